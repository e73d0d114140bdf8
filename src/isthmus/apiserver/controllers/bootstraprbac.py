"""The bootstrap RBAC policy written at every start, as kube's `rbac/bootstrap-roles` post-start hook does
(pkg/registry/rbac/rest/storage_rbac.go with pkg/registry/rbac/reconciliation).

The roles and bindings are data (authorization/bootstrappolicy.py). Every start creates what is
missing; an object that exists gets the permissions (roles) and subjects (bindings) it lacks, never
loses any, unless its annotation `rbac.authorization.kubernetes.io/autoupdate` says "false": as kube
reconciles them. The writes go through the generic store, like any client's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authorization.bootstrappolicy import AUTOUPDATE, CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES
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


def _reconcile_role(live: Obj, wanted: Obj) -> Obj | None:
    """The role with the bootstrap permissions it lacks added (None: nothing to add)."""
    missing = covers(rules_of(live), rules_of(wanted))
    if not missing:
        return None
    out: Obj = clone(live)
    out["rules"] = [*(out.get("rules") or []), *(r.to_api() for r in missing)]
    return out


def _reconcile_binding(live: Obj, wanted: Obj) -> Obj | None:
    """The binding with the bootstrap subjects it lacks added (None: nothing to add)."""
    have = live.get("subjects") or []
    missing = [s for s in wanted["subjects"] if not any(
        isinstance(h, dict) and (h.get("kind"), h.get("name")) == (s["kind"], s["name"]) for h in have)]
    if not missing:
        return None
    out: Obj = clone(live)
    out["subjects"] = [*have, *missing]
    return out


async def ensure_bootstrap_policy(storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
    """Create the bootstrap roles and bindings that are missing; top up the autoupdated ones."""
    kinds: tuple[tuple[str, tuple[Obj, ...], Reconcile], ...] = (
        ("clusterroles", CLUSTER_ROLES, _reconcile_role),
        ("clusterrolebindings", CLUSTER_ROLE_BINDINGS, _reconcile_binding))
    for plural, objects, reconcile in kinds:
        info = resources.get(GROUP, "v1", plural)
        for wanted in objects:
            name = wanted["metadata"]["name"]
            try:
                live = storage.get(info.key, "", name)
                if live is None:
                    await store.create(info, "", clone(wanted), manager=MANAGER)
                elif _autoupdate(live) and reconcile(live, wanted) is not None:

                    def top_up(cur: Obj, wanted: Obj = wanted, reconcile: Reconcile = reconcile) -> Obj:
                        return reconcile(cur, wanted) or cur

                    await store.update(info, "", name, top_up, manager=MANAGER)
                    log.info("reconciled bootstrap %s %s", info.kind, name)
            except ApiError as e:  # logged; the next start tries again
                log.warning("cannot ensure bootstrap %s %s: %s", info.kind, name, e.message)
