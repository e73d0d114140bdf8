"""What the embedded apiserver puts on the wire where clients compare it with kube-apiserver's bytes.

- /openapi/v2: kube-openapi's handler: JSON or gnostic protobuf by Accept (kubectl asks for protobuf
  only), one ETag for both, If-None-Match → 304, 406 when nothing matches.
- Status error bodies: exactly what kube-apiserver writes for the same request (expected bytes
  derived from k8s.io/apimachinery/pkg/api/errors and Go's json.Encoder, trailing newline included).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.harness.apiserver import RunningApiServer
from tests.unit.gnostic_proto import decode_document

KUBECTL_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
PROTO_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
HEAD = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "sprockets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"plural": "sprockets", "singular": "sprocket", "kind": "Sprocket"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"teeth": {"type": "integer", "minimum": 1}}},
            }}},
        }],
    },
}


async def _req(srv: RunningApiServer, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any, bytes]:
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    if data is not None:
        headers.setdefault("Content-Type", "application/json")
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, data=data, headers=headers) as r:
        return r.status, r.headers, await r.read()


# ---------------------------------------------------------------------------------------- /openapi/v2


async def test_openapi_v2_is_protobuf_for_kubectl_and_json_otherwise(apiserver: RunningApiServer) -> None:
    status, headers, proto = await _req(apiserver, "GET", "/openapi/v2", Accept=KUBECTL_ACCEPT)
    assert status == 200, proto[:200]
    assert headers["Content-Type"] == PROTO_TYPE
    assert "Accept" in headers.get("Vary", "")
    status, json_headers, body = await _req(apiserver, "GET", "/openapi/v2", Accept="application/json")
    assert status == 200 and json_headers["Content-Type"].startswith("application/json")
    # the protobuf is the JSON document, as gnostic's schema reads it
    assert decode_document(proto) == json.loads(body)
    # one ETag for both encodings (kube derives it from the JSON), a quoted SHA-512
    assert headers["ETag"] == json_headers["ETag"]
    assert len(headers["ETag"]) == 130 and headers["ETag"].startswith('"')
    # no Accept header means */*: JSON, as before
    status, plain_headers, _ = await _req(apiserver, "GET", "/openapi/v2")
    assert status == 200 and plain_headers["Content-Type"].startswith("application/json")


async def test_openapi_v2_if_none_match(apiserver: RunningApiServer) -> None:
    _, headers, _ = await _req(apiserver, "GET", "/openapi/v2", Accept=KUBECTL_ACCEPT)
    etag = headers["ETag"]
    status, again, body = await _req(apiserver, "GET", "/openapi/v2", Accept=KUBECTL_ACCEPT, **{"If-None-Match": etag})
    assert (status, body) == (304, b"")
    assert again["ETag"] == etag
    status, _, body = await _req(apiserver, "GET", "/openapi/v2", Accept=KUBECTL_ACCEPT, **{"If-None-Match": '"0"'})
    assert status == 200 and body


async def test_openapi_v2_not_acceptable(apiserver: RunningApiServer) -> None:
    status, _, _ = await _req(apiserver, "GET", "/openapi/v2", Accept="text/html")
    assert status == 406


async def test_openapi_v2_protobuf_follows_crds(apiserver: RunningApiServer) -> None:
    _, before, _ = await _req(apiserver, "GET", "/openapi/v2", Accept=KUBECTL_ACCEPT)
    status, _, body = await _req(apiserver, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert status == 201, body
    _, after, proto = await _req(apiserver, "GET", "/openapi/v2", Accept=KUBECTL_ACCEPT)
    assert after["ETag"] != before["ETag"]
    schema = decode_document(proto)["definitions"]["com.example.v1.Sprocket"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": "example.com", "version": "v1", "kind": "Sprocket"}]
    assert schema["properties"]["spec"]["properties"]["teeth"] == {"type": "integer", "minimum": 1}


# ---------------------------------------------------------------------------------------- Status bodies


async def _expect(srv: RunningApiServer, method: str, path: str, code: int, tail: bytes, body: Any = None,
                  **headers: str) -> None:
    status, resp_headers, got = await _req(srv, method, path, body, **headers)
    assert status == code, got
    assert resp_headers["Content-Type"].startswith("application/json")
    assert got == HEAD + tail


def _cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}


async def test_not_found_bodies(apiserver: RunningApiServer) -> None:
    await _expect(apiserver, "GET", "/api/v1/namespaces/default/configmaps/nope", 404,
                  b'"message":"configmaps \\"nope\\" not found","reason":"NotFound",'
                  b'"details":{"name":"nope","kind":"configmaps"},"code":404}\n')
    await _expect(apiserver, "GET", "/apis/apps/v1/namespaces/default/deployments/nope", 404,
                  b'"message":"deployments.apps \\"nope\\" not found","reason":"NotFound",'
                  b'"details":{"name":"nope","group":"apps","kind":"deployments"},"code":404}\n')


async def test_unknown_paths_are_generic_not_found_with_empty_details(apiserver: RunningApiServer) -> None:
    """kube's go-restful answers routes it does not have with NewGenericServerResponse(404): details {}.
    `kubectl debug` dereferences details of the 404 for pods/<name>/ephemeralcontainers."""
    status, _, body = await _req(apiserver, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    assert status == 201, body
    generic = (b'"message":"the server could not find the requested resource","reason":"NotFound","details":{},'
               b'"code":404}\n')
    await _expect(apiserver, "PATCH", "/api/v1/namespaces/default/pods/p/ephemeralcontainers", 404, generic,
                  {"spec": {}}, **{"Content-Type": "application/strategic-merge-patch+json"})
    await _expect(apiserver, "GET", "/api/v1/namespaces/default/pods/p/ephemeralcontainers", 404, generic)
    await _expect(apiserver, "GET", "/api/v1/foos", 404, generic)
    await _expect(apiserver, "GET", "/apis/apps/v1/namespaces/default/foos/x", 404, generic)


async def test_write_error_bodies(apiserver: RunningApiServer) -> None:
    status, _, body = await _req(apiserver, "POST", "/api/v1/namespaces/default/configmaps", _cm("c"))
    assert status == 201, body
    await _expect(apiserver, "POST", "/api/v1/namespaces/default/configmaps", 409,
                  b'"message":"configmaps \\"c\\" already exists","reason":"AlreadyExists",'
                  b'"details":{"name":"c","kind":"configmaps"},"code":409}\n', _cm("c"))
    await _expect(apiserver, "PUT", "/api/v1/namespaces/default/configmaps/c", 409,
                  b'"message":"Operation cannot be fulfilled on configmaps \\"c\\": the object has been modified; '
                  b'please apply your changes to the latest version and try again","reason":"Conflict",'
                  b'"details":{"name":"c","kind":"configmaps"},"code":409}\n', _cm("c", resourceVersion="1"))
    rfc1123 = (b"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
               b"must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
               b"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    await _expect(apiserver, "POST", "/api/v1/namespaces/default/configmaps", 422,
                  b'"message":"ConfigMap \\"Bad_Name\\" is invalid: metadata.name: Invalid value: \\"Bad_Name\\": '
                  + rfc1123 + b'","reason":"Invalid","details":{"name":"Bad_Name","kind":"ConfigMap","causes":['
                  b'{"reason":"FieldValueInvalid","message":"Invalid value: \\"Bad_Name\\": ' + rfc1123
                  + b'","field":"metadata.name"}]},"code":422}\n', _cm("Bad_Name"))
    await _expect(apiserver, "POST", "/api/v1/namespaces/other/configmaps", 400,
                  b'"message":"the namespace of the provided object does not match the namespace sent on the '
                  b'request","reason":"BadRequest","code":400}\n', _cm("d", namespace="default"))
    await _expect(apiserver, "PATCH", "/api/v1/namespaces/default/configmaps", 405,
                  b'"message":"the server does not allow this method on the requested resource",'
                  b'"reason":"MethodNotAllowed","details":{},"code":405}\n', {}, **{"Content-Type":
                                                                                 "application/merge-patch+json"})
    await _expect(apiserver, "PATCH", "/api/v1/namespaces/default/configmaps/c", 415,
                  b'"message":"the body of the request was in an unknown format - accepted media types include: '
                  b'application/json-patch+json, application/merge-patch+json, '
                  b'application/strategic-merge-patch+json, application/apply-patch+yaml",'
                  b'"reason":"UnsupportedMediaType","code":415}\n', b"{}", **{"Content-Type": "text/plain"})


async def test_create_in_terminating_namespace_is_forbidden_with_kube_body(apiserver: RunningApiServer) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t"}}
    assert (await _req(apiserver, "POST", "/api/v1/namespaces", ns))[0] == 201
    # a finalizer on its content keeps the namespace terminating
    held = _cm("held", finalizers=["example.com/hold"])
    assert (await _req(apiserver, "POST", "/api/v1/namespaces/t/configmaps", held))[0] == 201
    assert (await _req(apiserver, "DELETE", "/api/v1/namespaces/t"))[0] == 200
    await _expect(apiserver, "POST", "/api/v1/namespaces/t/configmaps", 403,
                  b'"message":"configmaps \\"c\\" is forbidden: unable to create new content in namespace t because '
                  b'it is being terminated","reason":"Forbidden","details":{"name":"c","kind":"configmaps","causes":['
                  b'{"reason":"NamespaceTerminating","message":"namespace t is being terminated",'
                  b'"field":"metadata.namespace"}]},"code":403}\n', _cm("c"))


async def test_unauthorized_and_too_large_bodies(tmp_path: Path) -> None:
    srv = RunningApiServer(tmp_path / "apiserver", token="s3cret", max_body_bytes=1024)
    await srv.start()
    try:
        await _expect(srv, "GET", "/api/v1/namespaces", 401,
                      b'"message":"Unauthorized","reason":"Unauthorized","code":401}\n')
        await _expect(srv, "POST", "/api/v1/namespaces/default/configmaps", 413,
                      b'"message":"Request entity too large: limit is 1024","reason":"RequestEntityTooLarge",'
                      b'"code":413}\n', _cm("big") | {"data": {"x": "y" * 4096}}, Authorization="Bearer s3cret")
    finally:
        await srv.close()
