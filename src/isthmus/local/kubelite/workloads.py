"""Deployments, ReplicaSets and StatefulSets → Pods: kube-controller-manager's workload controllers, simplified.

A Deployment owns ReplicaSets, one per pod template: ``<deploy>-<template hash>``, labelled
``pod-template-hash`` (also in its selector and template), annotated with the rollout revision
(``deployment.kubernetes.io/revision``); a ReplicaSet owns its Pods (``<rs>-<5 random>``). A
template change makes a new ReplicaSet (revision + 1), rolled out as kube's deployment controller
v1.32 does, one step per sync: RollingUpdate grows the new ReplicaSet within ``maxSurge`` and
shrinks the old ones only while ``spec.replicas - maxUnavailable`` Pods stay *available* (ready
for ``minReadySeconds``), so a new Pod that never becomes ready stalls the rollout; Recreate
scales the old ones to 0 and waits until their Pods are gone, terminating ones included, before
the new one grows. ``progressDeadlineSeconds`` and the Progressing / Available / ReplicaFailure
conditions carry kube's reasons and messages (``kubectl rollout status`` fails on
ProgressDeadlineExceeded); a paused Deployment is only scaled; a change of ``spec.replicas`` is
shared proportionally among the ReplicaSets of a rollout. Going back to an older template
(``kubectl rollout undo``) reuses its ReplicaSet, gives it the next revision and records the
earlier one in ``deployment.kubernetes.io/revision-history``. Old ReplicaSets are kept, scaled
to 0, up to ``revisionHistoryLimit`` (10), so ``kubectl rollout history`` lists them. Pods a
Deployment owned directly (kube-lite before ReplicaSets) are replaced. With a recorder, the
controllers emit kube's Events under kube's component names (``ScalingReplicaSet``,
``SuccessfulCreate``/``SuccessfulDelete``/``FailedCreate``).

StatefulSets create ``<name>-<ordinal>`` in order (OrderedReady: the next one only when the
previous is Ready), with hostname/subdomain for per-Pod DNS, and replace Pods of an old
revision one at a time from the highest ordinal; each template is a ControllerRevision
(``<name>-<hash>``, numbered), so ``kubectl rollout history/undo statefulset`` work too. All report the status fields that
``kubectl rollout status`` and ``kubectl wait --for=condition=Available`` read.

Deleting a workload deletes what it owns through the apiserver's garbage collector (ownerReferences).

Informer caches lag behind our own writes, so every create/delete is remembered
(:class:`Expectations`, like kube's ControllerExpectations) and the workload is not acted on
again until the cache has seen them: otherwise a quick second reconcile would create twice.

Why one module of about 900 lines: the three controllers share the pod template, the pure
plan/status shape and one controller skeleton (`_WorkloadController`: owned pods, expectations,
apply). It reads in three sections: the pure planners first (most of the unit tests), then
`Expectations`, then the controllers that apply the plans.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import ControllerRevision, Deployment, ReplicaSet, StatefulSet
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from isthmus.kube.helpers import is_conflict, is_not_found
from isthmus.local.kubelite import (
    CONTROLLER_REVISION_HASH_LABEL,
    FIELD_MANAGER,
    POD_INDEX_LABEL,
    POD_TEMPLATE_HASH_LABEL,
    STATEFULSET_POD_NAME_LABEL,
)
from isthmus.local.kubelite.endpointslices import ALPHANUMS, pod_is_ready
from isthmus.local.kubelite.pods import format_time
from isthmus.runtime import Controller, EventRecorder, Informer, Result, enqueue_owner, owner_refs, split_key
from isthmus.runtime.events import NORMAL, WARNING

__all__ = [
    "OWNER_INDEX",
    "REVISION_ANNOTATION",
    "DeploymentController",
    "Expectations",
    "ReplicaSetController",
    "StatefulSetController",
    "calculate_status",
    "deployment_complete",
    "deployment_status",
    "equal_ignore_hash",
    "fenceposts",
    "find_new_replicaset",
    "is_scaling_event",
    "max_surge",
    "max_unavailable",
    "new_replicaset",
    "new_rs_replicas",
    "old_replicasets_scale_down",
    "paused_conditions",
    "pod_available_in",
    "pod_from_template",
    "replicaset_plan",
    "replicaset_requeue",
    "replicaset_status",
    "revision_history",
    "revision_of",
    "rollout_scales",
    "rollout_status",
    "scale_plan",
    "semantic",
    "statefulset_plan",
    "statefulset_status",
    "stuck_requeue",
    "sync_controller_revisions",
    "template_hash",
]

log = logging.getLogger(__name__)

OWNER_INDEX = "kubelite-controller-uid"
"""Pods (and ReplicaSets) filed under the uid of their controller owner."""
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"
REVISION_HISTORY_ANNOTATION = "deployment.kubernetes.io/revision-history"
DEFAULT_HISTORY_LIMIT = 10
WAIT_SECONDS = 1.0
FAILED_CREATE_RETRY = 5.0
"""A refused Pod creation is tried again this often (kube: the rate-limited queue)."""

Obj = dict[str, Any]


def controller_uid_index(pod: Any) -> list[str]:
    return [r.uid for r in owner_refs(pod) if r.controller and r.uid]


# ---------------------------------------------------------------------------------- pure parts


def template_hash(template: Mapping[str, Any], collision_count: int = 0) -> str:
    """Stable hash of a pod template, kube-style: a 32-bit number whose decimal digits are
    mapped onto the name-safe alphabet (what ``pod-template-hash`` values look like)."""
    material = json.dumps([template, collision_count], sort_keys=True, separators=(",", ":")).encode()
    number = int.from_bytes(hashlib.sha256(material).digest()[:4], "big")
    return "".join(ALPHANUMS[b % len(ALPHANUMS)] for b in str(number).encode())


def random_suffix(length: int = 5) -> str:
    return "".join(random.choices(ALPHANUMS, k=length))


def pod_from_template(
    owner: Mapping[str, Any],
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    spec_overrides: Mapping[str, Any] | None = None,
) -> Obj:
    """A Pod from ``owner``'s template (labels, annotations, spec), owned by it (controller)."""
    meta = owner.get("metadata") or {}
    template = (owner.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    pod_meta: Obj = {
        "name": name,
        "namespace": meta.get("namespace"),
        "labels": {**(tmeta.get("labels") or {}), **(labels or {})},
        "ownerReferences": [
            {
                "apiVersion": owner.get("apiVersion") or "apps/v1",
                "kind": owner.get("kind"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    spec = copy.deepcopy(template.get("spec") or {})
    spec.update(spec_overrides or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _created(p: Mapping[str, Any]) -> str:
    return str((p.get("metadata") or {}).get("creationTimestamp") or "")


def _name(p: Mapping[str, Any]) -> str:
    return str((p.get("metadata") or {}).get("name"))


def _terminating(p: Mapping[str, Any]) -> bool:
    return (p.get("metadata") or {}).get("deletionTimestamp") is not None


def _int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError:
            return 0
        whole, rest = divmod(pct * total, 100)
        return whole + (1 if round_up and rest else 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _rolling(deploy: Mapping[str, Any]) -> bool:
    return (((deploy.get("spec") or {}).get("strategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"


def fenceposts(deploy: Mapping[str, Any]) -> tuple[int, int]:
    """kube's ResolveFenceposts: (maxSurge, maxUnavailable) of a RollingUpdate resolved against
    spec.replicas, surge rounded up, unavailability down; both 0 would stall, so unavailability 1."""
    spec = deploy.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    ru = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = _int_or_percent(ru.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = _int_or_percent(ru.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable(deploy: Mapping[str, Any]) -> int:
    """kube's MaxUnavailable: 0 for Recreate, else rollingUpdate.maxUnavailable resolved (default 25%)."""
    replicas = int((deploy.get("spec") or {}).get("replicas", 1) or 0)
    if not _rolling(deploy) or replicas == 0:
        return 0
    return min(fenceposts(deploy)[1], replicas)


def max_surge(deploy: Mapping[str, Any]) -> int:
    """kube's MaxSurge: 0 for Recreate, else rollingUpdate.maxSurge resolved (default 25%, rounded up)."""
    return fenceposts(deploy)[0] if _rolling(deploy) else 0


@dataclass
class Plan:
    """Pods to create (names) and to delete (names)."""

    create: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)


POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _deletion_cost(p: Mapping[str, Any]) -> int:
    try:
        return int(((p.get("metadata") or {}).get("annotations") or {}).get(POD_DELETION_COST, 0))
    except (TypeError, ValueError):
        return 0


def _deletion_order(p: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """Delete first: not ready, lower controller.kubernetes.io/pod-deletion-cost (a leader-elected
    workload keeps its leader for last), without an address, newest (kube's ActivePodsWithRanks,
    roughly)."""
    status = p.get("status") or {}
    created = _created(p)
    newest_first = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (1 if pod_is_ready(p) else 0, _deletion_cost(p), 1 if status.get("podIP") else 0, newest_first)


def replicaset_plan(rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Plan:
    """Scale the live Pods to spec.replicas: create ``<rs>-<5 random>``, delete the least useful first."""
    replicas = int((rs.get("spec") or {}).get("replicas", 1) or 0)
    live = [p for p in pods if not _terminating(p)]
    plan = Plan()
    if len(live) > replicas:
        plan.delete = [_name(p) for p in sorted(live, key=_deletion_order)[: len(live) - replicas]]
    base = f"{(rs.get('metadata') or {}).get('name')}-"
    plan.create = [base + random_suffix() for _ in range(max(0, replicas - len(live)))]
    return plan


def parse_time(text: Any) -> datetime | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _ready_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the Pod's Ready condition last became True (None: not ready)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") != "True":
                return None
            return parse_time(c.get("lastTransitionTime")) or datetime.min.replace(tzinfo=UTC)
    return None


def pod_available_in(pod: Mapping[str, Any], min_ready_seconds: int, now: datetime) -> float | None:
    """kube's IsPodAvailable as a wait: 0 when the Pod is available (ready for minReadySeconds),
    the seconds until it will be if it is ready, None if it is not ready."""
    since = _ready_since(pod)
    if since is None:
        return None
    if min_ready_seconds <= 0:
        return 0.0
    left = (since + timedelta(seconds=min_ready_seconds) - now).total_seconds()
    return 0.0 if left < 0 else max(left, 0.001)  # kube: available once strictly past the window


def replicaset_status(
    rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: datetime | None = None
) -> Obj:
    """Counts as kube's ReplicaSet controller reports them; availableReplicas waits for
    spec.minReadySeconds of readiness."""
    live = [p for p in pods if not _terminating(p)]
    ready = sum(1 for p in live if pod_is_ready(p))
    min_ready = int((rs.get("spec") or {}).get("minReadySeconds") or 0)
    when = now or datetime.now(UTC)
    available = sum(1 for p in live if pod_available_in(p, min_ready, when) == 0.0)
    return {
        "observedGeneration": int((rs.get("metadata") or {}).get("generation") or 1),
        "replicas": len(live),
        "fullyLabeledReplicas": len(live),
        "readyReplicas": ready,
        "availableReplicas": available,
    }


def replicaset_requeue(rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: datetime) -> float | None:
    """Seconds until the next ready Pod counts as available (minReadySeconds), None if none waits:
    nothing else would wake the controller when that time comes."""
    min_ready = int((rs.get("spec") or {}).get("minReadySeconds") or 0)
    waits = [w for p in pods if not _terminating(p) and (w := pod_available_in(p, min_ready, now))]
    return min(waits) if waits else None


def revision_of(obj: Mapping[str, Any]) -> int:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


def semantic(value: Any) -> Any:
    """A template as Go compares it: empty maps, lists and nulls are the same as absent (kubectl
    writes ``resources: {}`` where the original had nothing)."""
    if isinstance(value, Mapping):
        out = {k: semantic(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def _without_hash(template: Mapping[str, Any]) -> Obj:
    t: Obj = semantic(copy.deepcopy(dict(template)))
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH_LABEL, None)
        if not labels:
            t["metadata"].pop("labels")
    return t


def equal_ignore_hash(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """kube's EqualIgnoreHash: two pod templates alike but for the pod-template-hash label."""
    return _without_hash(a) == _without_hash(b)


def find_new_replicaset(
    deploy: Mapping[str, Any], sets: Iterable[Mapping[str, Any]], pod_hash: str
) -> Obj | None:
    """The ReplicaSet of the Deployment's current template: same hash, or the same template
    (``kubectl rollout undo`` copies an old ReplicaSet's template back); the oldest if several."""
    template = (deploy.get("spec") or {}).get("template") or {}
    found = [
        dict(rs)
        for rs in sets
        if ((rs.get("metadata") or {}).get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL) == pod_hash
        or equal_ignore_hash((rs.get("spec") or {}).get("template") or {}, template)
    ]
    return min(found, key=_created) if found else None


def new_replicaset(deploy: Mapping[str, Any], pod_hash: str, revision: int, replicas: int) -> Obj:
    """The ReplicaSet for the Deployment's template, as the deployment controller makes it."""
    meta = deploy.get("metadata") or {}
    spec = deploy.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), POD_TEMPLATE_HASH_LABEL: pod_hash}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), POD_TEMPLATE_HASH_LABEL: pod_hash}
    desired = int(spec.get("replicas", 1) or 0)
    rs_spec: Obj = {"replicas": replicas, "selector": selector, "template": template}
    if spec.get("minReadySeconds"):
        rs_spec["minReadySeconds"] = spec["minReadySeconds"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta.get('name')}-{pod_hash}",
            "namespace": meta.get("namespace"),
            "labels": dict(tmeta["labels"]),
            "annotations": {
                REVISION_ANNOTATION: str(revision),
                DESIRED_REPLICAS_ANNOTATION: str(desired),
                MAX_REPLICAS_ANNOTATION: str(desired),
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": rs_spec,
    }


def _replicas(obj: Mapping[str, Any], part: str = "spec", key: str = "replicas") -> int:
    return int((obj.get(part) or {}).get(key, 0 if part == "status" else 1) or 0)


def _annotation_int(obj: Mapping[str, Any], name: str) -> int | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(name)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def _active(sets: Iterable[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    return [rs for rs in sets if rs is not None and _replicas(rs) > 0]


def new_rs_replicas(deploy: Mapping[str, Any], sets: Iterable[Mapping[str, Any]], new: Mapping[str, Any]) -> int:
    """kube's NewRSNewReplicas: Recreate takes spec.replicas at once; RollingUpdate grows the new
    ReplicaSet only while all ReplicaSets together stay within spec.replicas + maxSurge
    (``sets`` includes ``new``)."""
    replicas = _replicas(deploy)
    if not _rolling(deploy):
        return replicas
    current = sum(_replicas(rs) for rs in sets)
    ceiling = replicas + max_surge(deploy)
    if current >= ceiling:
        return _replicas(new)
    return _replicas(new) + min(ceiling - current, replicas - _replicas(new))


def _oldest_first(sets: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(sets, key=lambda rs: (_created(rs), _name(rs)))


def old_replicasets_scale_down(
    deploy: Mapping[str, Any], new: Mapping[str, Any], olds: Iterable[Mapping[str, Any]]
) -> dict[str, int]:
    """kube's reconcileOldReplicaSets: how far the old ReplicaSets may shrink without the
    Deployment dropping below spec.replicas - maxUnavailable *available* Pods. The new
    ReplicaSet's unavailable Pods count against it, so a new Pod that never becomes ready holds
    the old ones up (the rollout stalls, as on a real cluster). Old ReplicaSets' unavailable Pods
    go first (cleanupUnhealthyReplicas), then available ones, oldest ReplicaSet first."""
    olds = _oldest_first(olds)
    scales = {_name(rs): _replicas(rs) for rs in olds}
    old_count = sum(scales.values())
    if old_count == 0:
        return {}
    replicas = _replicas(deploy)
    min_available = replicas - max_unavailable(deploy)
    new_unavailable = _replicas(new) - _replicas(new, "status", "availableReplicas")
    room = old_count + _replicas(new) - min_available - new_unavailable
    if room <= 0:
        return {}
    cleaned = 0
    for rs in olds:
        if cleaned >= room:
            break
        spec, available = scales[_name(rs)], _replicas(rs, "status", "availableReplicas")
        if spec == 0 or spec == available:
            continue
        down = min(room - cleaned, spec - available)
        scales[_name(rs)] = spec - down
        cleaned += down
    available = sum(_replicas(rs, "status", "availableReplicas") for rs in [new, *olds])
    budget = available - min_available
    for rs in olds:
        if budget <= 0:
            break
        down = min(scales[_name(rs)], budget)
        scales[_name(rs)] -= down
        budget -= down
    return {name: n for name, n in scales.items() if n != _replicas(next(r for r in olds if _name(r) == name))}


def rollout_scales(
    deploy: Mapping[str, Any],
    new: Mapping[str, Any],
    olds: Iterable[Mapping[str, Any]],
    *,
    old_pods_running: bool = False,
) -> dict[str, int]:
    """The next step of a rollout (spec.replicas of the ReplicaSets it changes; empty: nothing to
    do until Pods change), as kube's rolloutRolling / rolloutRecreate take one step per sync.

    RollingUpdate: grow the new ReplicaSet within maxSurge; else shrink the old ones within
    maxUnavailable. Recreate: every old ReplicaSet to 0, then — once no old Pod is left running,
    terminating ones included (``old_pods_running``) — the new one to spec.replicas."""
    olds = list(olds)
    replicas = _replicas(deploy)
    if not _rolling(deploy):
        active = _active(olds)
        if active:
            return {_name(rs): 0 for rs in active}
        if old_pods_running or _replicas(new) == replicas:
            return {}
        return {_name(new): replicas}
    if _replicas(new) > replicas:
        return {_name(new): replicas}
    if _replicas(new) < replicas:
        target = new_rs_replicas(deploy, [new, *olds], new)
        if target != _replicas(new):
            return {_name(new): target}
    return old_replicasets_scale_down(deploy, new, olds)


def is_scaling_event(deploy: Mapping[str, Any], new: Mapping[str, Any] | None, olds: Iterable[Mapping[str, Any]]) -> bool:
    """kube's isScalingEvent: spec.replicas changed since the active ReplicaSets were sized (their
    desired-replicas annotation)."""
    replicas = _replicas(deploy)
    for rs in _active([new, *olds]):
        desired = _annotation_int(rs, DESIRED_REPLICAS_ANNOTATION)
        if desired is not None and desired != replicas:
            return True
    return False


def _saturated(deploy: Mapping[str, Any], rs: Mapping[str, Any] | None) -> bool:
    replicas = _replicas(deploy)
    return (
        rs is not None
        and _replicas(rs) == replicas
        and _annotation_int(rs, DESIRED_REPLICAS_ANNOTATION) == replicas
        and _replicas(rs, "status", "availableReplicas") == replicas
    )


def _round_half_up(x: float) -> int:
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def scale_plan(
    deploy: Mapping[str, Any], new: Mapping[str, Any] | None, olds: Iterable[Mapping[str, Any]]
) -> dict[str, int]:
    """kube's DeploymentController.scale (a scaling event, or a paused Deployment): one active
    ReplicaSet (or none: the newest) takes spec.replicas; a saturated new one retires the old
    ones; otherwise a RollingUpdate's change is shared out proportionally to the ReplicaSets' sizes
    (via their max-replicas annotation), the leftover to the largest."""
    olds = list(olds)
    replicas = _replicas(deploy)
    active = _active([new, *olds])
    if len(active) <= 1:
        if active:
            target: Mapping[str, Any] | None = active[0]
        elif new is not None:
            target = new
        else:
            target = max(olds, key=lambda rs: (_replicas(rs), _created(rs)), default=None)
        if target is None or _replicas(target) == replicas:
            return {}
        return {_name(target): replicas}
    if _saturated(deploy, new):
        return {_name(rs): 0 for rs in _active(olds)}
    if not _rolling(deploy):
        return {}
    allowed = replicas + max_surge(deploy) if replicas > 0 else 0
    to_add = allowed - sum(_replicas(rs) for rs in active)
    if to_add > 0:
        order = sorted(active, key=lambda rs: (_replicas(rs), _created(rs)), reverse=True)
    else:
        order = sorted(active, key=lambda rs: (-_replicas(rs), _created(rs)))
    sizes = {_name(rs): _replicas(rs) for rs in order}
    added = 0
    status_replicas = _replicas(deploy, "status")
    for rs in order:
        if to_add == 0 or to_add == added:
            break
        if replicas == 0:
            fraction = -_replicas(rs)
        else:
            annotated = _annotation_int(rs, MAX_REPLICAS_ANNOTATION) or status_replicas or 1
            fraction = _round_half_up(_replicas(rs) * (replicas + max_surge(deploy)) / annotated) - _replicas(rs)
        share = min(fraction, to_add - added) if to_add > 0 else max(fraction, to_add - added)
        sizes[_name(rs)] += share
        added += share
    if order and to_add:
        first = _name(order[0])
        sizes[first] = max(0, sizes[first] + to_add - added)
    return {n: v for n, v in sizes.items() if v != _replicas(next(r for r in order if _name(r) == n))}


# Deployment condition types and reasons, as kube's deployment controller writes them.
PROGRESSING, AVAILABLE, REPLICA_FAILURE = "Progressing", "Available", "ReplicaFailure"
NEW_RS_CREATED, FOUND_NEW_RS, RS_UPDATED = "NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"
NEW_RS_AVAILABLE, TIMED_OUT = "NewReplicaSetAvailable", "ProgressDeadlineExceeded"
PAUSED, RESUMED = "DeploymentPaused", "DeploymentResumed"
NO_DEADLINE = 2**31 - 1
"""progressDeadlineSeconds of MaxInt32: no deadline (kube's HasProgressDeadline)."""


def condition(ctype: str, status: str, reason: str, message: str, now: str) -> Obj:
    return {"type": ctype, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


def set_condition(conditions: list[Obj], cond: Obj) -> list[Obj]:
    """kube's SetDeploymentCondition: the same status and reason leave the old one as it is (its
    message and times too); a new status or reason replaces it, at the end of the list, keeping the
    transition time when only the reason changed."""
    current = next((c for c in conditions if c.get("type") == cond["type"]), None)
    if current is not None and current.get("status") == cond["status"] and current.get("reason") == cond["reason"]:
        return conditions
    if current is not None and current.get("status") == cond["status"]:
        cond = {**cond, "lastTransitionTime": current.get("lastTransitionTime")}
    return [c for c in conditions if c.get("type") != cond["type"]] + [cond]


def _without(conditions: list[Obj], ctype: str) -> list[Obj]:
    return [c for c in conditions if c.get("type") != ctype]


def _get(conditions: Iterable[Mapping[str, Any]], ctype: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == ctype), None)


def progress_deadline(deploy: Mapping[str, Any]) -> int | None:
    """spec.progressDeadlineSeconds (the apiserver defaults it to 600); None: no deadline."""
    raw = (deploy.get("spec") or {}).get("progressDeadlineSeconds", 600)
    if raw is None:
        return None
    value = int(raw)
    return None if value == NO_DEADLINE else value


def calculate_status(
    deploy: Mapping[str, Any], new: Mapping[str, Any] | None, sets: Iterable[Mapping[str, Any]], now: str
) -> Obj:
    """kube's calculateStatus: counts summed over the ReplicaSets (updatedReplicas: the new one's),
    unavailableReplicas against their spec, the old conditions kept and Available set."""
    meta = deploy.get("metadata") or {}
    old_status = deploy.get("status") or {}
    replicas = _replicas(deploy)
    sets = list(sets)
    available = sum(_replicas(rs, "status", "availableReplicas") for rs in sets)
    out: Obj = {
        "observedGeneration": int(meta.get("generation") or 1),
        "replicas": sum(_replicas(rs, "status") for rs in sets),
        "updatedReplicas": _replicas(new, "status") if new is not None else 0,
        "readyReplicas": sum(_replicas(rs, "status", "readyReplicas") for rs in sets),
        "availableReplicas": available,
        "unavailableReplicas": max(0, sum(_replicas(rs) for rs in sets) - available),
    }
    if old_status.get("collisionCount"):
        out["collisionCount"] = old_status["collisionCount"]
    conds: list[Obj] = [dict(c) for c in old_status.get("conditions") or []]
    if available >= replicas - max_unavailable(deploy):
        cond = condition(AVAILABLE, "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", now)
    else:
        cond = condition(AVAILABLE, "False", "MinimumReplicasUnavailable",
                         "Deployment does not have minimum availability.", now)
    out["conditions"] = set_condition(conds, cond)
    return out


def deployment_complete(deploy: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """kube's DeploymentComplete: every replica updated and available, the generation observed."""
    replicas = _replicas(deploy)
    return (
        int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get("replicas") or 0) == replicas
        and int(status.get("availableReplicas") or 0) == replicas
        and int(status.get("observedGeneration") or 0) >= int((deploy.get("metadata") or {}).get("generation") or 1)
    )


def _progressing(deploy: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """kube's DeploymentProgressing: more updated, ready or available replicas, or fewer old ones,
    than the stored status says."""
    old = deploy.get("status") or {}

    def n(st: Mapping[str, Any], k: str) -> int:
        return int(st.get(k) or 0)

    return (
        n(status, "updatedReplicas") > n(old, "updatedReplicas")
        or n(status, "replicas") - n(status, "updatedReplicas") < n(old, "replicas") - n(old, "updatedReplicas")
        or n(status, "readyReplicas") > n(old, "readyReplicas")
        or n(status, "availableReplicas") > n(old, "availableReplicas")
    )


def timed_out(deploy: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> bool:
    """kube's DeploymentTimedOut: no progress for progressDeadlineSeconds since the Progressing
    condition's lastUpdateTime."""
    deadline = progress_deadline(deploy)
    cond = _get(status.get("conditions") or [], PROGRESSING)
    if deadline is None or cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    since = parse_time(cond.get("lastUpdateTime"))
    return since is not None and since + timedelta(seconds=deadline) < now


def rollout_status(
    deploy: Mapping[str, Any],
    new: Mapping[str, Any] | None,
    sets: Iterable[Mapping[str, Any]],
    now: datetime,
) -> Obj:
    """kube's syncRolloutStatus: calculateStatus plus the Progressing condition (complete,
    progressing — its lastUpdateTime moved only on progress —, or timed out) and ReplicaFailure
    copied from the ReplicaSets."""
    sets = list(sets)
    stamp = format_time(now)
    status = calculate_status(deploy, new, sets, stamp)
    conds: list[Obj] = status["conditions"]
    name = _name(new) if new is not None else None
    what = f'ReplicaSet "{name}"' if name else f'Deployment "{_name(deploy)}"'
    deadline = progress_deadline(deploy)
    if deadline is None:
        conds = _without(conds, PROGRESSING)
    current = _get((deploy.get("status") or {}).get("conditions") or [], PROGRESSING)
    complete_before = (status["replicas"] == status["updatedReplicas"] and current is not None
                       and current.get("reason") == NEW_RS_AVAILABLE)
    if deadline is not None and not complete_before:
        if deployment_complete(deploy, status):
            conds = set_condition(conds, condition(PROGRESSING, "True", NEW_RS_AVAILABLE,
                                                   f"{what} has successfully progressed.", stamp))
        elif _progressing(deploy, status):
            cond = condition(PROGRESSING, "True", RS_UPDATED, f"{what} is progressing.", stamp)
            if current is not None and current.get("status") == "True":
                cond["lastTransitionTime"] = current.get("lastTransitionTime")
            conds = [*_without(conds, PROGRESSING), cond]
        elif timed_out(deploy, {**status, "conditions": conds}, now):
            conds = set_condition(conds, condition(PROGRESSING, "False", TIMED_OUT,
                                                   f"{what} has timed out progressing.", stamp))
    failures = [c for rs in ([new] if new is not None else []) for c in _rs_failures(rs)]
    failures = failures or [c for rs in sets for c in _rs_failures(rs)]
    if failures:
        f = failures[0]
        t = f.get("lastTransitionTime") or stamp
        conds = set_condition(conds, {"type": REPLICA_FAILURE, "status": f.get("status"), "lastUpdateTime": t,
                                      "lastTransitionTime": t, "reason": f.get("reason"), "message": f.get("message")})
    else:
        conds = _without(conds, REPLICA_FAILURE)
    status["conditions"] = conds
    return status


def _rs_failures(rs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in (rs.get("status") or {}).get("conditions") or [] if c.get("type") == REPLICA_FAILURE]


def deployment_status(
    deploy: Mapping[str, Any], new: Mapping[str, Any] | None, sets: Iterable[Mapping[str, Any]], now: datetime
) -> Obj:
    """The status the deployment controller writes after a rollout step (see rollout_status)."""
    return rollout_status(deploy, new, sets, now)


def paused_conditions(deploy: Mapping[str, Any], now: str) -> list[Obj] | None:
    """kube's checkPausedConditions: Progressing Unknown DeploymentPaused while paused,
    DeploymentResumed once resumed (a reported deadline is never overwritten); None: no change."""
    if progress_deadline(deploy) is None:
        return None
    conds: list[Obj] = [dict(c) for c in (deploy.get("status") or {}).get("conditions") or []]
    current = _get(conds, PROGRESSING)
    if current is not None and current.get("reason") == TIMED_OUT:
        return None
    paused_now = current is not None and current.get("reason") == PAUSED
    if (deploy.get("spec") or {}).get("paused") and not paused_now:
        return set_condition(conds, condition(PROGRESSING, "Unknown", PAUSED, "Deployment is paused", now))
    if not (deploy.get("spec") or {}).get("paused") and paused_now:
        return set_condition(conds, condition(PROGRESSING, "Unknown", RESUMED, "Deployment is resumed", now))
    return None


def stuck_requeue(deploy: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> float | None:
    """kube's requeueStuckDeployment: a rollout that shows no progress is looked at again when its
    deadline passes, so ProgressDeadlineExceeded is reported without any other change."""
    deadline = progress_deadline(deploy)
    cond = _get(status.get("conditions") or [], PROGRESSING)
    if deadline is None or cond is None or cond.get("reason") in (NEW_RS_AVAILABLE, TIMED_OUT):
        return None
    if deployment_complete(deploy, status):
        return None
    since = parse_time(cond.get("lastUpdateTime"))
    if since is None:
        return None
    after = (since + timedelta(seconds=deadline) - now).total_seconds()
    return 1.0 if after < 1 else after + 1.0


def revision_history(annotations: Mapping[str, str], old_revision: str, limit: int = 2000) -> str | None:
    """The ``deployment.kubernetes.io/revision-history`` a ReplicaSet gets when a rollback makes it
    current again: its earlier revisions, comma-separated, the oldest dropped beyond ``limit``
    characters (kube's SetNewReplicaSetAnnotations); None when it cannot grow."""
    history = annotations.get(REVISION_HISTORY_ANNOTATION) or ""
    if not history:
        return old_revision
    olds = history.split(",")
    total, start = len(history) + len(old_revision) + 1, 0
    while total > limit and start < len(olds):
        total -= len(olds[start]) + 1
        start += 1
    return ",".join([*olds[start:], old_revision]) if total <= limit else None


def ordinal_of(set_name: str, pod_name: str) -> int | None:
    m = re.fullmatch(re.escape(set_name) + r"-(\d+)", pod_name)
    return int(m.group(1)) if m else None


def statefulset_plan(sts: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], revision: str) -> Plan:
    """OrderedReady: create the lowest missing ordinal once all below it are Ready; remove the
    highest surplus ordinal first; replace old-revision Pods one at a time, highest first.
    Parallel: create and remove all at once."""
    meta = sts.get("metadata") or {}
    spec = sts.get("spec") or {}
    name = str(meta.get("name"))
    replicas = int(spec.get("replicas", 1) or 0)
    start = int((spec.get("ordinals") or {}).get("start") or 0)
    parallel = spec.get("podManagementPolicy") == "Parallel"
    strategy = spec.get("updateStrategy") or {}
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    by_ord: dict[int, Mapping[str, Any]] = {}
    for p in pods:
        o = ordinal_of(name, _name(p))
        if o is not None:
            by_ord[o] = p
    wanted = range(start, start + replicas)
    plan = Plan()
    any_terminating = any(_terminating(p) for p in by_ord.values())
    surplus = sorted((o for o in by_ord if o not in wanted and not _terminating(by_ord[o])), reverse=True)
    if surplus and (parallel or not any_terminating):
        plan.delete = [_name(by_ord[o]) for o in (surplus if parallel else surplus[:1])]
    for o in wanted:
        pod = by_ord.get(o)
        if pod is None:
            plan.create.append(f"{name}-{o}")
            if not parallel:
                break
        elif not parallel and (_terminating(pod) or not pod_is_ready(pod)):
            break
    if plan.create or plan.delete or any_terminating:
        return plan
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate":
        return plan
    if not all(o in by_ord and pod_is_ready(by_ord[o]) for o in wanted):
        return plan
    for o in sorted(wanted, reverse=True):
        labels = (by_ord[o].get("metadata") or {}).get("labels") or {}
        if o - start >= partition and labels.get(CONTROLLER_REVISION_HASH_LABEL) != revision:
            plan.delete.append(_name(by_ord[o]))
            break
    return plan


def statefulset_status(sts: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], revision: str) -> Obj:
    """Counts and revisions, as ``kubectl rollout status statefulset`` reads them."""
    meta = sts.get("metadata") or {}
    spec = sts.get("spec") or {}
    old = sts.get("status") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    live = [p for p in pods if not _terminating(p)]

    def rev(p: Mapping[str, Any]) -> str | None:
        return ((p.get("metadata") or {}).get("labels") or {}).get(CONTROLLER_REVISION_HASH_LABEL)

    updated = sum(1 for p in live if rev(p) == revision)
    current_rev = old.get("currentRevision") or revision
    if updated == replicas == len(live):
        current_rev = revision
    ready = sum(1 for p in live if pod_is_ready(p))
    min_ready, now = int(spec.get("minReadySeconds") or 0), datetime.now(UTC)
    return {
        "observedGeneration": int(meta.get("generation") or 1),
        "replicas": len(live),
        "readyReplicas": ready,
        "availableReplicas": sum(1 for p in live if pod_available_in(p, min_ready, now) == 0.0),
        "currentReplicas": sum(1 for p in live if rev(p) == current_rev),
        "updatedReplicas": updated,
        "currentRevision": current_rev,
        "updateRevision": revision,
        "collisionCount": int(old.get("collisionCount") or 0),
    }


async def sync_controller_revisions(
    client: AsyncClient,
    revisions: Informer[ControllerRevision],
    owner: Obj,
    template_hash_: str,
    *,
    labels: Mapping[str, str],
    in_use: set[str],
) -> bool:
    """A ControllerRevision ``<owner>-<hash>`` per template, as kube's StatefulSet and DaemonSet
    controllers keep them (what ``kubectl rollout history/undo`` read): the current one carries
    the highest revision; beyond revisionHistoryLimit the oldest ones not ``in_use`` go.

    False when the name is taken by another template or owner (a hash collision: the caller
    counts it in status.collisionCount, which changes the next hash, as kube does)."""
    meta, spec = owner["metadata"], owner.get("spec") or {}
    ns, uid = meta.get("namespace"), meta.get("uid")
    name = f"{meta.get('name')}-{template_hash_}"
    data = {"spec": {"template": {**copy.deepcopy(spec.get("template") or {}), "$patch": "replace"}}}
    owned = [r.to_dict() for r in revisions.cache.by_index(OWNER_INDEX, uid)] if uid else []
    others = [r for r in owned if _name(r) != name]
    top = max((int(r.get("revision") or 0) for r in others), default=0)
    current = next((r for r in owned if _name(r) == name), None)
    if current is None:
        body = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {**labels, "controller.kubernetes.io/hash": template_hash_},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner.get("kind"), "name": meta.get("name"),
                                     "uid": uid, "controller": True, "blockOwnerDeletion": True}],
            },
            # kube's revision data: a patch that puts this template back (kubectl rollout undo applies it)
            "data": data,
            "revision": top + 1,
        }
        try:
            await client.create(cast(ControllerRevision, ControllerRevision.from_dict(body)), field_manager=FIELD_MANAGER)
        except ApiError as e:
            if not is_conflict(e):
                raise
            try:  # ours already (the cache does not show it yet), or a collision
                taken = (await client.get(ControllerRevision, name, namespace=ns)).to_dict()
            except ApiError as e2:
                if is_not_found(e2):
                    return True
                raise
            mine = any(r.get("uid") == uid for r in (taken.get("metadata") or {}).get("ownerReferences") or [])
            if not mine or semantic(taken.get("data")) != semantic(data):
                return False
    elif int(current.get("revision") or 0) <= top:  # back to an older template: it is the newest again
        await client.patch(
            ControllerRevision, name, {"revision": top + 1}, namespace=ns,
            patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
        )
    limit = spec.get("revisionHistoryLimit")
    limit = DEFAULT_HISTORY_LIMIT if limit is None else int(limit)
    keep = in_use | {name}
    unused = sorted((r for r in others if _name(r) not in keep), key=lambda r: int(r.get("revision") or 0))
    for r in unused[: max(0, len(unused) - limit)]:
        try:
            await client.delete(ControllerRevision, _name(r), namespace=ns)
        except ApiError as e:
            if not is_not_found(e):
                raise
    return True


# ---------------------------------------------------------------------------------- expectations


class Expectations:
    """Pod names each workload is waiting to see created / deleted in the cache (kube's
    ControllerExpectations). Expire after ``ttl`` so a lost event cannot block a workload."""

    def __init__(self, ttl: float = 15.0) -> None:
        self.ttl = ttl
        self._pending: dict[str, tuple[float, set[str], set[str]]] = {}

    def expect(self, key: str, creates: Iterable[str] = (), deletes: Iterable[str] = ()) -> None:
        _, c, d = self._pending.get(key, (0.0, set(), set()))
        self._pending[key] = (time.monotonic(), c | set(creates), d | set(deletes))

    def satisfied(self, key: str, present: set[str]) -> bool:
        entry = self._pending.get(key)
        if entry is None:
            return True
        at, creates, deletes = entry
        creates &= {n for n in creates if n not in present}
        deletes &= present
        if (not creates and not deletes) or time.monotonic() - at > self.ttl:
            self._pending.pop(key, None)
            return True
        return False

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)


# ---------------------------------------------------------------------------------- controllers


class _WorkloadController:
    kind = ""
    component = ""
    """The Event source kube's controller-manager uses for this controller."""

    def __init__(
        self,
        client: AsyncClient,
        workloads: Informer[Any],
        pods: Informer[Pod],
        *,
        workers: int,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.client = client
        self.workloads = workloads
        self.pods = pods
        self.recorder = recorder.child(self.component) if recorder is not None else None
        self.expectations = Expectations()
        self._failures: dict[str, str] = {}  # key → the last pod creation error (ReplicaFailure)
        try:
            pods.add_indexer(OWNER_INDEX, controller_uid_index)
        except ValueError:
            pass  # the other workload controller added it to the shared informer already
        self.controller = Controller(f"kubelite-{self.kind.lower()}s", self.reconcile, workers=workers)
        self.controller.watch(workloads)
        self.controller.watch(pods, enqueue_owner(self.kind, "apps"))

    async def run(self) -> None:
        await self.controller.run()

    def _owned_pods(self, uid: str | None) -> list[Obj]:
        return [p.to_dict() for p in self.pods.cache.by_index(OWNER_INDEX, uid)] if uid else []

    def _event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(obj, type_, reason, message)

    async def reconcile(self, key: str) -> Result | None:
        obj = self.workloads.cache.get(key)
        if obj is None:
            self.expectations.forget(key)
            self._failures.pop(key, None)
            return None  # the garbage collector removes the Pods (ownerReferences)
        data = obj.to_dict()
        pods = self._owned_pods(data["metadata"].get("uid"))
        if not self.expectations.satisfied(key, {_name(p) for p in pods}):
            return Result(requeue_after=WAIT_SECONDS)
        if data["metadata"].get("deletionTimestamp") is None:
            plan = self.plan(data, pods)
            await self._apply(key, data, plan)
        status = self.status(data, pods)
        failure = self._failures.get(key)
        status_conds = self._conditions(data, failure)
        if status_conds is not None:
            status["conditions"] = status_conds
        if not _subset_equal(status, data.get("status") or {}):
            ns, name = split_key(key)
            await self.client.patch(
                type(obj).Status,
                name,
                {"status": status},
                namespace=ns,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )
        if failure is not None:
            return Result(requeue_after=FAILED_CREATE_RETRY)
        after = self.requeue_after(data, pods)
        return Result(requeue_after=after) if after is not None else None

    def _conditions(self, data: Obj, failure: str | None) -> list[Obj] | None:
        """kube's ReplicaFailure condition (reason FailedCreate, the create error as message) while
        Pods cannot be created, removed once they can; None: status.conditions left alone."""
        conds = [dict(c) for c in (data.get("status") or {}).get("conditions") or []]
        current = _get(conds, REPLICA_FAILURE)
        if failure is not None and current is None:
            now = format_time(datetime.now(UTC))
            return [*conds, {"type": REPLICA_FAILURE, "status": "True", "lastTransitionTime": now,
                             "reason": "FailedCreate", "message": failure}]
        if failure is None and current is not None:
            return _without(conds, REPLICA_FAILURE)
        return None

    def requeue_after(self, data: Obj, pods: list[Obj]) -> float | None:
        return None

    def plan(self, data: Obj, pods: list[Obj]) -> Plan:
        raise NotImplementedError

    def status(self, data: Obj, pods: list[Obj]) -> Obj:
        raise NotImplementedError

    def new_pod(self, data: Obj, name: str) -> Obj:
        raise NotImplementedError

    def created_message(self, data: Obj, pod: str) -> str:
        return f"Created pod: {pod}"

    def deleted_message(self, data: Obj, pod: str) -> str:
        return f"Deleted pod: {pod}"

    def failed_create_message(self, data: Obj, pod: str, error: str) -> str:
        return f"Error creating: {error}"

    async def _apply(self, key: str, data: Obj, plan: Plan) -> None:
        ns, _ = split_key(key)
        for name in plan.delete:
            self.expectations.expect(key, deletes=[name])
            try:
                await self.client.delete(Pod, name, namespace=ns)
            except ApiError as e:
                if not is_not_found(e):
                    raise
            else:
                self._event(data, NORMAL, "SuccessfulDelete", self.deleted_message(data, name))
            log.info("pod deleted", extra={"owner": key, "kind": self.kind, "pod": name})
        self._failures.pop(key, None)
        for name in plan.create:
            pod = cast(Pod, Pod.from_dict(self.new_pod(data, name)))
            try:
                await self.client.create(pod, field_manager=FIELD_MANAGER)
            except ApiError as e:
                if e.status.code is None or e.status.code >= 500:
                    raise
                # Refused (admission, quota, a bad template): kube reports it on the owner and
                # retries later; the user sees why in `kubectl describe`.
                error = e.status.message or str(e)
                self._failures[key] = error
                self._event(data, WARNING, "FailedCreate", self.failed_create_message(data, name, error))
                log.warning("pod not created", extra={"owner": key, "kind": self.kind, "pod": name, "error": error})
                break
            self.expectations.expect(key, creates=[name])
            self._event(data, NORMAL, "SuccessfulCreate", self.created_message(data, name))
            log.info("pod created", extra={"owner": key, "kind": self.kind, "pod": name})


def _subset_equal(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    return all(current.get(k) == v for k, v in desired.items())


class ReplicaSetController(_WorkloadController):
    kind = "ReplicaSet"
    component = "replicaset-controller"

    def __init__(
        self,
        client: AsyncClient,
        replicasets: Informer[ReplicaSet],
        pods: Informer[Pod],
        *,
        workers: int = 2,
        recorder: EventRecorder | None = None,
    ) -> None:
        super().__init__(client, replicasets, pods, workers=workers, recorder=recorder)

    def plan(self, data: Obj, pods: list[Obj]) -> Plan:
        return replicaset_plan(data, pods)

    def status(self, data: Obj, pods: list[Obj]) -> Obj:
        return replicaset_status(data, pods, datetime.now(UTC))

    def requeue_after(self, data: Obj, pods: list[Obj]) -> float | None:
        return replicaset_requeue(data, pods, datetime.now(UTC))

    def new_pod(self, data: Obj, name: str) -> Obj:
        return pod_from_template(data, name)


class DeploymentController:
    """Keyed by Deployment; triggered by it and by the ReplicaSets it owns (their status). One
    rollout step per sync, as kube's controller: the ReplicaSets' status changes bring the next."""

    def __init__(
        self,
        client: AsyncClient,
        deployments: Informer[Deployment],
        replicasets: Informer[ReplicaSet],
        pods: Informer[Pod],
        *,
        workers: int = 2,
        recorder: EventRecorder | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.deployments = deployments
        self.replicasets = replicasets
        self.pods = pods
        self.recorder = recorder.child("deployment-controller") if recorder is not None else None
        self.clock = clock
        for informer in (replicasets, pods):
            with contextlib.suppress(ValueError):  # another controller of the shared informer added it
                informer.add_indexer(OWNER_INDEX, controller_uid_index)
        self.controller = Controller("kubelite-deployments", self.reconcile, workers=workers)
        self.controller.watch(deployments)
        self.controller.watch(replicasets, enqueue_owner("Deployment", "apps"))
        self.controller.watch(pods, enqueue_owner("Deployment", "apps"))  # Pods it owned before ReplicaSets

    async def run(self) -> None:
        await self.controller.run()

    def _hash(self, data: Obj) -> str:
        spec = data.get("spec") or {}
        return template_hash(
            semantic(spec.get("template") or {}), int((data.get("status") or {}).get("collisionCount") or 0)
        )

    def _old_pods_running(self, olds: list[Obj]) -> bool:
        """kube's oldPodsRunning (Recreate): an old ReplicaSet still counts Pods, or owns a Pod that
        has not terminated — a terminating one included: the new Pods wait until it is gone."""
        if any(_replicas(rs, "status") for rs in olds):
            return True
        for rs in olds:
            uid = (rs.get("metadata") or {}).get("uid")
            for pod in self.pods.cache.by_index(OWNER_INDEX, uid) if uid else []:
                if (pod.to_dict().get("status") or {}).get("phase") not in ("Failed", "Succeeded"):
                    return True
        return False

    async def reconcile(self, key: str) -> Result | None:
        obj = self.deployments.cache.get(key)
        if obj is None:
            return None  # the garbage collector removes the ReplicaSets (ownerReferences)
        ns, _ = split_key(key)
        data = obj.to_dict()
        uid = data["metadata"].get("uid")
        sets = [rs.to_dict() for rs in self.replicasets.cache.by_index(OWNER_INDEX, uid)] if uid else []
        new = find_new_replicaset(data, sets, self._hash(data))
        olds = [rs for rs in sets if new is None or _name(rs) != _name(new)]
        now = self.clock()
        if data["metadata"].get("deletionTimestamp") is not None:
            await self._write_status(data, calculate_status(data, new, sets, format_time(now)))
            return None
        for pod in self.pods.cache.by_index(OWNER_INDEX, uid) if uid else []:
            await self._delete(Pod, ns, str(pod.metadata.name if pod.metadata else ""))
        conds = paused_conditions(data, format_time(now))
        if conds is not None:
            await self._write_status(data, {"conditions": conds})
            data["status"] = {**(data.get("status") or {}), "conditions": conds}
        spec = data.get("spec") or {}
        if spec.get("paused") or is_scaling_event(data, new, olds):
            # kube's sync(): size only, no rollout step; a paused Deployment keeps its history trimmed
            plan = scale_plan(data, new, olds)
            if not plan:  # sized already (by hand?): bring the annotations up to date, or this never ends
                plan = {_name(rs): _replicas(rs) for rs in _active([new, *olds])
                        if _annotation_int(rs, DESIRED_REPLICAS_ANNOTATION) not in (None, _replicas(data))}
            await self._scale(ns, data, new, olds, plan)
            if spec.get("paused"):
                await self._clean_history(ns, data, olds)
            await self._write_status(data, calculate_status(data, new, sets, format_time(now)))
            return None
        if new is None:
            if not _rolling(data) and (_active(olds) or self._old_pods_running(olds)):
                await self._scale(ns, data, None, olds, {_name(rs): 0 for rs in _active(olds)})
                await self._write_status(data, rollout_status(data, None, sets, now))
                return Result(requeue_after=WAIT_SECONDS)  # until the old Pods are gone
            await self._create_new(ns, data, olds, now)
            return Result(requeue_after=WAIT_SECONDS)  # the cache brings it; act on what is stored
        await self._sync_new(ns, data, new, olds, now)
        scales = rollout_scales(data, new, olds, old_pods_running=not _rolling(data) and self._old_pods_running(olds))
        await self._scale(ns, data, new, olds, scales)
        if not scales and deployment_complete(data, data.get("status") or {}):
            await self._clean_history(ns, data, olds)
        status = rollout_status(data, new, sets, now)
        await self._write_status(data, status)
        after = stuck_requeue(data, status, now)
        return Result(requeue_after=after) if after is not None else None

    async def _write_status(self, data: Obj, status: Obj) -> None:
        if _subset_equal(status, data.get("status") or {}):
            return
        meta = data["metadata"]
        await self.client.patch(
            Deployment.Status, meta["name"], {"status": status}, namespace=meta.get("namespace"),
            patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
        )

    def _event(self, data: Obj, type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(data, type_, reason, message)

    async def _scale(
        self, ns: str | None, data: Obj, new: Obj | None, olds: list[Obj], scales: Mapping[str, int]
    ) -> None:
        """Each ReplicaSet to its size, annotated with the Deployment's desired and maximum
        replicas (what the next scaling event is measured against), with kube's Event."""
        replicas = _replicas(data)
        annotations = {DESIRED_REPLICAS_ANNOTATION: str(replicas),
                       MAX_REPLICAS_ANNOTATION: str(replicas + max_surge(data))}
        by_name = {_name(rs): rs for rs in [*olds, *([new] if new is not None else [])]}
        for rs_name, size in scales.items():
            rs = by_name.get(rs_name)
            if rs is None:
                continue
            before = _replicas(rs)
            await self.client.patch(
                ReplicaSet, rs_name, {"metadata": {"annotations": annotations}, "spec": {"replicas": size}},
                namespace=ns, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )
            if size != before:
                way = "up" if size > before else "down"
                self._event(data, NORMAL, "ScalingReplicaSet", f"Scaled {way} replica set {rs_name} to {size} from {before}")

    async def _create_new(self, ns: str | None, data: Obj, olds: list[Obj], now: datetime) -> None:
        """kube's getNewReplicaSet for a template without one: the next revision, sized within
        maxSurge (Recreate: in full, old Pods being gone), Progressing NewReplicaSetCreated."""
        pod_hash = self._hash(data)
        revision = max((revision_of(rs) for rs in olds), default=0) + 1
        empty: Obj = {"metadata": {"name": ""}, "spec": {"replicas": 0}}
        replicas = new_rs_replicas(data, [*olds, empty], empty)
        body = new_replicaset(data, pod_hash, revision, replicas)
        body["metadata"]["annotations"][MAX_REPLICAS_ANNOTATION] = str(_replicas(data) + max_surge(data))
        try:
            await self.client.create(cast(ReplicaSet, ReplicaSet.from_dict(body)), field_manager=FIELD_MANAGER)
        except ApiError as e:
            if not is_conflict(e):
                raise
            await self._on_name_taken(ns, data, body)
            return
        rs_name = body["metadata"]["name"]
        log.info("replicaset created", extra={"deployment": _name(data), "replicaset": rs_name, "revision": revision})
        if replicas > 0:
            self._event(data, NORMAL, "ScalingReplicaSet", f"Scaled up replica set {rs_name} from 0 to {replicas}")
        await self._annotate_revision(ns, data, revision)
        if progress_deadline(data) is not None:
            conds = set_condition([dict(c) for c in (data.get("status") or {}).get("conditions") or []],
                                  condition(PROGRESSING, "True", NEW_RS_CREATED,
                                            f'Created new replica set "{rs_name}"', format_time(now)))
            await self._write_status(data, {"conditions": conds})

    async def _sync_new(self, ns: str | None, data: Obj, new: Obj, olds: list[Obj], now: datetime) -> None:
        """kube's getNewReplicaSet for an existing one: the highest revision (a rollback makes an old
        ReplicaSet current again and records its earlier revision in revision-history), the
        Deployment's minReadySeconds, its revision on the Deployment, and Progressing
        FoundNewReplicaSet when no Progressing condition was recorded yet."""
        top = max((revision_of(rs) for rs in olds), default=0)
        revision = revision_of(new)
        patch: Obj = {}
        if revision <= top or revision == 0:
            annotations = {REVISION_ANNOTATION: str(top + 1)}
            if revision > 0:
                history = revision_history(((new.get("metadata") or {}).get("annotations") or {}), str(revision))
                if history is not None:
                    annotations[REVISION_HISTORY_ANNOTATION] = history
            revision = top + 1
            patch["metadata"] = {"annotations": annotations}
        min_ready = int((data.get("spec") or {}).get("minReadySeconds") or 0)
        if int((new.get("spec") or {}).get("minReadySeconds") or 0) != min_ready:
            patch["spec"] = {"minReadySeconds": min_ready}
        if patch:
            await self.client.patch(ReplicaSet, _name(new), patch, namespace=ns,
                                    patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER)
        await self._annotate_revision(ns, data, revision)
        conds = [dict(c) for c in (data.get("status") or {}).get("conditions") or []]
        if progress_deadline(data) is not None and _get(conds, PROGRESSING) is None:
            conds = set_condition(conds, condition(PROGRESSING, "True", FOUND_NEW_RS,
                                                   f'Found new replica set "{_name(new)}"', format_time(now)))
            await self._write_status(data, {"conditions": conds})
            data["status"] = {**(data.get("status") or {}), "conditions": conds}

    async def _annotate_revision(self, ns: str | None, data: Obj, revision: int) -> None:
        if revision_of(data) != revision:
            await self.client.patch(
                Deployment, _name(data), {"metadata": {"annotations": {REVISION_ANNOTATION: str(revision)}}},
                namespace=ns, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )

    async def _on_name_taken(self, ns: str | None, data: Obj, body: Obj) -> None:
        """The name is taken: by our ReplicaSet the cache does not show yet (nothing to do), or by
        another template or owner — a hash collision: count it, the next hash differs (as kube)."""
        try:
            other = (await self.client.get(ReplicaSet, body["metadata"]["name"], namespace=ns)).to_dict()
        except ApiError as e:
            if is_not_found(e):
                return
            raise
        ours = any(r.get("uid") == data["metadata"].get("uid") for r in other["metadata"].get("ownerReferences") or [])
        if ours and equal_ignore_hash((other.get("spec") or {}).get("template") or {}, body["spec"]["template"]):
            return
        collisions = int((data.get("status") or {}).get("collisionCount") or 0) + 1
        await self.client.patch(
            Deployment.Status, _name(data), {"status": {"collisionCount": collisions}}, namespace=ns,
            patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
        )
        log.warning("replicaset name taken: hash collision", extra={"replicaset": body["metadata"]["name"]})

    async def _clean_history(self, ns: str | None, data: Obj, olds: list[Obj]) -> None:
        """Old ReplicaSets beyond revisionHistoryLimit, oldest first, once they have no Pods."""
        limit = (data.get("spec") or {}).get("revisionHistoryLimit")
        limit = DEFAULT_HISTORY_LIMIT if limit is None else int(limit)
        idle = [rs for rs in olds if _replicas(rs) == 0 and _replicas(rs, "status") == 0]
        for rs in sorted(idle, key=revision_of)[: max(0, len(idle) - limit)]:
            await self._delete(ReplicaSet, ns, _name(rs))

    async def _delete(self, res: Any, ns: str | None, name: str) -> None:
        try:
            await self.client.delete(res, name, namespace=ns)
        except ApiError as e:
            if not is_not_found(e):
                raise


class StatefulSetController(_WorkloadController):
    kind = "StatefulSet"
    component = "statefulset-controller"

    def __init__(
        self,
        client: AsyncClient,
        statefulsets: Informer[StatefulSet],
        pods: Informer[Pod],
        revisions: Informer[ControllerRevision] | None = None,
        *,
        workers: int = 2,
        recorder: EventRecorder | None = None,
    ) -> None:
        super().__init__(client, statefulsets, pods, workers=workers, recorder=recorder)
        self.revisions = revisions
        if revisions is not None:
            with contextlib.suppress(ValueError):
                revisions.add_indexer(OWNER_INDEX, controller_uid_index)
            self.controller.watch(revisions, enqueue_owner("StatefulSet", "apps"))

    def _hash(self, data: Obj) -> str:
        return template_hash(semantic((data.get("spec") or {}).get("template") or {}))

    def _revision(self, data: Obj) -> str:
        return f"{data['metadata']['name']}-{self._hash(data)}"

    async def reconcile(self, key: str) -> Result | None:
        obj = self.workloads.cache.get(key)
        if obj is not None and self.revisions is not None:
            data = obj.to_dict()
            if data["metadata"].get("deletionTimestamp") is None:
                try:
                    await self._sync_revisions(data)
                except ApiError as e:  # history is a bonus: the Pods must not wait for it
                    log.warning("controllerrevision not written", extra={"statefulset": key, "error": str(e)})
        return await super().reconcile(key)

    async def _sync_revisions(self, data: Obj) -> None:
        """A ControllerRevision per template, as kube's StatefulSet controller keeps them (what
        ``kubectl rollout history/undo statefulset`` read)."""
        assert self.revisions is not None
        in_use = {(data.get("status") or {}).get("currentRevision")}
        in_use |= {
            ((p.get("metadata") or {}).get("labels") or {}).get(CONTROLLER_REVISION_HASH_LABEL)
            for p in self._owned_pods(data["metadata"].get("uid"))
        }
        await sync_controller_revisions(
            self.client, self.revisions, data, self._hash(data),
            labels=((data.get("spec") or {}).get("selector") or {}).get("matchLabels") or {},
            in_use={n for n in in_use if n},
        )

    def plan(self, data: Obj, pods: list[Obj]) -> Plan:
        plan = statefulset_plan(data, pods, self._revision(data))
        # A Pod named like one of ours but owned by someone else (e.g. the previous incarnation of
        # this StatefulSet, not yet garbage-collected) blocks its ordinal until it is gone.
        ns = data["metadata"].get("namespace")
        blocked = [n for n in plan.create if self.pods.cache.get(f"{ns}/{n}") is not None]
        if blocked:
            plan.create = [n for n in plan.create if n not in blocked]
        return plan

    def status(self, data: Obj, pods: list[Obj]) -> Obj:
        return statefulset_status(data, pods, self._revision(data))

    def requeue_after(self, data: Obj, pods: list[Obj]) -> float | None:
        return replicaset_requeue(data, pods, datetime.now(UTC))  # spec.minReadySeconds, as a ReplicaSet's

    def created_message(self, data: Obj, pod: str) -> str:
        return f"create Pod {pod} in StatefulSet {_name(data)} successful"

    def deleted_message(self, data: Obj, pod: str) -> str:
        return f"delete Pod {pod} in StatefulSet {_name(data)} successful"

    def failed_create_message(self, data: Obj, pod: str, error: str) -> str:
        return f"create Pod {pod} in StatefulSet {_name(data)} failed error: {error}"

    def new_pod(self, data: Obj, name: str) -> Obj:
        spec = data.get("spec") or {}
        ordinal = name.rsplit("-", 1)[1]
        overrides: Obj = {"hostname": name}
        if spec.get("serviceName"):
            overrides["subdomain"] = spec["serviceName"]
        return pod_from_template(
            data,
            name,
            labels={
                STATEFULSET_POD_NAME_LABEL: name,
                POD_INDEX_LABEL: ordinal,
                CONTROLLER_REVISION_HASH_LABEL: self._revision(data),
            },
            spec_overrides=overrides,
        )
