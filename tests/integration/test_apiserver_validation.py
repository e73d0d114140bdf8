"""Field validation the embedded apiserver shares with kube-apiserver, tried with real HTTP requests:
names and keys matched whole (issue 40 item 3), Ingress (item 4)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.conftest import RunningApiServer

SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
DNS1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
    "is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


async def _req(srv: RunningApiServer, method: str, path: str, body: Any = None,
               ctype: str = "application/json") -> tuple[int, Any]:
    data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    headers = {"Content-Type": ctype} if data is not None else {}
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, data=data, headers=headers) as r:
        raw = await r.read()
        return r.status, json.loads(raw) if raw else None


def _cm(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def _causes(body: Any) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


# ------------------------------------------------------------------------ item 3: whole-string names


@pytest.mark.parametrize(("meta", "field", "value", "detail"), [
    ({"name": "trail\n"}, "metadata.name", "trail\\n", SUBDOMAIN),
    ({"name": "ok", "labels": {"key\n": "v"}}, "metadata.labels", "key\\n", NAME_PART),
    ({"name": "ok", "labels": {"example.com\n/key": "v"}}, "metadata.labels", "example.com\\n/key",
     "prefix part " + SUBDOMAIN),
    ({"name": "ok", "labels": {"key": "v\n"}}, "metadata.labels", "v\\n", LABEL_VALUE),
    ({"name": "ok", "annotations": {"note\n": "v"}}, "metadata.annotations", "note\\n", NAME_PART),
])
async def test_a_trailing_newline_is_refused_where_kube_refuses_it(
        apiserver: RunningApiServer, meta: dict[str, Any], field: str, value: str, detail: str) -> None:
    status, body = await _req(apiserver, "POST", "/api/v1/namespaces/default/configmaps", _cm(**meta))
    assert (status, body["reason"]) == (422, "Invalid")
    assert _causes(body) == [(field, f'Invalid value: "{value}": {detail}')]
    assert body["message"] == (f'ConfigMap "{meta["name"].replace(chr(10), "")}'
                               + ('\\n' if meta["name"].endswith("\n") else "")
                               + f'" is invalid: {field}: Invalid value: "{value}": {detail}')
    status, listed = await _req(apiserver, "GET", "/api/v1/namespaces/default/configmaps")
    assert [i["metadata"]["name"] for i in listed["items"]] == []


async def test_a_generate_name_with_a_newline_is_refused(apiserver: RunningApiServer) -> None:
    """kube checks generateName itself, then the name made from it."""
    status, body = await _req(apiserver, "POST", "/api/v1/namespaces/default/configmaps", _cm(generateName="gen\n"))
    assert status == 422
    causes = _causes(body)
    assert causes[0] == ("metadata.generateName", f'Invalid value: "gen\\n": {SUBDOMAIN}')
    assert causes[1][0] == "metadata.name" and causes[1][1].startswith('Invalid value: "gen\\n')
    # a prefix ending in '-' is fine: the random suffix follows it
    status, body = await _req(apiserver, "POST", "/api/v1/namespaces/default/configmaps", _cm(generateName="gen-"))
    assert status == 201 and body["metadata"]["name"].startswith("gen-")


async def test_a_namespace_named_with_a_newline_is_refused(apiserver: RunningApiServer) -> None:
    status, body = await _req(apiserver, "POST", "/api/v1/namespaces",
                              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team\n"}})
    assert status == 422
    assert ("metadata.name", f'Invalid value: "team\\n": {LABEL}') in _causes(body)


async def test_a_service_name_with_a_newline_is_refused(apiserver: RunningApiServer) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web\n"},
           "spec": {"ports": [{"port": 80}]}}
    status, body = await _req(apiserver, "POST", "/api/v1/namespaces/default/services", svc)
    assert status == 422
    assert ("metadata.name", f'Invalid value: "web\\n": {DNS1035}') in _causes(body)


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "words.example.com"},
    "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "words", "singular": "word", "kind": "Word", "listKind": "WordList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                "word": {"type": "string", "pattern": "^[a-z]+$"}}}}}}}],
    },
}


async def test_crd_names_and_schema_patterns_match_whole_strings(apiserver: RunningApiServer) -> None:
    """A CRD's group is a subdomain, its plural a DNS-1035 label, and a schema pattern's `$` is Go's:
    the end of the text, not before a final newline."""
    bad = json.loads(json.dumps(CRD))
    bad["spec"]["names"]["plural"] = "words\n"
    bad["metadata"]["name"] = "words\n.example.com"
    status, body = await _req(apiserver, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", bad)
    assert status == 422
    assert any(f == "spec.names.plural" and m.startswith('Invalid value: "words\\n": ') for f, m in _causes(body))

    status, _ = await _req(apiserver, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert status == 201
    path = "/apis/example.com/v1/namespaces/default/words"
    for _ in range(200):
        status, _ = await _req(apiserver, "GET", path)
        if status == 200:
            break
        await asyncio.sleep(0.05)
    word: dict[str, Any] = {"apiVersion": "example.com/v1", "kind": "Word", "metadata": {"name": "w"}, "spec": {"word": "abc\n"}}
    status, body = await _req(apiserver, "POST", path, word)
    assert status == 422
    assert _causes(body) == [("spec.word", "Invalid value: \"abc\\n\": spec.word in body should match '^[a-z]+$'")]
    word["spec"]["word"] = "abc"
    status, _ = await _req(apiserver, "POST", path, word)
    assert status == 201
