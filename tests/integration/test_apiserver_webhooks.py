"""Admission webhooks end to end: the embedded apiserver calls a real HTTPS webhook server (aiohttp
on 127.0.0.1, certificate from a test CA) registered in Mutating/ValidatingWebhookConfigurations,
and clients see kube-apiserver's answers: denials, patches, warnings, failurePolicy.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from isthmus.apiserver.authentication.tls import ensure_certs
from isthmus.apiserver.server import ApiServer
from tests.harness.ports import free_port

TOKEN = "admin-token"
NS = "default"
GROUP_PATH = "/apis/admissionregistration.k8s.io/v1"
VWC = f"{GROUP_PATH}/validatingwebhookconfigurations"
MWC = f"{GROUP_PATH}/mutatingwebhookconfigurations"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
SVC_NAME = "hooks"


@dataclass
class Reply:
    status: int
    body: Any
    warnings: list[str]


@dataclass
class Hooks:
    """The webhook server: every path is one behaviour; `seen` records the reviews received."""

    port: int = 0
    ca_pem: bytes = b""
    wrong_ca_pem: bytes = b""
    seen: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)  # the Host header of each call
    server_names: list[str | None] = field(default_factory=list)  # the TLS SNI of each handshake

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def reviews(self, path: str) -> list[dict[str, Any]]:
        return self.seen.get(path, [])


def answer(review: dict[str, Any], allowed: bool = True, **extra: Any) -> web.Response:
    return web.json_response({"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                              "response": {"uid": review["request"]["uid"], "allowed": allowed, **extra}})


def json_patch(ops: list[dict[str, Any]]) -> dict[str, str]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


def make_app(hooks: Hooks) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        path = request.path
        hooks.seen.setdefault(path, []).append(review)
        hooks.hosts.append(request.host)
        obj = review["request"].get("object") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if path == "/deny":
            return answer(review, False, status={"message": "configmaps are closed today"})
        if path == "/deny-code":
            return answer(review, False, status={"code": 422, "reason": "Invalid", "message": "bad data"})
        if path == "/mutate":
            ops = [{"op": "add", "path": "/metadata/labels", "value": {**labels, "mutated": "yes"}}]
            return answer(review, **json_patch(ops))
        if path == "/mutate-invalid":
            ops = [{"op": "add", "path": "/metadata/labels", "value": {**labels, "mutated": "not a label value!"}}]
            return answer(review, **json_patch(ops))
        if path == "/mutate-data":
            data = obj.get("data") or {}
            return answer(review, **json_patch([{"op": "add", "path": "/data", "value": {**data, "added": "1"}}]))
        if path == "/require-mutated":
            if labels.get("mutated") != "yes":
                return answer(review, False, status={"message": "not mutated"})
            return answer(review)
        if path == "/warn":
            return answer(review, warnings=["this configmap is watched", 'quoted "word"'])
        if path == "/slow":
            await asyncio.sleep(3)
            return answer(review)
        return answer(review)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    return app


def webhook(name: str, path: str, hooks: Hooks, *, url: bool = True, ca: bytes | None = None,
            **spec: Any) -> dict[str, Any]:
    client: dict[str, Any] = {"caBundle": base64.b64encode(ca if ca is not None else hooks.ca_pem).decode()}
    if url:
        client["url"] = hooks.url(path)
    else:
        client["service"] = {"namespace": NS, "name": SVC_NAME, "path": path, "port": hooks.port}
    body: dict[str, Any] = {
        "name": name, "clientConfig": client, "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                   "operations": ["CREATE", "UPDATE"]}],
    }
    body.update(spec)
    return body


def configuration(kind: str, name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": list(webhooks)}


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": data}


class Env:
    def __init__(self, srv: ApiServer, hooks: Hooks, tmp: Path) -> None:
        assert srv.ca_pem is not None
        self.srv, self.hooks, self.tmp = srv, hooks, tmp
        self.ctx = ssl.create_default_context(cadata=srv.ca_pem.decode())

    async def call(self, method: str, path: str, body: Any = None) -> Reply:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession() as s, s.request(method, self.srv.url + path, json=body, headers=headers,
                                                           ssl=self.ctx) as r:
            return Reply(r.status, await r.json(content_type=None), r.headers.getall("Warning", []))

    async def create(self, path: str, body: Any) -> Reply:
        return await self.call("POST", path, body)

    async def must(self, path: str, body: Any) -> dict[str, Any]:
        r = await self.create(path, body)
        assert r.status == 201, r.body
        result: dict[str, Any] = r.body
        return result

    async def validating(self, *webhooks: dict[str, Any], name: str = "checks") -> None:
        await self.must(VWC, configuration("ValidatingWebhookConfiguration", name, *webhooks))

    async def mutating(self, *webhooks: dict[str, Any], name: str = "edits") -> None:
        await self.must(MWC, configuration("MutatingWebhookConfiguration", name, *webhooks))

    async def create_cm(self, name: str, labels: dict[str, str] | None = None, ns: str = NS, **data: str) -> Reply:
        return await self.create(CONFIGMAPS.format(ns=ns), configmap(name, labels, **data))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    ca_crt, crt, key = ensure_certs(tmp_path / "hook-tls", ["127.0.0.1", "localhost", f"{SVC_NAME}.{NS}.svc"])
    _, _, _ = ensure_certs(tmp_path / "other-tls", ["127.0.0.1"])
    hooks = Hooks(ca_pem=ca_crt.read_bytes(), wrong_ca_pem=(tmp_path / "other-tls" / "ca.crt").read_bytes())
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    sctx.load_cert_chain(crt, key)
    sctx.sni_callback = lambda _obj, name, _ctx: hooks.server_names.append(name)  # type: ignore[func-returns-value]
    runner = web.AppRunner(make_app(hooks))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=sctx)
    await site.start()
    server = site._server
    assert server is not None
    hooks.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    srv = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True)
    await srv.start()
    try:
        yield Env(srv, hooks, tmp_path)
    finally:
        await srv.stop()
        await runner.cleanup()


# ---------------------------------------------------------------------------------- denials


async def test_a_validating_webhook_denies_with_its_message_and_kubes_wording(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks))
    r = await env.create_cm("c1")
    assert r.status == 403
    assert r.body["message"] == 'admission webhook "deny.example.com" denied the request: configmaps are closed today'
    assert r.body["kind"] == "Status" and r.body["status"] == "Failure" and r.body["code"] == 403
    review = env.hooks.reviews("/deny")[0]
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    req = review["request"]
    assert req["operation"] == "CREATE" and req["name"] == "c1" and req["namespace"] == NS
    assert req["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert req["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert req["requestResource"] == req["resource"] and req["subResource"] == ""
    assert req["object"]["metadata"]["name"] == "c1" and req["oldObject"] is None
    assert req["userInfo"]["username"] and req["dryRun"] is False
    assert req["options"] == {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    assert (await env.call("GET", CONFIGMAPS.format(ns=NS) + "/c1")).status == 404


async def test_a_denial_keeps_the_webhooks_status_code_and_reason(env: Env) -> None:
    await env.validating(webhook("code.example.com", "/deny-code", env.hooks))
    r = await env.create_cm("c1")
    assert (r.status, r.body["reason"], r.body["code"]) == (422, "Invalid", 422)
    assert r.body["message"] == 'admission webhook "code.example.com" denied the request: bad data'


async def test_the_review_version_is_the_first_of_the_webhooks_list_the_server_speaks(env: Env) -> None:
    await env.validating(webhook("old.example.com", "/allow", env.hooks, admissionReviewVersions=["v9", "v1beta1", "v1"]))
    assert (await env.create_cm("c1")).status == 201
    assert env.hooks.reviews("/allow")[0]["apiVersion"] == "admission.k8s.io/v1beta1"


async def test_update_reviews_carry_the_old_object(env: Env) -> None:
    await env.must(CONFIGMAPS.format(ns=NS), configmap("c1", a="1"))
    await env.validating(webhook("allow.example.com", "/allow", env.hooks))
    live = (await env.call("GET", CONFIGMAPS.format(ns=NS) + "/c1")).body
    live["data"] = {"a": "2"}
    r = await env.call("PUT", CONFIGMAPS.format(ns=NS) + "/c1", live)
    assert r.status == 200, r.body
    req = env.hooks.reviews("/allow")[0]["request"]
    assert req["operation"] == "UPDATE" and req["oldObject"]["data"] == {"a": "1"} and req["object"]["data"] == {
        "a": "2"}
    assert req["options"]["kind"] == "UpdateOptions"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_shows_the_webhook_denial(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks))
    kubeconfig = env.tmp / "kubeconfig"
    env.srv.write_kubeconfig(kubeconfig)
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(kubeconfig), "create", "configmap", "c1", "-n", NS, "--from-literal=a=b",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "HOME": str(env.tmp)})
    out, _ = await proc.communicate()
    assert proc.returncode == 1
    assert out.decode().strip() == ('error: failed to create configmap: admission webhook "deny.example.com" denied '
                                    'the request: configmaps are closed today')


# ---------------------------------------------------------------------------------- mutation


async def test_a_mutating_patch_is_stored_and_seen_by_validating_webhooks(env: Env) -> None:
    await env.validating(webhook("require.example.com", "/require-mutated", env.hooks))
    r = await env.create_cm("before")
    assert r.status == 403 and r.body["message"].endswith("denied the request: not mutated")
    await env.mutating(webhook("mutate.example.com", "/mutate", env.hooks))
    created = await env.must(CONFIGMAPS.format(ns=NS), configmap("c1", {"app": "x"}))
    assert created["metadata"]["labels"] == {"app": "x", "mutated": "yes"}
    stored = (await env.call("GET", CONFIGMAPS.format(ns=NS) + "/c1")).body
    assert stored["metadata"]["labels"] == {"app": "x", "mutated": "yes"}
    assert env.hooks.reviews("/require-mutated")[-1]["request"]["object"]["metadata"]["labels"]["mutated"] == "yes"


async def test_what_a_mutating_webhook_makes_is_validated_again(env: Env) -> None:
    """kube validates the object after mutating admission: a webhook cannot store what a client
    could not (on creates and updates alike)."""
    assert (await env.create_cm("plain", {"app": "x"})).status == 201
    await env.mutating(webhook("mutate.example.com", "/mutate-invalid", env.hooks))
    r = await env.create_cm("c1", {"app": "x"})
    assert r.status == 422 and r.body["reason"] == "Invalid", r.body
    assert "metadata.labels" in r.body["message"]
    r = await env.call("PUT", CONFIGMAPS.format(ns=NS) + "/plain",
                       {**configmap("plain", {"app": "y"}), "metadata": {
                           **(await env.call("GET", CONFIGMAPS.format(ns=NS) + "/plain")).body["metadata"],
                           "labels": {"app": "y"}}})
    assert r.status == 422 and "metadata.labels" in r.body["message"], r.body
    assert (await env.call("GET", CONFIGMAPS.format(ns=NS) + "/plain")).body["metadata"]["labels"] == {"app": "x"}


async def test_mutating_webhooks_run_in_configuration_name_order_and_reinvoke_if_needed(env: Env) -> None:
    # "a-labels" runs first and is reinvoked (IfNeeded) because "b-data" changed the object after it.
    await env.mutating(webhook("labels.example.com", "/mutate", env.hooks, reinvocationPolicy="IfNeeded"),
                       name="a-labels")
    await env.mutating(webhook("data.example.com", "/mutate-data", env.hooks), name="b-data")
    created = await env.must(CONFIGMAPS.format(ns=NS), configmap("c1", x="y"))
    assert created["data"] == {"x": "y", "added": "1"}
    calls = env.hooks.reviews("/mutate")
    assert len(calls) == 2
    assert calls[1]["request"]["object"]["data"] == {"x": "y", "added": "1"}
    assert len(env.hooks.reviews("/mutate-data")) == 1
    assert env.hooks.reviews("/mutate-data")[0]["request"]["object"]["metadata"]["labels"] == {"mutated": "yes"}


async def test_without_reinvocation_a_webhook_is_called_once(env: Env) -> None:
    await env.mutating(webhook("labels.example.com", "/mutate", env.hooks), name="a-labels")
    await env.mutating(webhook("data.example.com", "/mutate-data", env.hooks), name="b-data")
    await env.must(CONFIGMAPS.format(ns=NS), configmap("c1"))
    assert len(env.hooks.reviews("/mutate")) == 1


async def test_warnings_reach_the_client(env: Env) -> None:
    await env.validating(webhook("warn.example.com", "/warn", env.hooks))
    r = await env.create_cm("c1")
    assert r.status == 201
    assert r.warnings == ['299 - "this configmap is watched"', '299 - "quoted \\"word\\""']


async def test_warnings_accompany_a_denial(env: Env) -> None:
    await env.mutating(webhook("warn.example.com", "/warn", env.hooks))
    await env.validating(webhook("deny.example.com", "/deny", env.hooks))
    r = await env.create_cm("c1")
    assert r.status == 403
    assert '299 - "this configmap is watched"' in r.warnings


# ---------------------------------------------------------------------------------- failures


async def test_failure_policy_fail_rejects_when_the_server_is_down(env: Env) -> None:
    port = free_port()
    hook = webhook("down.example.com", "/x", env.hooks)
    hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}/x"
    await env.validating(hook)
    r = await env.create_cm("c1")
    assert r.status == 500 and r.body["reason"] == "InternalError"
    assert r.body["message"] == (
        f'Internal error occurred: failed calling webhook "down.example.com": failed to call webhook: '
        f'Post "https://127.0.0.1:{port}/x?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection refused')


async def test_failure_policy_ignore_admits_when_the_server_is_down(env: Env) -> None:
    hook = webhook("down.example.com", "/x", env.hooks, failurePolicy="Ignore")
    hook["clientConfig"]["url"] = f"https://127.0.0.1:{free_port()}/x"
    await env.validating(hook)
    assert (await env.create_cm("c1")).status == 201


async def test_a_slow_webhook_times_out_by_its_timeout_seconds(env: Env) -> None:
    await env.validating(webhook("slow.example.com", "/slow", env.hooks, timeoutSeconds=1))
    r = await env.create_cm("c1")
    assert r.status == 500
    assert r.body["message"] == (
        f'Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: '
        f'Post "{env.hooks.url("/slow")}?timeout=1s": context deadline exceeded')
    await env.call("DELETE", VWC + "/checks")
    await env.validating(webhook("slow.example.com", "/slow", env.hooks, timeoutSeconds=1, failurePolicy="Ignore"))
    assert (await env.create_cm("c2")).status == 201


async def test_a_certificate_from_another_ca_fails_the_call(env: Env) -> None:
    await env.validating(webhook("tls.example.com", "/allow", env.hooks, ca=env.hooks.wrong_ca_pem))
    r = await env.create_cm("c1")
    assert r.status == 500
    assert r.body["message"] == (
        f'Internal error occurred: failed calling webhook "tls.example.com": failed to call webhook: '
        f'Post "{env.hooks.url("/allow")}?timeout=10s": tls: failed to verify certificate: x509: certificate '
        f"signed by unknown authority")
    assert env.hooks.reviews("/allow") == []


# ---------------------------------------------------------------------------------- matching


async def test_rules_select_operations_and_resources(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks, rules=[
        {"apiGroups": [""], "apiVersions": ["*"], "resources": ["secrets"], "operations": ["*"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["DELETE"]}]))
    assert (await env.create_cm("c1")).status == 201
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}}
    assert (await env.create(f"/api/v1/namespaces/{NS}/secrets", secret)).status == 403
    r = await env.call("DELETE", CONFIGMAPS.format(ns=NS) + "/c1")
    assert r.status == 403
    assert env.hooks.reviews("/deny")[-1]["request"]["operation"] == "DELETE"
    assert env.hooks.reviews("/deny")[-1]["request"]["oldObject"]["metadata"]["name"] == "c1"


async def test_namespace_selector(env: Env) -> None:
    await env.must("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "guarded", "labels": {"guard": "on"}}})
    await env.validating(webhook("deny.example.com", "/deny", env.hooks,
                                 namespaceSelector={"matchLabels": {"guard": "on"}}))
    assert (await env.create_cm("c1")).status == 201
    assert (await env.create_cm("c1", ns="guarded")).status == 403


async def test_object_selector(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks,
                                 objectSelector={"matchExpressions": [{"key": "locked", "operator": "Exists"}]}))
    assert (await env.create_cm("c1")).status == 201
    assert (await env.create_cm("c2", {"locked": "1"})).status == 403


async def test_match_conditions(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks, matchConditions=[
        {"name": "named-secret", "expression": "object.metadata.name.startsWith('secret-')"},
        {"name": "not-admin", "expression": "request.userInfo.username != 'nobody'"}]))
    assert (await env.create_cm("plain")).status == 201
    assert env.hooks.reviews("/deny") == []
    assert (await env.create_cm("secret-1")).status == 403


async def test_webhooks_never_judge_webhook_configurations(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks, rules=[
        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]))
    r = await env.call("DELETE", VWC + "/checks")
    assert r.status == 200, r.body
    assert env.hooks.reviews("/deny") == []


async def test_configurations_are_defaulted_and_validated_as_kube_does(env: Env) -> None:
    stored = await env.must(MWC, configuration("MutatingWebhookConfiguration", "edits",
                                               webhook("mutate.example.com", "/mutate", env.hooks)))
    hook = stored["webhooks"][0]
    assert (hook["failurePolicy"], hook["matchPolicy"], hook["timeoutSeconds"], hook["reinvocationPolicy"]) == (
        "Fail", "Equivalent", 10, "Never")
    assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {} and hook["rules"][0]["scope"] == "*"
    bad = webhook("deny", "/deny", env.hooks, sideEffects="Some", timeoutSeconds=31, admissionReviewVersions=["v2"])
    bad["clientConfig"]["url"] = "http://127.0.0.1/x"
    r = await env.create(VWC, configuration("ValidatingWebhookConfiguration", "bad", bad))
    assert r.status == 422
    assert [c["field"] for c in r.body["details"]["causes"]] == [
        "webhooks[0].name", "webhooks[0].sideEffects", "webhooks[0].timeoutSeconds", "webhooks[0].clientConfig.url",
        "webhooks[0].admissionReviewVersions"]
    assert r.body["message"] == (
        'ValidatingWebhookConfiguration.admissionregistration.k8s.io "bad" is invalid: ['
        'webhooks[0].name: Invalid value: "deny": should be a domain with at least three segments separated by '
        'dots, webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun", '
        'webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds, '
        'webhooks[0].clientConfig.url: Invalid value: "http://127.0.0.1/x": \'https\' is the only allowed URL '
        'scheme, webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of '
        "v1, v1beta1]")
    cond = webhook("cond.example.com", "/x", env.hooks, matchConditions=[{"name": "c", "expression": "object.("}])
    r = await env.create(VWC, configuration("ValidatingWebhookConfiguration", "cond", cond))
    assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "webhooks[0].matchConditions[0].expression"


async def test_dry_run_calls_side_effect_free_webhooks_with_dry_run_set(env: Env) -> None:
    await env.validating(webhook("deny.example.com", "/deny", env.hooks))
    r = await env.call("POST", CONFIGMAPS.format(ns=NS) + "?dryRun=All", configmap("c1"))
    assert r.status == 403
    assert env.hooks.reviews("/deny")[0]["request"]["dryRun"] is True


# ---------------------------------------------------------------------------------- service reference


async def test_a_service_reference_is_dialled_at_its_cluster_ip_with_the_service_name(env: Env) -> None:
    await env.validating(webhook("svc.example.com", "/deny", env.hooks, url=False))
    r = await env.create_cm("c1")  # no Service yet: the call fails (Fail)
    assert r.status == 500
    assert r.body["message"].startswith('Internal error occurred: failed calling webhook "svc.example.com": ')
    await env.must(f"/api/v1/namespaces/{NS}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": SVC_NAME},
        "spec": {"clusterIP": "127.0.0.1", "ports": [{"port": env.hooks.port, "protocol": "TCP"}]}})
    r = await env.create_cm("c2")
    assert r.status == 403, r.body
    assert r.body["message"] == 'admission webhook "svc.example.com" denied the request: configmaps are closed today'
    assert env.hooks.server_names[-1] == f"{SVC_NAME}.{NS}.svc"
    assert env.hooks.hosts[-1] == f"{SVC_NAME}.{NS}.svc:{env.hooks.port}"
    assert env.hooks.reviews("/deny")[-1]["request"]["name"] == "c2"


async def test_writes_skip_admission_unless_some_webhook_names_their_resource(env: Env) -> None:
    admission = env.srv.generic_store.admission
    configmaps, secrets = env.srv.resources.get("", "v1", "configmaps"), env.srv.resources.get("", "v1", "secrets")
    assert not admission.active(configmaps) and not admission.active(secrets)
    await env.validating(webhook("allow.example.com", "/allow", env.hooks))
    assert admission.active(configmaps) and not admission.active(secrets)
    await env.call("DELETE", VWC + "/checks")
    assert not admission.active(configmaps)


async def test_subresource_rules_see_status_writes(env: Env) -> None:
    await env.validating(webhook("status.example.com", "/deny", env.hooks, rules=[
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["services/status"], "operations": ["UPDATE"]}]))
    svc = await env.must(f"/api/v1/namespaces/{NS}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]}})
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "127.0.0.9"}]}}
    r = await env.call("PUT", f"/api/v1/namespaces/{NS}/services/web/status", svc)
    assert r.status == 403
    req = env.hooks.reviews("/deny")[0]["request"]
    assert (req["subResource"], req["requestSubResource"], req["operation"]) == ("status", "status", "UPDATE")
    svc = (await env.call("GET", f"/api/v1/namespaces/{NS}/services/web")).body
    svc["metadata"]["labels"] = {"a": "b"}
    assert (await env.call("PUT", f"/api/v1/namespaces/{NS}/services/web", svc)).status == 200


HPA_V1 = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h1"},
          "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                   "maxReplicas": 3, "targetCPUUtilizationPercentage": 70}}


@pytest.mark.parametrize("policy", ["Equivalent", "Exact"])
async def test_match_policy_equivalent_calls_the_webhook_with_its_version(env: Env, policy: str) -> None:
    await env.validating(webhook("hpa.example.com", "/allow", env.hooks, matchPolicy=policy, rules=[
        {"apiGroups": ["autoscaling"], "apiVersions": ["v2"], "resources": ["horizontalpodautoscalers"],
         "operations": ["CREATE"]}]))
    r = await env.create(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers", HPA_V1)
    assert r.status == 201, r.body
    reviews = env.hooks.reviews("/allow")
    if policy == "Exact":
        assert reviews == []
        return
    req = reviews[0]["request"]
    assert req["resource"] == {"group": "autoscaling", "version": "v2", "resource": "horizontalpodautoscalers"}
    assert req["requestResource"]["version"] == "v1"
    assert req["kind"]["version"] == "v2" and req["requestKind"]["version"] == "v1"
    assert req["object"]["apiVersion"] == "autoscaling/v2" and "metrics" in req["object"]["spec"]


async def test_a_patch_made_on_an_equivalent_version_reaches_the_requested_version(env: Env) -> None:
    await env.mutating(webhook("hpa.example.com", "/mutate", env.hooks, rules=[
        {"apiGroups": ["autoscaling"], "apiVersions": ["v2"], "resources": ["horizontalpodautoscalers"],
         "operations": ["CREATE"]}]))
    created = await env.must(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers", HPA_V1)
    assert created["apiVersion"] == "autoscaling/v1"
    assert created["metadata"]["labels"] == {"mutated": "yes"}
    assert created["spec"]["targetCPUUtilizationPercentage"] == 70


async def test_a_certificate_for_another_service_name_fails_the_call(env: Env) -> None:
    await env.must(f"/api/v1/namespaces/{NS}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "other"},
        "spec": {"clusterIP": "127.0.0.1", "ports": [{"port": env.hooks.port, "protocol": "TCP"}]}})
    hook = webhook("svc.example.com", "/allow", env.hooks, url=False)
    hook["clientConfig"]["service"]["name"] = "other"
    await env.validating(hook)
    r = await env.create_cm("c1")
    assert r.status == 500
    assert r.body["message"] == (
        f'Internal error occurred: failed calling webhook "svc.example.com": failed to call webhook: Post '
        f'"https://other.{NS}.svc:{env.hooks.port}/allow?timeout=10s": tls: failed to verify certificate: x509: '
        f"certificate is not valid for other.{NS}.svc")
    assert env.hooks.reviews("/allow") == []


async def test_a_ca_bundle_that_is_not_pem_fails_the_call(env: Env) -> None:
    hook = webhook("pem.example.com", "/allow", env.hooks, ca=b"not a certificate")
    await env.validating(hook)
    r = await env.create_cm("c1")
    assert r.status == 500
    assert r.body["message"] == ('Internal error occurred: failed calling webhook "pem.example.com": could not get '
                                 "REST client: unable to load root certificates: unable to parse bytes as PEM block")


async def test_with_a_cluster_netns_a_service_is_dialled_from_that_namespace(tmp_path: Path) -> None:
    """kube's egress selector for the cluster network: the webhook's Service address is reached
    inside the namespace the apiserver is given (runc mode: the node's), never from its own. The
    server listens on 127.0.0.1 *inside* a namespace this test makes; the same port on the host's
    loopback has nothing, so a dial from the host is refused (and never leaves the machine)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("this test makes a network namespace: it needs root and iproute2 (`make install`)")
    from isthmus.runtime import netns

    name = f"isthmus-t-{os.getpid()}-wh"
    netns.add(name)
    path = netns.path(name)
    await netns.run_in(path, ["ip", "link", "set", "lo", "up"], timeout=10)
    ca_crt, crt, key = ensure_certs(tmp_path / "hook-tls", ["127.0.0.1", f"{SVC_NAME}.{NS}.svc"])
    hooks = Hooks(ca_pem=ca_crt.read_bytes(), wrong_ca_pem=b"")
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    sctx.load_cert_chain(crt, key)
    runner = web.AppRunner(make_app(hooks))
    await runner.setup()
    port = free_port()
    site = web.SockSite(runner, netns.listening_socket_in(path, "127.0.0.1", port), ssl_context=sctx)
    await site.start()
    hooks.port = port
    srv = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True, cluster_netns=path)
    await srv.start()
    try:
        env = Env(srv, hooks, tmp_path)
        await env.validating(webhook("svc.example.com", "/deny", hooks, url=False))
        await env.must(f"/api/v1/namespaces/{NS}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": SVC_NAME},
            "spec": {"clusterIP": "127.0.0.1", "ports": [{"port": port, "protocol": "TCP"}]}})
        r = await env.create_cm("c1")
        assert r.status == 403, r.body
        assert r.body["message"] == 'admission webhook "svc.example.com" denied the request: configmaps are closed today'
        # The same apiserver without the namespace dials its own loopback, where nothing listens.
        srv.admission.webhooks.dial_netns = None  # type: ignore[union-attr]
        r = await env.create_cm("c2")
        assert r.status == 500 and "connection refused" in r.body["message"], r.body
    finally:
        await srv.stop()
        await runner.cleanup()
        netns.delete(name)
