"""kube-apiserver semantics the embedded apiserver must follow where clients rely on them.

- Server-side apply compares list-map keys after defaulting: the same configuration applied twice
  (a container port without `protocol`) is a no-op the second time, with no new resourceVersion.
- Names: generateName is used only when metadata.name is empty; a given name that exists is 409
  AlreadyExists, and generated names that collide are retried (kube's RetryGenerateName).
- Secrets and ConfigMaps: stringData written into data, `immutable` enforced, 1 MiB of data at
  most; duplicate keys in a body are strict decoding errors (fieldValidation decides).
- resourceVersion: Exact and NotOlderThan reads, 504 for a version not reached yet, list pages
  that are one snapshot (410 with a token for the rest once its history is gone).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.apimachinery import meta
from tests.harness.apiserver import RunningApiServer

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        ports:
        - containerPort: 80
"""

SERVICE = """apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
"""


async def _req(srv: RunningApiServer, method: str, path: str, body: Any = None,
               ctype: str = "application/json", **headers: str) -> tuple[int, Any, Any]:
    """(status, headers, decoded JSON body)."""
    data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    if data is not None:
        headers["Content-Type"] = ctype
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, data=data, headers=headers) as r:
        raw = await r.read()
        return r.status, r.headers, json.loads(raw) if raw else None


async def kubectl(srv: RunningApiServer, *args: str, stdin: str | None = None) -> tuple[int, str]:
    """kubectl against the in-process server (run as a subprocess: the event loop must keep serving)."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", srv.kubeconfig, *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(60):
        out, _ = await proc.communicate(stdin.encode() if stdin is not None else None)
    return proc.returncode or 0, out.decode()


# ------------------------------------------------------------------------ 4: apply is idempotent


@pytest.mark.parametrize(("path", "config"), [
    ("/apis/apps/v1/namespaces/default/deployments/web", DEPLOYMENT),
    ("/api/v1/namespaces/default/services/web", SERVICE),
])
async def test_apply_twice_with_defaulted_list_map_key_is_a_no_op(apiserver: RunningApiServer, path: str,
                                                                    config: str) -> None:
    # The port item omits `protocol`, a key of its list-map that defaulting sets to TCP: kube
    # identifies the applied item by its defaulted key, so the stored port is the same item.
    url = path + "?fieldManager=deployer"
    status, _, first = await _req(apiserver, "PATCH", url, config, "application/apply-patch+yaml")
    assert status == 201, first
    status, _, second = await _req(apiserver, "PATCH", url, config, "application/apply-patch+yaml")
    assert status == 200, second
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["managedFields"] == first["metadata"]["managedFields"]
    # The item is keyed as kube keys it, and the applier does not own the defaulted protocol.
    fields = json.dumps(first["metadata"]["managedFields"][0]["fieldsV1"])
    assert '{\\"containerPort\\":80,\\"protocol\\":\\"TCP\\"}' in fields or \
        '{\\"port\\":80,\\"protocol\\":\\"TCP\\"}' in fields
    assert "f:protocol" not in fields


async def test_apply_with_duplicate_defaulted_keys_is_refused(apiserver: RunningApiServer) -> None:
    # {containerPort: 80} and {containerPort: 80, protocol: TCP} are one key once defaulted.
    config = DEPLOYMENT.replace("- containerPort: 80", "- containerPort: 80\n        - {containerPort: 80, protocol: TCP}")
    status, _, body = await _req(apiserver, "PATCH", "/apis/apps/v1/namespaces/default/deployments/web"
                                 "?fieldManager=deployer", config, "application/apply-patch+yaml")
    assert status == 400, body
    assert "duplicate entries for key [containerPort=80,protocol=\"TCP\"]" in body["message"]


async def test_a_namespace_on_a_cluster_scoped_object_is_ignored_on_every_write(apiserver: RunningApiServer) -> None:
    """kube clears metadata.namespace of cluster-scoped objects (kustomize's namespace transformer
    sets it on some): apply twice and update must all reach the same object."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "scoped", "namespace": "elsewhere"}}
    for label in ("one", "two"):
        body["metadata"]["labels"] = {"pass": label}
        status, _, out = await _req(apiserver, "PATCH", "/api/v1/namespaces/scoped?fieldManager=t", body,
                                    "application/apply-patch+yaml")
        assert status in (200, 201), out
        assert out["metadata"]["labels"]["pass"] == label and "namespace" not in out["metadata"]
    status, _, out = await _req(apiserver, "PUT", "/api/v1/namespaces/scoped", {**body, "metadata": {
        **body["metadata"], "labels": {"pass": "three"}}})
    assert status == 200 and out["metadata"]["labels"]["pass"] == "three", out


@needs_kubectl
async def test_kubectl_apply_server_side_twice(apiserver: RunningApiServer) -> None:
    code, out = await kubectl(apiserver, "apply", "--server-side", "-f", "-", stdin=DEPLOYMENT)
    assert code == 0, out
    _, _, first = await _req(apiserver, "GET", "/apis/apps/v1/namespaces/default/deployments/web")
    code, out = await kubectl(apiserver, "apply", "--server-side", "-f", "-", stdin=DEPLOYMENT)
    assert code == 0, out
    assert "serverside-applied" in out
    _, _, second = await _req(apiserver, "GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


# ------------------------------------------------------------------------ 5: generateName


def _cm(name: str = "", generate: str = "") -> dict[str, Any]:
    m: dict[str, Any] = {}
    if name:
        m["name"] = name
    if generate:
        m["generateName"] = generate
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "v"}}


CMS = "/api/v1/namespaces/default/configmaps"


async def test_given_name_wins_over_generate_name_and_conflicts(apiserver: RunningApiServer) -> None:
    status, _, _ = await _req(apiserver, "POST", CMS, _cm("taken"))
    assert status == 201
    # With a name, generateName is ignored: the existing name is a conflict, not a fresh name.
    status, _, body = await _req(apiserver, "POST", CMS, _cm("taken", "taken-"))
    assert status == 409, body
    assert body["reason"] == "AlreadyExists"
    # kube's CheckGeneratedNameError words it so whenever generateName is set
    assert body["message"] == ('configmaps "taken" already exists, the server was not able to generate a unique '
                               "name for the object")
    assert body["details"] == {"name": "taken", "kind": "configmaps", "retryAfterSeconds": 1}
    _, _, listed = await _req(apiserver, "GET", CMS)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["taken"]
    # A given name that is free is used as is.
    status, _, body = await _req(apiserver, "POST", CMS, _cm("free", "free-"))
    assert status == 201 and body["metadata"]["name"] == "free"


async def test_generated_name_collisions_are_retried(apiserver: RunningApiServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    await _req(apiserver, "POST", CMS, _cm("gen-aaaaa"))
    names = iter(["gen-aaaaa", "gen-aaaaa", "gen-bbbbb"])
    monkeypatch.setattr(meta, "generate_name", lambda prefix: next(names))
    status, _, body = await _req(apiserver, "POST", CMS, _cm(generate="gen-"))
    assert status == 201, body
    assert body["metadata"]["name"] == "gen-bbbbb"
    # Every attempt taken (kube tries 8 names): 409 with a retry hint, nothing created.
    monkeypatch.setattr(meta, "generate_name", lambda prefix: "gen-aaaaa")
    status, _, body = await _req(apiserver, "POST", CMS, _cm(generate="gen-"))
    assert status == 409 and body["reason"] == "AlreadyExists", body
    assert body["details"]["retryAfterSeconds"] == 1


# ------------------------------------------------------------------------ 8: Secrets, ConfigMaps, strict decoding

SECRETS = "/api/v1/namespaces/default/secrets"


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


async def test_secret_string_data_is_merged_into_data(apiserver: RunningApiServer) -> None:
    # kube converts stringData into data (stringData wins) and never stores stringData.
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": _b64("from-data"), "b": _b64("kept")}, "stringData": {"a": "from-string", "c": "new"}}
    status, _, created = await _req(apiserver, "POST", SECRETS, body)
    assert status == 201, created
    assert "stringData" not in created
    assert created["data"] == {"a": _b64("from-string"), "b": _b64("kept"), "c": _b64("new")}
    _, _, got = await _req(apiserver, "GET", SECRETS + "/s")
    assert got["data"] == created["data"] and "stringData" not in got
    # on update too (a merge patch of stringData)
    status, _, patched = await _req(apiserver, "PATCH", SECRETS + "/s", {"stringData": {"b": "changed"}},
                                    "application/merge-patch+json")
    assert status == 200, patched
    assert patched["data"]["b"] == _b64("changed") and "stringData" not in patched


async def test_immutable_configmap_and_secret_refuse_data_changes(apiserver: RunningApiServer) -> None:
    await _req(apiserver, "POST", CMS, {**_cm("frozen"), "immutable": True})
    status, _, body = await _req(apiserver, "PATCH", CMS + "/frozen", {"data": {"k": "other"}},
                                 "application/merge-patch+json")
    assert status == 422, body
    assert body["message"] == 'ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    assert body["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": "data",
                                          "message": "Forbidden: field is immutable when `immutable` is set"}]
    status, _, body = await _req(apiserver, "PATCH", CMS + "/frozen", {"immutable": False},
                                 "application/merge-patch+json")
    assert status == 422 and body["details"]["causes"][0]["field"] == "immutable", body
    # metadata still changes
    status, _, body = await _req(apiserver, "PATCH", CMS + "/frozen", {"metadata": {"labels": {"x": "y"}}},
                                 "application/merge-patch+json")
    assert status == 200, body
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "frozen"}, "immutable": True,
              "data": {"a": _b64("1")}}
    await _req(apiserver, "POST", SECRETS, secret)
    status, _, body = await _req(apiserver, "PATCH", SECRETS + "/frozen", {"stringData": {"a": "2"}},
                                 "application/merge-patch+json")
    assert status == 422 and body["details"]["causes"][0]["field"] == "data", body
    status, _, body = await _req(apiserver, "PATCH", SECRETS + "/frozen", {"type": "kubernetes.io/tls"},
                                 "application/merge-patch+json")
    assert status == 422, body
    assert body["details"]["causes"][0] == {"reason": "FieldValueInvalid", "field": "type",
                                            "message": 'Invalid value: "kubernetes.io/tls": field is immutable'}


async def test_data_over_one_mib_is_refused(apiserver: RunningApiServer) -> None:
    big = "x" * (1536 * 1024)
    status, _, body = await _req(apiserver, "POST", CMS, {**_cm("big"), "data": {"k": big}})
    assert status == 422, body
    # ValidateConfigMap reports it against the whole object (an empty field path)
    assert body["message"] == 'ConfigMap "big" is invalid: : Too long: may not be more than 1048576 bytes'
    assert body["details"]["causes"] == [{"reason": "FieldValueTooLong",
                                          "message": "Too long: may not be more than 1048576 bytes"}]
    status, _, body = await _req(apiserver, "POST", SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"}, "data": {"k": _b64(big)}})
    assert status == 422, body
    assert body["message"] == 'Secret "big" is invalid: data: Too long: may not be more than 1048576 bytes'
    # exactly 1 MiB is fine
    status, _, body = await _req(apiserver, "POST", CMS, {**_cm("max"), "data": {"k": "x" * (1024 * 1024)}})
    assert status == 201, body.get("message")


DUP_JSON = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"data":{"a":"1","a":"2"}}'
DUP_YAML = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\ndata:\n  a: '1'\n  a: '2'\n"


async def test_duplicate_json_keys_and_field_validation(apiserver: RunningApiServer) -> None:
    status, _, body = await _req(apiserver, "POST", CMS + "?fieldValidation=Strict", DUP_JSON)
    assert status == 400, body
    assert body["message"] == ('ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
                               'duplicate field "data.a"')
    status, _, body = await _req(apiserver, "POST", CMS + "?fieldValidation=Strict", DUP_YAML, "application/yaml")
    assert status == 400, body
    assert body["message"].endswith('strict decoding error: yaml: unmarshal errors:\n  line 7: key "a" already set in map')
    # Warn (the default): accepted, the last value wins, one warning per duplicate
    status, headers, body = await _req(apiserver, "POST", CMS, DUP_JSON)
    assert status == 201 and body["data"] == {"a": "2"}, body
    assert headers.getall("Warning") == ['299 - "duplicate field \\"data.a\\""']
    status, headers, body = await _req(apiserver, "POST", CMS + "?fieldValidation=Ignore",
                                       DUP_JSON.replace(b'"d"', b'"e"'))
    assert status == 201 and body["data"] == {"a": "2"} and "Warning" not in headers, body
    # a patch: kube answers 422 naming the patch
    status, _, body = await _req(apiserver, "PATCH", CMS + "/d?fieldValidation=Strict", b'{"data":{"b":"1","b":"2"}}',
                                 "application/merge-patch+json")
    assert status == 422, body
    assert body["details"]["causes"][0]["field"] == "patch"
    assert body["message"].endswith('strict decoding error: duplicate field "data.b"')
    # server-side apply: yaml.v2's strict decoding of the configuration
    status, _, body = await _req(apiserver, "PATCH", CMS + "/d?fieldManager=m&fieldValidation=Strict",
                                 DUP_YAML, "application/apply-patch+yaml")
    assert status == 400, body
    assert body["message"] == ('error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n'
                               '  line 7: key "a" already set in map')


# ------------------------------------------------------------------------ 11: resourceVersion semantics


async def _cms(srv: RunningApiServer, query: str) -> tuple[int, Any]:
    status, _, body = await _req(srv, "GET", CMS + query)
    return status, body


def _names(body: Any) -> list[str]:
    return [o["metadata"]["name"] for o in body["items"]]


async def test_pages_are_one_snapshot(apiserver: RunningApiServer) -> None:
    for n in "abcde":
        await _req(apiserver, "POST", CMS, _cm(n))
    status, first = await _cms(apiserver, "?limit=2")
    assert status == 200 and _names(first) == ["a", "b"]
    snapshot = first["metadata"]["resourceVersion"]
    _, _, old_e = await _req(apiserver, "GET", CMS + "/e")
    # after page 1: one created inside the rest, one deleted, one modified
    await _req(apiserver, "POST", CMS, _cm("c0"))
    await _req(apiserver, "DELETE", CMS + "/d")
    await _req(apiserver, "PATCH", CMS + "/e", {"data": {"k": "changed"}}, "application/merge-patch+json")
    status, second = await _cms(apiserver, "?limit=2&continue=" + first["metadata"]["continue"])
    assert status == 200, second
    # the new one is not there, the deleted one still is: the list as of page 1's resourceVersion
    assert _names(second) == ["c", "d"]
    assert second["metadata"]["resourceVersion"] == snapshot
    status, third = await _cms(apiserver, "?limit=2&continue=" + second["metadata"]["continue"])
    assert status == 200 and _names(third) == ["e"] and "continue" not in third["metadata"]
    assert third["items"][0] == old_e  # its content (and resourceVersion) as of the snapshot
    assert third["metadata"]["resourceVersion"] == snapshot
    # a new list sees the present
    _, now = await _cms(apiserver, "")
    assert _names(now) == ["a", "b", "c", "c0", "e"]


async def test_continue_after_compaction_is_410_with_an_inconsistent_token(apiserver: RunningApiServer) -> None:
    for n in "abcd":
        await _req(apiserver, "POST", CMS, _cm(n))
    _, first = await _cms(apiserver, "?limit=2")
    await _req(apiserver, "POST", CMS, _cm("c0"))
    apiserver.store.compact()  # history up to now is gone, as etcd compaction does
    status, body = await _cms(apiserver, "?limit=2&continue=" + first["metadata"]["continue"])
    assert status == 410, body
    assert body["reason"] == "Expired"
    assert body["message"] == (
        "The provided continue parameter is too old to display a consistent list result. You can start a new list "
        "without the continue parameter, or use the continue token in this response to retrieve the remainder of "
        "the results. Continuing with the provided token results in an inconsistent list - objects that were "
        "created, modified, or deleted between the time the first chunk was returned and now may show up in the "
        "list.")
    # the token in the Status continues at the present
    status, rest = await _cms(apiserver, "?limit=10&continue=" + body["metadata"]["continue"])
    assert status == 200 and _names(rest) == ["c", "c0", "d"], rest


async def test_exact_and_not_older_than(apiserver: RunningApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from isthmus.apiserver.handlers import get

    monkeypatch.setattr(get, "BLOCK_TIMEOUT", 0.1)  # kube waits 3s for a version not reached yet
    await _req(apiserver, "POST", CMS, _cm("a"))
    _, listed = await _cms(apiserver, "")
    then = listed["metadata"]["resourceVersion"]
    await _req(apiserver, "POST", CMS, _cm("b"))
    status, exact = await _cms(apiserver, f"?resourceVersion={then}&resourceVersionMatch=Exact")
    assert status == 200 and _names(exact) == ["a"] and exact["metadata"]["resourceVersion"] == then
    # a resourceVersion with a limit is an exact read too (kube's legacy rule)
    status, legacy = await _cms(apiserver, f"?resourceVersion={then}&limit=5")
    assert status == 200 and _names(legacy) == ["a"]
    status, newer = await _cms(apiserver, f"?resourceVersion={then}&resourceVersionMatch=NotOlderThan")
    assert status == 200 and _names(newer) == ["a", "b"] and int(newer["metadata"]["resourceVersion"]) > int(then)
    # from the future: kube waits, then answers 504
    future = int(newer["metadata"]["resourceVersion"]) + 5
    current = apiserver.store.rv
    for query in (f"?resourceVersion={future}&resourceVersionMatch=NotOlderThan", f"?resourceVersion={future}",
                  f"/a?resourceVersion={future}"):
        status, body = await _cms(apiserver, query)
        assert status == 504, (query, body)
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f"Timeout: Too large resource version: {future}, current: {current}",
                        "reason": "Timeout", "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                                                     "message": "Too large resource version"}],
                                                         "retryAfterSeconds": 1}, "code": 504}
    apiserver.store.compact()
    status, body = await _cms(apiserver, f"?resourceVersion={then}&resourceVersionMatch=Exact")
    assert status == 410 and body["message"] == "The resourceVersion for the provided list is too old.", body


@pytest.mark.parametrize(("query", "message"), [
    ("?resourceVersionMatch=Exact", 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                                    "resourceVersionMatch is forbidden unless resourceVersion is provided"),
    ("?resourceVersion=1&resourceVersionMatch=Newest",
     'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Newest": supported values: '
     '"Exact", "NotOlderThan", ""'),
    ("?resourceVersion=0&resourceVersionMatch=Exact", 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: '
                                                      'Forbidden: resourceVersionMatch "exact" is forbidden for '
                                                      'resourceVersion "0"'),
    ("?watch=true&resourceVersion=1&resourceVersionMatch=NotOlderThan",
     'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for '
     "watch unless sendInitialEvents is provided"),
    ("?watch=true&sendInitialEvents=true",
     'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting '
     "resourceVersionMatch to NotOlderThan"),
    ("?sendInitialEvents=true", 'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                                "sendInitialEvents is forbidden for list"),
])
async def test_list_options_validation(apiserver: RunningApiServer, query: str, message: str) -> None:
    status, body = await _cms(apiserver, query)
    assert status == 422 and body["message"] == message, body


async def test_continue_with_resource_version_is_refused(apiserver: RunningApiServer) -> None:
    for n in "abc":
        await _req(apiserver, "POST", CMS, _cm(n))
    _, first = await _cms(apiserver, "?limit=1")
    status, body = await _cms(apiserver, "?limit=1&resourceVersion=5&continue=" + first["metadata"]["continue"])
    assert status == 400 and body["message"] == "specifying resource version is not allowed when using continue"


async def test_watch_from_a_future_version_sends_only_what_comes_after(apiserver: RunningApiServer) -> None:
    future = apiserver.store.rv + 2
    async with aiohttp.ClientSession() as s, s.get(
            apiserver.url + CMS + f"?watch=true&resourceVersion={future}&timeoutSeconds=10") as r:
        assert r.status == 200
        for n in "abc":  # rv current+1, +2, +3: only the third is after the version asked for
            await _req(apiserver, "POST", CMS, _cm(n))
        line = await r.content.readline()
    event = json.loads(line)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "c")
    assert int(event["object"]["metadata"]["resourceVersion"]) == future + 1


async def test_watch_list_from_a_future_version_ends_in_a_timeout(apiserver: RunningApiServer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from isthmus.apiserver.handlers import get

    monkeypatch.setattr(get, "BLOCK_TIMEOUT", 0.1)
    future = apiserver.store.rv + 5
    async with aiohttp.ClientSession() as s, s.get(
            apiserver.url + CMS + f"?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
            f"&allowWatchBookmarks=true&resourceVersion={future}") as r:
        assert r.status == 200  # a watch reports it in the stream, as kube's errWatcher
        event = json.loads(await r.content.readline())
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 504 and event["object"]["reason"] == "Timeout"
