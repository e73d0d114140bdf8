"""Node health and taints: kube-controller-manager's node lifecycle controller (v1.32), simplified.

Every ``MONITOR_SECONDS`` each Node is looked at. A kubelet that has neither renewed its Lease
(``kube-node-lease/<node>``) nor posted its status for ``GRACE_SECONDS`` (kube's
``--node-monitor-grace-period``, 50 s since v1.32) is presumed gone: its Ready, MemoryPressure,
DiskPressure and PIDPressure conditions become ``Unknown`` ("Kubelet stopped posting node
status."), a ``NodeNotReady`` Event is recorded and its Pods are marked not ready, so Services stop
sending them traffic. Staleness is measured on this controller's clock from when it last saw the
heartbeat or the Lease move, as kube does, so clock skew between machines does not matter.

The taints follow the conditions, as kube's NoSchedule tainting pass and taint-based eviction
write them: ``node.kubernetes.io/not-ready`` (Ready False) or ``unreachable`` (Ready Unknown), both
NoSchedule and NoExecute; ``memory-pressure``, ``disk-pressure``, ``pid-pressure`` and
``network-unavailable`` NoSchedule; and ``node.kubernetes.io/unschedulable:NoSchedule`` while
``spec.unschedulable`` is set (``kubectl cordon``). Taints of other keys are never touched.

Pods on a Node with a NoExecute taint they do not tolerate are deleted at once; those that
tolerate it for ``tolerationSeconds`` (the 300 s DefaultTolerationSeconds admission adds) when that
time has passed since the taint's ``timeAdded`` (kube's taint eviction controller).

:class:`PodGCController` is kube's pod garbage collector for what Nodes leave behind: the Pods of
a deleted Node (after 40 s), unscheduled Pods being deleted, and terminating Pods of a Node that is
not ready and tainted ``node.kubernetes.io/out-of-service``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from isthmus.kube.helpers import is_not_found
from isthmus.local.kubelite.scheduler import tolerates
from isthmus.runtime import Controller, EventRecorder, Informer, Result

__all__ = [
    "GRACE_SECONDS",
    "MONITOR_SECONDS",
    "NodeLifecycleController",
    "PodGCController",
    "desired_taints",
    "eviction_due",
    "gc_reason",
    "stale_conditions",
]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]

COMPONENT = "node-controller"
MONITOR_SECONDS = 5.0
"""kube's --node-monitor-period."""
GRACE_SECONDS = 50.0
"""kube's --node-monitor-grace-period (40 s before v1.32)."""
STARTUP_GRACE_SECONDS = 60.0
"""kube's --node-startup-grace-period: a Node that never posted Ready gets this long."""
NODE_LEASE_NAMESPACE = "kube-node-lease"

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
# kube's nodeConditionToTaintKeyStatusMap (the NoSchedule tainting pass).
_CONDITION_TAINTS: dict[tuple[str, str], str] = {
    ("Ready", "False"): NOT_READY,
    ("Ready", "Unknown"): UNREACHABLE,
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
}
_NO_SCHEDULE_KEYS = frozenset({*_CONDITION_TAINTS.values(), UNSCHEDULABLE})
_NO_EXECUTE_KEYS = frozenset({NOT_READY, UNREACHABLE})
_WATCHED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


def _fmt(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _conditions(node: Obj) -> dict[str, Obj]:
    return {str(c.get("type")): c for c in (node.get("status") or {}).get("conditions") or []}


def stale_conditions(node: Obj, now: float, *, never_posted: bool) -> list[Obj]:
    """The Node's conditions as kube writes them for a silent kubelet: the four it watches set to
    Unknown (transition now, the last heartbeat kept), every other one as it was."""
    reason, message = (("NodeStatusNeverUpdated", "Kubelet never posted node status.") if never_posted
                       else ("NodeStatusUnknown", "Kubelet stopped posting node status."))
    current = _conditions(node)
    out: list[Obj] = [dict(c) for t, c in current.items() if t not in _WATCHED_CONDITIONS]
    for ctype in _WATCHED_CONDITIONS:
        old = current.get(ctype)
        if old is not None and old.get("status") == "Unknown":
            out.append(dict(old))
            continue
        c: dict[str, Any] = {"type": ctype, "status": "Unknown", "reason": reason, "message": message,
                             "lastTransitionTime": _fmt(now)}
        c["lastHeartbeatTime"] = (old or {}).get("lastHeartbeatTime") or _fmt(now)
        out.append(c)
    return out


def desired_taints(node: Obj, now: float) -> list[Obj]:
    """The Node's taints with the ones this controller owns in step with its conditions and
    ``spec.unschedulable``; a taint already there keeps its ``timeAdded``."""
    spec = node.get("spec") or {}
    existing = list(spec.get("taints") or [])
    conds = _conditions(node)
    wanted: list[tuple[str, str]] = []
    for (ctype, status), key in _CONDITION_TAINTS.items():
        if (conds.get(ctype) or {}).get("status") == status:
            wanted.append((key, "NoSchedule"))
            if key in _NO_EXECUTE_KEYS:
                wanted.append((key, "NoExecute"))
    if spec.get("unschedulable"):
        wanted.append((UNSCHEDULABLE, "NoSchedule"))
    ours = {(t.get("key"), t.get("effect")): t for t in existing
            if (t.get("effect") == "NoSchedule" and t.get("key") in _NO_SCHEDULE_KEYS)
            or (t.get("effect") == "NoExecute" and t.get("key") in _NO_EXECUTE_KEYS)}
    out = [t for t in existing if (t.get("key"), t.get("effect")) not in ours]
    for key, effect in wanted:
        kept = ours.get((key, effect))
        if kept is not None:
            out.append(kept)
        else:
            taint: dict[str, Any] = {"key": key, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = _fmt(now)
            out.append(taint)
    return out


def eviction_due(pod: Obj, taints: Iterable[Obj], now: float) -> float | None:
    """When a Pod on a Node with these taints must go (kube's taint eviction): now for a NoExecute
    taint it does not tolerate, the earliest ``timeAdded + tolerationSeconds`` of the ones it
    tolerates for a while, None when it may stay."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    due: float | None = None
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return now
        if any(t.get("tolerationSeconds") is None for t in matching):
            continue  # tolerated for ever
        seconds = min(int(t["tolerationSeconds"]) for t in matching)
        added = _parse(taint.get("timeAdded")) or now
        at = added + max(0, seconds)
        due = at if due is None else min(due, at)
    return due


@dataclass
class _Health:
    seen: tuple[Any, Any]
    """(the Ready condition's lastHeartbeatTime, the Lease's renewTime) as last seen."""
    probe: float
    """This controller's clock when ``seen`` last changed."""


def _ready_status(node: Obj) -> str | None:
    c = _conditions(node).get("Ready")
    return None if c is None else str(c.get("status"))


class NodeLifecycleController:
    """Keyed by Node name; runs in the kube-lite that runs the cluster's controllers."""

    def __init__(
        self,
        client: AsyncClient,
        nodes: Informer[Node],
        leases: Informer[Lease],
        pods: Informer[Pod],
        recorder: EventRecorder,
        *,
        grace: float = GRACE_SECONDS,
        startup_grace: float = STARTUP_GRACE_SECONDS,
        monitor: float = MONITOR_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """recorder: kube-lite's (the Events go through its ``node-controller`` child)."""
        self.client = client
        self.nodes = nodes
        self.leases = leases
        self.pods = pods
        self.recorder = recorder.child(COMPONENT) if recorder.component != COMPONENT else recorder
        self.grace = grace
        self.startup_grace = startup_grace
        self.monitor = monitor
        self.clock = clock
        self._health: dict[str, _Health] = {}
        self.controller = Controller("kubelite-nodelifecycle", self.reconcile, workers=1)
        self.controller.watch(nodes)
        self.controller.watch(
            leases, lambda lease: [lease.metadata.name] if lease.metadata.namespace == NODE_LEASE_NAMESPACE else []
        )

    async def run(self) -> None:
        await self.controller.run()

    def _probe(self, name: str, node: Obj) -> _Health:
        lease = self.leases.cache.get(f"{NODE_LEASE_NAMESPACE}/{name}")
        renew = (lease.to_dict().get("spec") or {}).get("renewTime") if lease is not None else None
        seen = ((_conditions(node).get("Ready") or {}).get("lastHeartbeatTime"), renew)
        now = self.clock()
        health = self._health.get(name)
        if health is None or health.seen != seen:
            health = _Health(seen, now)
            self._health[name] = health
        return health

    async def reconcile(self, key: str) -> Result | None:
        obj = self.nodes.cache.get(key)
        if obj is None:
            self._health.pop(key, None)
            return None
        node = obj.to_dict()
        now = self.clock()
        health = self._probe(key, node)
        never = _ready_status(node) is None
        silent = now - health.probe > (self.startup_grace if never else self.grace)
        if silent and any((_conditions(node).get(t) or {}).get("status") != "Unknown" for t in _WATCHED_CONDITIONS):
            was_ready = _ready_status(node) == "True"
            conditions = stale_conditions(node, now, never_posted=never)
            updated = await self.client.patch(Node.Status, key, {"status": {"conditions": conditions}},
                                              patch_type=PatchType.MERGE)
            node = updated.to_dict()
            log.warning("node stopped posting status", extra={"node": key})
            if was_ready:
                self.recorder.normal(obj, "NodeNotReady", f"Node {key} status is now: NodeNotReady")
                await self._mark_pods_not_ready(key)
        taints = desired_taints(node, now)
        if taints != list((node.get("spec") or {}).get("taints") or []):
            await self.client.patch(
                Node, key,
                {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")},
                 "spec": {"taints": taints or None}},
                patch_type=PatchType.MERGE,
            )
        wait = await self._evict(key, taints, now)
        return Result(requeue_after=min(self.monitor, wait) if wait is not None else self.monitor)

    def _pods_on(self, node: str) -> list[Any]:
        return [p for p in self.pods.cache.list() if (p.to_dict().get("spec") or {}).get("nodeName") == node]

    async def _mark_pods_not_ready(self, node: str) -> None:
        """kube's MarkPodsNotReady: Ready False on every Pod of the Node (Services drop them)."""
        for pod in self._pods_on(node):
            data = pod.to_dict()
            conds = [dict(c) for c in (data.get("status") or {}).get("conditions") or []]
            ready = next((c for c in conds if c.get("type") == "Ready"), None)
            if ready is None or ready.get("status") == "False":
                continue
            ready["status"] = "False"
            ready["lastTransitionTime"] = _fmt(self.clock())
            try:
                await self.client.patch(Pod.Status, data["metadata"]["name"], {"status": {"conditions": conds}},
                                        namespace=data["metadata"].get("namespace"), patch_type=PatchType.MERGE)
            except ApiError as e:
                if not is_not_found(e):
                    raise
                continue
            self.recorder.warning(pod, "NodeNotReady", "Node is not ready")

    async def _evict(self, node: str, taints: list[Obj], now: float) -> float | None:
        """Delete the Pods whose time on a NoExecute-tainted Node is up; seconds to the next one."""
        if not any(t.get("effect") == "NoExecute" for t in taints):
            return None
        wait: float | None = None
        for pod in self._pods_on(node):
            data = pod.to_dict()
            if (data.get("metadata") or {}).get("deletionTimestamp"):
                continue
            due = eviction_due(data, taints, now)
            if due is None:
                continue
            if due > now:
                wait = due - now if wait is None else min(wait, due - now)
                continue
            ns, name = data["metadata"].get("namespace"), data["metadata"]["name"]
            self.recorder.normal(pod, "TaintManagerEviction", f"Marking for deletion Pod {ns}/{name}")
            try:
                await self.client.delete(Pod, name, namespace=ns)
            except ApiError as e:
                if not is_not_found(e):
                    raise
            log.info("pod evicted from tainted node", extra={"pod": f"{ns}/{name}", "node": node})
        return wait


# ---- pod garbage collection -------------------------------------------------------------------

ORPHAN_QUARANTINE_SECONDS = 40.0
"""kube's PodGC quarantine: a Node missing from the cache this long is really gone."""
GC_SECONDS = 20.0
"""kube's PodGC period."""
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


def gc_reason(pod: Obj, nodes: Mapping[str, Obj], missing_since: Mapping[str, float], now: float) -> str | None:
    """Why kube's PodGC force-deletes this Pod, or None: bound to a Node gone for the quarantine
    ("orphaned"), being deleted without ever being bound ("unscheduled"), or being deleted on a Node
    that is not ready and tainted out-of-service ("out-of-service")."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    node = str(spec.get("nodeName") or "")
    if not node:
        return "unscheduled" if meta.get("deletionTimestamp") else None
    if node not in nodes:
        since = missing_since.get(node)
        return "orphaned" if since is not None and now - since >= ORPHAN_QUARANTINE_SECONDS else None
    n = nodes[node]
    if meta.get("deletionTimestamp") and _ready_status(n) != "True" and any(
        t.get("key") == OUT_OF_SERVICE for t in (n.get("spec") or {}).get("taints") or []
    ):
        return "out-of-service"
    return None


class PodGCController:
    """kube's pod garbage collector, the parts Nodes need: Pods of deleted Nodes, unscheduled Pods
    being deleted and terminating Pods of out-of-service Nodes are force-deleted (an orphan first
    marked Failed with ``DisruptionTarget`` reason ``DeletionByPodGC``, as kube marks it)."""

    def __init__(self, client: AsyncClient, nodes: Informer[Node], pods: Informer[Pod], *,
                 period: float = GC_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.nodes = nodes
        self.pods = pods
        self.period = period
        self.clock = clock
        self._missing: dict[str, float] = {}

    async def run(self) -> None:
        await self.nodes.wait_synced()
        await self.pods.wait_synced()
        while True:
            try:
                await self.collect()
            except ApiError as e:
                log.warning("pod gc failed", extra={"error": str(e)})
            await asyncio.sleep(self.period)

    async def collect(self) -> list[str]:
        """One pass; the Pods deleted (``ns/name``)."""
        now = self.clock()
        nodes = {str(n.metadata.name): n.to_dict() for n in self.nodes.cache.list() if n.metadata}
        pods = [p.to_dict() for p in self.pods.cache.list()]
        bound = {str((p.get("spec") or {}).get("nodeName") or "") for p in pods} - {""}
        for name in bound - set(nodes):
            self._missing.setdefault(name, now)
        for name in list(self._missing):
            if name in nodes or name not in bound:
                del self._missing[name]
        deleted = []
        for pod in pods:
            why = gc_reason(pod, nodes, self._missing, now)
            if why is None:
                continue
            if why == "orphaned" and not await self._really_gone(str(pod["spec"]["nodeName"])):
                continue
            ns, name = pod["metadata"].get("namespace"), pod["metadata"]["name"]
            try:
                if why == "orphaned":
                    await self._mark_failed(pod)
                await self.client.delete(Pod, name, namespace=ns, grace_period=0)
            except ApiError as e:
                if not is_not_found(e):
                    raise
                continue
            log.info("pod garbage-collected", extra={"pod": f"{ns}/{name}", "reason": why})
            deleted.append(f"{ns}/{name}")
        return deleted

    async def _really_gone(self, node: str) -> bool:
        """kube asks the apiserver before deleting, the cache may be behind."""
        try:
            await self.client.get(Node, node)
        except ApiError as e:
            return is_not_found(e)
        return False

    async def _mark_failed(self, pod: Obj) -> None:
        status = pod.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                           "message": "PodGC: node no longer exists", "lastTransitionTime": _fmt(self.clock())})
        patch: dict[str, Any] = {"conditions": conditions}
        if status.get("phase") not in ("Succeeded", "Failed"):
            patch["phase"] = "Failed"
        await self.client.patch(Pod.Status, pod["metadata"]["name"], {"status": patch},
                                namespace=pod["metadata"].get("namespace"), patch_type=PatchType.MERGE)
