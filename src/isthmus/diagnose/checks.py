"""The checks of `isthmus diagnose`, one coroutine each, reading what the clusters and the broker
report (conditions, status, heartbeats) and probing what can be probed from here (the API, DNS,
VIPs). Each returns one `Check` with its reason and the next command to run; none writes.

Which checks run where, and the order they print in, is decided in `isthmus.diagnose.run`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from lightkube import ALL_NS, ApiError, AsyncClient
from lightkube.config.kubeconfig import SingleConfig
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod, Service

from isthmus.api import CRD_MODELS
from isthmus.api.about import CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, ClusterProperty, identity_mismatch
from isthmus.api.base import find_condition
from isthmus.api.crdcompat import ISTHMUS, incompatibilities, installed_by, not_stored
from isthmus.api.crdgen import all_crds, is_shared
from isthmus.api.egress import ClaimPhase, ExternalService, Gateway, SourceIP, SourceIPClaim
from isthmus.api.lb import POOLS_NAMESPACE, LoadBalancerPool
from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    CLUSTERSET_DOMAIN,
    DNS_SERVICE_NAME,
    HEARTBEAT_ANNOTATION,
    STALE_HEARTBEAT_SECONDS,
    Broker,
    Cluster,
    ServiceImport,
)
from isthmus.api.mcsvc import MultiClusterService
from isthmus.clusterset.brokerinfo import BrokerInfo
from isthmus.clusterset.cidrs import CidrError, plan_cluster_cidr
from isthmus.clusterset.control import get_if_kind, list_if_kind
from isthmus.diagnose.model import Check, Status, failed, passed, plural, warned
from isthmus.diagnose.net import ApiProbe, answer_addresses, dns_query, tcp_connect
from isthmus.discovery import views
from isthmus.kube.helpers import describe_error, get_or_none, is_not_found, list_all, status_code

AGENT_DEPLOYMENT = "isthmus-agent"
CLOCK_WARN_SECONDS = 5.0
"""The Date header has a one-second resolution: below this, skew is noise."""
CLOCK_FAIL_SECONDS = STALE_HEARTBEAT_SECONDS / 2
"""Beyond this, heartbeat ages (and so dead-cluster detection) are judged wrong."""
DNS_TIMEOUT = 1.5
VIP_TIMEOUT = 1.0
MAX_VIP_PROBES = 64
"""Per cluster: beyond this many VIP ports, the rest are counted, not probed (one diagnosis must
stay quick on a clusterset with thousands of services)."""
VIP_CONCURRENCY = 16
MAX_DETAILS = 20


# --- what the checks read -----------------------------------------------------------------------


@dataclass
class Target:
    """One kubeconfig context and what its first requests found out."""

    context: str
    config: SingleConfig
    client: AsyncClient
    explicit: bool
    """Named with --context: a context that is not part of the clusterset is then a failure."""
    api: ApiProbe | None = None
    api_error: str | None = None
    cluster_id: str | None = None
    """Set when the context is a member (ServiceDiscovery isthmus-system/isthmus)."""
    broker_info: BrokerInfo | None = None
    membership_error: str | None = None
    broker_namespaces: list[str] = field(default_factory=list)
    """Namespaces holding a Broker object: the context is (also) the broker."""
    cidrs: list[tuple[str, str]] = field(default_factory=list)
    """(kind, CIDR) this cluster's API publishes: Nodes' pod CIDRs, ServiceCIDRs."""

    @property
    def server(self) -> str:
        return str(self.config.cluster.server)

    @property
    def roles(self) -> list[str]:
        return [r for r, on in (("broker", bool(self.broker_namespaces)), ("member", self.cluster_id is not None)) if on]


@dataclass
class BrokerView:
    """The broker's Clusters, read once for every member's checks."""

    namespace: str
    server: str
    via: str
    """The context it was read through, or `broker-info of <context>` (a member's own credentials)."""
    clusters: dict[str, Cluster] = field(default_factory=dict)
    broker: Broker | None = None
    skew: float | None = None
    error: str | None = None
    via_file: Path | None = None
    """The kubeconfig file that defines the `via` context, when it is one."""

    @property
    def via_context(self) -> str | None:
        """The kubeconfig context the broker was read through (its admin's), or None."""
        return None if self.via.startswith("broker-info of ") else self.via


@dataclass
class Env:
    """What every check shares: how to spell the next commands, the broker, the reference time."""

    kubeconfig: str | None
    broker: BrokerView | None
    now: datetime

    def kubectl(self, target: Target | str, *args: str) -> str:
        context = target if isinstance(target, str) else target.context
        head = ["kubectl"] + (["--kubeconfig", self.kubeconfig] if self.kubeconfig else []) + ["--context", context]
        return shlex.join([*head, *args])

    def isthmus(self, target: Target | str, *args: str) -> str:
        context = target if isinstance(target, str) else target.context
        tail = ["--context", context] + (["--kubeconfig", self.kubeconfig] if self.kubeconfig else [])
        return shlex.join(["isthmus", *args, *tail])


def _more(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_DETAILS:
        return lines
    return [*lines[:MAX_DETAILS], f"... and {len(lines) - MAX_DETAILS} more"]


def _everywhere(model: Any) -> str | None:
    """The LIST scope that covers every object of a kind: all namespaces, or none (cluster-scoped)."""
    return ALL_NS if model.crd.namespaced else None


def _key(obj: Any) -> str:
    return f"{obj.namespace}/{obj.name}" if getattr(obj, "namespace", None) else str(obj.name)


# --- every cluster ------------------------------------------------------------------------------


def check_api(t: Target, env: Env) -> Check:
    if t.api is None:
        return failed("api", f"cannot reach the API server at {t.server}: {t.api_error}",
                      f"{env.kubectl(t, 'cluster-info')}  # check the server address, network and credentials")
    return passed("api", f"reachable at {t.server}, {t.api.version} ({t.api.elapsed * 1000:.0f} ms)")


def check_clock(t: Target, env: Env) -> Check:
    if t.api is None or t.api.skew is None:
        return warned("clock", "the API server sent no Date header: clock skew unknown")
    skew = t.api.skew
    text = f"API server clock {abs(skew):.0f}s {'ahead of' if skew > 0 else 'behind'} this machine's"
    if abs(skew) < CLOCK_WARN_SECONDS:
        return passed("clock", f"in step with this machine's (within {CLOCK_WARN_SECONDS:g}s)")
    fix = "synchronise the clocks (NTP, e.g. `timedatectl set-ntp true` on the hosts)"
    if abs(skew) >= CLOCK_FAIL_SECONDS:
        return failed("clock", f"{text}: heartbeat ages are judged wrong beyond {CLOCK_FAIL_SECONDS:g}s", fix)
    return warned("clock", text, fix)


async def check_crds(t: Target, env: Env) -> Check:
    """Every kind this client knows, served at the version it speaks and Established; for the APIs
    shared with other projects (mcs-api, Karmada), who installed each and whether it fits Isthmus."""
    crds = {c.metadata.name: c for c in await list_all(t.client, CustomResourceDefinition) if c.metadata}
    ours = {c["metadata"]["name"]: c for c in all_crds()}
    problems, shared = [], []
    for model in CRD_MODELS:
        info = model.crd
        name = f"{info.plural}.{info.group}"
        crd = crds.get(name)
        if crd is None:
            problems.append(f"{name}: not installed (expected {info.version})")
            continue
        served = [v.name for v in crd.spec.versions if v.served]
        wanted = ours[name]
        if is_shared(wanted):
            note = shared_crd_note(crd.to_dict(), wanted)
            if note.startswith("incompatible"):
                problems.append(f"{name}: {note}")
                continue
            shared.append(f"{name}: {note}")
        if info.version not in served:
            problems.append(f"{name}: serves {', '.join(served) or 'no version'}, this client speaks {info.version}")
        elif not any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []
                                                                              if crd.status else [])):
            problems.append(f"{name}: not Established yet")
    if problems:
        return failed("crds", f"{len(problems)} of {plural(len(CRD_MODELS), 'CRD')} missing, incompatible or at "
                              "another version", _crd_fix(env, t), _more(problems + shared))
    versions = sorted({m.crd.version for m in CRD_MODELS})
    return passed("crds", f"all {len(CRD_MODELS)} CRDs installed at the versions this client expects "
                          f"({', '.join(versions)})", shared)


def shared_crd_note(installed: dict[str, Any], ours: dict[str, Any]) -> str:
    """`installed by Isthmus`, `installed by <project>, compatible[ (not stored: ...)]` or
    `incompatible: <what is missing> (installed by <project>)`."""
    who = installed_by(installed) or "another installer"
    if who == ISTHMUS:
        stored = (installed.get("status") or {}).get("storedVersions") or []
        if len(stored) > 1:  # objects may still be stored at an older version (docs/deploy.md: Upgrading)
            return (f"installed by Isthmus, storage migration pending (status.storedVersions: {', '.join(stored)}): "
                    "isthmus crds migrate")
        return "installed by Isthmus"
    problems = incompatibilities(installed, ours)
    if problems:
        return f"incompatible: {'; '.join(problems)} (installed by {who})"
    lost = not_stored(installed, ours)
    return f"installed by {who}, compatible" + (f" (not stored: {', '.join(lost)})" if lost else "")


def _crd_fix(env: Env, t: Target) -> str:
    """Ours from the checkout; a missing shared one only where no other project's is installed."""
    apply = env.kubectl(t, "apply", "--server-side", "-f", "-")
    return (f"isthmus crds --only isthmus | {apply}; a missing shared CRD: isthmus crds --only shared | {apply}; "
            "an incompatible one: docs/deploy.md")


COMPONENT_NAMESPACES = (AGENT_NAMESPACE, POOLS_NAMESPACE)
"""Where Isthmus's Deployments run: isthmus-system, and the pool manager's own namespace (the lb component)."""


async def _deployments(client: AsyncClient) -> list[Deployment]:
    return [d for ns in COMPONENT_NAMESPACES for d in await list_all(client, Deployment, namespace=ns)]


def _deployment_problem(d: Deployment) -> str | None:
    want = d.spec.replicas if d.spec and d.spec.replicas is not None else 1
    ready = (d.status.readyReplicas if d.status else None) or 0
    if ready >= want:
        return None
    return f"{d.metadata.name if d.metadata else '?'}: {ready}/{want} ready"


async def _pod_problems(client: AsyncClient, deployment: Deployment) -> list[str]:
    """Why a Deployment's pods are not ready, as kubectl get pods would show it."""
    selector = deployment.spec.selector.matchLabels if deployment.spec and deployment.spec.selector else None
    if not selector:
        return []
    out = []
    namespace = (deployment.metadata.namespace if deployment.metadata else None) or AGENT_NAMESPACE
    for pod in await list_all(client, Pod, namespace=namespace, labels=selector):
        status = pod.status
        for cs in (status.containerStatuses or []) if status else []:
            if cs.ready:
                continue
            waiting = cs.state.waiting if cs.state else None
            why = waiting.reason if waiting and waiting.reason else (status.phase if status else None) or "not ready"
            out.append(f"pod {pod.metadata.name if pod.metadata else '?'}: {why}, {plural(cs.restartCount or 0, 'restart')}")
    return out


async def check_components(t: Target, env: Env) -> Check:
    """Every Isthmus Deployment of isthmus-system and isthmus-pools ready (the agent has a check of its own)."""
    deployments = [d for d in await _deployments(t.client) if d.metadata and d.metadata.name != AGENT_DEPLOYMENT]
    if not deployments:
        return warned("components", f"no Deployments in {AGENT_NAMESPACE}",
                      f"{env.kubectl(t, 'apply', '-k', 'deploy/' + ('member' if t.cluster_id else 'broker'))}")
    bad = [(d, p) for d in deployments if (p := _deployment_problem(d)) is not None]
    if not bad:
        names = ", ".join(sorted(d.metadata.name for d in deployments if d.metadata and d.metadata.name))
        return passed("components", f"{plural(len(deployments), 'Deployment')} ready ({names})")
    details = []
    for d, problem in bad:
        details.append(problem)
        details += [f"  {p}" for p in await _pod_problems(t.client, d)]
    first = bad[0][0].metadata
    first_ns = (first.namespace if first else None) or AGENT_NAMESPACE
    return failed("components", f"{len(bad)} of {plural(len(deployments), 'Deployment')} not ready",
                  env.kubectl(t, "-n", first_ns, "logs", f"deploy/{first.name if first else ''}"), _more(details))


# --- members: discovery -------------------------------------------------------------------------


BROKER_INFO_FILE = "broker-info.subm"
"""What `isthmus deploy-broker` writes by default, and the local clusterset beside its kubeconfig."""


def join_command(t: Target | str, env: Env, cluster_id: str, *extra: str) -> str:
    """`isthmus join` for one cluster, whole: the broker-info file (beside the kubeconfig that holds
    the context, as the local clusterset keeps it, else deploy-broker's default name here), the
    broker's admin credentials (its context, when the kubeconfig has one), the cluster and its
    context. Only what diagnose cannot know stays a placeholder."""
    config = t.config if isinstance(t, Target) else None
    info = BROKER_INFO_FILE
    if config is not None and config.fname is not None and (Path(config.fname).parent / BROKER_INFO_FILE).is_file():
        info = str(Path(config.fname).parent / BROKER_INFO_FILE)
    broker = ["--broker-kubeconfig", "<the broker's admin kubeconfig>"]
    b = env.broker
    if b is not None and b.via_context is not None:
        path = env.kubeconfig or (str(b.via_file) if b.via_file is not None else None)
        broker = (["--broker-kubeconfig", path] if path else []) + ["--broker-context", b.via_context]
    return env.isthmus(t, "join", info, "--cluster-id", cluster_id, *extra, *broker)


def check_join(t: Target, env: Env) -> Check:
    join = join_command(t, env, "<id>")
    if t.cluster_id is None:
        why = t.membership_error or "no ServiceDiscovery isthmus-system/isthmus"
        return failed("join", f"not part of a clusterset: {why}", join)
    b = env.broker
    if b is None or b.error is not None:
        why = (b.error if b is not None else None) or "no broker known"
        return failed("join", f"joined as {t.cluster_id}, but the broker cannot be read: {why}",
                      f"check the broker at {t.broker_info.server if t.broker_info else '?'} "
                      f"(`isthmus diagnose` with its context shows why)")
    info = t.broker_info
    if info is not None and (info.server.rstrip("/") != b.server.rstrip("/") or info.namespace != b.namespace):
        return failed("join", f"joined as {t.cluster_id} to the broker {info.server} (namespace {info.namespace}), "
                              f"not to {b.server} (namespace {b.namespace}) as the other clusters",
                      join_command(t, env, t.cluster_id, "--force"))
    if t.cluster_id not in b.clusters:
        return failed("join", f"joined as {t.cluster_id} here, but the broker ({b.server}, namespace {b.namespace}) "
                              f"has no Cluster {t.cluster_id}: it was removed or this cluster joined another broker",
                      join_command(t, env, t.cluster_id, "--force"))
    return passed("join", f"joined as {t.cluster_id} (broker {b.server}, namespace {b.namespace})")


async def check_about(t: Target, env: Env) -> Check:
    """The About API (KEP-2149) as other multi-cluster tools read it: `cluster.clusterset.k8s.io`
    must name the ID the cluster joined as (the agent and DNS refuse to start otherwise, so a
    disagreement surfaces at their next restart), and `clusterset.k8s.io` must exist and name the
    broker's clusterset. Missing properties only warn: a cluster joined before join wrote them runs
    unchecked until join is run again (clusterset/about.py tolerates it likewise)."""
    joined = t.cluster_id or "<id>"
    rejoin = join_command(t, env, joined)
    properties = env.kubectl(t, "get", "clusterproperties")
    try:
        id_prop = await get_or_none(t.client, ClusterProperty, CLUSTER_ID_PROPERTY)
        set_prop = await get_or_none(t.client, ClusterProperty, CLUSTERSET_PROPERTY)
    except ApiError as err:
        if is_not_found(err):
            return warned("about", "the About API (clusterproperties.about.k8s.io) is not installed: other "
                                   "multi-cluster tools cannot read this cluster's ID", rejoin)
        if status_code(err) == 403:
            return warned("about", f"may not read ClusterProperties: {err.status.message}",
                          env.kubectl(t, "auth", "can-i", "get", "clusterproperties"))
        raise
    problem = identity_mismatch(joined, id_prop.value if id_prop is not None else None)
    if problem is not None:
        return failed("about", problem, properties)
    b = env.broker
    expected = b.broker.metadata.uid if b is not None and b.broker is not None and b.broker.metadata else None
    clusterset = set_prop.value if set_prop is not None else None
    if clusterset is not None and expected is not None and clusterset != expected:
        return failed("about", f"ClusterProperty {CLUSTERSET_PROPERTY} is {clusterset!r}, but the broker this "
                               f"cluster joined is clusterset {expected!r}: other tools place it in another "
                               f"clusterset", join_command(t, env, joined, "--force"))
    missing = [name for name, prop in ((CLUSTER_ID_PROPERTY, id_prop), (CLUSTERSET_PROPERTY, set_prop))
               if prop is None or prop.value is None]
    if missing:
        return warned("about", f"no ClusterProperty {' or '.join(missing)}: joined before Isthmus wrote the "
                               f"About API, or removed since; other multi-cluster tools cannot place this cluster",
                      rejoin)
    return passed("about", f"ClusterProperty {CLUSTER_ID_PROPERTY} = {joined}, {CLUSTERSET_PROPERTY} = "
                           f"{clusterset}" + (" (this broker's)" if expected is not None else ""))


def check_heartbeat(t: Target, env: Env) -> Check:
    b = env.broker
    cluster = b.clusters.get(t.cluster_id or "") if b is not None else None
    if cluster is None:
        return Check("heartbeat", Status.SKIP, "no Cluster on the broker (see join)")
    logs = env.kubectl(t, "-n", AGENT_NAMESPACE, "logs", f"deploy/{AGENT_DEPLOYMENT}")
    raw = (cluster.metadata.annotations or {}).get(HEARTBEAT_ANNOTATION)
    beat = views._parse_time(raw)
    if beat is None:
        return failed("heartbeat", f"cluster {t.cluster_id} never sent a heartbeat: its agent has not run", logs)
    # Ages on the broker's clock, as the agents judge each other.
    ref = env.now + timedelta(seconds=b.skew or 0.0) if b is not None else env.now
    age = (ref - beat).total_seconds()
    ready = find_condition(cluster.status.conditions, "Ready")
    if age > STALE_HEARTBEAT_SECONDS:
        return failed("heartbeat", f"last heartbeat {age:.0f}s ago, stale after {STALE_HEARTBEAT_SECONDS:g}s: "
                                   f"the agent of {t.cluster_id} is down or cannot reach the broker", logs)
    if ready is not None and str(ready.status) != "True":
        return failed("heartbeat", f"Cluster {t.cluster_id} is not Ready: {ready.message or ready.reason}", logs)
    if age < -CLOCK_WARN_SECONDS:
        return warned("heartbeat", f"heartbeat {-age:.0f}s in the future: the agent's clock runs ahead of the "
                                   f"broker's", "synchronise the clocks (NTP)")
    return passed("heartbeat", f"heartbeat {max(age, 0):.0f}s ago, Ready")


async def check_agent(t: Target, env: Env) -> Check:
    deployment = await get_if_kind(t.client, Deployment, AGENT_DEPLOYMENT, AGENT_NAMESPACE)
    if deployment is None:
        return failed("agent", f"Deployment {AGENT_NAMESPACE}/{AGENT_DEPLOYMENT} not found: discovery is not installed",
                      env.kubectl(t, "apply", "-k", "deploy/member"))
    problem = _deployment_problem(deployment)
    if problem is None:
        return passed("agent", f"Deployment {AGENT_NAMESPACE}/{AGENT_DEPLOYMENT} ready")
    return failed("agent", f"Deployment {AGENT_NAMESPACE}/{problem}",
                  env.kubectl(t, "-n", AGENT_NAMESPACE, "logs", f"deploy/{AGENT_DEPLOYMENT}"),
                  _more(await _pod_problems(t.client, deployment)))


async def check_exports(t: Target, env: Env) -> Check:
    rows = await views.export_rows(t.client, None)
    bad = [(r, r.problems()) for r in rows if r.problems()]
    if not bad:
        return passed("exports", f"{plural(len(rows), 'ServiceExport')}, {'valid, no conflict' if len(rows) == 1 else 'all valid, no conflicts'}")
    details = [f"{r.namespace}/{r.name}: {p}" for r, problems in bad for p in problems]
    conflicts = sum(1 for r, _ in bad if r.conflict_reasons())
    return failed("exports", f"{len(bad)} of {plural(len(rows), 'ServiceExport')} invalid or in conflict ({conflicts} in conflict)",
                  env.isthmus(t, "show", "exports", "-A"), _more(details))


async def _imports(client: AsyncClient) -> list[ServiceImport]:
    return cast(list[ServiceImport], await list_if_kind(client, ServiceImport, ALL_NS))


async def _dns_addresses(t: Target) -> list[tuple[str, int]]:
    """Where to ask the cluster's DNS from here: the NodePort on the first Node's InternalIP (the
    local clusterset's way, and a cluster's nodes are often reachable), then ClusterIP:port."""
    svc = await get_if_kind(t.client, Service, DNS_SERVICE_NAME, AGENT_NAMESPACE)
    if svc is None or svc.spec is None:
        return []
    ports = [p for p in svc.spec.ports or [] if (p.protocol or "TCP") == "UDP"]
    out: list[tuple[str, int]] = []
    if any(p.nodePort for p in ports):
        nodes = await list_all(t.client, Node)
        addrs = [a.address for n in nodes[:1] for a in (n.status.addresses or [] if n.status else [])
                 if a.type == "InternalIP"]
        out += [(addrs[0], p.nodePort) for p in ports if p.nodePort and addrs]
    ip = svc.spec.clusterIP
    if ip and ip != "None":
        out += [(ip, p.port) for p in ports]
    return out


def _not_from_here(t: Target, host: str) -> bool:
    """An address this machine must not dial for `t`: its API server is on this machine's loopback
    (the local clusterset) while the address is not — the runc mode's addresses live in network
    namespaces of their own, and from here a packet to one would follow the default route off the
    machine. `isthmus shell --node <cluster> -- isthmus diagnose` probes them from inside."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        api_local = ipaddress.ip_address(urlsplit(t.server).hostname or "").is_loopback
        return api_local and not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _probed_elsewhere(name: str, t: Target, skipped: list[str]) -> Check:
    return warned(name, f"not probed from this machine: {', '.join(skipped[:3])} live in the local clusterset's "
                        "network namespaces (runc mode)",
                  f"isthmus shell --node {t.cluster_id or '<cluster>'} -- isthmus diagnose --context {t.context}")


async def check_dns(t: Target, env: Env) -> Check:
    addresses = await _dns_addresses(t)
    skipped = [f"{h}:{p}" for h, p in addresses if _not_from_here(t, h)]
    addresses = [(h, p) for h, p in addresses if not _not_from_here(t, h)]
    if skipped and not addresses:
        return _probed_elsewhere("dns", t, skipped)
    if not addresses:
        return failed("dns", f"no UDP port on Service {AGENT_NAMESPACE}/{DNS_SERVICE_NAME}: clusterset.local is not "
                             f"served", env.kubectl(t, "apply", "-k", "deploy/member"))
    imports = [i for i in await _imports(t.client)]
    with_vip = [i for i in imports if i.spec.ips]
    if with_vip:
        known = with_vip[0]
        name, qtype, expect = f"{known.name}.{known.namespace}.svc.{CLUSTERSET_DOMAIN}", "A", sorted(known.spec.ips or [])
    elif imports:
        known = imports[0]
        name, qtype, expect = f"{known.name}.{known.namespace}.svc.{CLUSTERSET_DOMAIN}", "A", None
    else:
        name, qtype, expect = CLUSTERSET_DOMAIN, "SOA", None
    errors = []
    for host, port in addresses:
        try:
            answer = await dns_query(host, port, name, qtype, DNS_TIMEOUT)
        except (TimeoutError, OSError) as err:
            why = (f"no answer within {DNS_TIMEOUT:g}s" if isinstance(err, TimeoutError)
                   else (err.strerror or describe_error(err)).lower())
            errors.append(f"{host}:{port}: {why}")
            continue
        rcode = answer.header.rcode
        got = answer_addresses(answer)
        where = f"{host}:{port}"
        logs = env.kubectl(t, "-n", AGENT_NAMESPACE, "logs", f"deploy/{DNS_SERVICE_NAME}")
        if rcode != 0:
            return failed("dns", f"{where} answered {name} {qtype} with rcode {rcode} (expected NOERROR)", logs)
        if expect is not None and got != expect:
            return failed("dns", f"{where} answered {name} with {', '.join(got) or 'no address'}, the ServiceImport "
                                 f"says {', '.join(expect)}", logs)
        if qtype == "A" and expect is None and not got:
            return warned("dns", f"{where} knows {name} but has no address for it (no ready endpoints?)",
                          env.isthmus(t, "show", "imports", "-A"))
        shown = f" -> {', '.join(got)}" if got else ""
        return passed("dns", f"{where} answers {name} {qtype}{shown}")
    return failed("dns", f"the DNS Service {AGENT_NAMESPACE}/{DNS_SERVICE_NAME} did not answer",
                  env.kubectl(t, "-n", AGENT_NAMESPACE, "get", "pods,svc", "-l", "app.kubernetes.io/name=isthmus-dns"),
                  errors)


async def check_vips(t: Target, env: Env) -> Check:
    """A TCP connect to each ClusterSet IP and TCP port this cluster imports (UDP cannot be probed
    without a service-specific question)."""
    probes: list[tuple[str, str, int]] = []
    udp_only = 0
    for i in await _imports(t.client):
        for ip in i.spec.ips or []:
            tcp = [p.port for p in i.spec.ports if p.protocol == "TCP"]
            udp_only += 0 if tcp else 1
            probes += [(f"{i.namespace}/{i.name}", ip, port) for port in tcp]
    if not probes:
        note = f" ({udp_only} UDP-only, not probed)" if udp_only else ""
        return passed("vips", f"no ClusterSet IP with a TCP port imported{note}")
    elsewhere = [f"{ip}:{port}" for _, ip, port in probes if _not_from_here(t, ip)]
    if elsewhere:
        return _probed_elsewhere("vips", t, elsewhere)
    skipped = max(0, len(probes) - MAX_VIP_PROBES)
    probes = probes[:MAX_VIP_PROBES]
    gate = asyncio.Semaphore(VIP_CONCURRENCY)

    async def one(ip: str, port: int) -> str | None:
        async with gate:
            return await tcp_connect(ip, port, VIP_TIMEOUT)

    results = await asyncio.gather(*(one(ip, port) for _, ip, port in probes))
    bad = [f"{key} {ip}:{port}: {why}" for (key, ip, port), why in zip(probes, results, strict=True) if why]
    more = f"; {skipped} more not probed" if skipped else ""
    if bad:
        first = probes[next(i for i, r in enumerate(results) if r)][0]
        ns, name = first.split("/", 1)
        return failed("vips", f"{len(bad)} of {plural(len(probes), 'VIP port')} not answering{more}",
                      env.kubectl(t, "-n", ns, "get", "endpointslices", "-l",
                                  f"multicluster.kubernetes.io/service-name={name}"), _more(bad))
    return passed("vips", f"{plural(len(probes), 'VIP port')} answer{'s' if len(probes) == 1 else ''}{more}")


# --- the broker ---------------------------------------------------------------------------------


def check_broker(t: Target, env: Env) -> Check:
    b = env.broker
    if b is None or b.error is not None or b.broker is None:
        why = b.error if b is not None and b.error else "no Broker object"
        return failed("broker", f"broker not readable: {why}",
                      f"isthmus deploy-broker --context {t.context}")
    spec = b.broker.spec
    return passed("broker", f"namespace {b.namespace}: {plural(len(b.clusters), 'cluster')} joined, ClusterSet IPs "
                            f"{'on' if spec.clusterset_ip_enabled else 'off'} by default, range "
                            f"{', '.join(spec.clusterset_ip_cidr_range)}")


# --- capabilities -------------------------------------------------------------------------------


async def check_pools(t: Target, env: Env) -> Check:
    """Load balancing: each pool's HAProxy instances running and serving its generation."""
    pools = cast(list[LoadBalancerPool], await list_if_kind(t.client, LoadBalancerPool, _everywhere(LoadBalancerPool)))
    if not pools:
        return passed("pools", "no LoadBalancerPools")
    details = []
    bad = 0
    for pool in pools:
        want = pool.spec.count
        ready = pool.status.ready_instances
        if ready >= want:
            continue
        bad += 1
        details.append(f"{_key(pool)}: {ready}/{plural(want, 'HAProxy instance')} ready")
        for inst in pool.status.instances:
            if str(inst.state) != "Running" or inst.message:
                holder = f" on {inst.holder}" if inst.holder else ""
                details.append(f"  slot {inst.slot}{holder}: {inst.state}{': ' + inst.message if inst.message else ''}")
    if bad:
        return failed("pools", f"{bad} of {plural(len(pools), 'LoadBalancerPool')} not fully ready",
                      env.isthmus(t, "show", "pools", "-A"), _more(details))
    total = sum(p.spec.count for p in pools)
    return passed("pools", f"{plural(len(pools), 'LoadBalancerPool')}, {plural(total, 'HAProxy instance')} running")


async def check_mcs(t: Target, env: Env) -> Check:
    """Exposure: every MultiClusterService Ready, or why not."""
    items = cast(list[MultiClusterService], await list_if_kind(t.client, MultiClusterService, _everywhere(MultiClusterService)))
    if not items:
        return passed("multiclusterservices", "no MultiClusterServices")
    bad = []
    for m in items:
        ready = find_condition(m.status.conditions, "Ready")
        if ready is None or str(ready.status) != "True":
            why = ready.message or ready.reason if ready is not None else "no Ready condition yet"
            bad.append(f"{_key(m)}: {why}")
    if bad:
        return failed("multiclusterservices", f"{len(bad)} of {plural(len(items), 'MultiClusterService')} not Ready",
                      env.isthmus(t, "show", "mcs", "-A"), _more(bad))
    return passed("multiclusterservices", f"{plural(len(items), 'MultiClusterService')} Ready")


def _rule_ips(gateway: Gateway) -> set[str]:
    return {r.source_ip for r in [*gateway.spec.egress_rules, *gateway.spec.ingress_rules]}


async def check_egress(t: Target, env: Env) -> Check:
    """Egress: each bound claim's address is a Bound SourceIP, and the gateway that uses it has
    programmed it (Gateway Ready with a holder); every ExternalService Ready."""
    claims = cast(list[SourceIPClaim], await list_if_kind(t.client, SourceIPClaim, _everywhere(SourceIPClaim)))
    services = cast(list[ExternalService], await list_if_kind(t.client, ExternalService, _everywhere(ExternalService)))
    if not claims and not services:
        return passed("egress", "no SourceIPClaims or ExternalServices")
    ips = {s.name: s for s in cast(list[SourceIP], await list_if_kind(t.client, SourceIP, _everywhere(SourceIP)))}
    gateways = cast(list[Gateway], await list_if_kind(t.client, Gateway, _everywhere(Gateway)))
    bad = []
    bound = 0
    for c in claims:
        if c.status.phase != ClaimPhase.BOUND or not c.status.source_ip:
            ready = find_condition(c.status.conditions, "Ready")
            bad.append(f"claim {_key(c)}: {c.status.phase or 'Pending'}"
                       f"{': ' + (ready.message or str(ready.reason)) if ready is not None and ready.message else ''}")
            continue
        bound += 1
        ip = c.status.source_ip
        sip = ips.get(str(ipaddress.ip_address(ip))) if _is_ip(ip) else None
        if sip is None or sip.spec.claim_ref is None or sip.spec.claim_ref.name != c.name:
            bad.append(f"claim {_key(c)}: {ip} has no SourceIP bound to it")
            continue
        for g in gateways:
            if ip in _rule_ips(g):
                ready = find_condition(g.status.conditions, "Ready")
                if ready is None or str(ready.status) != "True" or not g.status.holder:
                    why = (ready.message or str(ready.reason)) if ready is not None else "not programmed yet"
                    bad.append(f"claim {_key(c)}: {ip} not owned by a gateway (Gateway {_key(g)}: {why})")
    for s in services:
        ready = find_condition(s.status.conditions, "Ready")
        if ready is None or str(ready.status) != "True":
            why = (ready.message or str(ready.reason)) if ready is not None else "no Ready condition yet"
            bad.append(f"externalservice {_key(s)}: {why}")
    if bad:
        return failed("egress", f"{plural(len(bad), 'egress problem')} ({plural(len(claims), 'claim')}, "
                              f"{plural(len(services), 'ExternalService')})",
                      env.kubectl(t, "get", "sourceipclaims,sourceips,externalservices,gateways", "-A"), _more(bad))
    return passed("egress", f"{plural(bound, 'source IP')} bound and owned by a gateway, "
                             f"{plural(len(services), 'ExternalService')} Ready")


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


# --- the clusterset -----------------------------------------------------------------------------


Range = tuple[str, str, str]
"""(owner cluster, kind, CIDR): kind is pod, service or clusterset-ip."""


def overlapping_pairs(cidrs: Iterable[Range]) -> list[tuple[Range, Range]]:
    """Every overlapping pair of ranges of different owners or kinds.

    Clusters of a clusterset route to each other's pods and VIPs: no two of their pod, service
    and ClusterSet IP ranges may overlap (one cluster's two ranges neither)."""
    seen: dict[Range, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for owner, kind, cidr in cidrs:
        try:
            seen.setdefault((owner, kind, cidr), ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            continue
    items = sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[1].version, int(kv[1].network_address)))
    out = []
    for i, (a, net_a) in enumerate(items):
        for b, net_b in items[i + 1:]:
            if a[:2] == b[:2] or net_a.version != net_b.version:
                continue
            if net_a.overlaps(net_b):
                out.append((a, b))
    return out


def find_overlaps(cidrs: Iterable[Range]) -> list[str]:
    """(owner, kind, CIDR) triples → one line per overlapping pair of different owners or kinds."""
    return [f"{a[0]} {a[1]} {a[2]} overlaps {b[0]} {b[1]} {b[2]}" for a, b in overlapping_pairs(cidrs)]


CLUSTERSET_IP = "clusterset-ip"


def free_block(ranges: list[str], cidrs: Iterable[Range], cluster_id: str) -> str | None:
    """The first /16 of the clusterset's range that overlaps none of `cidrs` but the cluster's own
    ClusterSet IP block (the one it gives up), or None when there is none; join's own allocator
    picks it, so join accepts it."""
    taken = {f"{owner} {kind} {i}": cidr for i, (owner, kind, cidr) in enumerate(cidrs)
             if (owner, kind) != (cluster_id, CLUSTERSET_IP)}
    try:
        return plan_cluster_cidr(ranges, taken, cluster_id, None)
    except CidrError:
        return None


def _to_move(pairs: list[tuple[Range, Range]], env: Env) -> tuple[list[str], list[str]]:
    """(clusters to re-join with another ClusterSet IP block, overlaps no join can fix). Of two
    ClusterSet IP blocks, the later-joined cluster's moves (the older one's VIPs stay)."""
    clusters = env.broker.clusters if env.broker is not None else {}

    def later(cid: str) -> tuple[bool, float, str]:
        at = clusters[cid].spec.joined_at if cid in clusters else None
        return (at is None, at.timestamp() if at is not None else 0.0, cid)

    move: list[str] = []
    other: list[str] = []
    for a, b in pairs:
        owners = [r[0] for r in (a, b) if r[1] == CLUSTERSET_IP]
        if any(o in move for o in owners):
            continue
        if not owners:
            other.append(f"{a[0]} {a[1]} {a[2]} and {b[0]} {b[1]} {b[2]}")
            continue
        move.append(max(owners, key=later))
    return move, other


def check_cidrs(targets: list[Target], env: Env) -> Check:
    triples: list[Range] = []
    if env.broker is not None:
        for cid, cluster in env.broker.clusters.items():
            triples += [(cid, CLUSTERSET_IP, c) for c in cluster.spec.clusterset_ip_cidr]
    for t in targets:
        if t.cluster_id is not None:
            triples += [(t.cluster_id, kind, c) for kind, c in t.cidrs]
    if not triples:
        return Check("cidrs", Status.SKIP, "no address ranges to compare (no broker, no member reachable)")
    pairs = overlapping_pairs(triples)
    if pairs:
        return failed("cidrs", f"{plural(len(pairs), 'overlap')} between address ranges",
                      _overlap_fix(pairs, triples, targets, env), _more(find_overlaps(triples)))
    kinds = sorted({k for _, k, _ in triples})
    return passed("cidrs", f"{plural(len(triples), 'range')}, no overlap ({', '.join(kinds) or 'none published'})")


def _overlap_fix(pairs: list[tuple[Range, Range]], triples: list[Range], targets: list[Target], env: Env) -> str:
    """The commands that end the overlaps: each cluster to move re-joined (--force) with a free
    /16 computed here; pod and service ranges are the cluster's own and are only named."""
    move, other = _to_move(pairs, env)
    b = env.broker
    ranges = list(b.broker.spec.clusterset_ip_cidr_range) if b is not None and b.broker is not None else []
    if not ranges:
        ranges = next((list(t.broker_info.clusterset_ip_cidr_range) for t in targets if t.broker_info), [])
    joins = []
    taken = list(triples)
    for cid in move:
        block = free_block(ranges, taken, cid) if ranges else None
        if block is None:
            block = "<a free /16 of the clusterset range>"
        else:  # the next cluster to move must not get the same block
            taken = [r for r in taken if (r[0], r[1]) != (cid, CLUSTERSET_IP)] + [(cid, CLUSTERSET_IP, block)]
        target: Target | str = next((t for t in targets if t.cluster_id == cid), f"<context of {cid}>")
        joins.append(join_command(target, env, cid, "--clusterset-ip-cidr", block, "--force"))
    text = " && ".join(joins)
    if other:
        text += ("; then " if text else "") + (f"give each cluster pod and service ranges of its own (set when "
                                               f"the cluster is made): {'; '.join(other)}")
    return text


def check_members(targets: list[Target], env: Env) -> Check:
    """Every joined cluster is among the contexts checked (else its own checks did not run)."""
    b = env.broker
    if b is None:
        unreachable = [t.context for t in targets if t.api is None]
        among = f" among the reachable contexts ({', '.join(unreachable)} unreachable)" if unreachable else ""
        return failed("members", f"no broker found{among}: no context is a broker or a member of a clusterset",
                      "isthmus diagnose --context <member context>")
    if b.error is not None:
        return failed("members", f"cannot read the broker ({b.server}, via {b.via}): {b.error}",
                      env.kubectl(b.via, "cluster-info") if not b.via.startswith("broker-info") else
                      f"check that {b.server} is reachable from here")
    checked = {t.cluster_id for t in targets if t.cluster_id}
    missing = sorted(set(b.clusters) - checked)
    if missing:
        return warned("members", f"{plural(len(b.clusters), 'cluster')} joined; no context checked here for "
                                 f"{', '.join(missing)}", "add their contexts to the kubeconfig (or pass --context)")
    return passed("members", f"{plural(len(b.clusters), 'cluster')} joined, all checked")
