"""API Priority and Fairness defaults: kube v1.32's mandatory and suggested FlowSchemas and
PriorityLevelConfigurations (k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap), kept as kube-apiserver's
APF config controller keeps them.

This server does not queue requests: the objects are there so that what clients and admins read
(`kubectl get flowschemas`, `prioritylevelconfigurations`, tools that check a cluster's APF setup
or add their own FlowSchemas next to kube's) is what a real cluster shows.

Kept as kube's ensurer keeps them, at every start: a missing object is created with the annotation
`apf.kubernetes.io/autoupdate-spec: "true"`; an existing one whose annotation says "true" (or that
has none and was never changed: generation 1) gets the bootstrap spec back if it differs; one whose
annotation says "false" is the admin's. Each FlowSchema's status carries kube's `Dangling`
condition (False, `Found`) once its priority level exists.
"""

from __future__ import annotations

import logging
from typing import Any

from isthmus.apiserver.apimachinery import meta
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

GROUP = "flowcontrol.apiserver.k8s.io"
AUTOUPDATE = "apf.kubernetes.io/autoupdate-spec"
MANAGER = "api-priority-and-fairness-config-producer-v1"
SYSTEM = "kube-system"

ALL_RESOURCES: Obj = {"apiGroups": ["*"], "clusterScope": True, "namespaces": ["*"], "resources": ["*"],
                      "verbs": ["*"]}
ALL_URLS: Obj = {"nonResourceURLs": ["*"], "verbs": ["*"]}


def _limited(shares: int, lendable: int, queues: tuple[int, int, int] | None) -> Obj:
    """A Limited level: nominal shares, lendable percent, Queue (queues, hand size, queue length
    limit) or Reject when queues is None."""
    response: Obj = {"type": "Reject"}
    if queues is not None:
        response = {"queuing": {"handSize": queues[1], "queueLengthLimit": queues[2], "queues": queues[0]},
                    "type": "Queue"}
    return {"limited": {"lendablePercent": lendable, "limitResponse": response, "nominalConcurrencyShares": shares},
            "type": "Limited"}


# name → spec, mandatory first.
PRIORITY_LEVELS: dict[str, Obj] = {
    "exempt": {"exempt": {"lendablePercent": 0, "nominalConcurrencyShares": 0}, "type": "Exempt"},
    "catch-all": _limited(5, 0, None),
    "system": _limited(30, 33, (64, 6, 50)),
    "node-high": _limited(40, 25, (64, 6, 50)),
    "leader-election": _limited(10, 0, (16, 4, 50)),
    "workload-high": _limited(40, 50, (128, 6, 50)),
    "workload-low": _limited(100, 90, (128, 6, 50)),
    "global-default": _limited(20, 50, (128, 6, 50)),
}
MANDATORY = ("exempt", "catch-all")


def _subject(spec: str) -> Obj:
    """`User:x`, `Group:x` or `SA:<ns>/<name>` as a flowcontrol Subject."""
    kind, _, name = spec.partition(":")
    if kind == "SA":
        ns, _, sa = name.partition("/")
        return {"kind": "ServiceAccount", "serviceAccount": {"name": sa, "namespace": ns}}
    return {"kind": kind, kind.lower(): {"name": name}}


def _rule(verbs: str, groups: str, resources: str, namespaces: str = "*", cluster: bool = False) -> Obj:
    out: Obj = {"apiGroups": ["" if g == "core" else g for g in groups.split()]}
    if cluster:
        out["clusterScope"] = True
    out["namespaces"] = namespaces.split()
    out["resources"] = resources.split()
    out["verbs"] = verbs.split()
    return out


def _schema(level: str, precedence: int, distinguisher: str, subjects: tuple[str, ...],
            resource_rules: list[Obj] | None = None, non_resource_rules: list[Obj] | None = None) -> Obj:
    """A FlowSchema spec; without rules it matches every request of its subjects (kube's NewFSAll)."""
    rules: Obj = {}
    if resource_rules is None and non_resource_rules is None:
        resource_rules, non_resource_rules = [ALL_RESOURCES], [ALL_URLS]
    if non_resource_rules:
        rules["nonResourceRules"] = non_resource_rules
    if resource_rules:
        rules["resourceRules"] = resource_rules
    rules["subjects"] = [_subject(s) for s in subjects]
    spec: Obj = {}
    if distinguisher:
        spec["distinguisherMethod"] = {"type": distinguisher}
    spec["matchingPrecedence"] = precedence
    spec["priorityLevelConfiguration"] = {"name": level}
    spec["rules"] = [rules]
    return spec


_BY_USER, _BY_NS = "ByUser", "ByNamespace"
_AUTH = ("Group:system:unauthenticated", "Group:system:authenticated")
_KCM, _SCHED = "User:system:kube-controller-manager", "User:system:kube-scheduler"
_LEASES = _rule("get create update", "coordination.k8s.io", "leases")
# The lock objects leader election used before Leases, still in kube's defaults.
_LOCKS = _rule("get create update", "core", "endpoints configmaps")
_LOCKS_IN_SYSTEM = _rule("get create update", "core", "endpoints configmaps", SYSTEM)

FLOW_SCHEMAS: dict[str, Obj] = {
    "exempt": _schema("exempt", 1, "", ("Group:system:masters",)),
    "catch-all": _schema("catch-all", 10000, _BY_USER, _AUTH),
    "probes": _schema("exempt", 2, "", _AUTH, resource_rules=[],
                      non_resource_rules=[{"nonResourceURLs": ["/healthz", "/readyz", "/livez"], "verbs": ["get"]}]),
    "system-leader-election": _schema("leader-election", 100, _BY_USER, (_KCM, _SCHED, f"SA:{SYSTEM}/*"),
                                      resource_rules=[_LOCKS_IN_SYSTEM, _LEASES]),
    "endpoint-controller": _schema(
        "workload-high", 150, _BY_USER,
        (_KCM, f"SA:{SYSTEM}/endpoint-controller", f"SA:{SYSTEM}/endpointslicemirroring-controller"),
        resource_rules=[_rule("get create update", "core", "endpoints")]),
    "workload-leader-election": _schema("leader-election", 200, _BY_USER, (f"SA:{SYSTEM}/*",),
                                        resource_rules=[_LOCKS, _LEASES]),
    "system-node-high": _schema("node-high", 400, _BY_USER, ("Group:system:nodes",), resource_rules=[
        _rule("*", "core", "nodes nodes/status", cluster=True), _rule("*", "coordination.k8s.io", "leases")]),
    "system-nodes": _schema("system", 500, _BY_USER, ("Group:system:nodes",)),
    "kube-controller-manager": _schema("workload-high", 800, _BY_NS, (_KCM,)),
    "kube-scheduler": _schema("workload-high", 800, _BY_NS, (_SCHED,)),
    "kube-system-service-accounts": _schema("workload-high", 900, _BY_NS, (f"SA:{SYSTEM}/*",)),
    "service-accounts": _schema("workload-low", 9000, _BY_USER, ("Group:system:serviceaccounts",)),
    "global-default": _schema("global-default", 9900, _BY_USER, _AUTH),
}


def _object(kind: str, name: str, spec: Obj) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": kind,
            "metadata": {"name": name, "annotations": {AUTOUPDATE: "true"}}, "spec": spec}


def _should_update(live: Obj) -> bool:
    """kube's shouldUpdateSpec: the annotation decides; without one, only a never-changed object."""
    value = (live["metadata"].get("annotations") or {}).get(AUTOUPDATE)
    if value is not None:
        return str(value).lower() == "true"
    return bool(live["metadata"].get("generation") == 1)


def dangling_condition(level: str, exists: bool, now: str) -> Obj:
    """The APF controller's condition on a FlowSchema, as kube words it."""
    if exists:
        return {"lastTransitionTime": now,
                "message": f"This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" "
                           "and it exists",
                "reason": "Found", "status": "False", "type": "Dangling"}
    return {"lastTransitionTime": now,
            "message": f"This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" "
                       "but there is no such object",
            "reason": "NotFound", "status": "True", "type": "Dangling"}


async def ensure_apf_defaults(storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
    """Create the defaults that are missing, give autoupdated ones their spec back, set the
    FlowSchemas' Dangling condition."""
    for plural, kind, objects in (("prioritylevelconfigurations", "PriorityLevelConfiguration", PRIORITY_LEVELS),
                                  ("flowschemas", "FlowSchema", FLOW_SCHEMAS)):
        info = resources.get(GROUP, "v1", plural)
        for name, spec in objects.items():
            try:
                live = storage.get(info.key, "", name)
                if live is None:
                    await store.create(info, "", _object(kind, name, spec), manager=MANAGER)
                elif live.get("spec") != spec and _should_update(live):

                    def build(cur: Obj, spec: Obj = spec) -> Obj:
                        cur["spec"] = spec
                        cur["metadata"]["annotations"] = {**(cur["metadata"].get("annotations") or {}),
                                                          AUTOUPDATE: "true"}
                        return cur

                    await store.update(info, "", name, build, manager=MANAGER)
            except ApiError as e:  # logged; the next start tries again
                log.warning("cannot ensure %s %s: %s", kind, name, e.message)
    await _set_dangling(storage, resources, store)


async def _set_dangling(storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
    info = resources.get(GROUP, "v1", "flowschemas")
    levels = {p["metadata"]["name"] for p in storage.list(resources.get(GROUP, "v1", "prioritylevelconfigurations").key)}
    for fs in storage.list(info.key):
        level = str(((fs.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name") or "")
        exists = level in levels
        have = [c for c in (fs.get("status") or {}).get("conditions") or [] if c.get("type") == "Dangling"]
        if have and have[0].get("status") == ("False" if exists else "True"):
            continue
        condition = dangling_condition(level, exists, meta.now_rfc3339())

        def build(cur: Obj, condition: Obj = condition) -> Obj:
            others = [c for c in (cur.get("status") or {}).get("conditions") or [] if c.get("type") != "Dangling"]
            cur["status"] = {"conditions": [*others, condition]}
            return cur

        try:
            await store.update(info, "", fs["metadata"]["name"], build, subresource="status", manager=MANAGER)
        except ApiError as e:
            log.warning("cannot set FlowSchema %s's status: %s", fs["metadata"]["name"], e.message)
