"""Services and Ingresses → pool fragments, and fragments merged into (possibly shared) pools. Pure.

A *fragment* is what one owner (a Service or an Ingress of this cluster) contributes to a pool:
its frontends and backends, named by the seed's rules (`api/lb.py`), and the pool settings its
config asks for. Ownership is read from names, so merging a fragment touches only its owner's
parts: another owner's frontends and backends are never rewritten, and a frontend port another
owner already binds is refused (a conflict reported on the newcomer), never taken over.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from isthmus.api.lb import (
    DKLB_CONFIG_ANNOTATION,
    BackendServer,
    ConfigError,
    HealthCheck,
    IngressConfig,
    LinkBackend,
    LinkBackendMapEntry,
    LoadBalancerPoolSpec,
    LoadBalancerPoolStatus,
    Owner,
    PoolBackend,
    PoolFrontend,
    PoolHAProxy,
    Reason,
    RewriteHttp,
    ServiceConfig,
    backend_owner,
    cluster_name_part,
    frontend_owner,
    ingress_backend_name,
    ingress_frontend_name,
    pool_name,
    service_backend_name,
    service_frontend_name,
)

NODE_PORT_TYPES = ("NodePort", "LoadBalancer")
NODE_CHECK = HealthCheck(protocol="TCP")
"""Servers are nodes at a NodePort: a node that dies stops getting connections (a connect check; the
node's proxy, not the pod, answers at a NodePort, so an HTTP check would judge one pod, not the node)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PATH_TYPE_RANK = {"Exact": 0, "Prefix": 1, "ImplementationSpecific": 2}


@dataclass(frozen=True)
class Problem:
    """Something the user must hear about (a Warning Event with this reason)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Settings:
    """Pool-level settings an owner's config asks for."""

    role: str
    network: str
    cpus: float
    mem: int
    count: int
    cloud_provider_configuration: str | None = None

    def apply(self, spec: LoadBalancerPoolSpec) -> None:
        spec.role, spec.network, spec.cpus, spec.mem, spec.count = (
            self.role, self.network, self.cpus, self.mem, self.count)  # fmt: skip
        spec.cloud_provider_configuration = self.cloud_provider_configuration

    def of(self, spec: LoadBalancerPoolSpec) -> Settings:
        return Settings(spec.role, spec.network, spec.cpus, spec.mem, spec.count, spec.cloud_provider_configuration)


@dataclass
class Fragment:
    owner: Owner
    pool: str
    settings: Settings
    frontends: list[PoolFrontend] = field(default_factory=list)
    backends: list[PoolBackend] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    pending: bool = False
    """Something the cluster fills in soon is missing (a NodePort): reconcile again shortly."""
    explicit: bool = False
    """The config named the pool (`name`), rather than the automatic `<cluster>--<ns>--<name>`."""
    shared_with: tuple[str, ...] = ()
    """Namespaces the config lets join a pool this owner creates (`sharedWith`)."""


def owner_key(owner: Owner) -> str:
    return f"{owner.kind}/{owner.namespace}/{owner.name}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def ready_node_addresses(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """InternalIP of every Ready, schedulable node (ExternalIP when it has none), sorted."""
    out: set[str] = set()
    for node in nodes:
        status = node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if not ready or (node.get("spec") or {}).get("unschedulable"):
            continue
        addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
        address = addrs.get("InternalIP") or addrs.get("ExternalIP")
        if address:
            out.add(address)
    return sorted(out)


def _settings(cfg: ServiceConfig | IngressConfig, cloud: str | None = None) -> Settings:
    # With a cloud load balancer the seed ignores `.network` (the dedicated pool is the cloud's).
    network = "" if cloud is not None else cfg.effective_network
    return Settings(cfg.role, network, cfg.cpus, cfg.memory, cfg.size, cloud)


def translate_service(
    cluster: str, svc: Mapping[str, Any], cfg: ServiceConfig, nodes: Sequence[str]
) -> Fragment:
    """The seed's Service translation: one TCP frontend and backend per TCP port, on the port
    `.frontends` maps it to (else the Service port), served by every node at the port's NodePort."""
    ns, name = _meta(svc)["namespace"], _meta(svc)["name"]
    owner = Owner(cluster=cluster_name_part(cluster), kind="Service", namespace=ns, name=name)
    ext = cfg.cloud_provider_configuration is not None
    frag = Fragment(owner, cfg.name or pool_name(cluster, ns, name, ext=ext),
                    _settings(cfg, cfg.cloud_provider_configuration), explicit=cfg.name is not None,
                    shared_with=tuple(cfg.shared_with or ()))  # fmt: skip
    ports = (svc.get("spec") or {}).get("ports") or []
    numbers = {int(p["port"]) for p in ports if p.get("port")}
    if cfg.cloud_provider_configuration is None:
        for f in cfg.frontends:
            if f.service_port not in numbers:
                raise ConfigError(
                    f"invalid {DKLB_CONFIG_ANNOTATION}: frontends: servicePort {f.service_port} is not a port of this Service "
                    f"(ports: {', '.join(str(n) for n in sorted(numbers)) or 'none'})"
                )
    if not nodes:
        frag.problems.append(Problem(Reason.INVALID_BACKEND_SERVICE,
                                     "no Ready node to send traffic to: the pool's backends are empty until one is"))
    for p in ports:
        port, proto = int(p["port"]), p.get("protocol") or "TCP"
        if proto != "TCP":
            frag.problems.append(Problem(Reason.UNSUPPORTED_PROTOCOL,
                                         f"port {port}/{proto} is not exposed: pools balance TCP only (HAProxy)"))
            continue
        bname = service_backend_name(cluster, ns, name, port)
        servers: list[BackendServer] = []
        node_port = p.get("nodePort")
        if node_port:
            servers = [BackendServer(address=a, port=int(node_port)) for a in nodes]
        elif (svc.get("spec") or {}).get("allocateLoadBalancerNodePorts") is False:
            frag.problems.append(Problem(Reason.INVALID_BACKEND_SERVICE,
                                         f"port {port} has no NodePort (allocateLoadBalancerNodePorts is false): "
                                         "the pool reaches Services at their nodes' NodePorts"))
        else:
            frag.pending = True  # the NodePort allocator has not got to it yet: looked at again shortly
        frag.backends.append(PoolBackend(name=bname, protocol="TCP", servers=servers, proxy_protocol=cfg.proxy_protocol,
                                         health_check=NODE_CHECK))  # fmt: skip
        frag.frontends.append(PoolFrontend(
            name=service_frontend_name(cluster, ns, name, port), bind_port=cfg.frontend_port(port), protocol="TCP",
            link_backend=LinkBackend(default_backend=bname),
        ))  # fmt: skip
    return frag


@dataclass(frozen=True)
class _Rule:
    host: str
    path: str
    path_type: str
    backend: str
    order: int


def _host_rank(host: str) -> int:
    return 2 if not host else 1 if host.startswith("*.") else 0


def _map_entry(rule: _Rule) -> LinkBackendMapEntry:
    entry = LinkBackendMapEntry(backend=rule.backend)
    if rule.host.startswith("*."):
        entry.host_reg = "^[^.]+" + re.escape(rule.host[1:].lower()) + "$"
    elif rule.host:
        entry.host_eq = rule.host.lower()
    path = rule.path
    if rule.path_type == "Exact":
        entry.path_exact = path or "/"
    elif rule.path_type == "Prefix":
        trimmed = path.rstrip("/")
        if trimmed:  # "/" (or "") matches every path: no condition
            entry.path_reg = "^" + re.escape(trimmed) + "(/|$)"
    elif path:
        entry.path_beg = path  # the seed's (and ImplementationSpecific's) plain prefix
    return entry


def _service_port(svc: Mapping[str, Any], port: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for p in (svc.get("spec") or {}).get("ports") or []:
        if ("number" in port and p.get("port") == port["number"]) or ("name" in port and p.get("name") == port["name"]):
            return dict(p)
    return None


def translate_ingress(
    cluster: str,
    ing: Mapping[str, Any],
    cfg: IngressConfig,
    services: Mapping[str, Mapping[str, Any]],
    nodes: Sequence[str],
) -> Fragment:
    """One HTTP frontend; a backend per (Service, port) referenced; routing entries sorted by the
    seed's priority (host before no host, exact host before wildcard, longer path first, Exact
    before Prefix before ImplementationSpecific for the same path, then the Ingress's order)."""
    ns, name = _meta(ing)["namespace"], _meta(ing)["name"]
    owner = Owner(cluster=cluster_name_part(cluster), kind="Ingress", namespace=ns, name=name)
    frag = Fragment(owner, cfg.name or pool_name(cluster, ns, name), _settings(cfg), explicit=cfg.name is not None,
                    shared_with=tuple(cfg.shared_with or ()))  # fmt: skip
    spec = ing.get("spec") or {}
    backends: dict[str, PoolBackend] = {}

    def backend_for(ref: Mapping[str, Any]) -> str | None:
        svc_ref = ref.get("service")
        if not svc_ref:
            frag.problems.append(Problem(Reason.INVALID_BACKEND_SERVICE,
                                         "a backend names no Service (resource backends are not supported)"))
            return None
        svc_name, port = svc_ref.get("name", ""), svc_ref.get("port") or {}
        label = port.get("number", port.get("name", ""))
        bname = ingress_backend_name(cluster, ns, name, svc_name, label)
        if bname in backends:
            return bname
        servers: list[BackendServer] = []
        svc = services.get(f"{ns}/{svc_name}")
        if svc is None:
            frag.problems.append(Problem(Reason.INVALID_BACKEND_SERVICE,
                                         f"Service {ns}/{svc_name} does not exist: its rules answer 503 until it does"))
        elif (svc.get("spec") or {}).get("type") not in NODE_PORT_TYPES:
            frag.problems.append(Problem(
                Reason.INVALID_BACKEND_SERVICE,
                f"Service {ns}/{svc_name} is of type {(svc.get('spec') or {}).get('type') or 'ClusterIP'}: Ingress "
                "backends must be NodePort or LoadBalancer Services (pools reach them at the nodes' NodePorts); "
                "its rules answer 503",
            ))
        else:
            sp = _service_port(svc, port)
            if sp is None:
                frag.problems.append(Problem(Reason.INVALID_BACKEND_SERVICE,
                                             f"Service {ns}/{svc_name} has no port {label}: its rules answer 503"))
            elif sp.get("nodePort"):
                servers = [BackendServer(address=a, port=int(sp["nodePort"])) for a in nodes]
        backends[bname] = PoolBackend(name=bname, protocol="HTTP", servers=servers, rewrite_http=RewriteHttp(),
                                      health_check=NODE_CHECK)  # fmt: skip
        return bname

    rules: list[_Rule] = []
    for rule in spec.get("rules") or []:
        host = (rule.get("host") or "").strip()
        for path in ((rule.get("http") or {}).get("paths")) or []:
            bad = next((v for v in (host, path.get("path") or "") if _CONTROL.search(v)), None)
            if bad is not None:  # HAProxy's config cannot carry it: the pool manager would refuse it
                frag.problems.append(Problem(Reason.TRANSLATION_ERROR,
                                             f"rule {bad!r} has a control character: left out"))
                continue
            bname = backend_for(path.get("backend") or {})
            if bname is not None:
                rules.append(_Rule(host, path.get("path") or "", path.get("pathType") or "ImplementationSpecific",
                                   bname, len(rules)))  # fmt: skip
    rules.sort(key=lambda r: (_host_rank(r.host), -len(r.path.rstrip("/") if r.path_type == "Prefix" else r.path),
                              _PATH_TYPE_RANK.get(r.path_type, 2), r.order))  # fmt: skip
    default = spec.get("defaultBackend")
    default_name = backend_for(default) if default else None
    frag.backends = list(backends.values())
    frag.frontends = [PoolFrontend(
        name=ingress_frontend_name(cluster, ns, name), bind_port=cfg.frontends.http.port, protocol="HTTP",
        link_backend=LinkBackend(default_backend=default_name, map=[_map_entry(r) for r in rules]),
    )]  # fmt: skip
    if not nodes:
        frag.problems.append(Problem(Reason.INVALID_BACKEND_SERVICE,
                                     "no Ready node to send traffic to: the pool's backends are empty until one is"))
    return frag


# --- merging into pools ------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    frontend: str
    port: int
    holder: str
    """The frontend already bound to the port (another owner's, or not a translator's)."""
    pool: str | None = None
    """The other pool that binds it (None: this pool)."""

    def describe(self) -> str:
        owner = frontend_owner(self.holder)
        who = f"{owner.kind} {owner.namespace}/{owner.name}" if owner else f"frontend {self.holder!r}"
        return f"{who} in {'pool ' + self.pool if self.pool else 'the pool'}"


@dataclass
class Merge:
    spec: LoadBalancerPoolSpec | None
    """None: the pool has nothing left and is to be deleted."""
    conflicts: list[Conflict] = field(default_factory=list)
    placed: list[str] = field(default_factory=list)
    """This owner's frontends that are in the pool."""


def owns(owner: Owner, part: Owner | None) -> bool:
    return part is not None and part == owner


def remove_owner(spec: LoadBalancerPoolSpec, owner: Owner) -> LoadBalancerPoolSpec | None:
    """The spec without `owner`'s parts; None when nothing is left."""
    out = spec.model_copy(deep=True)
    out.haproxy.frontends = [f for f in out.haproxy.frontends if not owns(owner, frontend_owner(f.name))]
    out.haproxy.backends = [b for b in out.haproxy.backends if not owns(owner, backend_owner(b.name))]
    if not out.haproxy.frontends and not out.haproxy.backends:
        return None
    return out


def has_parts(spec: LoadBalancerPoolSpec, owner: Owner) -> bool:
    return any(owns(owner, frontend_owner(f.name)) for f in spec.haproxy.frontends) or any(
        owns(owner, backend_owner(b.name)) for b in spec.haproxy.backends
    )


def merge(current: LoadBalancerPoolSpec | None, frag: Fragment, *, apply_settings: bool,
          elsewhere: Mapping[int, tuple[str, str]] | None = None) -> Merge:
    """`current` with the owner's parts replaced by the fragment's. A fragment frontend whose
    (non-zero) port another frontend binds — in this pool, or in another pool (`elsewhere`: port →
    (pool, frontend); pools share their edge hosts' addresses, so the pool manager would refuse it)
    — is left out and reported, unless it binds that port in this pool already (it is the holder,
    not the newcomer). The stats port is always 0 (the pool manager allocates it)."""
    base = remove_owner(current, frag.owner) if current is not None else None
    spec = base if base is not None else LoadBalancerPoolSpec(haproxy=PoolHAProxy())
    if current is None or apply_settings:
        frag.settings.apply(spec)
    spec.haproxy.stats.bind_port = 0
    taken = {f.bind_port: f.name for f in spec.haproxy.frontends if f.bind_port}
    bound = {(f.name, f.bind_port) for f in current.haproxy.frontends} if current is not None else set()
    result = Merge(spec)
    for fe in frag.frontends:
        holder = taken.get(fe.bind_port) if fe.bind_port else None
        if holder is not None:
            result.conflicts.append(Conflict(fe.name, fe.bind_port, holder))
            continue
        other = (elsewhere or {}).get(fe.bind_port) if fe.bind_port else None
        if other is not None and (fe.name, fe.bind_port) not in bound:
            result.conflicts.append(Conflict(fe.name, fe.bind_port, other[1], pool=other[0]))
            continue
        taken[fe.bind_port] = fe.name
        spec.haproxy.frontends.append(fe)
        result.placed.append(fe.name)
    spec.haproxy.backends.extend(frag.backends)
    spec.haproxy.frontends.sort(key=lambda f: f.name)
    spec.haproxy.backends.sort(key=lambda b: b.name)
    return result


def new_pool_spec(frag: Fragment) -> Merge:
    return merge(None, frag, apply_settings=True)


# --- status --------------------------------------------------------------------------------------


def load_balancer_ingress(
    status: LoadBalancerPoolStatus, frontends: Sequence[str], conflicts: Sequence[Conflict] = ()
) -> list[dict[str, Any]]:
    """`status.loadBalancer.ingress` for an owner: hostnames, then private, then public addresses
    (each sorted), each with the real ports of the owner's frontends (and the refused ones with
    `error: PortConflict`)."""
    ports = [{"port": f.port, "protocol": "TCP"} for f in status.frontends if f.name in frontends]
    ports += [{"port": c.port, "protocol": "TCP", "error": "PortConflict"} for c in conflicts]
    ports.sort(key=lambda p: (p["port"], "error" in p))
    mine = [f for f in status.frontends if f.name in frontends]
    private = sorted({a for f in mine for a in f.private_addresses})
    public = sorted({a for f in mine for a in f.public_addresses} - set(private))
    out: list[dict[str, Any]] = [{"hostname": h, **({"ports": ports} if ports else {})} for h in sorted(status.hostnames)]
    out += [{"ip": a, **({"ports": ports} if ports else {})} for a in [*private, *public]]
    return out
