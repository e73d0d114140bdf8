"""kube's bootstrap RBAC policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy), the part that matters
here: the default ClusterRoles and ClusterRoleBindings, as data.

controllers/bootstraprbac.py writes them at every start (kube's `rbac/bootstrap-roles` post-start
hook). admin, edit and view are the union of what kube aggregates into them (aggregation itself is
not implemented).
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.authorization.rbac import GROUP, PolicyRule

__all__ = ["AUTOUPDATE", "CLUSTER_ROLES", "CLUSTER_ROLE_BINDINGS"]

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
