"""Deployments, ReplicaSets and StatefulSets → Pods: kube-controller-manager's workload controllers, simplified.

A Deployment owns ReplicaSets, one per pod template: ``<deploy>-<template hash>``, labelled
``pod-template-hash`` (also in its selector and template), annotated with the rollout revision
(``deployment.kubernetes.io/revision``); a ReplicaSet owns its Pods (``<rs>-<5 random>``). A
template change makes a new ReplicaSet (revision + 1) scaled to ``spec.replicas`` at once, and the
old ones are scaled down as the new Pods become available (RollingUpdate without maxSurge pacing:
the surge is the whole new set; Recreate: old ones to 0 first). Going back to an older template
(``kubectl rollout undo``) reuses its ReplicaSet and gives it the next revision. Old ReplicaSets
are kept, scaled to 0, up to ``revisionHistoryLimit`` (10), so ``kubectl rollout history`` lists
them. Pods a Deployment owned directly (kube-lite before ReplicaSets) are replaced.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
from isthmus.runtime import Controller, Informer, Result, enqueue_owner, owner_refs, split_key

__all__ = [
    "OWNER_INDEX",
    "REVISION_ANNOTATION",
    "DeploymentController",
    "Expectations",
    "ReplicaSetController",
    "StatefulSetController",
    "deployment_status",
    "equal_ignore_hash",
    "find_new_replicaset",
    "max_unavailable",
    "new_replicaset",
    "pod_from_template",
    "replicaset_plan",
    "replicaset_status",
    "revision_of",
    "rollout_scales",
    "semantic",
    "statefulset_plan",
    "statefulset_status",
    "sync_controller_revisions",
    "template_hash",
]

log = logging.getLogger(__name__)

OWNER_INDEX = "kubelite-controller-uid"
"""Pods (and ReplicaSets) filed under the uid of their controller owner."""
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"
DEFAULT_HISTORY_LIMIT = 10
WAIT_SECONDS = 1.0

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


def max_unavailable(deploy: Mapping[str, Any]) -> int:
    """kube's MaxUnavailable: 0 for Recreate, else rollingUpdate.maxUnavailable resolved (default 25%)."""
    spec = deploy.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    strategy = spec.get("strategy") or {}
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate" or replicas == 0:
        return 0
    ru = strategy.get("rollingUpdate") or {}
    surge = _int_or_percent(ru.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = _int_or_percent(ru.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return min(unavailable, replicas)


@dataclass
class Plan:
    """Pods to create (names) and to delete (names)."""

    create: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)


def _deletion_order(p: Mapping[str, Any]) -> tuple[int, int, str]:
    """Delete first: not ready, without an address, newest (kube's ActivePods ordering, roughly)."""
    status = p.get("status") or {}
    created = _created(p)
    newest_first = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (1 if pod_is_ready(p) else 0, 1 if status.get("podIP") else 0, newest_first)


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


def replicaset_status(rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Obj:
    live = [p for p in pods if not _terminating(p)]
    ready = sum(1 for p in live if pod_is_ready(p))
    return {
        "observedGeneration": int((rs.get("metadata") or {}).get("generation") or 1),
        "replicas": len(live),
        "fullyLabeledReplicas": len(live),
        "readyReplicas": ready,
        "availableReplicas": ready,  # minReadySeconds is not waited for
    }


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


def rollout_scales(
    deploy: Mapping[str, Any], new: Mapping[str, Any], olds: Iterable[Mapping[str, Any]]
) -> dict[str, int]:
    """spec.replicas of every ReplicaSet. RollingUpdate: the new one at spec.replicas at once, the
    old ones keep what is not yet available in the new one (newest old first). Recreate: the old
    ones to 0, the new one up once their Pods are gone."""
    spec = deploy.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    recreate = ((spec.get("strategy") or {}).get("type")) == "Recreate"
    olds = sorted(olds, key=revision_of, reverse=True)
    out: dict[str, int] = {}
    if recreate:
        for rs in olds:
            out[_name(rs)] = 0
        old_left = sum(_replicas(rs, "status") for rs in olds)
        out[_name(new)] = replicas if old_left == 0 else min(_replicas(new), replicas)
        return out
    out[_name(new)] = replicas
    allowed = max(0, replicas - min(replicas, _replicas(new, "status", "availableReplicas")))
    for rs in olds:
        keep = min(_replicas(rs), allowed)
        out[_name(rs)] = keep
        allowed -= keep
    return out


def _condition(
    old: Mapping[str, Any] | None, ctype: str, ok: bool, reason: str, message: str, now: str
) -> Obj:
    status = "True" if ok else "False"
    same = old is not None and old.get("status") == status
    unchanged = same and old is not None and old.get("reason") == reason and old.get("message") == message
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": old.get("lastUpdateTime") if unchanged and old else now,
        "lastTransitionTime": old.get("lastTransitionTime") if same and old else now,
    }


def deployment_status(
    deploy: Mapping[str, Any], new: Mapping[str, Any] | None, sets: Iterable[Mapping[str, Any]], now: str
) -> Obj:
    """Counts (summed over the ReplicaSets' status) and the Available/Progressing conditions, with
    the deployment controller's reasons."""
    meta = deploy.get("metadata") or {}
    spec = deploy.get("spec") or {}
    old_status = deploy.get("status") or {}
    old_conds = {c.get("type"): c for c in old_status.get("conditions") or []}
    replicas = int(spec.get("replicas", 1) or 0)
    sets = list(sets)
    total = sum(_replicas(rs, "status") for rs in sets)
    ready = sum(_replicas(rs, "status", "readyReplicas") for rs in sets)
    available = sum(_replicas(rs, "status", "availableReplicas") for rs in sets)
    updated = _replicas(new, "status") if new is not None else 0
    available_ok = available >= replicas - max_unavailable(deploy)
    rs_name = _name(new) if new is not None else f"{meta.get('name')}"
    new_synced = new is not None and int((new.get("status") or {}).get("observedGeneration") or 0) >= int(
        (new.get("metadata") or {}).get("generation") or 1
    )
    complete = new_synced and updated == replicas and total == replicas and available >= replicas
    if complete:
        progressing = ("NewReplicaSetAvailable", f'ReplicaSet "{rs_name}" has successfully progressed.')
    else:
        progressing = ("ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
    out: Obj = {
        "observedGeneration": int(meta.get("generation") or 1),
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": max(0, replicas - available),
        "conditions": [
            _condition(
                old_conds.get("Available"),
                "Available",
                available_ok,
                "MinimumReplicasAvailable" if available_ok else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available_ok
                else "Deployment does not have minimum availability.",
                now,
            ),
            _condition(old_conds.get("Progressing"), "Progressing", True, *progressing, now),
        ],
    }
    if old_status.get("collisionCount"):
        out["collisionCount"] = old_status["collisionCount"]
    return out


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
    return {
        "observedGeneration": int(meta.get("generation") or 1),
        "replicas": len(live),
        "readyReplicas": ready,
        "availableReplicas": ready,
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

    def __init__(
        self, client: AsyncClient, workloads: Informer[Any], pods: Informer[Pod], *, workers: int
    ) -> None:
        self.client = client
        self.workloads = workloads
        self.pods = pods
        self.expectations = Expectations()
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

    async def reconcile(self, key: str) -> Result | None:
        obj = self.workloads.cache.get(key)
        if obj is None:
            self.expectations.forget(key)
            return None  # the garbage collector removes the Pods (ownerReferences)
        data = obj.to_dict()
        pods = self._owned_pods(data["metadata"].get("uid"))
        if not self.expectations.satisfied(key, {_name(p) for p in pods}):
            return Result(requeue_after=WAIT_SECONDS)
        if data["metadata"].get("deletionTimestamp") is None:
            plan = self.plan(data, pods)
            await self._apply(key, data, plan)
        status = self.status(data, pods)
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
        return None

    def plan(self, data: Obj, pods: list[Obj]) -> Plan:
        raise NotImplementedError

    def status(self, data: Obj, pods: list[Obj]) -> Obj:
        raise NotImplementedError

    def new_pod(self, data: Obj, name: str) -> Obj:
        raise NotImplementedError

    async def _apply(self, key: str, data: Obj, plan: Plan) -> None:
        ns, _ = split_key(key)
        for name in plan.delete:
            self.expectations.expect(key, deletes=[name])
            try:
                await self.client.delete(Pod, name, namespace=ns)
            except ApiError as e:
                if not is_not_found(e):
                    raise
            log.info("pod deleted", extra={"owner": key, "kind": self.kind, "pod": name})
        for name in plan.create:
            pod = cast(Pod, Pod.from_dict(self.new_pod(data, name)))
            await self.client.create(pod, field_manager=FIELD_MANAGER)
            self.expectations.expect(key, creates=[name])
            log.info("pod created", extra={"owner": key, "kind": self.kind, "pod": name})


def _subset_equal(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    return all(current.get(k) == v for k, v in desired.items())


class ReplicaSetController(_WorkloadController):
    kind = "ReplicaSet"

    def __init__(
        self, client: AsyncClient, replicasets: Informer[ReplicaSet], pods: Informer[Pod], *, workers: int = 2
    ) -> None:
        super().__init__(client, replicasets, pods, workers=workers)

    def plan(self, data: Obj, pods: list[Obj]) -> Plan:
        return replicaset_plan(data, pods)

    def status(self, data: Obj, pods: list[Obj]) -> Obj:
        return replicaset_status(data, pods)

    def new_pod(self, data: Obj, name: str) -> Obj:
        return pod_from_template(data, name)


class DeploymentController:
    """Keyed by Deployment; triggered by it and by the ReplicaSets it owns (their status)."""

    def __init__(
        self,
        client: AsyncClient,
        deployments: Informer[Deployment],
        replicasets: Informer[ReplicaSet],
        pods: Informer[Pod],
        *,
        workers: int = 2,
    ) -> None:
        self.client = client
        self.deployments = deployments
        self.replicasets = replicasets
        self.pods = pods
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

    async def reconcile(self, key: str) -> Result | None:
        obj = self.deployments.cache.get(key)
        if obj is None:
            return None  # the garbage collector removes the ReplicaSets (ownerReferences)
        ns, name = split_key(key)
        data = obj.to_dict()
        uid = data["metadata"].get("uid")
        sets = [rs.to_dict() for rs in self.replicasets.cache.by_index(OWNER_INDEX, uid)] if uid else []
        pod_hash = self._hash(data)
        new = find_new_replicaset(data, sets, pod_hash)
        if data["metadata"].get("deletionTimestamp") is None:
            for pod in self.pods.cache.by_index(OWNER_INDEX, uid) if uid else []:
                await self._delete(Pod, ns, str(pod.metadata.name if pod.metadata else ""))
            if new is None:
                revision = max((revision_of(rs) for rs in sets), default=0) + 1
                recreate = ((data.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate"
                start = 0 if recreate and any(_replicas(rs, "status") for rs in sets) else _replicas(data)
                body = new_replicaset(data, pod_hash, revision, start)
                try:
                    await self.client.create(
                        cast(ReplicaSet, ReplicaSet.from_dict(body)), field_manager=FIELD_MANAGER
                    )
                    log.info("replicaset created", extra={"deployment": key, "replicaset": body["metadata"]["name"],
                                                          "revision": revision})
                except ApiError as e:
                    if not is_conflict(e):
                        raise
                    await self._on_name_taken(ns, data, body)
                return Result(requeue_after=WAIT_SECONDS)  # the cache brings it; act on what is stored
            olds = [rs for rs in sets if _name(rs) != _name(new)]
            await self._sync_revision(ns, data, new, olds)
            for rs_name, replicas in rollout_scales(data, new, olds).items():
                rs = new if rs_name == _name(new) else next(r for r in olds if _name(r) == rs_name)
                if _replicas(rs) != replicas:
                    await self.client.patch(
                        ReplicaSet, rs_name, {"spec": {"replicas": replicas}}, namespace=ns,
                        patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
                    )
            await self._clean_history(ns, data, olds)
        status = deployment_status(data, new, sets, format_time(datetime.now(UTC)))
        if not _subset_equal(status, data.get("status") or {}):
            await self.client.patch(
                Deployment.Status, name, {"status": status}, namespace=ns,
                patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )
        return None

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

    async def _sync_revision(self, ns: str | None, data: Obj, new: Obj, olds: list[Obj]) -> None:
        """The current ReplicaSet carries the highest revision (an undo makes an old one current
        again), and the Deployment says which, as kube's controller annotates both."""
        top = max((revision_of(rs) for rs in olds), default=0)
        revision = revision_of(new)
        if revision <= top or revision == 0:
            revision = top + 1
            await self.client.patch(
                ReplicaSet, _name(new), {"metadata": {"annotations": {REVISION_ANNOTATION: str(revision)}}},
                namespace=ns, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )
        if revision_of(data) != revision:
            await self.client.patch(
                Deployment, _name(data), {"metadata": {"annotations": {REVISION_ANNOTATION: str(revision)}}},
                namespace=ns, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )

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

    def __init__(
        self,
        client: AsyncClient,
        statefulsets: Informer[StatefulSet],
        pods: Informer[Pod],
        revisions: Informer[ControllerRevision] | None = None,
        *,
        workers: int = 2,
    ) -> None:
        super().__init__(client, statefulsets, pods, workers=workers)
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
