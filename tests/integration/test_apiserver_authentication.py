"""Authentication over the wire: who a request is, what reviews answer, what admission sees."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.admission.chain import Admission
from isthmus.apiserver.authentication.tls import issue_client_cert
from isthmus.apiserver.server import ApiServer

TOKEN = "s3cret-token"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[ApiServer, list[str]]]:
    seen: list[str] = []

    async def record(req: AdmissionRequest) -> None:
        # kube-root-ca.crt's publisher; the apiserver's own extension-apiserver-authentication
        if not req.user.startswith("system:serviceaccount:kube-system:") and req.user != "system:apiserver":
            seen.append(req.user)

    admission = Admission()
    admission.add_validating("", "configmaps", record)
    srv = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True, admission=admission)
    await srv.start()
    try:
        yield srv, seen
    finally:
        await srv.stop()


def client_ssl(srv: ApiServer, tmp_path: Path, user: str | None = None, groups: tuple[str, ...] = ()) -> ssl.SSLContext:
    assert srv.ca_pem is not None and srv.data_dir is not None
    ctx = ssl.create_default_context(cadata=srv.ca_pem.decode())
    if user is not None:
        cert, key = issue_client_cert(srv.data_dir / "tls", user, groups)
        (tmp_path / "c.pem").write_bytes(cert)
        (tmp_path / "k.pem").write_bytes(key)
        ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    return ctx


async def post(srv: ApiServer, ctx: ssl.SSLContext, path: str, body: Any,
               token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.post(srv.url + path, json=body, headers=headers, ssl=ctx) as r:
        return r.status, await r.json(content_type=None)


SSR = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
REVIEWS = "/apis/authentication.k8s.io/v1/"


async def test_self_subject_review_names_the_requester(server: tuple[ApiServer, list[str]], tmp_path: Path) -> None:
    srv, _ = server
    code, body = await post(srv, client_ssl(srv, tmp_path), REVIEWS + "selfsubjectreviews", SSR, TOKEN)
    assert code == 201
    assert body["status"] == {"userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]}}
    assert body["metadata"]["creationTimestamp"]
    code, body = await post(srv, client_ssl(srv, tmp_path, "robot", ("bots",)), REVIEWS + "selfsubjectreviews", SSR)
    assert code == 201
    assert body["status"]["userInfo"] == {"username": "robot", "groups": ["bots", "system:authenticated"]}
    # Anonymous users only reach the public paths: no review of themselves.
    code, body = await post(srv, client_ssl(srv, tmp_path), REVIEWS + "selfsubjectreviews", SSR)
    assert (code, body["reason"]) == (401, "Unauthorized")


async def test_token_review_needs_a_token(server: tuple[ApiServer, list[str]], tmp_path: Path) -> None:
    srv, _ = server
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}}
    code, body = await post(srv, client_ssl(srv, tmp_path), REVIEWS + "tokenreviews", review, TOKEN)
    assert code == 400
    assert body["message"] == "token is required for TokenReview in authentication"
    review["spec"] = {"token": TOKEN}
    code, body = await post(srv, client_ssl(srv, tmp_path), REVIEWS + "tokenreviews", review, TOKEN)
    assert code == 201 and body["status"]["authenticated"] is True


async def test_admission_sees_the_authenticated_user(server: tuple[ApiServer, list[str]], tmp_path: Path) -> None:
    srv, seen = server
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    code, _ = await post(srv, client_ssl(srv, tmp_path), "/api/v1/namespaces/default/configmaps", cm, TOKEN)
    assert code == 201
    cm["metadata"] = {"name": "b"}
    # jane may write configmaps through RBAC only once bound to a role that allows it.
    code, _ = await post(srv, client_ssl(srv, tmp_path, "jane"), "/api/v1/namespaces/default/configmaps", cm)
    assert code == 403
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "jane"},
               "roleRef": {"kind": "ClusterRole", "name": "edit"}, "subjects": [{"kind": "User", "name": "jane"}]}
    code, _ = await post(srv, client_ssl(srv, tmp_path), "/apis/rbac.authorization.k8s.io/v1/namespaces/default/"
                         "rolebindings", binding, TOKEN)
    assert code == 201
    code, _ = await post(srv, client_ssl(srv, tmp_path, "jane"), "/api/v1/namespaces/default/configmaps", cm)
    assert code == 201
    assert seen == ["admin", "jane"]
