"""Deployments and StatefulSets → Pods: kube-controller-manager's workload controllers, simplified.

Deployments own their Pods directly (the embedded apiserver serves no ReplicaSet kind): Pods
are named ``<deploy>-<template hash>-<5 random>`` and labelled ``pod-template-hash``; a
template change creates the new Pods at once and deletes old ones as new ones become ready.
StatefulSets create ``<name>-<ordinal>`` in order (OrderedReady: the next one only when the
previous is Ready), with hostname/subdomain for per-Pod DNS, and replace Pods of an old
revision one at a time from the highest ordinal. Both report the status fields that
``kubectl rollout status`` and ``kubectl wait --for=condition=Available`` read.

Deleting a workload deletes its Pods through the apiserver's garbage collector (ownerReferences).

Informer caches lag behind our own writes, so every create/delete is remembered
(:class:`Expectations`, like kube's ControllerExpectations) and the workload is not acted on
again until the cache has seen them: otherwise a quick second reconcile would create twice.
"""

from __future__ import annotations

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
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from isthmus.kube.helpers import is_not_found
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
    "DeploymentController",
    "Expectations",
    "StatefulSetController",
    "deployment_plan",
    "deployment_status",
    "max_unavailable",
    "pod_from_template",
    "statefulset_plan",
    "statefulset_status",
    "template_hash",
]

log = logging.getLogger(__name__)

OWNER_INDEX = "kubelite-controller-uid"
"""Pods filed under the uid of their controller owner."""
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


def deployment_plan(deploy: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], pod_hash: str) -> Plan:
    """Scale the Pods of the current template to spec.replicas; remove old-template Pods as
    new ones become ready (RollingUpdate) or before creating any (Recreate)."""
    spec = deploy.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    recreate = ((spec.get("strategy") or {}).get("type")) == "Recreate"
    live = [p for p in pods if not _terminating(p)]
    new = [
        p
        for p in live
        if ((p.get("metadata") or {}).get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL) == pod_hash
    ]
    new_names = {_name(p) for p in new}
    old = [p for p in live if _name(p) not in new_names]
    plan = Plan()
    if recreate and old:
        plan.delete = [_name(p) for p in old]
        return plan
    if len(new) > replicas:
        plan.delete += [_name(p) for p in sorted(new, key=_deletion_order)[: len(new) - replicas]]
    base = f"{(deploy.get('metadata') or {}).get('name')}-{pod_hash}-"
    plan.create = [base + random_suffix() for _ in range(max(0, replicas - len(new)))]
    ready_new = min(replicas, sum(1 for p in new if pod_is_ready(p)))
    keep_old = max(0, replicas - ready_new)
    if len(old) > keep_old:
        plan.delete += [_name(p) for p in sorted(old, key=_deletion_order)[: len(old) - keep_old]]
    return plan


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
    deploy: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], pod_hash: str, now: str
) -> Obj:
    """Counts and the Available/Progressing conditions, as the deployment controller reports them."""
    meta = deploy.get("metadata") or {}
    spec = deploy.get("spec") or {}
    old_status = deploy.get("status") or {}
    old_conds = {c.get("type"): c for c in old_status.get("conditions") or []}
    replicas = int(spec.get("replicas", 1) or 0)
    live = [p for p in pods if not _terminating(p)]
    updated = [
        p
        for p in live
        if ((p.get("metadata") or {}).get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL) == pod_hash
    ]
    ready = sum(1 for p in live if pod_is_ready(p))
    available_ok = ready >= replicas - max_unavailable(deploy)
    rs_name = f"{meta.get('name')}-{pod_hash}"
    complete = (
        len(updated) == replicas
        and len(live) == replicas
        and sum(1 for p in updated if pod_is_ready(p)) == replicas
    )
    if complete:
        progressing = ("NewReplicaSetAvailable", f'ReplicaSet "{rs_name}" has successfully progressed.')
    else:
        progressing = ("ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
    return {
        "observedGeneration": int(meta.get("generation") or 1),
        "replicas": len(live),
        "updatedReplicas": len(updated),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(0, replicas - ready),
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


class DeploymentController(_WorkloadController):
    kind = "Deployment"

    def __init__(
        self, client: AsyncClient, deployments: Informer[Deployment], pods: Informer[Pod], *, workers: int = 2
    ) -> None:
        super().__init__(client, deployments, pods, workers=workers)

    def _hash(self, data: Obj) -> str:
        spec = data.get("spec") or {}
        return template_hash(
            spec.get("template") or {}, int((data.get("status") or {}).get("collisionCount") or 0)
        )

    def plan(self, data: Obj, pods: list[Obj]) -> Plan:
        return deployment_plan(data, pods, self._hash(data))

    def status(self, data: Obj, pods: list[Obj]) -> Obj:
        return deployment_status(data, pods, self._hash(data), format_time(datetime.now(UTC)))

    def new_pod(self, data: Obj, name: str) -> Obj:
        return pod_from_template(data, name, labels={POD_TEMPLATE_HASH_LABEL: self._hash(data)})


class StatefulSetController(_WorkloadController):
    kind = "StatefulSet"

    def __init__(
        self,
        client: AsyncClient,
        statefulsets: Informer[StatefulSet],
        pods: Informer[Pod],
        *,
        workers: int = 2,
    ) -> None:
        super().__init__(client, statefulsets, pods, workers=workers)

    def _revision(self, data: Obj) -> str:
        return f"{data['metadata']['name']}-{template_hash((data.get('spec') or {}).get('template') or {})}"

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
