"""The bootstrap RBAC policy written at every start, as kube's `rbac/bootstrap-roles` post-start hook does
(pkg/registry/rbac/rest/storage_rbac.go with pkg/registry/rbac/reconciliation).

The roles and bindings are data (authorization/bootstrappolicy.py): ClusterRoles and
ClusterRoleBindings, and the Roles and RoleBindings of kube-system and kube-public. Every start
creates what is missing; an object that exists gets the labels, annotations, permissions (roles),
aggregation selectors (aggregated roles) and subjects (bindings) it lacks, never loses any, unless
its annotation `rbac.authorization.kubernetes.io/autoupdate` says "false": as kube reconciles them.
The aggregated roles' rules are filled by controllers/clusterroleaggregation.py. The writes go through the generic store, like any client's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authorization.bootstrappolicy import (
    AUTOUPDATE,
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
)
from isthmus.apiserver.authorization.rbac import GROUP, covers, rules_of
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store

log = logging.getLogger("isthmus.apiserver.rbac")

Obj = dict[str, Any]

MANAGER = "isthmus-apiserver"
Reconcile = Callable[[Obj, Obj], "Obj | None"]


def _autoupdate(live: Obj) -> bool:
    """kube leaves alone only what says autoupdate "false" (a protected object)."""
    return (live["metadata"].get("annotations") or {}).get(AUTOUPDATE) != "false"


def _merge_meta(out: Obj, wanted: Obj) -> bool:
    """The labels and annotations the bootstrap object has and the live one lacks, added (kube's
    reconciliation keeps the live values of keys both have). True when something was added."""
    changed = False
    for field in ("labels", "annotations"):
        want = wanted["metadata"].get(field) or {}
        have = out["metadata"].get(field) or {}
        missing = {k: v for k, v in want.items() if k not in have}
        if missing:
            out["metadata"][field] = {**have, **missing}
            changed = True
    return changed


def _reconcile_role(live: Obj, wanted: Obj) -> Obj | None:
    """The role with what the bootstrap one has and it lacks: labels, annotations, and permissions, or
    for an aggregated role the selectors of its aggregationRule (its rules are the aggregation
    controller's). None: nothing to add."""
    out: Obj = clone(live)
    changed = _merge_meta(out, wanted)
    if wanted.get("aggregationRule"):
        have = (out.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
        add = [s for s in wanted["aggregationRule"]["clusterRoleSelectors"] if s not in have]
        if add:
            out["aggregationRule"] = {**(out.get("aggregationRule") or {}), "clusterRoleSelectors": [*have, *add]}
            changed = True
    else:
        missing = covers(rules_of(live), rules_of(wanted))
        if missing:
            out["rules"] = [*(out.get("rules") or []), *(r.to_api() for r in missing)]
            changed = True
    return out if changed else None


def _reconcile_binding(live: Obj, wanted: Obj) -> Obj | None:
    """The binding with the bootstrap labels, annotations and subjects it lacks added (None: nothing to add)."""
    out: Obj = clone(live)
    changed = _merge_meta(out, wanted)
    have = out.get("subjects") or []
    missing = [s for s in wanted.get("subjects") or [] if not any(
        isinstance(h, dict) and (h.get("kind"), h.get("name"), h.get("namespace"))
        == (s["kind"], s["name"], s.get("namespace")) for h in have)]
    if missing:
        out["subjects"] = [*have, *missing]
        changed = True
    return out if changed else None


async def ensure_bootstrap_policy(storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
    """Create the bootstrap roles and bindings that are missing; top up the autoupdated ones."""
    kinds: tuple[tuple[str, tuple[Obj, ...], Reconcile], ...] = (
        ("clusterroles", CLUSTER_ROLES, _reconcile_role),
        ("clusterrolebindings", CLUSTER_ROLE_BINDINGS, _reconcile_binding),
        ("roles", ROLES, _reconcile_role),
        ("rolebindings", ROLE_BINDINGS, _reconcile_binding))
    for plural, objects, reconcile in kinds:
        info = resources.get(GROUP, "v1", plural)
        for wanted in objects:
            name, ns = wanted["metadata"]["name"], wanted["metadata"].get("namespace", "")
            try:
                live = storage.get(info.key, ns, name)
                if live is None:
                    await store.create(info, ns, clone(wanted), manager=MANAGER)
                elif _autoupdate(live) and reconcile(live, wanted) is not None:

                    def top_up(cur: Obj, wanted: Obj = wanted, reconcile: Reconcile = reconcile) -> Obj:
                        return reconcile(cur, wanted) or cur

                    await store.update(info, ns, name, top_up, manager=MANAGER)
                    log.info("reconciled bootstrap %s %s", info.kind, name)
            except ApiError as e:  # logged; the next start tries again
                log.warning("cannot ensure bootstrap %s %s: %s", info.kind, name, e.message)
