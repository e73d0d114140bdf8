"""PodDisruptionBudget status: kube-controller-manager's disruption controller (v1.32).

For each budget, the Pods of its namespace its selector picks (a missing selector picks none, an
empty one all) give:

- ``expectedPods``: with ``minAvailable`` as an integer, the number of those Pods; with a
  percentage or ``maxUnavailable``, the sum of the scale (spec.replicas) of their controllers
  (a Deployment through its ReplicaSet, a bare ReplicaSet, a StatefulSet), so a rollout or a
  missing Pod does not shrink the budget's base. A Pod of another controller (a DaemonSet,
  which has no scale) makes the budget fail safe: ``DisruptionAllowed=False SyncFailed``,
  ``disruptionsAllowed: 0``. Pods without a controller are counted as none, with kube's
  ``UnmanagedPods`` warning.
- ``desiredHealthy``: minAvailable (a percentage rounded up), or expectedPods - maxUnavailable
  (rounded up), never below 0.
- ``currentHealthy``: the Ready Pods that are neither terminating nor listed in
  ``disruptedPods`` (evicted through the Eviction API, not yet deleted).
- ``disruptionsAllowed``: currentHealthy - desiredHealthy (0 when negative or nothing expected),
  with the ``DisruptionAllowed`` condition (``SufficientPods`` / ``InsufficientPods``).
- ``disruptedPods``: the Eviction subresource adds a Pod with the time of its eviction; an
  entry goes when the Pod is gone or terminating, or after 2 minutes (kube's DeletionTimeout) when
  the Pod is still there — with kube's ``NotDeleted`` warning on the Pod. The budget is looked at
  again when the next entry expires.

Budgets are reconciled when they change and when any Pod of their namespace changes (the Pods
matching a budget are few and the test is cheap).

A second queue, as kube's, looks after Pods marked ``DisruptionTarget=True`` (by an eviction or a
preemption) that were not deleted after all: 2 minutes after the mark, if the Pod is still not
terminating (nor finished), the condition is set back to False.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment, ReplicaSet, StatefulSet
from lightkube.resources.core_v1 import Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from isthmus.local.kubelite import FIELD_MANAGER
from isthmus.local.kubelite.endpointslices import pod_is_ready
from isthmus.local.kubelite.pods import format_time
from isthmus.local.kubelite.scheduler import label_selector_matches
from isthmus.runtime import Controller, EventRecorder, Informer, Result, make_key, split_key
from isthmus.runtime.events import NORMAL, WARNING

__all__ = [
    "DELETION_TIMEOUT",
    "DisruptionController",
    "ExpectedPods",
    "budget_status",
    "disrupted_pods",
    "expected_pods",
    "healthy_pods",
    "stale_disruption_in",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DELETION_TIMEOUT = timedelta(minutes=2)
"""How long an evicted Pod may stay listed in disruptedPods before kube stops counting on its deletion."""
COMPONENT = "controllermanager"
"""The source kube's disruption controller writes its Events under (its recorder's component)."""
CONDITION = "DisruptionAllowed"


class ScaleError(Exception):
    """The budget's base cannot be worked out (kube's message, shown in the SyncFailed condition)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller")), None)


def _parse(text: Any) -> datetime | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent, rounding up (as the disruption controller asks)."""
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1] or 0)
        whole, rest = divmod(pct * total, 100)
        return whole + (1 if rest else 0)
    return int(value)


@dataclass
class ExpectedPods:
    expected: int
    desired_healthy: int
    unmanaged: list[str]


Lookup = Callable[[str, str, str], Mapping[str, Any] | None]
"""(kind, namespace, name) → the object from a cache, or None."""


def controller_scale(pod: Mapping[str, Any], lookup: Lookup) -> tuple[str, int] | None:
    """The uid and spec.replicas of the controller that scales ``pod`` (kube's finders: a
    Deployment through its ReplicaSet, a ReplicaSet, a StatefulSet); None when none of them does."""
    ref = _controller_ref(pod)
    ns = str(_meta(pod).get("namespace") or "")
    if ref is None:
        return None
    kind, name, uid = ref.get("kind"), str(ref.get("name")), ref.get("uid")
    if kind == "ReplicaSet":
        rs = lookup("ReplicaSet", ns, name)
        if rs is None or _meta(rs).get("uid") != uid:
            return None
        owner = _controller_ref(rs)
        if owner is not None and owner.get("kind") == "Deployment":
            deploy = lookup("Deployment", ns, str(owner.get("name")))
            if deploy is None or _meta(deploy).get("uid") != owner.get("uid"):
                return None
            return str(owner.get("uid")), int((deploy.get("spec") or {}).get("replicas", 1) or 0)
        return str(uid), int((rs.get("spec") or {}).get("replicas", 1) or 0)
    if kind == "StatefulSet":
        sts = lookup("StatefulSet", ns, name)
        if sts is None or _meta(sts).get("uid") != uid:
            return None
        return str(uid), int((sts.get("spec") or {}).get("replicas", 1) or 0)
    return None


def expected_scale(pods: Iterable[Mapping[str, Any]], lookup: Lookup) -> tuple[int, list[str]]:
    """kube's getExpectedScale: the sum of the scales of the Pods' controllers (each counted once)
    and the Pods without a controller. Raises ScaleError for a controller that has no scale."""
    scales: dict[str, int] = {}  # by the scaling controller's uid: a Deployment's ReplicaSets count once
    unmanaged: list[str] = []
    for pod in pods:
        if _controller_ref(pod) is None:
            unmanaged.append(str(_meta(pod).get("name")))
            continue
        found = controller_scale(pod, lookup)
        if found is None:
            raise ScaleError(f'found no controllers for pod "{_meta(pod).get("name")}"')
        scales[found[0]] = found[1]
    return sum(scales.values()), unmanaged


def expected_pods(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], lookup: Lookup) -> ExpectedPods:
    """kube's getExpectedPodCount: expectedPods and desiredHealthy of the budget."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected, unmanaged = expected_scale(pods, lookup)
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        return ExpectedPods(expected, desired, unmanaged)
    min_available = spec.get("minAvailable")
    if isinstance(min_available, str):
        expected, unmanaged = expected_scale(pods, lookup)
        return ExpectedPods(expected, _scaled(min_available, expected), unmanaged)
    if min_available is not None:
        return ExpectedPods(len(pods), int(min_available), [])
    return ExpectedPods(0, 0, [])


def disrupted_pods(
    pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: datetime
) -> tuple[dict[str, str], datetime | None, list[Mapping[str, Any]]]:
    """kube's buildDisruptedPodMap: the entries still awaited (Pod present, not terminating,
    evicted less than DELETION_TIMEOUT ago), when the first of them expires, and the Pods whose
    entry expired without them being deleted (kube warns on those)."""
    listed = (pdb.get("status") or {}).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    recheck: datetime | None = None
    overdue: list[Mapping[str, Any]] = []
    if not listed:
        return kept, None, overdue
    for pod in pods:
        name = str(_meta(pod).get("name"))
        if _meta(pod).get("deletionTimestamp") is not None or name not in listed:
            continue
        since = _parse(listed[name])
        if since is None:
            continue
        expires = since + DELETION_TIMEOUT
        if expires < now:
            overdue.append(pod)
        else:
            recheck = expires if recheck is None or expires < recheck else recheck
            kept[name] = listed[name]
    return kept, recheck, overdue


def healthy_pods(pods: Iterable[Mapping[str, Any]], disrupted: Mapping[str, str], now: datetime) -> int:
    """kube's countHealthyPods: Ready, not terminating, not awaiting deletion after an eviction."""
    count = 0
    for pod in pods:
        if _meta(pod).get("deletionTimestamp") is not None:
            continue
        since = _parse(disrupted.get(str(_meta(pod).get("name")))) if disrupted else None
        if since is not None and since + DELETION_TIMEOUT > now:
            continue
        if pod_is_ready(pod):
            count += 1
    return count


def stale_disruption_in(pod: Mapping[str, Any], now: datetime) -> float | None:
    """kube's nonTerminatingPodHasStaleDisruptionCondition: a Pod marked ``DisruptionTarget=True``
    (an eviction or preemption that did not delete it) that is still not terminating gets the
    condition set to False 2 minutes after it was added; the seconds left until then (0: now), or
    None when there is nothing to clean (no such condition, terminating, finished, or the kubelet's)."""
    if _meta(pod).get("deletionTimestamp") is not None:
        return None
    status = pod.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"), None)
    if (cond is None or cond.get("status") != "True" or cond.get("reason") == "TerminationByKubelet"
            or status.get("phase") in ("Succeeded", "Failed")):
        return None
    since = _parse(cond.get("lastTransitionTime")) or now
    return max(0.0, (since + DELETION_TIMEOUT - now).total_seconds())


def _set_condition(conditions: list[Obj], cond: Obj, now: str) -> list[Obj]:
    """apimeta.SetStatusCondition: lastTransitionTime moves only when the status changes."""
    current = next((c for c in conditions if c.get("type") == cond["type"]), None)
    merged = {**cond, "lastTransitionTime": now}
    if current is not None and current.get("status") == cond["status"]:
        merged["lastTransitionTime"] = current.get("lastTransitionTime") or now
    return [merged if c.get("type") == cond["type"] else c for c in conditions] if current else [*conditions, merged]


def budget_status(
    pdb: Mapping[str, Any], current_healthy: int, expected: ExpectedPods, disrupted: dict[str, str], now: str
) -> Obj:
    """kube's updatePdbStatus with UpdateDisruptionAllowedCondition."""
    allowed = current_healthy - expected.desired_healthy
    if expected.expected <= 0 or allowed <= 0:
        allowed = 0
    generation = int(_meta(pdb).get("generation") or 1)
    conds = [dict(c) for c in (pdb.get("status") or {}).get("conditions") or []]
    ok = allowed > 0
    cond = {"type": CONDITION, "status": "True" if ok else "False",
            "reason": "SufficientPods" if ok else "InsufficientPods", "message": "",
            "observedGeneration": generation}
    return {
        "observedGeneration": generation,
        "disruptedPods": disrupted,
        "disruptionsAllowed": allowed,
        "currentHealthy": current_healthy,
        "desiredHealthy": expected.desired_healthy,
        "expectedPods": expected.expected,
        "conditions": _set_condition(conds, cond, now),
    }


def failed_status(pdb: Mapping[str, Any], message: str, now: str) -> Obj:
    """kube's failSafe: nothing may be disrupted while the budget cannot be computed."""
    status = dict(pdb.get("status") or {})
    conds = [dict(c) for c in status.get("conditions") or []]
    cond = {"type": CONDITION, "status": "False", "reason": "SyncFailed", "message": message,
            "observedGeneration": int(status.get("observedGeneration") or 0)}
    return {"disruptionsAllowed": 0, "conditions": _set_condition(conds, cond, now)}


def _unchanged(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    def strip(conds: Any) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message") or "",
                       c.get("observedGeneration")) for c in conds or [])

    for k, v in wanted.items():
        if k == "conditions":
            if strip(current.get(k)) != strip(v):
                return False
        elif k == "disruptedPods":
            if (current.get(k) or {}) != v:
                return False
        elif current.get(k) != v:
            return False
    return True


class DisruptionController:
    """Keyed by PodDisruptionBudget; triggered by it and by every Pod of its namespace."""

    def __init__(
        self,
        client: AsyncClient,
        budgets: Informer[PodDisruptionBudget],
        pods: Informer[Pod],
        deployments: Informer[Deployment],
        replicasets: Informer[ReplicaSet],
        statefulsets: Informer[StatefulSet],
        *,
        recorder: EventRecorder | None = None,
        workers: int = 2,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.budgets = budgets
        self.pods = pods
        self._caches: dict[str, Informer[Any]] = {
            "Deployment": deployments, "ReplicaSet": replicasets, "StatefulSet": statefulsets,
        }
        self.recorder = recorder.child(COMPONENT) if recorder is not None else None
        self.clock = clock
        self.controller = Controller("kubelite-disruption", self.reconcile, workers=workers)
        self.controller.watch(budgets)
        self.controller.watch(pods, self._budgets_of_pod, initial=False)
        # kube's second queue: Pods whose DisruptionTarget condition went stale
        self.stale = Controller("kubelite-disruption-stale", self.reconcile_pod, workers=1)
        self.stale.watch(pods, predicate=lambda _old, new: _has_disruption_target(new))

    async def run(self) -> None:
        await asyncio.gather(self.controller.run(), self.stale.run())

    async def reconcile_pod(self, key: str) -> Result | None:
        """kube's syncStalePodDisruption: ``DisruptionTarget`` back to False on a Pod that was not
        deleted within 2 minutes of being marked (reason and message are left as they were)."""
        obj = self.pods.cache.get(key)
        if obj is None:
            return None
        pod = obj.to_dict()
        wait = stale_disruption_in(pod, self.clock())
        if wait is None:
            return None
        if wait > 0:
            return Result(requeue_after=wait)
        ns, name = split_key(key)
        patch = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "False",
                                            "lastTransitionTime": format_time(self.clock())}]}}
        await self.client.patch(Pod.Status, name, patch, namespace=ns, patch_type=PatchType.STRATEGIC,
                                field_manager=FIELD_MANAGER)
        return None

    def _budgets_of_pod(self, pod: Any) -> list[str]:
        ns = pod.metadata.namespace if pod.metadata else None
        return [make_key(ns, b.metadata.name) for b in self.budgets.cache.list_namespace(ns or "")
                if b.metadata and b.metadata.name]

    def _lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        obj = self._caches[kind].cache.get(make_key(namespace, name))
        return obj.to_dict() if obj is not None else None

    def _event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(obj, type_, reason, message)

    async def reconcile(self, key: str) -> Result | None:
        obj = self.budgets.cache.get(key)
        if obj is None:
            return None
        pdb = obj.to_dict()
        if _meta(pdb).get("deletionTimestamp") is not None:
            return None
        ns, _ = split_key(key)
        selector = (pdb.get("spec") or {}).get("selector")
        pods = [p.to_dict() for p in self.pods.cache.list_namespace(ns or "")]
        pods = [p for p in pods if label_selector_matches(selector, _meta(p).get("labels") or {})]
        now = self.clock()
        stamp = format_time(now)
        if not pods:
            self._event(pdb, NORMAL, "NoPods", "No matching pods found")
        try:
            expected = expected_pods(pdb, pods, self._lookup)
        except ScaleError as e:
            self._event(pdb, WARNING, "CalculateExpectedPodCountFailed",
                        f"Failed to calculate the number of expected pods: {e}")
            await self._write(pdb, failed_status(pdb, str(e), stamp))
            return None
        if expected.unmanaged:
            self._event(pdb, WARNING, "UnmanagedPods",
                        f"Pods selected by this PodDisruptionBudget (selector: {_selector_text(selector)}) were "
                        "found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, "
                        "which may result in undefined behavior. To account for these pods please set "
                        '".spec.minAvailable" field of the PDB to an integer value.')
        disrupted, recheck, overdue = disrupted_pods(pdb, pods, now)
        for pod in overdue:
            # kube's wording, namespace twice included (its format string's)
            self._event(pod, WARNING, "NotDeleted", f"Pod was expected by PDB {ns}/{ns} to be deleted but it wasn't")
        status = budget_status(pdb, healthy_pods(pods, disrupted, now), expected, disrupted, stamp)
        await self._write(pdb, status)
        if recheck is not None:
            return Result(requeue_after=max(0.1, (recheck - now).total_seconds()))
        return None

    async def _write(self, pdb: Mapping[str, Any], status: Obj) -> None:
        current = pdb.get("status") or {}
        if _unchanged(current, status):
            return
        patch = dict(status)
        if "disruptedPods" in patch:  # a merge patch keeps keys it does not name: drop the expired ones
            gone = {k: None for k in current.get("disruptedPods") or {} if k not in patch["disruptedPods"]}
            patch["disruptedPods"] = {**gone, **patch["disruptedPods"]}
        meta = _meta(pdb)
        await self.client.patch(
            PodDisruptionBudget.Status, str(meta.get("name")), {"status": patch}, namespace=meta.get("namespace"),
            patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
        )


def _has_disruption_target(pod: Any) -> bool:
    conds = (pod.status.conditions if pod.status is not None else None) or []
    return any(c.type == "DisruptionTarget" and c.status == "True" for c in conds)


def _selector_text(selector: Mapping[str, Any] | None) -> str:
    """How Go's %v prints a *metav1.LabelSelector (close enough to recognise it)."""
    if selector is None:
        return "nil"
    labels = " ".join(f"{k}:{v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
    return f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{}},}}"
