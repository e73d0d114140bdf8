"""Isthmus's own components in the local clusterset: installed from deploy/member, run as pods.

`isthmus up` installs them as a cluster admin would on a real cluster — `kubectl apply --server-side -k` of an
overlay of deploy/member with load balancing opted in (deploy/components/lb, class-less Services too)
rendered for the local plan (the DNS Service gets a fixed NodePort, the DNS
server also answers the cluster's own zone, as there is no CoreDNS here; the translator gets the
cluster's name and the pool manager the cluster's edge addresses) — and kube-lite runs their
pods as processes. `status` reads their health from the Deployments and Pods, as a user would with
kubectl.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from isthmus.api.lb import POOLS_NAMESPACE
from isthmus.local import plan
from isthmus.local.kubelite.containers import container_pid
from isthmus.local.plan import DNS, ClusterPlan, PartId

MEMBER_BASE = "member"
"""The kustomization of deploy/ a member cluster gets."""
LB_COMPONENTS = ("components/lb", "components/lb/class-less")
"""Load balancing is opt-in on a real cluster (deploy/components/lb); the local clusterset has no
other load balancer, so it opts in, class-less Services included (the seed's flows name no class)."""
BROKER_BASE = "broker/controllers"
"""The kustomization of deploy/ with the broker's workloads (deploy/broker itself is `deploy-broker`'s)."""
READ_TIMEOUT = 2.0
COMPONENT_NAMESPACES = (plan.COMPONENT_NAMESPACE, POOLS_NAMESPACE)
"""Where the component Deployments are: the pool manager has a namespace of its own
(deploy/member/pools/namespace.yaml says why)."""


FAST_READINESS = {
    "target": {"kind": "Deployment"},
    "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/template/spec/containers/0/readinessProbe/periodSeconds",
                              "value": 1}]),
}
"""Readiness probed every second here (5 s in deploy/): kube-lite, like a kubelet, probes a new pod
at once, while it is still importing, then after a whole period; `isthmus up` waits for every pod."""


def pinned_image(digest: str | None) -> dict[str, Any]:
    """The overlay's `images:` entry pinning the Isthmus image by the digest `make image` recorded
    (runc mode: the pods run exactly the image built here); nothing without one."""
    from isthmus.api.image import IMAGE_REPOSITORY

    return {"images": [{"name": IMAGE_REPOSITORY, "digest": digest}]} if digest else {}


def replicas(nodes: int) -> int:
    """The local clusterset's replicas of the pool manager, DNS, the webhook, the controller manager, the
    agent, the egress gateway and each egress forwarder (two each in deploy/): one on one node, where a second adds memory (every pod is a process or
    container on this one machine) and no availability; two with several nodes, one per node, so a
    rollout or a drain of a node always leaves one serving (the drill, local/drill.py, counts every
    request)."""
    return min(nodes, 2)


def overlay(cluster: ClusterPlan, deploy_dir: Path, into: Path, pools_dir: Path, digest: str | None = None,
            nodes: int = 1) -> Path:
    """Write the local overlay of deploy/member for one cluster into `into` (a directory of its own,
    rewritten every `up`); returns it. The base is referenced by a relative path: kustomize refuses
    absolute ones. `pools_dir` is the cluster's pool manager's state dir (pods here share one
    filesystem, so each cluster needs its own; each replica's instances have run directories of
    their own slots). `nodes`: the cluster's nodes (`up --nodes`)."""
    into.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(deploy_dir / MEMBER_BASE, into)
    port = plan.dns_node_port(cluster)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "components": [os.path.relpath(deploy_dir / c, into) for c in LB_COMPONENTS],
        **pinned_image(digest),
        "patches": [
            {"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[DNS]},
             "patch": yaml.safe_dump([{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                                        "value": f"--local-zone={plan.LOCAL_ZONE}"}])},
            # Each ExternalService's forwarder pods are as many as the replicas below (`replicas`).
            {"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[plan.CONTROLLER_MANAGER]},
             "patch": yaml.safe_dump([{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                                        "value": f"--forwarder-replicas={replicas(nodes)}"},
                                       {"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                                        "value": f"--cluster-name={cluster.name}"}])},
            _pools_patch(cluster, pools_dir),
            *_runc_patches(cluster),
            FAST_READINESS,
            # One webhook, DNS, pool manager and controller manager replica per cluster on one node,
            # two with several (`replicas`). A rollout still never leaves DNS without a ready pod
            # (maxUnavailable 0, maxSurge 1), nor the controllers without a standby to hand over to.
            *({"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[kind]},
               "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": replicas(nodes)}])}
              for kind in (plan.WEBHOOK, DNS, plan.POOLS, plan.CONTROLLER_MANAGER, plan.AGENT)),
            # The gateway as many: on one node a restarted pod takes the Lease over as a standby would
            # (two there would bind the same host addresses); with several nodes a standby on another
            # node takes over when the leader's node is drained.
            {"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[plan.EGRESS_GATEWAY]},
             "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": replicas(nodes)},
                                      {"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                                       "value": "--lease-duration=4"}])},
            {"target": {"kind": "Service", "name": plan.DNS_SERVICE},
             "patch": yaml.safe_dump([
                 {"op": "replace", "path": "/spec/type", "value": "NodePort"},
                 {"op": "add", "path": "/spec/ports/0/nodePort", "value": port},
                 {"op": "add", "path": "/spec/ports/1/nodePort", "value": port},
             ])},
        ],
    }
    return _write(into, kustomization)


def broker_overlay(deploy_dir: Path, into: Path, pools_dir: Path, runtime: str = plan.PROCESS,
                   digest: str | None = None) -> Path:
    """The local overlay of deploy/broker/controllers: the broker's pool manager on the broker's edge
    addresses (127.30.0.1 / 127.31.0.1, or 10.30.0.1 / 10.31.0.1 under runc), exactly as a member's."""
    into.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(deploy_dir / BROKER_BASE, into)
    return _write(into, {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        **pinned_image(digest),
        "patches": [_pools_patch(plan.broker_plan(runtime), pools_dir), FAST_READINESS,
                    # The broker has one node: one pool manager (two would never both be scheduled).
                    {"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[plan.POOLS]},
                     "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": 1}])}],
    })


def source_ip_class(cluster: ClusterPlan) -> dict[str, Any]:
    """The cluster's local SourceIPClass (`isthmus-local`): its own /24 of 127.32.0.0/16."""
    from isthmus.api.egress import GROUP, VERSION

    assert cluster.egress_range is not None
    first, last = cluster.egress_range
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SourceIPClass",
            "metadata": {"name": plan.LOCAL_SOURCE_IP_CLASS, "labels": {"app.kubernetes.io/part-of": "isthmus"}},
            "spec": {"ranges": [{"start": first, "end": last}],
                     "allowedNamespaces": list(plan.LOCAL_SOURCE_IP_NAMESPACES), "reclaimPolicy": "Delete"}}


async def ensure_source_ip_class(kubeconfig: Path, cluster: ClusterPlan) -> None:
    """Apply the local SourceIPClass once its CRD is served and the admission webhook answers (one
    `kubectl apply -k` cannot create a CRD and an object of it, and the webhook runs as a pod). Not
    forced: an admin's edits to it are kept."""
    from lightkube import ApiError

    from isthmus.api.egress import SourceIPClass
    from isthmus.kube.client import make_client
    from isthmus.kube.helpers import wait_established
    from isthmus.kube.resources import resource_for

    client = make_client(kubeconfig, timeout=10.0)
    try:
        async with asyncio.timeout(60):
            await wait_established(client, SourceIPClass.crd.crd_name)
            res: Any = resource_for(SourceIPClass)
            while True:
                try:
                    await client.apply(res.from_dict(source_ip_class(cluster)), field_manager="isthmus-up")
                    return
                except ApiError as e:
                    if e.status.code == 409:  # an admin changed a field we set; theirs stays
                        return
                    if e.status.code != 500:  # 500: the admission webhook is not serving yet
                        raise
                await asyncio.sleep(0.5)
    finally:
        await client.close()


def _runc_patches(cluster: ClusterPlan) -> list[dict[str, Any]]:
    """runc mode: the egress gateway on its node's network (hostNetwork, as docs/egress.md has it on
    a real cluster), where `up` made the cluster's whole egress range local (the gateway binds the
    claimed source IPs; the fabric routes their answers back to this node; with several nodes, to
    the node it runs on: local/network/speaker.py)."""
    if cluster.runtime != plan.RUNC:
        return []
    return [{"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[plan.EGRESS_GATEWAY]},
             "patch": yaml.safe_dump([
                 {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
                 {"op": "add", "path": "/spec/template/spec/dnsPolicy", "value": "ClusterFirstWithHostNet"},
                 # Its own network's net.ipv4.ip_unprivileged_port_start=0 (the manifest's answer to ports
                 # below 1024) is refused with hostNetwork, by kube's kubelet and ours: the node's own
                 # setting applies instead (docs/network.md).
                 {"op": "add", "path": "/spec/template/spec/securityContext/sysctls", "value": []},
             ])},
            # A hostNetwork pod is beyond even Pod Security's baseline: isthmus-system, `restricted` in
            # deploy/member, enforces `privileged` here (warn and audit still say restricted).
            {"target": {"kind": "Namespace", "name": plan.COMPONENT_NAMESPACE},
             "patch": yaml.safe_dump([{"op": "replace", "path": "/metadata/labels/pod-security.kubernetes.io~1enforce",
                                       "value": "privileged"}])}]


def _pools_patch(cluster: ClusterPlan, pools_dir: Path) -> dict[str, Any]:
    """The edge host's addresses are the cluster's own. Process pods share the machine's network, so
    the pod keeps a pod IP of its own for its health endpoint instead of the host network, and a state
    dir of its own per cluster; under runc the manifest's hostNetwork and emptyDir stand as written."""
    edges = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": arg} for arg in (
        f"--public-address={cluster.pool_public_address}", f"--private-address={cluster.pool_private_address}")]
    if cluster.runtime == plan.RUNC:
        return {"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[plan.POOLS]},
                "patch": yaml.safe_dump(edges)}
    return {"target": {"kind": "Deployment", "name": plan.DEPLOYMENTS[plan.POOLS]},
            "patch": yaml.safe_dump([
                {"op": "replace", "path": "/spec/template/spec/hostNetwork", "value": False},
                {"op": "replace", "path": "/spec/template/spec/dnsPolicy", "value": "ClusterFirst"},
                *edges,
                {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": f"--state-dir={pools_dir}"},
            ])}


def _write(into: Path, kustomization: dict[str, Any]) -> Path:
    text = "# Written by `isthmus up` for the local plan; rewritten on every up.\n"
    text += yaml.safe_dump(kustomization, sort_keys=False)
    (into / "kustomization.yaml").write_text(text)
    return into


def apply_argv(kubeconfig: Path, directory: Path) -> list[str] | None:
    """`kubectl apply --server-side -k` of the overlay, or None when there is no kubectl (then the
    same rendered objects are applied server-side from Python: see `isthmus.kube.manifests`).

    Server-side: client-side apply computes three-way merges against the OpenAPI schema in kubectl,
    3.3 s of CPU per cluster against 1.3 s, and four of them ran at once on every `up`. The
    manifests' fields are up's to set (a new version rolls out), hence --force-conflicts.
    --validate=false: validating made kubectl fetch and parse the server's OpenAPI v3 documents
    (3 MB), 1.1 s of its CPU per cluster for manifests that are ours and checked by the tests; the
    server still decodes and validates every object as it stores it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    return [kubectl, "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--force-conflicts",
            "--validate=false", "-k", str(directory)]


@dataclass
class PodPart:
    """What `status` says of one component: from its Deployment and the newest of its pods."""

    health: str = "down"
    pod: str | None = None
    pid: int | None = None
    restarts: int = 0
    last_exit: int | None = None
    last_error: str | None = None
    ready_replicas: int = 0
    replicas: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def judge(deployment: dict[str, Any] | None, pods: list[dict[str, Any]]) -> PodPart:
    """A component's health the way `kubectl get deploy,pods` shows it: ready when a replica is
    ready; restarting when its container crash-loops or restarted; starting otherwise. `pod` and
    `pid` are a ready replica's; `restarts` counts every replica's."""
    out = PodPart()
    if deployment is None:
        out.health, out.last_error = "starting", "not installed yet"
        return out
    status = deployment.get("status") or {}
    out.replicas = int((deployment.get("spec") or {}).get("replicas", 1) or 0)
    out.ready_replicas = int(status.get("readyReplicas") or 0)
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    live.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
    best = None
    for p in live:
        statuses = (p.get("status") or {}).get("containerStatuses") or []
        if statuses and statuses[0].get("ready"):
            best = p
            break
    best = best or (live[-1] if live else None)
    waiting_reason = None
    if best is not None:
        out.pod = best["metadata"]["name"]
        statuses = (best.get("status") or {}).get("containerStatuses") or []
        if statuses and "running" in (statuses[0].get("state") or {}):
            out.pid = container_pid(statuses[0].get("containerID"))
    # Restarts of every replica; the last exit and the error of the one that ended last.
    newest = ""
    for p in live:
        for cs in ((p.get("status") or {}).get("containerStatuses") or [])[:1]:
            out.restarts += int(cs.get("restartCount") or 0)
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and waiting_reason is None:
                waiting_reason = waiting["reason"]
                if waiting.get("message"):
                    out.last_error = f"{waiting_reason}: {waiting['message']}"[:300]
            last = (cs.get("lastState") or {}).get("terminated") or {}
            if last and str(last.get("finishedAt") or "") >= newest:
                newest = str(last.get("finishedAt") or "")
                out.last_exit = last.get("exitCode")
                if out.last_error is None or not waiting_reason:
                    out.last_error = (f"exited {last.get('exitCode')}"
                                      + (f" ({last['reason']})" if last.get("reason") else ""))
    if out.ready_replicas >= 1:
        out.health = "ready"
    elif waiting_reason in ("CrashLoopBackOff", "CreateContainerConfigError", "ErrImagePull",
                            "ImagePullBackOff") or out.restarts:
        out.health = "restarting"
    else:
        out.health = "starting"
    return out


async def read_components(kubeconfig: Path, deployments: dict[str, str] | None = None) -> dict[str, PodPart]:
    """Each pod part of one cluster (member parts by default; the broker passes its own), read from its
    apiserver: two lists (Deployments, Pods of the namespace), matched here by each selector. `up`
    and `status` ask several times a second while a clusterset starts: a GET and a LIST per part
    cost nine times the requests."""
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Pod

    from isthmus.kube.client import make_client

    client = make_client(kubeconfig, timeout=READ_TIMEOUT)
    out: dict[str, PodPart] = {}
    found: dict[str, Any] = {}
    all_pods: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(READ_TIMEOUT * 2):
            for ns in COMPONENT_NAMESPACES:
                found.update({str(d.metadata.name): d.to_dict() async for d in client.list(Deployment, namespace=ns)
                              if d.metadata is not None})
                all_pods += [p.to_dict() async for p in client.list(Pod, namespace=ns)]
    finally:
        await client.close()
    for kind, name in (deployments if deployments is not None else plan.DEPLOYMENTS).items():
        dep = found.get(name)
        selector = ((dep or {}).get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        pods = [p for p in all_pods
                if selector and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
        out[kind] = judge(dep, pods)
    return out


def pod_part_ids(cluster: str) -> list[PartId]:
    return [PartId(cluster, kind) for kind in (plan.BROKER_POD_KINDS if cluster == plan.BROKER else plan.POD_KINDS)]


async def apply_rendered(kubeconfig: Path, directory: Path) -> None:
    """What `kubectl apply -k` does, for machines without kubectl: render, then server-side apply."""
    from isthmus.kube.client import make_client
    from isthmus.kube.manifests import apply, render

    client = make_client(kubeconfig, timeout=10.0)
    try:
        await apply(client, render(directory), field_manager="isthmus-up")
    finally:
        await client.close()


async def deployment_exists(kubeconfig: Path, deployment: str) -> bool:
    """Whether the component Deployment is there (True when that cannot be read: restart to be safe)."""
    from lightkube.resources.apps_v1 import Deployment

    from isthmus.kube.client import make_client
    from isthmus.kube.helpers import get_or_none

    client = make_client(kubeconfig, timeout=10.0)
    try:
        return await get_or_none(client, Deployment, deployment, namespace=plan.COMPONENT_NAMESPACE) is not None
    except Exception:
        return True
    finally:
        await client.close()


async def restart(kubeconfig: Path, deployment: str) -> None:
    """`kubectl rollout restart`: a new template annotation, so the Deployment replaces its pods."""
    import datetime

    from lightkube.resources.apps_v1 import Deployment
    from lightkube.types import PatchType

    from isthmus.kube.client import make_client

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}}
    client = make_client(kubeconfig, timeout=10.0)
    try:
        await client.patch(Deployment, deployment, body, namespace=plan.COMPONENT_NAMESPACE,
                           patch_type=PatchType.STRATEGIC)
    finally:
        await client.close()


async def remove_superseded(kubeconfig: Path) -> list[str]:
    """Delete the Deployments an earlier version installed and this one replaced (`apply -k` adds and
    updates, it never removes); returns the names deleted. Their pods go with them (garbage collector)."""
    from lightkube import ApiError
    from lightkube.resources.apps_v1 import Deployment

    from isthmus.kube.client import make_client
    from isthmus.kube.helpers import is_not_found

    client = make_client(kubeconfig, timeout=10.0)
    deleted: list[str] = []
    try:
        for name in plan.SUPERSEDED_DEPLOYMENTS:
            try:
                await client.delete(Deployment, name, namespace=plan.COMPONENT_NAMESPACE)
                deleted.append(name)
            except ApiError as e:
                if not is_not_found(e):
                    raise
    finally:
        await client.close()
    return deleted
