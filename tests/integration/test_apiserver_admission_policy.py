"""ValidatingAdmissionPolicy over the wire: the broker's "own objects only" policy, Warn bindings,
failurePolicy, selectors, and refusal of policies that do not compile.

Identities are client certificates from the server's client CA (CN = username). Every test user
is also in `system:masters`, so authorization (RBAC) lets them through and only admission judges.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.authentication.tls import issue_client_cert
from isthmus.apiserver.server import ApiServer

TOKEN = "admin-token"
NS = "broker"
SOURCE = "multicluster.kubernetes.io/source-cluster"
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAPB = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
EXPORTS = f"/apis/isthmus.io/v1alpha1/namespaces/{NS}/exportedservices"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"

EXPORT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "exportedservices.isthmus.io"},
    "spec": {"group": "isthmus.io", "scope": "Namespaced",
             "names": {"plural": "exportedservices", "singular": "exportedservice", "kind": "ExportedService"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}

# The broker's policy, as deploy/broker ships it.
OWN_OBJECTS_EXPRESSION = (
    "'system:serviceaccount:' + request.namespace + ':cluster-' + "
    "(request.operation == 'DELETE' ? oldObject : object).metadata.labels['multicluster.kubernetes.io/source-cluster']"
    " == request.userInfo.username && (request.operation != 'UPDATE' || "
    "oldObject.metadata.labels['multicluster.kubernetes.io/source-cluster'] == "
    "object.metadata.labels['multicluster.kubernetes.io/source-cluster'])")
OWN_OBJECTS_MESSAGE = ("a member cluster may only write its own objects (label "
                       "multicluster.kubernetes.io/source-cluster must name it)")
BROKER_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "isthmus-member-own-objects"},
    "spec": {
        "matchConstraints": {"resourceRules": [
            {"apiGroups": ["isthmus.io"], "apiVersions": ["*"], "resources": ["exportedservices"],
             "operations": ["CREATE", "UPDATE", "DELETE"]},
            {"apiGroups": ["discovery.k8s.io"], "apiVersions": ["v1"], "resources": ["endpointslices"],
             "operations": ["CREATE", "UPDATE", "DELETE"]}]},
        "matchConditions": [{"name": "member-clusters-only", "expression":
                             "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace "
                             "+ ':cluster-')"}],
        "validations": [{"expression": OWN_OBJECTS_EXPRESSION, "message": OWN_OBJECTS_MESSAGE}],
    },
}

# The same rule written with variables and has(): a missing label fails the validation (its
# message) instead of erroring (still a denial under failurePolicy Fail, but a cryptic one).
LABEL = "'multicluster.kubernetes.io/source-cluster'"
BROKER_POLICY_VARIABLES = {
    **BROKER_POLICY,
    "metadata": {"name": "isthmus-member-own-objects"},
    "spec": {
        **BROKER_POLICY["spec"],
        "variables": [
            {"name": "obj", "expression": "request.operation == 'DELETE' ? oldObject : object"},
            {"name": "cluster", "expression": f"has(variables.obj.metadata.labels) && {LABEL} in "
                                              f"variables.obj.metadata.labels ? variables.obj.metadata.labels[{LABEL}] : ''"},
        ],
        "validations": [{
            "expression": "'system:serviceaccount:' + request.namespace + ':cluster-' + variables.cluster == "
                          "request.userInfo.username && (request.operation != 'UPDATE' || "
                          f"(has(oldObject.metadata.labels) && {LABEL} in oldObject.metadata.labels && "
                          f"oldObject.metadata.labels[{LABEL}] == variables.cluster))",
            "message": OWN_OBJECTS_MESSAGE}],
    },
}


def binding(name: str, policy: str, actions: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": policy, "validationActions": actions or ["Deny"], **spec}}


def policy(name: str, expression: str, resources: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": resources or ["configmaps"],
              "operations": ["CREATE", "UPDATE", "DELETE"]}]
    body: dict[str, Any] = {"matchConstraints": {"resourceRules": rules}, "validations": [{"expression": expression}]}
    body.update(spec)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": body}


@dataclass
class Reply:
    status: int
    body: Any
    warnings: list[str]


class Client:
    def __init__(self, srv: ApiServer, ctx: ssl.SSLContext, token: str | None = None) -> None:
        self.srv, self.ctx, self.token = srv, ctx, token

    async def call(self, method: str, path: str, body: Any = None) -> Reply:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        async with aiohttp.ClientSession() as s, s.request(method, self.srv.url + path, json=body, headers=headers,
                                                           ssl=self.ctx) as r:
            return Reply(r.status, await r.json(content_type=None), r.headers.getall("Warning", []))

    async def create(self, path: str, body: Any) -> Reply:
        return await self.call("POST", path, body)

    async def apply(self, path: str, body: Any) -> Reply:
        """Server-side apply, as the agents write."""
        headers = {"Content-Type": "application/apply-patch+yaml"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        async with aiohttp.ClientSession() as s, s.patch(
                self.srv.url + path + "?fieldManager=agent", data=json.dumps(body), headers=headers,
                ssl=self.ctx) as r:
            return Reply(r.status, await r.json(content_type=None), r.headers.getall("Warning", []))


@dataclass
class Env:
    srv: ApiServer
    admin: Client
    tmp: Path

    def user(self, name: str) -> Client:
        assert self.srv.ca_pem is not None and self.srv.data_dir is not None
        ctx = ssl.create_default_context(cadata=self.srv.ca_pem.decode())
        cert, key = issue_client_cert(self.srv.data_dir / "tls", name, ("system:masters",))
        safe = name.replace(":", "_")
        (self.tmp / f"{safe}.crt").write_bytes(cert)
        (self.tmp / f"{safe}.key").write_bytes(key)
        ctx.load_cert_chain(self.tmp / f"{safe}.crt", self.tmp / f"{safe}.key")
        return Client(self.srv, ctx)

    def member(self, cluster: str) -> Client:
        return self.user(f"system:serviceaccount:{NS}:cluster-{cluster}")

    async def apply(self, path: str, body: Any) -> None:
        r = await self.admin.create(path, body)
        assert r.status == 201, r.body


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    srv = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True, preload_crds=[EXPORT_CRD])
    await srv.start()
    assert srv.ca_pem is not None
    e = Env(srv, Client(srv, ssl.create_default_context(cadata=srv.ca_pem.decode()), TOKEN), tmp_path)
    try:
        await e.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield e
    finally:
        await e.srv.stop()  # a test may have restarted it
        await srv.stop()


@pytest.fixture
async def broker(env: Env) -> Env:
    await env.apply(VAP, BROKER_POLICY)
    await env.apply(VAPB, binding("isthmus-member-own-objects", "isthmus-member-own-objects"))
    return env


def slice_(name: str, cluster: str | None) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": "web"}
    if cluster is not None:
        labels[SOURCE] = cluster
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4", "endpoints": [],
            "metadata": {"name": name, "labels": labels}}


def export(name: str, cluster: str | None) -> dict[str, Any]:
    return {"apiVersion": "isthmus.io/v1alpha1", "kind": "ExportedService",
            "metadata": {"name": name, "labels": {SOURCE: cluster} if cluster else {}}, "spec": {"port": 80}}


def denial(resource: str, name: str, message: str, policy: str = "isthmus-member-own-objects",
           bind: str = "isthmus-member-own-objects") -> str:
    return f'{resource} "{name}" is forbidden: ValidatingAdmissionPolicy \'{policy}\' with binding \'{bind}\' ' \
           f"denied request: {message}"


def assert_denied(r: Reply, resource: str, name: str, message: str, code: int = 422, **kw: str) -> None:
    text = denial(resource, name, message, **kw)
    assert (r.status, r.body["reason"], r.body["message"]) == (code, {422: "Invalid", 403: "Forbidden"}[code], text)
    assert r.body["details"]["name"] == name and r.body["details"]["causes"] == [
        {"message": text.split(" is forbidden: ", 1)[1]}]


# ------------------------------------------------------------------ the broker policy


async def test_member_creates_only_objects_labelled_as_its_own(broker: Env) -> None:
    a = broker.member("a")
    assert (await a.create(SLICES, slice_("a-web", "a"))).status == 201
    r = await a.create(SLICES, slice_("b-web", "b"))
    assert_denied(r, "endpointslices.discovery.k8s.io", "b-web", OWN_OBJECTS_MESSAGE)
    # No label at all: the expression cannot evaluate, and failurePolicy Fail denies.
    r = await a.create(SLICES, slice_("x-web", None))
    assert r.status == 422
    assert r.body["message"] == denial("endpointslices.discovery.k8s.io", "x-web", f"expression "
                                       f"'{OWN_OBJECTS_EXPRESSION}' resulted in error: no such key: {SOURCE}")
    # Users who are not member clusters are not judged (matchConditions): the admin writes anything.
    assert (await broker.admin.create(SLICES, slice_("b-web", "b"))).status == 201
    # Nor is a ServiceAccount of another namespace's "cluster-" prefix, nor one not named cluster-*.
    assert (await broker.user("system:serviceaccount:other:cluster-a").create(SLICES, slice_("c", "b"))).status == 201
    assert (await broker.user(f"system:serviceaccount:{NS}:agent").create(SLICES, slice_("d", "b"))).status == 201


async def test_member_updates_only_its_own_objects_and_cannot_relabel_them(broker: Env) -> None:
    a = broker.member("a")
    assert (await a.create(SLICES, slice_("a-web", "a"))).status == 201
    assert (await broker.admin.create(SLICES, slice_("b-web", "b"))).status == 201
    mine = (await a.call("GET", f"{SLICES}/a-web")).body
    mine["endpoints"] = [{"addresses": ["10.0.0.1"]}]
    r = await a.call("PUT", f"{SLICES}/a-web", mine)
    assert r.status == 200 and r.body["endpoints"] == [{"addresses": ["10.0.0.1"]}]
    theirs = (await a.call("GET", f"{SLICES}/b-web")).body
    theirs["endpoints"] = []
    assert_denied(await a.call("PUT", f"{SLICES}/b-web", theirs), "endpointslices.discovery.k8s.io", "b-web",
                  OWN_OBJECTS_MESSAGE)
    # Taking over another cluster's object by relabelling it is denied too (oldObject's label)...
    theirs["metadata"]["labels"][SOURCE] = "a"
    assert_denied(await a.call("PUT", f"{SLICES}/b-web", theirs), "endpointslices.discovery.k8s.io", "b-web",
                  OWN_OBJECTS_MESSAGE)
    # ...as is giving one's own away.
    mine = (await a.call("GET", f"{SLICES}/a-web")).body
    mine["metadata"]["labels"][SOURCE] = "b"
    assert_denied(await a.call("PUT", f"{SLICES}/a-web", mine), "endpointslices.discovery.k8s.io", "a-web",
                  OWN_OBJECTS_MESSAGE)
    got = (await broker.admin.call("GET", f"{SLICES}/b-web")).body
    assert got["metadata"]["labels"][SOURCE] == "b" and not got.get("endpoints")


async def test_member_deletes_only_its_own_objects(broker: Env) -> None:
    a = broker.member("a")
    assert (await a.create(SLICES, slice_("a-web", "a"))).status == 201
    assert (await broker.admin.create(SLICES, slice_("b-web", "b"))).status == 201
    assert_denied(await a.call("DELETE", f"{SLICES}/b-web"), "endpointslices.discovery.k8s.io", "b-web",
                  OWN_OBJECTS_MESSAGE)
    assert (await a.call("DELETE", f"{SLICES}/a-web")).status == 200
    assert (await broker.admin.call("GET", f"{SLICES}/b-web")).status == 200
    assert (await broker.admin.call("GET", f"{SLICES}/a-web")).status == 404
    # A collection delete judges each object: only the member's own go.
    assert (await a.create(SLICES, slice_("a-2", "a"))).status == 201
    r = await a.call("DELETE", SLICES)
    assert r.status == 200 and [i["metadata"]["name"] for i in r.body["items"]] == ["a-2"]
    assert (await broker.admin.call("GET", f"{SLICES}/b-web")).status == 200


async def test_custom_resources_are_judged_too(broker: Env) -> None:
    a, b = broker.member("a"), broker.member("b")
    assert (await a.create(EXPORTS, export("web-a", "a"))).status == 201
    assert_denied(await b.create(EXPORTS, export("web-x", "a")), "exportedservices.isthmus.io", "web-x",
                  OWN_OBJECTS_MESSAGE)
    assert_denied(await b.call("DELETE", f"{EXPORTS}/web-a"), "exportedservices.isthmus.io", "web-a",
                  OWN_OBJECTS_MESSAGE)
    assert (await a.call("DELETE", f"{EXPORTS}/web-a")).status == 200
    # Server-side apply (how the agents write): creating and changing through apply is judged alike.
    assert (await a.apply(f"{EXPORTS}/web-a", export("web-a", "a"))).status == 201
    assert (await a.apply(f"{EXPORTS}/web-a", {**export("web-a", "a"), "spec": {"port": 81}})).status == 200
    assert_denied(await b.apply(f"{EXPORTS}/web-a", export("web-a", "b")), "exportedservices.isthmus.io", "web-a",
                  OWN_OBJECTS_MESSAGE)
    assert_denied(await b.apply(f"{EXPORTS}/web-b", export("web-b", "a")), "exportedservices.isthmus.io", "web-b",
                  OWN_OBJECTS_MESSAGE)


async def test_a_policy_without_a_binding_does_nothing(env: Env) -> None:
    await env.apply(VAP, BROKER_POLICY)
    assert (await env.member("a").create(SLICES, slice_("b-web", "b"))).status == 201


# ------------------------------------------------------------------ actions, failure policy, reasons


async def test_warn_binding_warns_instead_of_denying(env: Env) -> None:
    await env.apply(VAP, policy("no-foo", "", validations=[{"expression": "!('foo' in object.data)",
                                                          "message": "no foo please"}]))
    await env.apply(VAPB, binding("no-foo-warn", "no-foo", ["Warn", "Audit"]))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"foo": "1"}}
    r = await env.admin.create(CONFIGMAPS.format(ns="default"), cm)
    assert r.status == 201
    assert r.warnings == ["299 - \"Validation failed for ValidatingAdmissionPolicy 'no-foo' with binding "
                          "'no-foo-warn': no foo please\""]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"bar": "1"}}
    r = await env.admin.create(CONFIGMAPS.format(ns="default"), cm)
    assert (r.status, r.warnings) == (201, [])
    # Denied by another binding of the same policy: the error response carries the warning too.
    await env.apply(VAPB, binding("no-foo-deny", "no-foo"))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "e"}, "data": {"foo": "1"}}
    r = await env.admin.create(CONFIGMAPS.format(ns="default"), cm)
    assert r.status == 422 and r.body["message"].endswith("with binding 'no-foo-deny' denied request: no foo please")
    assert r.warnings == ["299 - \"Validation failed for ValidatingAdmissionPolicy 'no-foo' with binding "
                          "'no-foo-warn': no foo please\""]


async def test_failure_policy_decides_what_an_evaluation_error_does(env: Env) -> None:
    expr = "object.data.size == 'big'"  # data.size does not exist: an evaluation error
    await env.apply(VAP, policy("strict", expr, failurePolicy="Fail"))
    await env.apply(VAP, policy("lenient", expr.replace("size", "length"), failurePolicy="Ignore"))
    await env.apply(VAPB, binding("lenient", "lenient"))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert (await env.admin.create(CONFIGMAPS.format(ns="default"), cm)).status == 201
    await env.apply(VAPB, binding("strict", "strict"))
    cm["metadata"]["name"] = "d"
    r = await env.admin.create(CONFIGMAPS.format(ns="default"), cm)
    assert_denied(r, "configmaps", "d", f"expression '{expr}' resulted in error: no such key: size",
                  policy="strict", bind="strict")


async def test_reason_message_expression_and_default_message(env: Env) -> None:
    await env.apply(VAP, policy("named", "", validations=[
        {"expression": "object.metadata.name.startsWith('ok-')", "reason": "Forbidden",
         "messageExpression": "'name ' + object.metadata.name + ' must start with ok-'"}]))
    await env.apply(VAPB, binding("named", "named"))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}}
    assert_denied(await env.admin.create(CONFIGMAPS.format(ns="default"), cm), "configmaps", "bad",
                  "name bad must start with ok-", code=403, policy="named", bind="named")
    await env.apply(VAP, policy("sized", "size(object.metadata.name) < 10", resources=["secrets"]))
    await env.apply(VAPB, binding("sized", "sized"))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a-very-long-name"}}
    assert_denied(await env.admin.create("/api/v1/namespaces/default/secrets", secret), "secrets",
                  "a-very-long-name", "failed expression: size(object.metadata.name) < 10",
                  policy="sized", bind="sized")


async def test_variables_and_params(env: Env) -> None:
    params_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "limits", "namespace": "default"},
                 "data": {"max": "3"}}
    await env.apply(CONFIGMAPS.format(ns="default"), params_cm)
    body = policy("few-keys", "size(variables.keys) <= int(params.data.max)", resources=["secrets"],
                  paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
                  variables=[{"name": "keys", "expression": "has(object.data) ? object.data : {}"}])
    await env.apply(VAP, body)
    await env.apply(VAPB, binding("few-keys", "few-keys", paramRef={"name": "limits", "namespace": "default"}))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eA=="}}
    assert (await env.admin.create("/api/v1/namespaces/default/secrets", secret)).status == 201
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t"},
              "data": {k: "eA==" for k in "abcd"}}
    r = await env.admin.create("/api/v1/namespaces/default/secrets", secret)
    assert r.status == 422 and r.body["message"].endswith(
        "denied request: failed expression: size(variables.keys) <= int(params.data.max)")
    # A binding whose param is missing denies (parameterNotFoundAction defaults to Deny).
    await env.apply(VAPB, binding("few-keys-2", "few-keys", paramRef={"name": "nope", "namespace": "default"}))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "u"}}
    r = await env.admin.create("/api/v1/namespaces/default/secrets", secret)
    assert r.status == 422 and r.body["message"] == denial(
        "secrets", "u", "failed to configure binding: no params found for policy binding with `Deny` "
        "parameterNotFoundAction", policy="few-keys", bind="few-keys-2")


async def test_namespace_object_is_null_in_match_conditions_and_the_namespace_in_validations(env: Env) -> None:
    """kube composes variables into the match conditions with namespaceObject null, and again into
    the validations with the request's namespace; a policy that never names namespaceObject skips
    the second composition, one that does gets each value where kube gives it."""
    for name, tier in (("team", "gold"), ("other", "silver")):
        await env.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name, "labels": {"tier": tier}}})
    # The variable reads namespaceObject: null (so "none") in the match condition, the namespace's
    # label in the validation.
    await env.apply(VAP, policy(
        "tier", "variables.tier == 'gold'",
        variables=[{"name": "tier", "expression": "namespaceObject == null ? 'none' : "
                                                  "namespaceObject.metadata.labels['tier']"}],
        matchConditions=[{"name": "seen-as-null", "expression": "variables.tier == 'none'"}]))
    await env.apply(VAPB, binding("tier", "tier"))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await env.admin.create(CONFIGMAPS.format(ns="team"), cm)).status == 201
    r = await env.admin.create(CONFIGMAPS.format(ns="other"), cm)
    assert r.status == 422 and r.body["message"].endswith("failed expression: variables.tier == 'gold'")
    # A policy without namespaceObject: its variable, read by both, is one value throughout.
    await env.apply(VAP, policy(
        "named", "variables.name == 'd'", resources=["secrets"],
        variables=[{"name": "name", "expression": "object.metadata.name"}],
        matchConditions=[{"name": "only-c-or-d", "expression": "variables.name in ['c', 'd']"}]))
    await env.apply(VAPB, binding("named", "named"))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}
    r = await env.admin.create("/api/v1/namespaces/team/secrets", secret)
    assert r.status == 422 and r.body["message"].endswith("failed expression: variables.name == 'd'")
    for name in ("d", "e"):  # d passes the validation; e is not matched
        r = await env.admin.create("/api/v1/namespaces/team/secrets", {**secret, "metadata": {"name": name}})
        assert r.status == 201, r.body


# ------------------------------------------------------------------ matching


async def test_matching_by_resource_and_namespace_selector(env: Env) -> None:
    for name, labels in (("prod", {"env": "prod"}), ("dev", {"env": "dev"})):
        await env.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name, "labels": labels}})
    await env.apply(VAP, policy("no-configmaps-in-prod", "false", matchConstraints={
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                           "operations": ["CREATE"]}],
        "namespaceSelector": {"matchLabels": {"env": "prod"}}}))
    await env.apply(VAPB, binding("no-configmaps-in-prod", "no-configmaps-in-prod"))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    r = await env.admin.create(CONFIGMAPS.format(ns="prod"), cm)
    assert r.status == 422 and "failed expression: false" in r.body["message"]
    assert (await env.admin.create(CONFIGMAPS.format(ns="dev"), cm)).status == 201
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}
    assert (await env.admin.create("/api/v1/namespaces/prod/secrets", secret)).status == 201
    # A binding's matchResources narrows the policy further: here to objects labelled x=y.
    await env.apply(VAP, policy("narrow", "false", resources=["secrets"]))
    await env.apply(VAPB, binding("narrow", "narrow", matchResources={"objectSelector": {"matchLabels": {"x": "y"}}}))
    assert (await env.admin.create("/api/v1/namespaces/dev/secrets", secret)).status == 201
    labelled = {**secret, "metadata": {"name": "d", "labels": {"x": "y"}}}
    assert (await env.admin.create("/api/v1/namespaces/dev/secrets", labelled)).status == 422


async def test_policies_never_lock_out_their_own_resources(env: Env) -> None:
    deny_all = policy("deny-everything", "false", matchConstraints={"resourceRules": [
        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]})
    await env.apply(VAP, deny_all)
    await env.apply(VAPB, binding("deny-everything", "deny-everything"))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await env.admin.create(CONFIGMAPS.format(ns="default"), cm)).status == 422
    assert (await env.admin.call("DELETE", f"{VAPB}/deny-everything")).status == 200
    assert (await env.admin.create(CONFIGMAPS.format(ns="default"), cm)).status == 201


# ------------------------------------------------------------------ the policy objects


async def test_policy_that_does_not_compile_is_refused(env: Env) -> None:
    r = await env.admin.create(VAP, policy("bad", "object.metadata.name =="))
    assert (r.status, r.body["reason"]) == (422, "Invalid")
    cause = r.body["details"]["causes"][0]
    assert cause["field"] == "spec.validations[0].expression"
    assert cause["message"].startswith('Invalid value: "object.metadata.name ==": compilation failed: ERROR: <input>:1:')
    assert r.body["message"].startswith('ValidatingAdmissionPolicy.admissionregistration.k8s.io "bad" is invalid: '
                                        "spec.validations[0].expression: Invalid value: ")
    r = await env.admin.create(VAP, policy("typo", "obejct.metadata.name == 'x'"))
    assert r.status == 422 and "undeclared reference to 'obejct'" in r.body["details"]["causes"][0]["message"]
    r = await env.admin.create(VAP, policy("params", "params.x == 1"))  # no paramKind: no params
    assert r.status == 422 and "undeclared reference to 'params'" in r.body["message"]
    assert (await env.admin.call("GET", f"{VAP}/bad")).status == 404


async def test_policy_and_binding_defaults_and_required_fields(env: Env) -> None:
    r = await env.admin.create(VAP, policy("ok", "true"))
    assert r.status == 201
    spec = r.body["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["matchPolicy"] == "Equivalent"
    assert spec["matchConstraints"]["namespaceSelector"] == {} and spec["matchConstraints"]["objectSelector"] == {}
    r = await env.admin.create(VAP, {"apiVersion": "admissionregistration.k8s.io/v1",
                                     "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "empty"}, "spec": {}})
    assert r.status == 422
    fields = {c["field"] for c in r.body["details"]["causes"]}
    assert {"spec.matchConstraints", "spec.validations"} <= fields
    r = await env.admin.create(VAPB, binding("b", "ok", ["Deny", "Warn"]))
    assert r.status == 422 and "must not contain both Deny and Warn" in r.body["message"]
    r = await env.admin.create(VAPB, binding("b", "", ["Nope"]))
    assert r.status == 422
    assert {c["field"] for c in r.body["details"]["causes"]} == {"spec.policyName", "spec.validationActions[0]"}


async def test_kubectl_columns(env: Env) -> None:
    await env.apply(VAP, policy("p", "true", paramKind={"apiVersion": "v1", "kind": "ConfigMap"}))
    await env.apply(VAPB, binding("b", "p", paramRef={"name": "limits", "namespace": "default"}))
    table = "application/json;as=Table;v=v1;g=meta.k8s.io"
    for path, header, row in ((VAP, ["Name", "Validations", "ParamKind", "Age"], ["p", 1, "v1/ConfigMap"]),
                              (VAPB, ["Name", "PolicyName", "ParamRef", "Age"], ["b", "p", "default/limits"])):
        async with aiohttp.ClientSession() as s, s.get(env.srv.url + path, ssl=env.admin.ctx, headers={
                "Authorization": f"Bearer {TOKEN}", "Accept": table}) as r:
            body = await r.json()
        assert [c["name"] for c in body["columnDefinitions"]] == header
        assert body["rows"][0]["cells"][:3] == row


async def test_equivalent_versions_match_unless_exact(env: Env) -> None:
    # A policy on events.k8s.io/v1 Events judges core/v1 Events too (one resource, two APIs),
    # seeing the object as events.k8s.io/v1 serves it (`note`, not `message`).
    rules = [{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"], "resources": ["events"],
              "operations": ["CREATE"]}]
    await env.apply(VAP, policy("quiet", "object.note != 'boom'", matchConstraints={"resourceRules": rules}))
    await env.apply(VAPB, binding("quiet", "quiet"))
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "message": "boom", "reason": "R",
             "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "type": "Normal"}
    r = await env.admin.create("/api/v1/namespaces/default/events", event)
    assert r.status == 422 and r.body["message"].endswith("failed expression: object.note != 'boom'")
    await env.apply(VAP, policy("quiet-exact", "false", matchConstraints={"resourceRules": rules,
                                                                         "matchPolicy": "Exact"}))
    await env.apply(VAPB, binding("quiet-exact", "quiet-exact"))
    event["metadata"]["name"], event["message"] = "e2", "fine"
    assert (await env.admin.create("/api/v1/namespaces/default/events", event)).status == 201


async def test_policies_hold_after_a_restart(env: Env, tmp_path: Path) -> None:
    await env.apply(VAP, policy("none", "false"))
    await env.apply(VAPB, binding("none", "none"))
    await env.srv.stop()
    srv = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True, preload_crds=[EXPORT_CRD])
    await srv.start()
    env.srv = srv
    assert srv.ca_pem is not None
    env.admin = Client(srv, ssl.create_default_context(cadata=srv.ca_pem.decode()), TOKEN)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await env.admin.create(CONFIGMAPS.format(ns="default"), cm)).status == 422


async def test_broker_policy_with_variables_words_a_missing_label_as_its_message(env: Env) -> None:
    await env.apply(VAP, BROKER_POLICY_VARIABLES)
    await env.apply(VAPB, binding("isthmus-member-own-objects", "isthmus-member-own-objects"))
    a = env.member("a")
    assert (await a.create(SLICES, slice_("a-web", "a"))).status == 201
    assert_denied(await a.create(SLICES, slice_("x-web", None)), "endpointslices.discovery.k8s.io", "x-web",
                  OWN_OBJECTS_MESSAGE)
    assert_denied(await a.create(SLICES, slice_("b-web", "b")), "endpointslices.discovery.k8s.io", "b-web",
                  OWN_OBJECTS_MESSAGE)
    mine = (await a.call("GET", f"{SLICES}/a-web")).body
    del mine["metadata"]["labels"][SOURCE]
    assert_denied(await a.call("PUT", f"{SLICES}/a-web", mine), "endpointslices.discovery.k8s.io", "a-web",
                  OWN_OBJECTS_MESSAGE)
    assert (await env.admin.create(SLICES, slice_("b-web", "b"))).status == 201
    assert_denied(await a.call("DELETE", f"{SLICES}/b-web"), "endpointslices.discovery.k8s.io", "b-web",
                  OWN_OBJECTS_MESSAGE)
    assert (await a.call("DELETE", f"{SLICES}/a-web")).status == 200
