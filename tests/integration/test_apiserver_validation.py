"""Field validation the embedded apiserver shares with kube-apiserver, tried with real HTTP requests:
names and keys matched whole (issue 40 item 3), Ingress (item 4)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.registry.service import default_service
from isthmus.apiserver.serializer.decoding import MAX_DEPTH
from tests.harness.apiserver import RunningApiServer

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
    ({"name": "ok", "finalizers": ["example.com/keep\n"]}, "metadata.finalizers", "example.com/keep\\n", NAME_PART),
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


# ------------------------------------------------------------------------ item 4: Ingress

INGRESSES = "/apis/networking.k8s.io/v1/namespaces/default/ingresses"


def _ingress(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", **meta}, "spec": spec}


def _rule(host: str = "shop.example.com", path: str = "/", path_type: str | None = "Prefix",
          backend: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"path": path, "backend": backend or {"service": {"name": "web", "port": {"number": 80}}}}
    if path_type is not None:
        item["pathType"] = path_type
    return {"host": host, "http": {"paths": [item]}}


def _svc(name: str = "web", **port: Any) -> dict[str, Any]:
    return {"service": {"name": name, "port": port or {"number": 80}}}


P0 = "spec.rules[0].http.paths[0]"


@pytest.mark.parametrize(("spec", "causes"), [
    ({}, [("spec", "Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be "
                   "specified")]),
    ({"rules": [_rule(backend=_svc("web:a"))]},
     [(f"{P0}.backend.service.name", f'Invalid value: "web:a": {DNS1035}')]),
    ({"rules": [_rule(backend=_svc("web\n"))]},
     [(f"{P0}.backend.service.name", f'Invalid value: "web\\n": {DNS1035}')]),
    ({"rules": [_rule(path_type=None)]}, [(f"{P0}.pathType", "Required value: pathType must be specified")]),
    ({"rules": [_rule(path_type="Regex")]}, [(f"{P0}.pathType", 'Unsupported value: "Regex": supported values: '
                                                               '"Exact", "ImplementationSpecific", "Prefix"')]),
    ({"rules": [_rule(path="api")]}, [(f"{P0}.path", 'Invalid value: "api": must be an absolute path')]),
    ({"rules": [_rule(path="/a/../b")]}, [(f"{P0}.path", "Invalid value: \"/a/../b\": must not contain '/../'")]),
    ({"rules": [_rule(path="/a/.", path_type="Exact")]},
     [(f"{P0}.path", "Invalid value: \"/a/.\": cannot end with '/.'")]),
    ({"rules": [_rule(path="api", path_type="ImplementationSpecific")]},
     [(f"{P0}.path", 'Invalid value: "api": must be an absolute path')]),
    ({"rules": [_rule(host="Shop.example.com")]},
     [("spec.rules[0].host", f'Invalid value: "Shop.example.com": {SUBDOMAIN}')]),
    ({"rules": [_rule(host="127.0.0.1")]},
     [("spec.rules[0].host", 'Invalid value: "127.0.0.1": must be a DNS name, not an IP address')]),
    ({"rules": [_rule(host="a.*.com")]},
     [("spec.rules[0].host", "Invalid value: \"a.*.com\": a wildcard DNS-1123 subdomain must start with '*.', "
       "followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and "
       "end with an alphanumeric character (e.g. '*.example.com', regex used for validation is "
       "'\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")]),
    ({"rules": [{"host": "a.com", "http": {"paths": []}}]}, [("spec.rules[0].http.paths", "Required value")]),
    ({"rules": [_rule(backend=_svc(number=70000))]},
     [(f"{P0}.backend.service.port.number", "Invalid value: 70000: must be between 1 and 65535, inclusive")]),
    ({"rules": [_rule(backend={"service": {"name": "web", "port": {"name": "Http"}}})]},
     [(f"{P0}.backend.service.port.name",
       'Invalid value: "Http": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)')]),
    ({"rules": [_rule(backend={"service": {"name": "web", "port": {"name": "http", "number": 80}}})]},
     [(f"{P0}.backend", 'Invalid value: "": cannot set both port name & port number')]),
    ({"rules": [_rule(backend={"service": {"name": "web", "port": {}}})]},
     [(f"{P0}.backend", "Required value: port name or number is required")]),
    ({"rules": [_rule(backend={"service": {"port": {"number": 80}}})]},
     [(f"{P0}.backend.service.name", "Required value")]),
    ({"defaultBackend": {}}, [("spec.defaultBackend", 'Invalid value: "": resource or service backend is required')]),
    ({"defaultBackend": {**_svc(), "resource": {"kind": "Bucket", "name": "b"}}},
     [("spec.defaultBackend", 'Invalid value: "": cannot set both resource and service backends')]),
    ({"defaultBackend": {"resource": {"apiGroup": "k8s.example.com", "kind": "Bucket", "name": "a/b"}}},
     [("spec.defaultBackend.resource.name", "Invalid value: \"a/b\": may not contain '/'")]),
    ({"defaultBackend": _svc(), "tls": [{"hosts": ["shop.example.com\n"], "secretName": "tls_cert"}]},
     [("spec.tls[0].hosts[0]", f'Invalid value: "shop.example.com\\n": {SUBDOMAIN}'),
      ("spec.tls[0].secretName", f'Invalid value: "tls_cert": {SUBDOMAIN}')]),
    ({"defaultBackend": _svc(), "ingressClassName": "Edge"},
     [("spec.ingressClassName", f'Invalid value: "Edge": {SUBDOMAIN}')]),
])
async def test_ingress_fields_are_validated_as_kube_does(apiserver: RunningApiServer, spec: dict[str, Any],
                                                         causes: list[tuple[str, str]]) -> None:
    status, body = await _req(apiserver, "POST", INGRESSES, _ingress(spec))
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert _causes(body) == causes
    expected = ", ".join(f"{f}: {m}" for f, m in causes)
    expected = f"[{expected}]" if len(causes) > 1 else expected
    assert body["message"] == f'Ingress.networking.k8s.io "web" is invalid: {expected}'


async def test_a_valid_ingress_is_stored_and_an_update_is_checked_too(apiserver: RunningApiServer) -> None:
    spec = {"ingressClassName": "edgelb", "rules": [_rule(host="*.example.com"), _rule(path="/api", path_type="Exact")],
            "tls": [{"hosts": ["*.example.com"], "secretName": "shop-tls"}]}
    status, body = await _req(apiserver, "POST", INGRESSES, _ingress(spec))
    assert status == 201, body
    patch = {"spec": {"rules": [_rule(backend=_svc("web:a"))]}}
    status, body = await _req(apiserver, "PATCH", INGRESSES + "/web", patch, "application/merge-patch+json")
    assert status == 422
    assert _causes(body) == [(f"{P0}.backend.service.name", f'Invalid value: "web:a": {DNS1035}')]
    status_patch = {"status": {"loadBalancer": {"ingress": [{"ip": "300.1.1.1"}]}}}
    status, body = await _req(apiserver, "PATCH", INGRESSES + "/web/status", status_patch,
                              "application/merge-patch+json")
    assert status == 422
    assert _causes(body) == [("status.loadBalancer.ingress[0].ip", 'Invalid value: "300.1.1.1": must be a valid IP '
                              "address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]


async def test_the_class_annotation_must_match_the_class_name(apiserver: RunningApiServer) -> None:
    ing = _ingress({"defaultBackend": _svc(), "ingressClassName": "edgelb"},
                   annotations={"kubernetes.io/ingress.class": "nginx"})
    status, body = await _req(apiserver, "POST", INGRESSES, ing)
    assert status == 422
    assert _causes(body) == [("annotations.kubernetes.io/ingress.class",
                              'Invalid value: "nginx": must match `ingressClassName` when both are specified')]


# ------------------------------------------------------------------------ item 4: nesting depth

THINGS = "/apis/example.com/v1/namespaces/default/things"
THING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}
TOO_DEEP_JSON = "couldn't get version/kind; json parse error: invalid character '{' exceeded max depth"
TOO_DEEP_YAML = f"error converting YAML to JSON: yaml: exceeded max depth of {MAX_DEPTH}"


def _nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def _thing(name: str, spec: str) -> str:
    return '{"apiVersion":"example.com/v1","kind":"Thing","metadata":{"name":"' + name + '"},"spec":' + spec + "}"


@pytest.fixture
async def things(apiserver: RunningApiServer) -> RunningApiServer:
    status, _ = await _req(apiserver, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", THING_CRD)
    assert status == 201
    for _ in range(200):
        if (await _req(apiserver, "GET", THINGS))[0] == 200:
            return apiserver
        await asyncio.sleep(0.05)
    raise AssertionError("the CRD was never served")


@pytest.mark.parametrize("levels", [MAX_DEPTH, 300, 5000])
async def test_a_body_nested_too_deep_is_a_400_on_every_decode_path(things: RunningApiServer, levels: int) -> None:
    """Before: 5,000 levels in YAML (a body, an apply) or 300 in JSON were a 500 RecursionError."""
    deep = _nested(levels)
    yaml_body = "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: y}\nspec: " + "[" * levels + "]" * levels
    cases = [
        ("POST", THINGS, _thing("t", deep), "application/json", TOO_DEEP_JSON),
        ("POST", THINGS, yaml_body, "application/yaml", TOO_DEEP_YAML),
        ("POST", "/api/v1/namespaces/default/configmaps",
         '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"extra":' + deep + "}", "application/json",
         TOO_DEEP_JSON),
        ("PATCH", THINGS + "/ok", '{"spec":' + deep + "}", "application/merge-patch+json", TOO_DEEP_JSON),
        ("PATCH", "/api/v1/namespaces/default/configmaps/ok", '{"data":' + deep + "}",
         "application/strategic-merge-patch+json", TOO_DEEP_JSON),
        ("PATCH", THINGS + "/ok", '[{"op":"add","path":"/spec/b","value":' + deep + "}]", "application/json-patch+json",
         TOO_DEEP_JSON),
        ("PATCH", THINGS + "/ok?fieldManager=m", _thing("ok", deep), "application/apply-patch+yaml", TOO_DEEP_YAML),
        ("PATCH", THINGS + "/ok?fieldManager=m", yaml_body.replace("name: y", "name: ok"),
         "application/apply-patch+yaml", TOO_DEEP_YAML),
    ]
    assert (await _req(things, "POST", THINGS, _thing("ok", '{"a":1}')))[0] == 201
    assert (await _req(things, "POST", "/api/v1/namespaces/default/configmaps", _cm(name="ok")))[0] == 201
    for method, path, body, ctype, message in cases:
        status, answer = await _req(things, method, path, body, ctype)
        assert (status, answer["reason"], answer["message"]) == (400, "BadRequest", message), (path, ctype)
    status, stored = await _req(things, "GET", THINGS + "/ok")
    assert status == 200 and stored["spec"] == {"a": 1}


def _pb_field(num: int, data: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    length, size = b"", len(data)
    while True:
        byte, size = size & 0x7F, size >> 7
        length += bytes([byte | (0x80 if size else 0)])
        if not size:
            return bytes([num << 3 | 2]) + length + data


async def test_a_protobuf_body_nested_too_deep_is_a_400(things: RunningApiServer) -> None:
    """kubectl's protobuf bodies can nest too: a ControllerRevision's data is raw JSON."""
    revision = (_pb_field(1, _pb_field(1, b"rev") + _pb_field(3, b"default"))
                + _pb_field(2, _pb_field(1, _nested(300).encode())))
    body = b"k8s\x00" + _pb_field(1, _pb_field(1, b"apps/v1") + _pb_field(2, b"ControllerRevision")) + _pb_field(
        2, revision)
    status, answer = await _req(things, "POST", "/apis/apps/v1/namespaces/default/controllerrevisions", body,
                                "application/vnd.kubernetes.protobuf")
    assert (status, answer["message"]) == (400, TOO_DEEP_JSON)
    shallow = b"k8s\x00" + _pb_field(1, _pb_field(1, b"apps/v1") + _pb_field(2, b"ControllerRevision")) + _pb_field(
        2, _pb_field(1, _pb_field(1, b"rev") + _pb_field(3, b"default")) + _pb_field(2, _pb_field(1, b'{"a":1}')))
    status, answer = await _req(things, "POST", "/apis/apps/v1/namespaces/default/controllerrevisions", shallow,
                                "application/vnd.kubernetes.protobuf")
    assert status == 201 and answer["data"] == {"a": 1}, answer


async def test_the_deepest_allowed_object_works_everywhere(things: RunningApiServer) -> None:
    """An object MAX_DEPTH levels deep (its root included) is stored, patched, applied, listed and
    shown as a table; a JSON patch cannot take it one level further."""
    spec = _nested(MAX_DEPTH - 1)  # root → spec → MAX_DEPTH-1 levels: exactly MAX_DEPTH
    assert (await _req(things, "POST", THINGS, _thing("deep", spec)))[0] == 201
    assert (await _req(things, "PATCH", THINGS + "/deep", '{"spec":{"b":1}}', "application/merge-patch+json"))[0] == 200
    assert (await _req(things, "PATCH", THINGS + "/deep?fieldManager=m", _thing("deep", spec),
                       "application/apply-patch+yaml"))[0] == 200
    status, listed = await _req(things, "GET", THINGS)
    assert status == 200 and [i["metadata"]["name"] for i in listed["items"]] == ["deep"]
    path = "/spec" + "/a" * (MAX_DEPTH - 1)  # the innermost value, 1
    status, answer = await _req(things, "PATCH", THINGS + "/deep",
                                '[{"op":"replace","path":"' + path + '","value":{"x":1}}]', "application/json-patch+json")
    assert (status, answer["message"]) == (400, TOO_DEEP_JSON)
    status, answer = await _req(things, "PATCH", THINGS + "/deep",
                                '[{"op":"replace","path":"' + path + '","value":2}]', "application/json-patch+json")
    assert status == 200


CLASSES = "/apis/networking.k8s.io/v1/ingressclasses"


@pytest.mark.parametrize(("spec", "causes"), [
    ({}, [("spec.controller", "Required value")]),
    ({"controller": "edgelb"}, [("spec.controller", 'Invalid value: "edgelb": must be a domain-prefixed path '
                                                    '(such as "acme.io/foo")')]),
    ({"controller": "isthmus.io/edge lb"}, [("spec.controller", "Invalid value: \"edge lb\": Invalid path (regex "
                                             "used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')")]),
    ({"controller": "isthmus.io/edgelb", "parameters": {"kind": "Pool", "name": "a"}},
     [("spec.parameters.scope", "Required value")]),
    ({"controller": "isthmus.io/edgelb", "parameters": {"kind": "Pool", "name": "a", "scope": "Namespace"}},
     [("spec.parameters.namespace", "Required value: `parameters.scope` is set to 'Namespace'")]),
    ({"controller": "isthmus.io/edgelb", "parameters": {"kind": "Pool", "name": "a", "scope": "Cluster",
                                                        "namespace": "x"}},
     [("spec.parameters.namespace", "Forbidden: `parameters.scope` is set to 'Cluster'")]),
])
async def test_ingress_class_fields_are_validated_as_kube_does(apiserver: RunningApiServer, spec: dict[str, Any],
                                                               causes: list[tuple[str, str]]) -> None:
    cls = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "edgelb"}, "spec": spec}
    status, body = await _req(apiserver, "POST", CLASSES, cls)
    assert (status, _causes(body)) == (422, causes), body


async def test_an_ingress_class_controller_is_immutable(apiserver: RunningApiServer) -> None:
    cls = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "edgelb"},
           "spec": {"controller": "isthmus.io/edgelb"}}
    assert (await _req(apiserver, "POST", CLASSES, cls))[0] == 201
    status, body = await _req(apiserver, "PATCH", CLASSES + "/edgelb", {"spec": {"controller": "example.com/other"}},
                              "application/merge-patch+json")
    assert (status, _causes(body)) == (422, [("spec.controller",
                                              'Invalid value: "example.com/other": field is immutable')])


async def test_yaml_aliases_that_recurse_or_explode_are_refused_as_yaml_v2_refuses_them(
        things: RunningApiServer) -> None:
    """Before: a recursive anchor was a 500 (`Recursion limit reached`), and a 300-byte body whose
    aliases expand to 10^7 values was stored as a 20 MB object (10^9 at nine levels)."""
    lines = ["apiVersion: example.com/v1", "kind: Thing", "metadata: {name: bomb}", "spec:",
             "  x0: &a0 [a,a,a,a,a,a,a,a,a,a]"]
    lines += [f"  x{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb = "\n".join(lines) + "\n"
    recursive = "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: loop}\nspec: &a {x: [*a]}\n"
    for method, path, body, ctype, message in [
        ("POST", THINGS, bomb, "application/yaml", "yaml: document contains excessive aliasing"),
        ("PATCH", THINGS + "/bomb?fieldManager=m", bomb, "application/apply-patch+yaml",
         "yaml: document contains excessive aliasing"),
        ("POST", THINGS, recursive, "application/yaml", "yaml: anchor 'a' value contains itself"),
    ]:
        status, answer = await _req(things, method, path, body, ctype)
        assert (status, answer["message"]) == (400, f"error converting YAML to JSON: {message}"), path
    shared = "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: ok}\nspec: {a: &x {k: v}, b: *x, c: *x}\n"
    status, answer = await _req(things, "POST", THINGS, shared, "application/yaml")
    assert status == 201 and answer["spec"] == {"a": {"k": "v"}, "b": {"k": "v"}, "c": {"k": "v"}}


# ------------------------------------------------------------------------ Services (item 3: names of ports)

SERVICES = "/api/v1/namespaces/default/services"


def _service(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec}


@pytest.mark.parametrize(("spec", "causes"), [
    ({"ports": [{"name": "http\n", "port": 80}]},
     [("spec.ports[0].name", f'Invalid value: "http\\n": {LABEL}')]),
    ({"ports": [{"port": 80}], "selector": {"app": "web\n"}},
     [("spec.selector", f'Invalid value: "web\\n": {LABEL_VALUE}')]),
    ({"ports": [{"port": 80, "targetPort": "web\n"}]},
     [("spec.ports[0].targetPort",
       'Invalid value: "web\\n": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)')]),
    ({"ports": [{"port": 0}]}, [("spec.ports[0].port", "Invalid value: 0: must be between 1 and 65535, inclusive"),
                                ("spec.ports[0].targetPort",  # defaulted to the port, as kube does
                                 "Invalid value: 0: must be between 1 and 65535, inclusive")]),
    ({"ports": [{"port": 80, "protocol": "HTTP"}]},
     [("spec.ports[0].protocol", 'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"')]),
    ({"type": "Balanced", "ports": [{"port": 80}]},
     [("spec.type", 'Unsupported value: "Balanced": supported values: "ClusterIP", "ExternalName", '
                    '"LoadBalancer", "NodePort"')]),
    ({}, [("spec.ports", "Required value")]),
    ({"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]},
     [("spec.ports[1].name", 'Duplicate value: "a"')]),
    ({"ports": [{"port": 80}, {"name": "b", "port": 81}, {"port": 82}]},  # one port may go unnamed, not several
     [("spec.ports[0].name", "Required value"), ("spec.ports[2].name", "Required value")]),
])
async def test_service_ports_and_selector_are_validated_as_kube_does(
        apiserver: RunningApiServer, spec: dict[str, Any], causes: list[tuple[str, str]]) -> None:
    status, body = await _req(apiserver, "POST", SERVICES, _service(**spec))
    assert (status, _causes(body)) == (422, causes), body
    ok = _service(ports=[{"name": "http", "port": 80, "targetPort": "http"}, {"name": "dns", "port": 53,
                                                                              "protocol": "UDP"}],
                  selector={"app": "web"})
    assert (await _req(apiserver, "POST", SERVICES, ok))[0] == 201


@pytest.mark.parametrize("distribution", ["PreferClose", "PreferSameZone", "PreferSameNode"])
async def test_service_traffic_distribution_takes_kubes_values(apiserver: RunningApiServer, distribution: str) -> None:
    name = distribution.lower()
    svc = _service(ports=[{"port": 80}], trafficDistribution=distribution) | {"metadata": {"name": name}}
    status, body = await _req(apiserver, "POST", SERVICES, svc)
    assert status == 201 and body["spec"]["trafficDistribution"] == distribution, body


async def test_an_unknown_service_traffic_distribution_is_refused_in_kubes_words(apiserver: RunningApiServer) -> None:
    """kube 1.34+ (PreferSameTrafficDistribution on) refuses anything else, on create and on update."""
    message = ('Unsupported value: "PreferSameRegion": supported values: "PreferClose", "PreferSameZone", '
               '"PreferSameNode"')
    svc = _service(ports=[{"port": 80}], trafficDistribution="PreferSameRegion") | {"metadata": {"name": "region"}}
    status, body = await _req(apiserver, "POST", SERVICES, svc)
    assert (status, _causes(body)) == (422, [("spec.trafficDistribution", message)]), body
    del svc["spec"]["trafficDistribution"]
    assert (await _req(apiserver, "POST", SERVICES, svc))[0] == 201
    status, body = await _req(apiserver, "PATCH", SERVICES + "/region", {"spec": {"trafficDistribution": "PreferSameRegion"}},
                              "application/merge-patch+json")
    assert (status, _causes(body)) == (422, [("spec.trafficDistribution", message)]), body


async def test_objects_stored_before_the_validation_still_take_status_writes(apiserver: RunningApiServer) -> None:
    """A data dir written by an older server holds an Ingress without pathType and a Service with a
    bad port name: their controllers' status writes must go on (kube validates only the status
    there), while a change of their spec is held to the rules."""
    meta = {"namespace": "default", "uid": "u-1", "creationTimestamp": "2026-12-01T00:00:00Z"}
    apiserver.store.create("networking.k8s.io/ingresses", _ingress(
        {"rules": [_rule(path_type=None)]}, **meta) | {"status": {"loadBalancer": {}}})
    legacy = _service(ports=[{"name": "http\n", "port": 80}]) | {"metadata": {"name": "web", **meta},
                                                                  "status": {"loadBalancer": {}}}
    default_service(legacy)  # stored as the old server stored it: defaulted
    apiserver.store.create("/services", legacy)
    address = {"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.9"}]}}}
    for path in (INGRESSES + "/web/status", SERVICES + "/web/status"):
        status, body = await _req(apiserver, "PATCH", path, address, "application/merge-patch+json")
        assert status == 200 and body["status"]["loadBalancer"]["ingress"] == [{"ip": "127.0.0.9"}], (path, body)
    status, body = await _req(apiserver, "PATCH", INGRESSES + "/web", {"spec": {"ingressClassName": "edgelb"}},
                              "application/merge-patch+json")
    assert (status, _causes(body)) == (422, [(f"{P0}.pathType", "Required value: pathType must be specified")])


async def test_an_object_named_before_the_rule_can_still_be_updated_and_deleted(apiserver: RunningApiServer) -> None:
    """`trail\\n` was stored by the lenient server; kube judges a name on create only, so its
    finalizer can still be removed and the object deleted (not stuck forever)."""
    apiserver.store.create("/configmaps", _cm(name="trail\n", namespace="default", uid="u-2", finalizers=["a.io/x"],
                                              creationTimestamp="2026-12-01T00:00:00Z"))
    path = "/api/v1/namespaces/default/configmaps/trail%0A"
    status, body = await _req(apiserver, "PATCH", path, {"metadata": {"finalizers": None}},
                              "application/merge-patch+json")
    assert status == 200 and "finalizers" not in body["metadata"], body
    assert (await _req(apiserver, "DELETE", path))[0] == 200
    assert (await _req(apiserver, "GET", path))[0] == 404
