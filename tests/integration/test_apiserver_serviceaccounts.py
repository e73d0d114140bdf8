"""ServiceAccounts as a real cluster has them: tokens (TokenRequest, `kubectl create token`), their
authentication and revocation, and kube-controller-manager's ServiceAccount controllers."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.authentication.serviceaccounts import ServiceAccountTokens
from isthmus.apiserver.server import ApiServer
from tests.harness.apiserver import RunningApiServer
from tests.harness.polling import eventually

TOKEN = "admin-token"
KUBECTL = "/usr/bin/kubectl"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


class Api:
    """The server over HTTPS, as admin (the bearer token) or as another token's user."""

    def __init__(self, run: RunningApiServer) -> None:
        self.run = run

    @property
    def srv(self) -> ApiServer:
        return self.run.server

    def _ssl(self) -> ssl.SSLContext:
        assert self.srv.ca_pem is not None
        return ssl.create_default_context(cadata=self.srv.ca_pem.decode())

    async def call(self, method: str, path: str, body: Any = None, token: str | None = TOKEN,
                   content_type: str = "application/json") -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers["Content-Type"] = content_type
        data = json.dumps(body).encode() if body is not None else None
        async with aiohttp.ClientSession() as s, s.request(method, self.srv.url + path, data=data, headers=headers,
                                                           ssl=self._ssl()) as r:
            text = await r.text()
            return r.status, json.loads(text) if r.content_type == "application/json" else text

    async def create(self, path: str, body: Any) -> Any:
        code, out = await self.call("POST", path, body)
        assert code == 201, out
        return out

    async def review(self, token: str, audiences: list[str] | None = None) -> Any:
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = audiences
        out = await self.create("/apis/authentication.k8s.io/v1/tokenreviews",
                                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
        return out["status"]

    async def token(self, sa: str, spec: dict[str, Any] | None = None, ns: str = "default") -> tuple[int, Any]:
        return await self.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec or {}})

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, "--kubeconfig", self.run.kubeconfig, *args], capture_output=True, text=True,
                              timeout=60)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    run = RunningApiServer(tmp_path / "apiserver", token=TOKEN, tls=True)
    await run.start()
    try:
        yield Api(run)
    finally:
        await run.close()


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


async def make_sa(api: Api, name: str = "bot", ns: str = "default") -> Any:
    return await api.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})


async def make_pod(api: Api, name: str = "p", sa: str = "bot") -> Any:
    return await api.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"serviceAccountName": sa, "containers": [{"name": "c", "image": "busybox"}]}})


# ---------------------------------------------------------------- TokenRequest and authentication


async def test_kubectl_create_token_authenticates_as_the_service_account(api: Api) -> None:
    sa = await make_sa(api)
    r = await asyncio.to_thread(api.kubectl, "create", "token", "bot")
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    c = claims(token)
    assert c["iss"] == API_AUDIENCE and c["aud"] == [API_AUDIENCE]
    assert c["sub"] == "system:serviceaccount:default:bot"
    assert c["exp"] - c["iat"] == 3600 and c["nbf"] == c["iat"]
    assert c["kubernetes.io"] == {"namespace": "default", "serviceaccount": {"name": "bot", "uid": sa["metadata"]["uid"]}}

    status = await api.review(token)
    assert status["authenticated"] is True
    assert status["audiences"] == [API_AUDIENCE]
    assert status["user"] == {
        "username": "system:serviceaccount:default:bot", "uid": sa["metadata"]["uid"],
        "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={c['jti']}"]}}
    # The token is a credential for the API itself (kubectl auth whoami's review).
    code, who = await api.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, token=token)
    assert code == 201 and who["status"]["userInfo"]["username"] == "system:serviceaccount:default:bot"


async def test_kubectl_create_token_duration_audience_and_kubes_errors(api: Api) -> None:
    await make_sa(api)
    r = await asyncio.to_thread(api.kubectl, "create", "token", "bot", "--duration=2h", "--audience=vault")
    assert r.returncode == 0, r.stderr
    c = claims(r.stdout.strip())
    assert c["aud"] == ["vault"] and c["exp"] - c["iat"] == 7200
    r = await asyncio.to_thread(api.kubectl, "create", "token", "bot", "--duration=5m")
    assert r.returncode != 0
    assert ('TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 300: '
            "may not specify a duration less than 10 minutes") in r.stderr
    r = await asyncio.to_thread(api.kubectl, "create", "token", "nobody")
    assert r.returncode != 0 and 'serviceaccounts "nobody" not found' in r.stderr


async def test_token_request_validation_is_kubes(api: Api) -> None:
    await make_sa(api)
    code, body = await api.token("bot", {"expirationSeconds": 599})
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                                          "message": "Invalid value: 599: may not specify a duration less than "
                                                     "10 minutes"}]
    code, body = await api.token("bot", {"expirationSeconds": 600})
    assert code == 201 and body["spec"]["expirationSeconds"] == 600 and body["spec"]["audiences"] == [API_AUDIENCE]
    code, body = await api.token("ghost")
    assert (code, body["message"], body["details"]) == (404, 'serviceaccounts "ghost" not found',
                                                        {"name": "ghost", "kind": "serviceaccounts"})
    code, body = await api.token("bot", {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "nope"}})
    assert (code, body["message"]) == (404, 'pods "nope" not found')
    code, body = await api.token("bot", {"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}})
    assert (code, body["message"]) == (400, "cannot bind token to object of type /v1, Kind=ConfigMap")
    code, _ = await api.call("GET", "/api/v1/namespaces/default/serviceaccounts/bot/token")
    assert code == 405


async def test_deleting_the_service_account_revokes_its_tokens(api: Api) -> None:
    await make_sa(api)
    _, body = await api.token("bot")
    token = body["status"]["token"]
    assert (await api.call("GET", "/api/v1/namespaces/default/configmaps", token=token))[0] != 401
    code, _ = await api.call("DELETE", "/api/v1/namespaces/default/serviceaccounts/bot")
    assert code == 200
    status = await api.review(token)
    assert status == {"user": {}, "error": 'serviceaccounts "bot" not found'}
    code, body = await api.call("GET", "/api/v1/namespaces/default/configmaps", token=token)
    assert (code, body["reason"]) == (401, "Unauthorized")
    # A new ServiceAccount of the same name is another one: the old token stays revoked.
    sa = await make_sa(api)
    status = await api.review(token)
    assert status["error"] == (f"service account UID ({sa['metadata']['uid']}) does not match claim "
                               f"({claims(token)['kubernetes.io']['serviceaccount']['uid']})")


async def test_pod_bound_token_names_the_pod_and_dies_with_it(api: Api) -> None:
    await make_sa(api)
    pod = await make_pod(api)
    r = await asyncio.to_thread(api.kubectl, "create", "token", "bot", "--bound-object-kind=Pod",
                                "--bound-object-name=p")
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert claims(token)["kubernetes.io"]["pod"] == {"name": "p", "uid": pod["metadata"]["uid"]}
    extra = (await api.review(token))["user"]["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["p"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    # A bound object reference with another uid: the object was replaced.
    code, body = await api.token("bot", {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p",
                                                            "uid": "0000"}})
    assert (code, body["reason"]) == (409, "Conflict")
    assert body["message"].startswith('Operation cannot be fulfilled on Pod "p": the UID in the bound object '
                                      "reference (0000) does not match the UID in record.")
    # A pod running as another ServiceAccount cannot carry this one's token.
    await make_pod(api, "other", sa="default")
    code, body = await api.token("bot", {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "other"}})
    assert (code, body["message"]) == (400, 'cannot bind token for serviceaccount "bot" to pod running with '
                                            "different serviceaccount name.")
    code, _ = await api.call("DELETE", "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0")
    assert code == 200
    await eventually(lambda: api.srv.store.get("/pods", "default", "p") is None)
    assert await api.review(token) == {"user": {}, "error": "service account token has been invalidated"}


async def test_kubelet_token_of_3607_seconds_is_extended_to_a_year(api: Api) -> None:
    await make_sa(api)
    await make_pod(api)
    before = int(time.time())
    code, body = await api.token("bot", {"expirationSeconds": 3607, "boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": "p"}})
    assert code == 201 and body["spec"]["expirationSeconds"] == 3607
    c = claims(body["status"]["token"])
    assert c["exp"] - c["iat"] == 365 * 24 * 3600
    assert c["kubernetes.io"]["warnafter"] == c["iat"] + 3607
    # The status reports the expiry asked for, as kube does.
    expires = time.mktime(time.strptime(body["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert before + 3607 - 2 <= expires <= time.time() + 3607 + 2
    # Not pod-bound, or another audience: no extension.
    _, body = await api.token("bot", {"expirationSeconds": 3607})
    c = claims(body["status"]["token"])
    assert c["exp"] - c["iat"] == 3607 and "warnafter" not in c["kubernetes.io"]
    _, body = await api.token("bot", {"expirationSeconds": 3607, "audiences": ["vault"],
                                      "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}})
    assert claims(body["status"]["token"])["exp"] - claims(body["status"]["token"])["iat"] == 3607


async def test_expired_tokens_and_other_audiences_are_refused(api: Api) -> None:
    await make_sa(api)
    _, body = await api.token("bot", {"expirationSeconds": 600})
    token = body["status"]["token"]
    _, body = await api.token("bot", {"audiences": ["vault"]})
    vault = body["status"]["token"]
    status = await api.review(vault)
    assert status["error"] == (f'token audiences ["vault"] is invalid for the target audiences ["{API_AUDIENCE}"]')
    assert (await api.call("GET", "/api/v1/namespaces", token=vault))[0] == 401
    status = await api.review(vault, audiences=["vault", "other"])
    assert status["authenticated"] is True and status["audiences"] == ["vault"]
    # 600 s and the 60 s leeway later, the token has expired.
    api.srv.sa_tokens.clock = lambda: time.time() + 661
    assert await api.review(token) == {"user": {}, "error": "service account token has expired"}
    assert (await api.call("GET", "/api/v1/namespaces", token=token))[0] == 401


async def test_a_forged_token_is_refused(api: Api) -> None:
    await make_sa(api)
    _, body = await api.token("bot")
    header, payload, sig = body["status"]["token"].split(".")
    forged = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged["sub"] = "system:serviceaccount:kube-system:admin"
    forged_payload = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    status = await api.review(f"{header}.{forged_payload}.{sig}")
    assert status == {"user": {}, "error": "go-jose/go-jose: error in cryptographic primitive"}


async def test_tokens_survive_a_restart_with_the_data_dir(api: Api) -> None:
    await make_sa(api)
    _, body = await api.token("bot")
    key = api.run.data_dir / "tls" / "sa.key"
    assert key.stat().st_mode & 0o777 == 0o600
    await api.run.restart()
    assert (await api.review(body["status"]["token"]))["authenticated"] is True


# ---------------------------------------------------------------- kube-controller-manager's controllers


async def test_every_namespace_gets_a_default_service_account_and_the_root_ca(api: Api) -> None:
    await api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    store = api.srv.store
    assert await eventually(lambda: store.get("/serviceaccounts", "team", "default"))
    cm = await eventually(lambda: store.get("/configmaps", "team", "kube-root-ca.crt"))
    assert api.srv.ca_pem is not None and cm["data"] == {"ca.crt": api.srv.ca_pem.decode()}
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        assert store.get("/serviceaccounts", ns, "default") and store.get("/configmaps", ns, "kube-root-ca.crt")
    # Deleted or changed, they come back as they were.
    code, _ = await api.call("DELETE", "/api/v1/namespaces/team/serviceaccounts/default")
    assert code == 200
    assert await eventually(lambda: store.get("/serviceaccounts", "team", "default"))
    code, _ = await api.call("PATCH", "/api/v1/namespaces/team/configmaps/kube-root-ca.crt",
                             {"data": {"ca.crt": "junk"}}, content_type="application/merge-patch+json")
    assert code == 200
    assert await eventually(lambda: store.get("/configmaps", "team", "kube-root-ca.crt")["data"] == {
        "ca.crt": api.srv.ca_pem.decode()})  # type: ignore[union-attr]
    code, _ = await api.call("DELETE", "/api/v1/namespaces/team/configmaps/kube-root-ca.crt")
    assert code == 200
    cm = await eventually(lambda: store.get("/configmaps", "team", "kube-root-ca.crt"))
    assert cm["data"] == {"ca.crt": api.srv.ca_pem.decode()}


async def test_root_ca_is_published_only_when_serving_tls(tmp_path: Path) -> None:
    srv = ApiServer(token=TOKEN)
    await srv.start()
    try:
        assert await eventually(lambda: srv.store.get("/serviceaccounts", "default", "default"))
        await asyncio.sleep(0.2)
        assert srv.store.get("/configmaps", "default", "kube-root-ca.crt") is None
    finally:
        await srv.stop()


async def test_legacy_token_secret_is_filled_and_goes_with_its_service_account(api: Api) -> None:
    sa = await make_sa(api)
    await api.create("/api/v1/namespaces/default/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "bot-token", "annotations": {"kubernetes.io/service-account.name": "bot"}}})
    store = api.srv.store
    secret = await eventually(lambda: (s := store.get("/secrets", "default", "bot-token")) and
                              (s.get("data") or {}).get("token") and s)
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert api.srv.ca_pem is not None
    assert data["namespace"] == "default" and data["ca.crt"] == api.srv.ca_pem.decode()
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == sa["metadata"]["uid"]
    c = claims(data["token"])
    assert c["iss"] == "kubernetes/serviceaccount" and "exp" not in c and "aud" not in c
    status = await api.review(data["token"])
    assert status["authenticated"] is True
    assert status["user"]["username"] == "system:serviceaccount:default:bot"
    assert status["user"]["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default",
                                        "system:authenticated"]
    code, _ = await api.call("DELETE", "/api/v1/namespaces/default/serviceaccounts/bot")
    assert code == 200
    assert await eventually(lambda: store.get("/secrets", "default", "bot-token") is None)
    assert (await api.review(data["token"]))["error"] == "token has been invalidated"


async def test_a_token_secret_must_name_its_service_account(api: Api) -> None:
    code, body = await api.call("POST", "/api/v1/namespaces/default/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "orphan"}})
    assert (code, body["message"]) == (422, 'Secret "orphan" is invalid: '
                                            "metadata.annotations[kubernetes.io/service-account.name]: Required value")


async def test_another_issuer_is_also_the_api_audience(tmp_path: Path) -> None:
    issuer = "https://isthmus.example"
    run = RunningApiServer(tmp_path / "apiserver", token=TOKEN, tls=True, service_account_issuer=issuer)
    await run.start()
    try:
        api = Api(run)
        await make_sa(api)
        _, body = await api.token("bot")
        c = claims(body["status"]["token"])
        assert (c["iss"], c["aud"], body["spec"]["audiences"]) == (issuer, [issuer], [issuer])
        status = await api.review(body["status"]["token"])
        assert status["authenticated"] is True and status["audiences"] == [issuer]
        # Another server's tokens (another key, the default issuer) are not this one's.
        other = ServiceAccountTokens(None, lambda *_: None)
        forged, _ = other.issue({"metadata": {"name": "bot", "namespace": "default", "uid": "x"}}, [issuer], 3600)
        assert await api.review(forged) == {"user": {}, "error": "invalid bearer token"}
    finally:
        await run.close()
