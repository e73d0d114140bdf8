"""kube's bootstrap RBAC policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy), the part that matters
here, and its reconciliation at start (kube's `rbac/bootstrap-roles` post-start hook).

Every start creates what is missing; an object that exists gets the permissions (roles) and
subjects (bindings) it lacks, never loses any, unless its annotation
`rbac.authorization.kubernetes.io/autoupdate` says "false": as kube reconciles them. admin, edit and view are the
union of what kube aggregates into them (aggregation itself is not implemented).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authorization.rbac import GROUP, PolicyRule, covers, rules_of
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store

__all__ = ["AUTOUPDATE", "CLUSTER_ROLES", "CLUSTER_ROLE_BINDINGS", "ensure_bootstrap_policy"]

log = logging.getLogger("isthmus.apiserver.rbac")

Obj = dict[str, Any]

AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAPPING = {"kubernetes.io/bootstrapping": "rbac-defaults"}
READ = ("get", "list", "watch")
WRITE = ("create", "delete", "deletecollection", "patch", "update")
READ_WRITE = READ + WRITE


def _rule(verbs: tuple[str, ...], groups: tuple[str, ...] = (), *resources: str, urls: tuple[str, ...] = ()) -> Obj:
    return PolicyRule(verbs, groups, tuple(resources), (), urls).to_api()


def _cluster_role(name: str, *rules: Obj) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": dict(BOOTSTRAPPING), "annotations": {AUTOUPDATE: "true"}},
            "rules": list(rules)}


def _binding(name: str, role: str, *groups: str) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": dict(BOOTSTRAPPING), "annotations": {AUTOUPDATE: "true"}},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups]}


_VIEW = (
    _rule(READ, ("",), "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
          "services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status",
          "configmaps"),
    _rule(READ, ("",), "limitranges", "resourcequotas", "bindings", "events", "pods/status",
          "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log"),
    _rule(READ, ("",), "namespaces"),
    _rule(READ, ("discovery.k8s.io",), "endpointslices"),
    _rule(READ, ("apps",), "controllerrevisions", "statefulsets", "statefulsets/scale", "statefulsets/status",
          "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
          "replicasets", "replicasets/scale", "replicasets/status"),
    _rule(READ, ("autoscaling",), "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
    _rule(READ, ("batch",), "jobs", "cronjobs", "cronjobs/status", "jobs/status"),
    _rule(READ, ("policy",), "poddisruptionbudgets", "poddisruptionbudgets/status"),
    _rule(READ, ("networking.k8s.io",), "networkpolicies", "ingresses", "ingresses/status"),
)
_EDIT = (
    _rule(READ, ("",), "pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"),
    _rule(("impersonate",), ("",), "serviceaccounts"),
    _rule(WRITE, ("",), "pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"),
    _rule(("create",), ("",), "pods/eviction"),
    _rule(WRITE, ("",), "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
          "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events"),
    _rule(("create",), ("",), "serviceaccounts/token"),
    _rule(WRITE, ("apps",), "statefulsets", "statefulsets/scale", "daemonsets", "deployments", "deployments/scale",
          "deployments/rollback", "replicasets", "replicasets/scale"),
    _rule(WRITE, ("autoscaling",), "horizontalpodautoscalers"),
    _rule(WRITE, ("batch",), "jobs", "cronjobs"),
    _rule(WRITE, ("policy",), "poddisruptionbudgets"),
    _rule(WRITE, ("networking.k8s.io",), "networkpolicies", "ingresses"),
    _rule(READ_WRITE, ("coordination.k8s.io",), "leases"),
    *_VIEW,
)
_ADMIN = (
    _rule(("create",), ("authorization.k8s.io",), "localsubjectaccessreviews"),
    _rule(READ_WRITE, (GROUP,), "roles", "rolebindings"),
    *_EDIT,
)

CLUSTER_ROLES: tuple[Obj, ...] = (
    _cluster_role("cluster-admin", _rule(("*",), ("*",), "*"), _rule(("*",), urls=("*",))),
    _cluster_role("admin", *_ADMIN),
    _cluster_role("edit", *_EDIT),
    _cluster_role("view", *_VIEW),
    _cluster_role("system:discovery", _rule(("get",), urls=(
        "/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*", "/api", "/api/*",
        "/apis", "/apis/*"))),
    _cluster_role("system:basic-user",
                  _rule(("create",), ("authorization.k8s.io",), "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
                  _rule(("create",), ("authentication.k8s.io",), "selfsubjectreviews")),
    _cluster_role("system:public-info-viewer",
                  _rule(("get",), urls=("/livez", "/readyz", "/healthz", "/version", "/version/"))),
    _cluster_role("system:service-account-issuer-discovery", _rule(("get",), urls=(
        "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks",
        "/openid/v1/jwks/"))),
)

CLUSTER_ROLE_BINDINGS: tuple[Obj, ...] = (
    _binding("cluster-admin", "cluster-admin", "system:masters"),
    _binding("system:discovery", "system:discovery", "system:authenticated"),
    _binding("system:basic-user", "system:basic-user", "system:authenticated"),
    _binding("system:public-info-viewer", "system:public-info-viewer", "system:authenticated",
             "system:unauthenticated"),
    _binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery",
             "system:serviceaccounts"),
)

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
