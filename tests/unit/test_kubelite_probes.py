"""kube-lite's probes, each handler against something real on 127.0.0.1, with the kubelet's wording."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from isthmus.local.kubelite.probes import Prober, ProbeResult, probe_once, resolve_port
from tests.harness.ports import free_port

CONTAINER = {"name": "main", "ports": [{"name": "metrics", "containerPort": 0}]}


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(status=int(request.query.get("status", "200")))

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1], seen
    finally:
        await runner.cleanup()


async def test_http_probe(server: tuple[int, list[dict[str, str]]]) -> None:
    port, seen = server
    container = {"name": "main", "ports": [{"name": "metrics", "containerPort": port}]}
    ok = await probe_once({"httpGet": {"path": "/readyz", "port": "metrics", "httpHeaders": [
        {"name": "X-Probe", "value": "yes"}]}}, host="127.0.0.1", container=container, env={})
    assert ok == ProbeResult(True)
    assert seen[0]["User-Agent"] == "kube-probe/1.32" and seen[0]["X-Probe"] == "yes"
    assert await probe_once({"httpGet": {"path": "/?status=302", "port": port}}, host="127.0.0.1",
                            container=container, env={}) == ProbeResult(True)  # 3xx (the redirect's target)
    bad = await probe_once({"httpGet": {"path": "/?status=503", "port": port}}, host="127.0.0.1",
                           container=container, env={})
    assert bad == ProbeResult(False, "HTTP probe failed with statuscode: 503")
    closed = free_port()
    refused = await probe_once({"httpGet": {"path": "/healthz", "port": closed}}, host="127.0.0.1",
                               container=container, env={})
    assert not refused.ok and refused.message.startswith(f'Get "http://127.0.0.1:{closed}/healthz": dial tcp ')


async def test_tcp_and_exec_probes(server: tuple[int, list[dict[str, str]]]) -> None:
    port, _ = server
    assert (await probe_once({"tcpSocket": {"port": port}}, host="127.0.0.1", container=CONTAINER, env={})).ok
    closed = free_port()
    refused = await probe_once({"tcpSocket": {"port": closed}}, host="127.0.0.1", container=CONTAINER, env={})
    assert refused == ProbeResult(False, f"dial tcp 127.0.0.1:{closed}: connect: connection refused")
    env = {"PATH": "/usr/bin:/bin", "WANT": "yes"}
    assert (await probe_once({"exec": {"command": ["sh", "-c", 'test "$WANT" = yes']}}, host="", container=CONTAINER,
                             env=env)).ok
    failed = await probe_once({"exec": {"command": ["sh", "-c", "echo not ready; exit 1"]}}, host="",
                              container=CONTAINER, env=env)
    assert failed == ProbeResult(False, "not ready")
    slow = await probe_once({"exec": {"command": ["sleep", "5"]}, "timeoutSeconds": 1}, host="", container=CONTAINER,
                            env=env)
    assert not slow.ok and "timed out" in slow.message


def test_named_ports() -> None:
    assert resolve_port("metrics", {"name": "c", "ports": [{"name": "metrics", "containerPort": 9090}]}) == 9090
    assert resolve_port(8080, CONTAINER) == 8080 and resolve_port("8080", CONTAINER) == 8080
    with pytest.raises(ValueError, match="couldn't find port: nope in main"):
        resolve_port("nope", CONTAINER)


async def test_thresholds() -> None:
    """Readiness flips after failureThreshold failures and back after successThreshold successes."""
    results = itertools.chain([True, True, False, False, True, True], itertools.repeat(True))
    changes: list[bool] = []
    failures: list[str] = []

    async def once() -> Any:
        return ProbeResult(next(results), "no")

    prober = Prober("readiness", {"periodSeconds": 0.01, "failureThreshold": 2, "successThreshold": 2}, once,
                    lambda ok, _: changes.append(ok), failures.append)
    task = asyncio.create_task(prober.run())
    await asyncio.sleep(0.3)
    task.cancel()
    assert changes == [True, False, True] and failures == ["no", "no"]
