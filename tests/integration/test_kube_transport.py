"""The aiohttp transport under lightkube: errors as httpx's, streamed bodies, timeouts, and the requests
that skip httpx (kube/transport.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiohttp
import httpx2
import pytest
import yaml
from aiohttp import web
from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import ServiceStatus
from lightkube.models.discovery_v1 import Endpoint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.kube import helpers
from isthmus.kube.client import load_config, make_client
from isthmus.kube.transport import AiohttpTransport, install
from tests.harness.ports import free_port


async def test_refused_connection_is_httpx_connect_error() -> None:
    client = httpx2.AsyncClient(transport=AiohttpTransport(True))
    with pytest.raises(httpx2.ConnectError, match=r"\[Errno 111\] Connection refused"):
        await client.get(f"http://127.0.0.1:{free_port()}/")
    await client.aclose()


async def test_bodies_stream_headers_and_errors_pass_through() -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"X-Kind": "watch"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f'{{"n":{i}}}\n'.encode())
            await asyncio.sleep(0.05)
        return resp

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({"method": request.method, "body": body.decode(),
                                  "auth": request.headers.get("Authorization")}, status=201)

    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/watch", stream)
    app.router.add_route("PATCH", "/echo", echo)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    client = httpx2.AsyncClient(transport=AiohttpTransport(True), base_url=f"http://127.0.0.1:{port}")
    try:
        r = await client.patch("/echo", content=b'{"a":1}', headers={"Authorization": "Bearer t"})
        assert (r.status_code, r.json()) == (201, {"method": "PATCH", "body": '{"a":1}', "auth": "Bearer t"})

        async with client.stream("GET", "/watch", timeout=httpx2.Timeout(5, read=None)) as resp:
            assert resp.headers["x-kind"] == "watch"
            lines = [line async for line in resp.aiter_lines()]
        assert lines == ['{"n":0}', '{"n":1}', '{"n":2}']

        with pytest.raises(httpx2.ReadTimeout):
            await client.get("/slow", timeout=httpx2.Timeout(0.3))
    finally:
        await client.aclose()
        await runner.cleanup()


# ---------------------------------------------------------------- fast_request (lightkube without httpx)


class _Api:
    """An API server stand-in that records what arrives and answers as it is told."""

    def __init__(self) -> None:
        self.seen: list[dict[str, object]] = []
        self.answers: list[tuple[int, dict[str, object]]] = []
        self.delay = 0.0

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append({"method": request.method, "path": request.path, "query": dict(request.query),
                          "type": request.headers.get("Content-Type"),
                          "auth": request.headers.getall("Authorization", []),
                          "trace": request.headers.get("X-Trace"), "body": await request.read()})
        await asyncio.sleep(self.delay)
        status, body = self.answers.pop(0) if self.answers else (200, _NS)
        # As kube-apiserver labels it (aiohttp's json_response adds a charset lightkube does not expect).
        return web.Response(body=json.dumps(body).encode(), status=status, headers={"Content-Type": "application/json"})


_NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "resourceVersion": "7"}}
_UNAUTHORIZED = (401, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401,
                       "reason": "Unauthorized", "message": "Unauthorized"})


async def _serve(api: _Api) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


def _kubeconfig(tmp_path: Path, port: int, user: dict[str, str]) -> Path:
    conf = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(conf))
    return path


async def test_fast_requests_send_what_lightkube_prepares_without_httpx(tmp_path: Path) -> None:
    api = _Api()
    runner, port = await _serve(api)
    client = make_client(_kubeconfig(tmp_path, port, {"token": "t0"}), field_manager="tester")

    async def no_httpx(*_a: object, **_k: object) -> None:
        raise AssertionError("httpx's send was used")

    client._client._client.send = no_httpx  # type: ignore[method-assign,assignment]
    try:
        slice_ = EndpointSlice(metadata=ObjectMeta(name="s1", namespace="n1", labels={"a": "b"}),
                               addressType="IPv4", endpoints=[Endpoint(addresses=["10.1.0.1"])])
        api.answers.append((201, {**slice_.to_dict(), "metadata": {"name": "s1", "namespace": "n1", "uid": "u1"}}))
        got = await client.apply(slice_, force=True)
        assert got.metadata is not None and got.metadata.uid == "u1"
        sent = api.seen[-1]
        assert (sent["method"], sent["path"], sent["query"], sent["type"], sent["auth"]) == (
            "PATCH", "/apis/discovery.k8s.io/v1/namespaces/n1/endpointslices/s1",
            {"fieldManager": "tester", "force": "true"}, "application/apply-patch+yaml", ["Bearer t0"])
        assert json.loads(sent["body"]) == slice_.to_dict()  # type: ignore[arg-type]

        client._client._client.headers["X-Trace"] = "on"  # the client's headers as they are at each request
        ns = await client.get(Namespace, "default")
        assert ns.metadata is not None and ns.metadata.resourceVersion == "7"
        assert api.seen[-1]["method"] == "GET" and api.seen[-1]["query"] == {} and api.seen[-1]["trace"] == "on"

        await client.create(Namespace(metadata=ObjectMeta(name="x")))
        assert (api.seen[-1]["method"], api.seen[-1]["path"], api.seen[-1]["type"]) == (
            "POST", "/api/v1/namespaces", "application/json")

        api.answers.append((200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}))
        await client.delete(Namespace, "x")
        assert (api.seen[-1]["method"], api.seen[-1]["path"]) == ("DELETE", "/api/v1/namespaces/x")

        # The write helpers prepare their requests themselves: the same requests go out.
        await helpers.apply_quiet(client, slice_, field_manager="agent", force=True)
        sent = api.seen[-1]
        assert (sent["method"], sent["path"], sent["query"], sent["type"]) == (
            "PATCH", "/apis/discovery.k8s.io/v1/namespaces/n1/endpointslices/s1",
            {"fieldManager": "agent", "force": "true"}, "application/apply-patch+yaml")
        assert json.loads(sent["body"]) == slice_.to_dict()  # type: ignore[arg-type]
        svc = Service(metadata=ObjectMeta(name="web", namespace="n1"), status=ServiceStatus(conditions=[]))
        await helpers.patch_status_quiet(client, svc, field_manager="agent", patch_type=PatchType.MERGE)
        sent = api.seen[-1]
        assert (sent["method"], sent["path"], sent["query"], sent["type"], json.loads(sent["body"])) == (
            "PATCH", "/api/v1/namespaces/n1/services/web/status", {"fieldManager": "agent"},
            "application/merge-patch+json", {"status": {"conditions": []}})
        api.answers.append((201, {**_NS, "metadata": {"name": "y", "uid": "u2"}}))
        made = await helpers.create(client, Namespace(metadata=ObjectMeta(name="y")), field_manager="agent")
        assert made.metadata is not None and made.metadata.uid == "u2"
        assert (api.seen[-1]["method"], api.seen[-1]["path"], api.seen[-1]["query"]) == (
            "POST", "/api/v1/namespaces", {"fieldManager": "agent"})
        api.answers.append((200, {**_NS, "metadata": {"name": "y", "resourceVersion": "9"}}))
        put = await helpers.replace(client, Namespace(metadata=ObjectMeta(name="y", resourceVersion="8")))
        assert put.metadata is not None and put.metadata.resourceVersion == "9"
        sent = api.seen[-1]
        assert (sent["method"], sent["path"], sent["query"], json.loads(sent["body"])["metadata"]) == (
            "PUT", "/api/v1/namespaces/y", {"fieldManager": "tester"}, {"name": "y", "resourceVersion": "8"})
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_client_header_with_a_line_break_is_refused(tmp_path: Path) -> None:
    """The fast path sends the client's own headers as they are: one that would split the head
    leaves the request to httpx, which refuses it, and nothing is sent."""
    api = _Api()
    runner, port = await _serve(api)
    client = make_client(_kubeconfig(tmp_path, port, {"token": "t0"}))
    try:
        client._client._client.headers["X-Trace"] = "on\r\nx-evil: 1"
        with pytest.raises(ValueError, match="header injection"):
            await client.get(Namespace, "default")
        with pytest.raises(ValueError, match="header injection"):
            await helpers.apply_quiet(client, Namespace(metadata=ObjectMeta(name="x")), field_manager="m")
        assert api.seen == []
    finally:
        await client.close()
        await runner.cleanup()


async def test_fast_request_errors_are_lightkube_and_httpx_errors(tmp_path: Path) -> None:
    api = _Api()
    runner, port = await _serve(api)
    client = make_client(_kubeconfig(tmp_path, port, {"token": "t0"}), timeout=0.5)
    try:
        api.answers.append((404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                  "message": 'namespaces "nope" not found', "code": 404}))
        with pytest.raises(ApiError) as err:
            await client.get(Namespace, "nope")
        assert (err.value.status.code, err.value.status.message) == (404, 'namespaces "nope" not found')

        api.delay = 2.0
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(Namespace, "default")
    finally:
        await client.close()
        await runner.cleanup()
    gone = make_client(_kubeconfig(tmp_path, free_port(), {"token": "t0"}))
    try:
        with pytest.raises(httpx2.ConnectError, match="Connection refused"):
            await gone.get(Namespace, "default")
    finally:
        await gone.close()


async def test_fast_request_reads_a_rotated_token_file_after_a_401(tmp_path: Path) -> None:
    api = _Api()
    runner, port = await _serve(api)
    token = tmp_path / "token"
    token.write_text("old")
    client = make_client(_kubeconfig(tmp_path, port, {"tokenFile": str(token)}))
    try:
        await client.get(Namespace, "default")
        # Rotated within the same second, same inode: only the 401 makes the client read it again.
        stat = token.stat()
        token.write_text("new")
        os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        api.answers.append(_UNAUTHORIZED)
        ns = await client.get(Namespace, "default")
        assert ns.metadata is not None and ns.metadata.name == "default"
        assert [s["auth"] for s in api.seen] == [["Bearer old"], ["Bearer old"], ["Bearer new"]]
        api.answers.append(_UNAUTHORIZED)
        with pytest.raises(ApiError) as err:  # the file did not change: no second try
            await client.get(Namespace, "default")
        assert err.value.status.code == 401 and len(api.seen) == 4
    finally:
        await client.close()
        await runner.cleanup()


async def test_hooks_and_other_auth_keep_httpx(tmp_path: Path) -> None:
    api = _Api()
    runner, port = await _serve(api)
    client = make_client(_kubeconfig(tmp_path, port, {"username": "u", "password": "p"}))
    hooked = make_client(_kubeconfig(tmp_path, port, {"token": "t0"}))
    recorded: list[str] = []

    async def record(request: httpx2.Request) -> None:
        recorded.append(request.url.path)

    hooked._client._client.event_hooks = {"request": [record], "response": []}
    try:
        await client.get(Namespace, "default")
        assert str(api.seen[-1]["auth"][0]).startswith("Basic ")  # type: ignore[index]
        await hooked.get(Namespace, "default")
        assert recorded == ["/api/v1/namespaces/default"]
    finally:
        await client.close()
        await hooked.close()
        await runner.cleanup()


async def test_a_server_behind_a_proxy_is_reached_through_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that trusts the environment (a server other than loopback) honours HTTP(S)_PROXY as
    httpx does: its requests go through the proxy, not straight to the server."""
    api = _Api()
    runner, port = await _serve(api)
    forwarded: list[str] = []

    async def forward(request: web.BaseRequest) -> web.StreamResponse:  # a plain HTTP proxy: absolute-form targets
        forwarded.append(f"{request.method} {request.url}")
        async with aiohttp.ClientSession() as session, session.request(
                request.method, request.url, headers={k: v for k, v in request.headers.items() if k != "Host"},
                data=await request.read()) as upstream:
            return web.Response(status=upstream.status, body=await upstream.read(),
                                headers={"Content-Type": upstream.headers.get("Content-Type", "")})

    proxy = web.Server(forward)
    proxy_runner = web.ServerRunner(proxy)
    await proxy_runner.setup()
    proxy_port = free_port()
    await web.TCPSite(proxy_runner, "127.0.0.1", proxy_port).start()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
    client = AsyncClient(load_config(_kubeconfig(tmp_path, port, {"token": "t0"})), trust_env=True)
    install(client)
    try:
        ns = await client.get(Namespace, "default")
        assert ns.metadata is not None and ns.metadata.name == "default"
        assert forwarded == [f"GET http://127.0.0.1:{port}/api/v1/namespaces/default"]
        assert api.seen[-1]["auth"] == ["Bearer t0"]
    finally:
        await client.close()
        await proxy_runner.cleanup()
        await runner.cleanup()
