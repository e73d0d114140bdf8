"""The aiohttp transport under lightkube: errors as httpx's, streamed bodies, timeouts (kube/transport.py)."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from aiohttp import web

from isthmus.kube.transport import AiohttpTransport
from tests.ports import free_port


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
