"""APF's classification of a request, kube's matching rules, without a server."""

from __future__ import annotations

from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authorization.attributes import request_attributes
from isthmus.apiserver.controllers.apfbootstrap import FLOW_SCHEMAS
from isthmus.apiserver.controllers.apfclassifier import rule_matches

SA = UserInfo("system:serviceaccount:kube-system:robot", groups=("system:serviceaccounts", "system:authenticated"))
BOB = UserInfo("bob", groups=("system:authenticated",))


def first(user: UserInfo, method: str, path: str) -> str:
    """The first default FlowSchema (by precedence, then name) matching the request."""
    a = request_attributes(method, path, {}, user)
    ordered = sorted(FLOW_SCHEMAS.items(), key=lambda kv: (kv[1]["matchingPrecedence"], kv[0]))
    return next(name for name, spec in ordered if any(rule_matches(r, user, a) for r in spec["rules"]))


def test_default_schemas_classify_as_kubes() -> None:
    assert first(BOB, "GET", "/livez") == "probes"
    assert first(BOB, "GET", "/livez/ping") == "global-default"  # probes names the paths exactly
    assert first(BOB, "GET", "/api/v1/pods") == "global-default"
    assert first(SA, "PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l") == "system-leader-election"
    assert first(SA, "PUT", "/api/v1/namespaces/kube-system/configmaps/l") == "system-leader-election"
    assert first(SA, "PUT", "/api/v1/namespaces/x/configmaps/l") == "workload-leader-election"
    assert first(SA, "GET", "/api/v1/namespaces/x/pods") == "kube-system-service-accounts"
    node = UserInfo("system:node:n", groups=("system:nodes", "system:authenticated"))
    assert first(node, "PATCH", "/api/v1/nodes/n/status") == "system-node-high"  # cluster-scoped, clusterScope
    assert first(node, "GET", "/api/v1/namespaces/x/pods") == "system-nodes"
    kcm = UserInfo("system:kube-controller-manager", groups=("system:authenticated",))
    assert first(kcm, "PUT", "/api/v1/namespaces/x/endpoints/e") == "endpoint-controller"
    assert first(kcm, "GET", "/api/v1/namespaces/x/endpoints/e") == "endpoint-controller"
    assert first(kcm, "DELETE", "/api/v1/namespaces/x/endpoints/e") == "kube-controller-manager"
    other_sa = UserInfo("system:serviceaccount:team:x", groups=("system:serviceaccounts", "system:authenticated"))
    assert first(other_sa, "GET", "/api/v1/pods") == "service-accounts"
