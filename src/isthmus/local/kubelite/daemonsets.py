"""DaemonSets → one Pod per eligible Node: kube-controller-manager's DaemonSet controller, simplified.

A Node is eligible when it fits the template's ``nodeName``, ``nodeSelector`` and required
nodeAffinity, and the Pod (with the tolerations kube adds to every daemon Pod) tolerates its
NoSchedule and NoExecute taints; an untolerated NoSchedule taint only stops new Pods, an existing
one keeps running (kube's shouldRun / shouldContinueRunning). Node label changes re-evaluate every
DaemonSet (``kubectl label node``): a Node that stops matching loses its daemon Pod, one that
starts matching gets one.

Daemon Pods are ``<ds>-<5 random>``, pinned to their Node by the ``metadata.name`` node affinity
kube writes and bound by the scheduler (as since kube 1.12: no ``spec.nodeName`` of their own; a
Pod not yet bound counts for the Node its affinity names), labelled ``controller-revision-hash`` and
``pod-template-generation``. Each template is a ControllerRevision ``<ds>-<hash>`` (shared with
StatefulSets). RollingUpdate replaces out-of-date Pods, at most ``maxUnavailable`` Nodes at a time,
old one deleted first and the new one created once it is gone (maxSurge 0), or with maxSurge the new
one first and the old one deleted once the new one is available; OnDelete only uses the
new template when a Pod is deleted. Deleting the DaemonSet deletes its Pods through the apiserver's
garbage collector.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import ControllerRevision, DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from isthmus.kube.helpers import is_not_found
from isthmus.local.kubelite import CONTROLLER_REVISION_HASH_LABEL, FIELD_MANAGER
from isthmus.local.kubelite.endpointslices import pod_is_ready
from isthmus.local.kubelite.scheduler import node_matches_affinity, tolerates
from isthmus.local.kubelite.workloads import (
    OWNER_INDEX,
    WAIT_SECONDS,
    Expectations,
    controller_uid_index,
    pod_from_template,
    random_suffix,
    semantic,
    sync_controller_revisions,
    template_hash,
)
from isthmus.runtime import Controller, EventRecorder, Informer, Result, enqueue_owner, split_key
from isthmus.runtime.events import NORMAL, WARNING

__all__ = [
    "POD_TEMPLATE_GENERATION_LABEL",
    "DaemonSetController",
    "DaemonSetPlan",
    "daemon_tolerations",
    "daemonset_plan",
    "daemonset_status",
    "node_should_run",
]

log = logging.getLogger(__name__)

POD_TEMPLATE_GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"

Obj = dict[str, Any]

# kube's AddOrUpdateDaemonPodTolerations: a daemon Pod stays through node trouble.
_DEFAULT_TOLERATIONS: list[tuple[str, str]] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
]
_HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", "NoSchedule")


def daemon_tolerations(pod_spec: Mapping[str, Any]) -> list[Obj]:
    """The template's tolerations plus kube's defaults for daemon Pods (an existing one with the
    same key and effect is replaced, as AddOrUpdateTolerationInPodSpec does)."""
    defaults = list(_DEFAULT_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        defaults.append(_HOST_NETWORK_TOLERATION)
    out = [dict(t) for t in pod_spec.get("tolerations") or []]
    for key, effect in defaults:
        wanted = {"key": key, "operator": "Exists", "effect": effect}
        out = [t for t in out if not (t.get("key") == key and t.get("effect") == effect)] + [wanted]
    return out


def node_should_run(ds: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """kube's NodeShouldRunDaemonPod: (a Pod should be created here, an existing one may stay)."""
    pod_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    name = str((node.get("metadata") or {}).get("name"))
    if pod_spec.get("nodeName") and pod_spec["nodeName"] != name:
        return False, False
    if not node_matches_affinity({"spec": pod_spec}, node):
        return False, False
    tolerations = daemon_tolerations(pod_spec)
    untolerated = [
        t for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in tolerations)
    ]
    if any(t.get("effect") == "NoExecute" for t in untolerated):
        return False, False
    return not untolerated, True


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _terminating(pod: Mapping[str, Any]) -> bool:
    return (pod.get("metadata") or {}).get("deletionTimestamp") is not None


def _node_of(pod: Mapping[str, Any]) -> str:
    """kube's GetTargetNodeName: the Node a daemon Pod is bound to, or, not yet scheduled, the one
    its required ``metadata.name`` node affinity names."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(f.get("values") or []) == 1:
                return str(f["values"][0])
    return ""


def _by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Daemon Pods per Node, oldest first (kube keeps the oldest when there are several)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for p in sorted(pods, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""), _name(p))):
        out.setdefault(_node_of(p), []).append(p)
    return out


def template_generation(ds: Mapping[str, Any]) -> str:
    meta = ds.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION) or meta.get("generation") or 1)


def is_updated(pod: Mapping[str, Any], ds: Mapping[str, Any], pod_hash: str) -> bool:
    """kube's IsPodUpdated: the current template's hash, or its template generation."""
    labels = _labels(pod)
    return labels.get(CONTROLLER_REVISION_HASH_LABEL) == pod_hash or (
        TEMPLATE_GENERATION_ANNOTATION in ((ds.get("metadata") or {}).get("annotations") or {})
        and labels.get(POD_TEMPLATE_GENERATION_LABEL) == template_generation(ds)
    )


def _ready_since(pod: Mapping[str, Any]) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("lastTransitionTime"):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(str(c["lastTransitionTime"]).replace("Z", "+00:00")).timestamp()
    return None


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: float) -> bool:
    """Ready for at least minReadySeconds (kube's IsPodAvailable)."""
    if not pod_is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = _ready_since(pod)
    return since is not None and now - since >= min_ready_seconds


def _int_or_percent(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent, rounding up (as the DaemonSet controller does)."""
    if isinstance(value, str) and value.endswith("%"):
        with contextlib.suppress(ValueError):
            return -(-int(value[:-1]) * total // 100)
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def max_unavailable(ds: Mapping[str, Any], desired: int) -> int:
    ru = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {}
    unavailable = _int_or_percent(ru.get("maxUnavailable", 1), desired)
    surge = _int_or_percent(ru.get("maxSurge", 0), desired)
    return 1 if unavailable == 0 and surge == 0 else unavailable


def max_surge(ds: Mapping[str, Any], desired: int) -> int:
    ru = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {}
    return _int_or_percent(ru.get("maxSurge", 0), desired)


def _surplus(
    ds: Mapping[str, Any], running: list[Mapping[str, Any]], pod_hash: str, surge: bool, min_ready: int,
    now: float,
) -> list[str]:
    """Pods beyond the one a Node may run (oldest first in ``running``): all but the oldest; with
    maxSurge, an old Pod may stay beside the oldest new one until that is available (kube)."""
    if not surge:
        return [_name(p) for p in running[1:]]
    new = [p for p in running if is_updated(p, ds, pod_hash)]
    old = [p for p in running if not is_updated(p, ds, pod_hash)]
    out = [_name(p) for p in new[1:] + old[1:]]
    if new and old and (not pod_is_ready(old[0]) or is_available(new[0], min_ready, now)):
        out.append(_name(old[0]))
    return out


def _surge_plan(
    ds: Mapping[str, Any], eligible: list[str], by_node: Mapping[str, list[Mapping[str, Any]]],
    pod_hash: str, surge: int, min_ready: int, now: float,
) -> DaemonSetPlan:
    """kube's rolling update with maxSurge: the new Pod first, beside the old one, on at most
    maxSurge Nodes at a time (at once where the old one is not available); the old one goes
    once the new one is available."""
    plan = DaemonSetPlan()
    surging = 0
    allowed: list[str] = []
    candidates: list[str] = []
    for name in eligible:
        live = [p for p in by_node.get(name, []) if not _terminating(p)]
        new = [p for p in live if is_updated(p, ds, pod_hash)]
        old = [p for p in live if not is_updated(p, ds, pod_hash)]
        if not old:
            continue
        if not new:
            (candidates if is_available(old[0], min_ready, now) else allowed).append(name)
        elif not is_available(new[0], min_ready, now):
            surging += 1
        else:
            plan.delete.append(_name(old[0]))
    for name in allowed + candidates[: max(0, surge - surging)]:
        plan.create[f"{_name(ds)}-{random_suffix()}"] = name
    return plan


@dataclass
class DaemonSetPlan:
    """Pods to create (name → node) and to delete (names)."""

    create: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)


def daemonset_plan(
    ds: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
    pod_hash: str, now: float,
) -> DaemonSetPlan:
    """kube's manage then rollingUpdate: a Pod where one should run and none is (a terminating
    one blocks its Node until it is gone), none where it may not stay, one per Node; then, for
    RollingUpdate, delete out-of-date Pods while at most maxUnavailable Nodes are unavailable."""
    spec = ds.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    per_node = _by_node(pods)
    plan = DaemonSetPlan()
    base = f"{_name(ds)}-"
    nodes = list(nodes)
    desired = sum(node_should_run(ds, n)[0] for n in nodes)
    rolling = ((spec.get("updateStrategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"
    surge = max_surge(ds, desired) if rolling else 0
    eligible: list[str] = []
    for node in nodes:
        name = _name(node)
        should_run, should_continue = node_should_run(ds, node)
        on_node = per_node.get(name, [])
        live = [p for p in on_node if not _terminating(p)]
        failed = [p for p in live if (p.get("status") or {}).get("phase") == "Failed"]
        if should_run and not on_node:
            plan.create[base + random_suffix()] = name
        elif should_continue:
            plan.delete += [_name(p) for p in failed]
            running = [p for p in live if p not in failed]
            plan.delete += _surplus(ds, running, pod_hash, surge > 0, min_ready, now)
            if should_run:
                eligible.append(name)
        else:
            plan.delete += [_name(p) for p in live]
    # Pods bound to a Node the cache does not have are left alone, as kube leaves them to the Pod
    # garbage collector: a Node re-registering (or not yet seen after a restart) keeps its Pods.
    if plan.create or plan.delete:
        return plan
    if not rolling:
        return plan
    by_node = _by_node(pods)
    if surge > 0:
        return _surge_plan(ds, eligible, by_node, pod_hash, surge, min_ready, now)
    unavailable, candidates = 0, []
    for name in eligible:
        live = [p for p in by_node.get(name, []) if not _terminating(p)]
        if len(live) != 1:
            unavailable += 1
            continue
        pod = live[0]
        if is_updated(pod, ds, pod_hash):
            unavailable += not is_available(pod, min_ready, now)
        elif not is_available(pod, min_ready, now):
            plan.delete.append(_name(pod))  # an unavailable old Pod is replaced at once
        else:
            candidates.append(_name(pod))
    room = max(0, max_unavailable(ds, desired) - unavailable - len(plan.delete))  # those count as unavailable
    plan.delete += candidates[:room]
    return plan


def daemonset_status(
    ds: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
    pod_hash: str, now: float,
) -> Obj:
    """The counts kube's updateDaemonSetStatus writes (what ``kubectl get ds`` and
    ``kubectl rollout status ds`` show)."""
    spec = ds.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    per_node = _by_node(p for p in pods if not _terminating(p))
    desired = current = misscheduled = ready = available = updated = 0
    for node in nodes:
        should_run, _ = node_should_run(ds, node)
        on_node = per_node.get(_name(node), [])
        if should_run:
            desired += 1
            if on_node:
                current += 1
                pod = on_node[0]
                ready += pod_is_ready(pod)
                available += is_available(pod, min_ready, now)
                updated += is_updated(pod, ds, pod_hash)
        elif on_node:
            misscheduled += 1
    status: Obj = {
        "observedGeneration": int((ds.get("metadata") or {}).get("generation") or 1),
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": available,
        "numberUnavailable": desired - available,
        "updatedNumberScheduled": updated,
    }
    # DaemonSetStatus as Go writes it: omitempty zeros left out, collisionCount only once counted.
    status = {k: v for k, v in status.items() if v or k not in OMITEMPTY_STATUS}
    collisions = int((ds.get("status") or {}).get("collisionCount") or 0)
    if collisions:
        status["collisionCount"] = collisions
    return status


OMITEMPTY_STATUS = ("observedGeneration", "numberAvailable", "numberUnavailable", "updatedNumberScheduled")


def _node_placement_changed(old: Any | None, new: Any) -> bool:
    """Node events that can change where daemon Pods run (kube's shouldIgnoreNodeUpdate): not the
    kubelet's status heartbeats, which would wake every DaemonSet every 10 s."""
    if old is None:
        return True
    a, b = old.to_dict(), new.to_dict()
    return bool(
        (a.get("metadata") or {}).get("labels") != (b.get("metadata") or {}).get("labels")
        or a.get("spec") != b.get("spec")
    )


class DaemonSetController:
    """Keyed by DaemonSet; triggered by it, its Pods, its ControllerRevisions and every Node change."""

    def __init__(
        self,
        client: AsyncClient,
        daemonsets: Informer[DaemonSet],
        nodes: Informer[Node],
        pods: Informer[Pod],
        revisions: Informer[ControllerRevision],
        *,
        workers: int = 2,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.client = client
        self.recorder = recorder.child("daemonset-controller") if recorder is not None else None
        self.daemonsets = daemonsets
        self.nodes = nodes
        self.pods = pods
        self.revisions = revisions
        self.expectations = Expectations()
        for informer in (pods, revisions):
            with contextlib.suppress(ValueError):  # another controller of the shared informer added it
                informer.add_indexer(OWNER_INDEX, controller_uid_index)
        self.controller = Controller("kubelite-daemonsets", self.reconcile, workers=workers)
        self.controller.watch(daemonsets)
        self.controller.watch(pods, enqueue_owner("DaemonSet", "apps"))
        self.controller.watch(revisions, enqueue_owner("DaemonSet", "apps"))
        self.controller.watch(nodes, lambda _node: self.daemonsets.cache.keys(), predicate=_node_placement_changed)

    async def run(self) -> None:
        await self.controller.run()

    @staticmethod
    def pod_hash(data: Obj) -> str:
        return template_hash(
            semantic((data.get("spec") or {}).get("template") or {}),
            int((data.get("status") or {}).get("collisionCount") or 0),
        )

    def new_pod(self, data: Obj, name: str, node: str, pod_hash: str) -> Obj:
        template_spec = ((data.get("spec") or {}).get("template") or {}).get("spec") or {}
        affinity = dict(template_spec.get("affinity") or {})
        # kube's ReplaceDaemonSetPodNodeNameNodeAffinity: the Pod is pinned to its Node.
        affinity["nodeAffinity"] = {
            **(affinity.get("nodeAffinity") or {}),
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]},
        }
        return pod_from_template(
            data, name,
            labels={CONTROLLER_REVISION_HASH_LABEL: pod_hash, POD_TEMPLATE_GENERATION_LABEL: template_generation(data)},
            spec_overrides={"affinity": affinity, "tolerations": daemon_tolerations(template_spec)},
        )

    async def reconcile(self, key: str) -> Result | None:
        obj = self.daemonsets.cache.get(key)
        if obj is None:
            self.expectations.forget(key)
            return None  # the garbage collector removes the Pods (ownerReferences)
        ns, name = split_key(key)
        data = obj.to_dict()
        uid = data["metadata"].get("uid")
        pods = [p.to_dict() for p in self.pods.cache.by_index(OWNER_INDEX, uid)] if uid else []
        if not self.expectations.satisfied(key, {_name(p) for p in pods}):
            return Result(requeue_after=WAIT_SECONDS)
        nodes = [n.to_dict() for n in self.nodes.cache.list()]
        pod_hash = self.pod_hash(data)
        now = datetime.now(UTC).timestamp()
        if data["metadata"].get("deletionTimestamp") is None:
            template = (data.get("spec") or {}).get("template") or {}
            in_use = {f"{name}-{h}" for h in (_labels(p).get(CONTROLLER_REVISION_HASH_LABEL) for p in pods) if h}
            ok = await sync_controller_revisions(
                self.client, self.revisions, data, pod_hash,
                labels=(template.get("metadata") or {}).get("labels") or {},
                in_use=in_use,
            )
            if not ok:
                await self._count_collision(ns, data)
                return Result(requeue_after=WAIT_SECONDS)
            await self._apply(key, data, daemonset_plan(data, nodes, pods, pod_hash, now), pod_hash)
        status = daemonset_status(data, nodes, pods, pod_hash, now)
        old = data.get("status") or {}
        patch = {**{k: None for k in OMITEMPTY_STATUS if k in old and k not in status}, **status}
        if any(old.get(k) != v for k, v in patch.items()):
            await self.client.patch(
                DaemonSet.Status, name, {"status": patch}, namespace=ns,
                patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )
        min_ready = int((data.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready and status["numberReady"] > status.get("numberAvailable", 0):
            return Result(requeue_after=min(float(min_ready), 5.0))  # becomes available without an event
        return None

    async def _count_collision(self, ns: str | None, data: Obj) -> None:
        collisions = int((data.get("status") or {}).get("collisionCount") or 0) + 1
        await self.client.patch(
            DaemonSet.Status, _name(data), {"status": {"collisionCount": collisions}}, namespace=ns,
            patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
        )
        log.warning("controllerrevision name taken: hash collision", extra={"daemonset": _name(data)})

    async def _apply(self, key: str, data: Obj, plan: DaemonSetPlan, pod_hash: str) -> None:
        ns, _ = split_key(key)
        for pod_name in plan.delete:
            self.expectations.expect(key, deletes=[pod_name])
            try:
                await self.client.delete(Pod, pod_name, namespace=ns)
            except ApiError as e:
                if not is_not_found(e):
                    raise
            else:
                self._event(data, NORMAL, "SuccessfulDelete", f"Deleted pod: {pod_name}")
            log.info("pod deleted", extra={"owner": key, "kind": "DaemonSet", "pod": pod_name})
        for pod_name, node in plan.create.items():
            pod = cast(Pod, Pod.from_dict(self.new_pod(data, pod_name, node, pod_hash)))
            try:
                await self.client.create(pod, field_manager=FIELD_MANAGER)
            except ApiError as e:
                if e.status.code is not None and e.status.code < 500:  # refused: say why, as kube's controller
                    self._event(data, WARNING, "FailedCreate", f"Error creating: {e.status.message or e}")
                raise
            self.expectations.expect(key, creates=[pod_name])
            self._event(data, NORMAL, "SuccessfulCreate", f"Created pod: {pod_name}")
            log.info("pod created", extra={"owner": key, "kind": "DaemonSet", "pod": pod_name, "node": node})

    def _event(self, data: Obj, type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(data, type_, reason, message)
