"""Request attributes as kube's RequestInfoFactory derives them; RBAC rule matching and escalation
coverage as kube's rbac helpers compute them."""

from __future__ import annotations

import pytest

from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authorization import Authorizer, forbidden, request_attributes
from isthmus.apiserver.authorization.rbac import (
    PolicyRule,
    RuleResolver,
    compact_string,
    covers,
    escalation_message,
    rule_allows,
)
from isthmus.apiserver.storage.store import Store

U = UserInfo("u", groups=("g", "system:authenticated"))


def attrs(method: str, path: str, query: dict[str, str] | None = None) -> tuple[str, str, str, str, str, str]:
    a = request_attributes(method, path, query or {}, U)
    assert a.resource_request
    return a.verb, a.api_group, a.namespace, a.resource, a.name, a.subresource


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "", "ns", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "", "ns", "pods", "", "")),
    ("GET", "/api/v1/pods", {"fieldSelector": "metadata.name=p"}, ("list", "", "", "pods", "p", "")),
    ("GET", "/api/v1/watch/namespaces/ns/pods/p", {}, ("watch", "", "ns", "pods", "p", "")),
    ("HEAD", "/api/v1/namespaces/ns/pods/p", {}, ("get", "", "ns", "pods", "p", "")),
    ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, ("get", "", "ns", "pods", "p", "log")),
    ("POST", "/api/v1/namespaces/ns/pods/p/exec", {}, ("create", "", "ns", "pods", "p", "exec")),
    ("DELETE", "/apis/apps/v1/namespaces/ns/deployments", {}, ("deletecollection", "apps", "ns", "deployments", "", "")),
    ("PATCH", "/apis/x.io/v1/clusters/c/status", {}, ("patch", "x.io", "", "clusters", "c", "status")),
    # A namespace is in its own namespace; its status and finalize are its subresources.
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "ns", "namespaces", "ns", "")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "ns", "namespaces", "ns", "finalize")),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "", "namespaces", "", "")),
])
def test_resource_request_attributes(method: str, path: str, query: dict[str, str],
                                     expected: tuple[str, ...]) -> None:
    assert attrs(method, path, query) == expected


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis/apps", "/apis/apps/v1", "/healthz", "/openapi/v2",
                                  "/version"])
def test_non_resource_requests(path: str) -> None:
    a = request_attributes("GET", path, {}, U)
    assert (a.resource_request, a.verb, a.path) == (False, "get", path)


def test_rule_matching() -> None:
    get_pods = request_attributes("GET", "/api/v1/namespaces/ns/pods/p", {}, U)
    log = request_attributes("GET", "/api/v1/namespaces/ns/pods/p/log", {}, U)
    assert rule_allows(get_pods, PolicyRule(("get",), ("",), ("pods",)))
    assert rule_allows(get_pods, PolicyRule(("*",), ("*",), ("*",)))
    assert not rule_allows(get_pods, PolicyRule(("get",), ("apps",), ("pods",)))
    assert rule_allows(get_pods, PolicyRule(("get",), ("",), ("pods",), ("p",)))
    assert not rule_allows(get_pods, PolicyRule(("get",), ("",), ("pods",), ("q",)))
    assert not rule_allows(log, PolicyRule(("get",), ("",), ("pods",)))
    assert rule_allows(log, PolicyRule(("get",), ("",), ("pods/log",)))
    assert rule_allows(log, PolicyRule(("get",), ("",), ("*/log",)))
    assert not rule_allows(log, PolicyRule(("get",), ("",), ("pods/*",)))
    metrics = request_attributes("GET", "/metrics/x", {}, U)
    assert rule_allows(metrics, PolicyRule(("get",), non_resource_urls=("/metrics/*",)))
    assert not rule_allows(metrics, PolicyRule(("get",), non_resource_urls=("/metrics",)))
    assert not rule_allows(metrics, PolicyRule(("post",), non_resource_urls=("*",)))


def test_forbidden_sanitizes_and_appends_the_reason() -> None:
    a = request_attributes("GET", "/a<b>&", {}, UserInfo("u"))
    assert forbidden(a, "RBAC: x").message == 'forbidden: User "u" cannot get path "/a&lt;b&gt;&amp;": RBAC: x'


def test_covers_and_the_escalation_message() -> None:
    owner = [PolicyRule(("get", "list"), ("",), ("pods", "*/status")), PolicyRule(("get",), non_resource_urls=("/x/*",))]
    assert covers(owner, [PolicyRule(("get",), ("",), ("pods", "services/status"))]) == []
    assert covers(owner, [PolicyRule(("get",), non_resource_urls=("/x/y",))]) == []
    missing = covers(owner, [PolicyRule(("get", "delete", "watch"), ("",), ("pods",), ("a",))])
    assert [compact_string(r) for r in missing] == ['{APIGroups:[""], Resources:["pods"], ResourceNames:["a"], '
                                                    'Verbs:["delete"]}',
                                                    '{APIGroups:[""], Resources:["pods"], ResourceNames:["a"], '
                                                    'Verbs:["watch"]}']
    assert escalation_message(U, missing, []) == (
        'user "u" (groups=["g" "system:authenticated"]) is attempting to grant RBAC permissions not currently '
        'held:\n{APIGroups:[""], Resources:["pods"], ResourceNames:["a"], Verbs:["delete" "watch"]}')


def test_masters_bypass_every_mode_and_always_deny_has_kubes_reason() -> None:
    store = Store(None)
    store.open()
    authorizer = Authorizer(["AlwaysDeny"], RuleResolver(store))
    a = request_attributes("GET", "/api/v1/pods", {}, U)
    assert authorizer.authorize(a).reason == "Everything is forbidden."
    assert not authorizer.authorize(a).allowed
    root = request_attributes("GET", "/api/v1/pods", {}, UserInfo("root", groups=("system:masters",)))
    assert authorizer.authorize(root).allowed
    with pytest.raises(ValueError, match="Bogus"):
        Authorizer(["Bogus"], RuleResolver(store))


def test_cli_refuses_an_unknown_authorization_mode() -> None:
    from typer.testing import CliRunner

    from isthmus.cli.main import app

    result = CliRunner().invoke(app, ["apiserver", "--authorization-mode", "RBAC,Webhook"])
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: --authorization-mode RBAC,Webhook: each mode must be one of RBAC, AlwaysAllow, "
                             "AlwaysDeny\n")


def _rbac_store() -> tuple[Store, Authorizer]:
    store = Store(None)
    store.open()
    resolver = RuleResolver(store)
    store.on_write(resolver.on_write)
    return store, Authorizer(["RBAC"], resolver)


def _role(name: str, rules: list[dict[str, object]]) -> dict[str, object]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": "ns", "uid": name}, "rules": rules}


def _binding(name: str, role: str) -> dict[str, object]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "User", "name": "u"}]}


def test_remembered_answers_hold_for_every_name_and_end_with_any_rbac_write() -> None:
    store, authorizer = _rbac_store()

    def allowed(verb: str, name: str) -> bool:
        method = {"get": "GET", "delete": "DELETE", "patch": "PATCH"}[verb]
        return authorizer.authorize(request_attributes(method, f"/api/v1/namespaces/ns/configmaps/{name}", {}, U)).allowed

    assert not allowed("get", "a")  # nothing bound yet
    store.create("rbac.authorization.k8s.io/roles", _role("read", [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]))
    assert not allowed("get", "a")  # a role alone grants nothing: the denial was not kept past the write
    store.create("rbac.authorization.k8s.io/rolebindings", _binding("read", "read"))
    assert allowed("get", "a") and allowed("get", "b")
    # A rule naming objects: its answer depends on the name, asked again each time.
    store.create("rbac.authorization.k8s.io/roles", _role("one", [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["delete", "patch"]}]))
    store.create("rbac.authorization.k8s.io/rolebindings", _binding("one", "one"))
    assert allowed("delete", "a") and not allowed("delete", "b") and allowed("delete", "a")
    assert not allowed("patch", "b") and allowed("patch", "a")
    store.delete("rbac.authorization.k8s.io/rolebindings", "ns", "read")
    assert not allowed("get", "a") and not allowed("get", "b")
