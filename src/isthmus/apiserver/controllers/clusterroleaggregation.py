"""kube-controller-manager's ClusterRole aggregation controller (pkg/controller/clusterroleaggregation).

A ClusterRole with an `aggregationRule` has no rules of its own: its `rules` are the rules of every
other ClusterRole one of its `clusterRoleSelectors` matches, in selector order, roles by name,
each rule once. That is how `admin`, `edit` and `view` get theirs (from `system:aggregate-to-*`,
and `view` into `edit` into `admin`), and how a user's ClusterRole labelled
`rbac.authorization.k8s.io/aggregate-to-view: "true"` extends `view`. As kube's, the controller
recomputes every aggregated role whenever any ClusterRole changes (a change can add or remove a
match, or change a matched role's rules) and writes only when the rules differ; anything a
client writes to an aggregated role's rules is overwritten.
"""

from __future__ import annotations

import logging
from typing import Any

from isthmus.apiserver.authorization.rbac import CLUSTER_ROLES, GROUP
from isthmus.apiserver.controllers.base import QueueController
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

MANAGER = "clusterrole-aggregation-controller"
USER = "system:serviceaccount:kube-system:clusterrole-aggregation-controller"


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels): matchLabels and matchExpressions
    (In, NotIn, Exists, DoesNotExist) all hold; an empty selector matches everything."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return False
        key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def aggregated_rules(role: Obj, roles: list[Obj]) -> list[Any]:
    """syncClusterRole's rules for `role`: per selector, the matching roles (not itself) by name, each
    of their rules unless an equal one is already in."""
    rule = role.get("aggregationRule") or {}
    out: list[Any] = []
    name = role["metadata"]["name"]
    for selector in rule.get("clusterRoleSelectors") or []:
        matched = sorted((r for r in roles if r["metadata"]["name"] != name
                          and selector_matches(selector, r["metadata"].get("labels") or {})),
                         key=lambda r: r["metadata"]["name"])
        for other in matched:
            for policy_rule in other.get("rules") or []:
                if policy_rule not in out:
                    out.append(policy_rule)
    return out


def _same(new: list[Any], old: Any) -> bool:
    """equality.Semantic.DeepEqual: an empty list and null are the same rules."""
    return new == (old or [])


class ClusterRoleAggregationController(QueueController):
    name = MANAGER
    write_keys = (CLUSTER_ROLES,)

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
        super().__init__()
        self.storage, self.resources, self.store = storage, resources, store

    def on_write(self, ev: WatchEvent) -> None:
        """Any ClusterRole's change may change what an aggregated role gathers: all of them are queued
        (enqueueAll), each once however many writes came meanwhile."""
        self.resync()

    def resync(self) -> None:
        for role in self.storage.list(CLUSTER_ROLES):
            if role.get("aggregationRule"):
                self.put(("clusterrole", role["metadata"]["name"]))

    async def sync_all(self) -> None:
        """Every aggregated role up to date now (at start, so `admin` has its rules from the first
        request). Passes until one changes nothing: `admin` gathers `edit`, which gathers `view`, so
        a role synced before the one it matches needs another pass (bounded: a pass that changes
        something fills at least one more level)."""
        names = [r["metadata"]["name"] for r in self.storage.list(CLUSTER_ROLES) if r.get("aggregationRule")]
        for _ in range(len(names) + 1):
            changed = [await self.sync(name) for name in names]
            if not any(changed):
                return

    async def handle(self, kind: str, arg: Any) -> None:
        await self.sync(str(arg))

    async def sync(self, name: str) -> bool:
        """syncClusterRole; True when it wrote the role."""
        role = self.storage.get(CLUSTER_ROLES, "", name)
        if role is None or not role.get("aggregationRule"):
            return False
        rules = aggregated_rules(role, self.storage.list(CLUSTER_ROLES))
        if _same(rules, role.get("rules")):
            return False
        info = self.resources.get(GROUP, "v1", "clusterroles")

        def build(live: Obj) -> Obj:
            live["rules"] = aggregated_rules(live, self.storage.list(CLUSTER_ROLES))
            return live

        await self.store.update(info, "", name, build, manager=MANAGER, user=USER)
        return True
