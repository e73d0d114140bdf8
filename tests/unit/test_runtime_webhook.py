"""The generic AdmissionReview v1 server: what kube-apiserver gets back for good and bad reviews."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from isthmus.runtime.webhook import AdmissionResponse, WebhookServer, self_signed, server_context


async def deny(request: dict[str, Any]) -> AdmissionResponse:
    return AdmissionResponse(allowed=False, code=422, message=f"no {request['name']}", warnings=["careful"])


async def patch(_request: dict[str, Any]) -> AdmissionResponse:
    return AdmissionResponse(patch=[{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}])


async def broken(_request: dict[str, Any]) -> AdmissionResponse:
    raise RuntimeError("boom")


def review(**request: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.fixture
async def base() -> AsyncIterator[str]:
    server = WebhookServer({"/deny": deny, "/patch": patch, "/broken": broken})
    await server.start("127.0.0.1", 0, None)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


async def post(url: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, data=json.dumps(body)) as r:
        return r.status, (await r.json() if r.content_type == "application/json" else await r.text())


async def test_a_denial_echoes_the_uid_with_status_and_warnings(base: str) -> None:
    status, body = await post(base + "/deny", review(uid="u-1", name="web"))
    assert status == 200 and body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"] == {"uid": "u-1", "allowed": False, "warnings": ["careful"],
                                "status": {"code": 422, "message": "no web", "reason": "Invalid"}}


async def test_a_patch_is_base64_jsonpatch(base: str) -> None:
    _, body = await post(base + "/patch", review(uid="u-2"))
    resp = body["response"]
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(resp["patch"])) == [
        {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]


async def test_a_failing_handler_denies_with_500(base: str) -> None:
    _, body = await post(base + "/broken", review(uid="u-3"))
    assert body["response"]["allowed"] is False and body["response"]["status"]["code"] == 500
    assert "boom" in body["response"]["status"]["message"]


@pytest.mark.parametrize("body", [
    "not json at all",
    {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
    [1, 2],
])
async def test_a_malformed_review_is_400(base: str, body: Any) -> None:
    status, _ = await post(base + "/deny", body)
    assert status == 400


async def test_health_and_unknown_paths(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        for path in ("/healthz", "/readyz"):
            async with s.get(base + path) as r:
                assert r.status == 200
        async with s.post(base + "/nowhere", data="{}") as r:
            assert r.status == 404


async def test_self_signed_certificates_serve_tls_for_the_service_name(tmp_path: Path) -> None:
    certs = self_signed(["isthmus-lb.isthmus-system.svc", "127.0.0.1"])
    cert = x509.load_pem_x509_certificate(certs.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["isthmus-lb.isthmus-system.svc"]
    (tmp_path / "tls.crt").write_bytes(certs.cert)
    (tmp_path / "tls.key").write_bytes(certs.key)
    server = WebhookServer({"/deny": deny})
    await server.start("127.0.0.1", 0, server_context(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")))
    try:
        client = ssl.create_default_context(cadata=certs.ca.decode())
        async with aiohttp.ClientSession() as s, s.get(
                f"https://127.0.0.1:{server.port}/healthz", ssl=client) as r:
            assert r.status == 200
        other = ssl.create_default_context(cadata=self_signed(["x"]).ca.decode())
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{server.port}/healthz", ssl=other):
                pass
    finally:
        await server.stop()
