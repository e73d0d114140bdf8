"""The pool manager against a real apiserver and real HAProxy processes: routing, headers, PROXY v2,
stats, hitless reloads, runtime-API server changes, instance death, slots shared by two managers."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import httpx2
import pytest
from aiohttp import web
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace

from isthmus.api.lb import LB_NAMESPACE, LoadBalancerPool, api_name
from isthmus.haproxy.config import render
from isthmus.kube.helpers import install_crds
from tests.harness.polling import eventually_passes
from tests.harness.pools import POOL, Env

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]

T = TypeVar("T")


async def http_backend(name: str) -> tuple[web.AppRunner, int]:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"backend": name, "path": request.path, "headers": dict(request.headers)})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


async def proxy_v2_backend() -> tuple[asyncio.Server, int, list[bytes]]:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readexactly(16)
        rest = await reader.readexactly(int.from_bytes(head[14:16], "big"))
        seen.append(head + rest)
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


@pytest.fixture
async def env(apiserver: Any, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    client = apiserver.client()
    await install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name=LB_NAMESPACE)))
    e = Env(apiserver, tmp_path, abs(hash(request.node.name)) % 50)
    try:
        yield e
    finally:
        await e.close()


def frontend_port(pool: LoadBalancerPool, name: str) -> int:
    return next(f.port for f in pool.status.frontends if f.name == name)


async def get(session: aiohttp.ClientSession, url: str, host: str = "x") -> tuple[int, Any]:
    async with session.get(url, headers={"Host": host}) as r:
        body = await r.text()
        try:
            return r.status, json.loads(body)
        except ValueError:
            return r.status, body


async def test_http_routing_headers_tcp_proxy_v2_and_stats(env: Env) -> None:
    runners = [await http_backend(n) for n in ("a", "b")]
    pserver, pport, seen = await proxy_v2_backend()
    await env.manager("m1")
    await env.pool("web", {
        "role": "slave_public",
        "haproxy": {
            "frontends": [
                {"name": "c:ns:ing", "bindPort": 0, "protocol": "HTTP", "linkBackend": {"map": [
                    {"backend": "c:ns:ing:b:80", "hostEq": "foo.com", "pathExact": "/exact"},
                    {"backend": "c:ns:ing:a:80", "hostReg": "^[^.]+\\.foo\\.com$"},
                    {"backend": "c:ns:ing:missing:80", "pathBeg": "/missing"},
                ]}},
                {"name": "c:ns:tcp:3306", "bindPort": 0, "linkBackend": {"defaultBackend": "c:ns:tcp:3306"}},
            ],
            "backends": [
                {"name": "c:ns:ing:a:80", "protocol": "HTTP", "rewriteHttp": {},
                 "servers": [{"address": "127.0.0.1", "port": runners[0][1]}]},
                {"name": "c:ns:ing:b:80", "protocol": "HTTP", "rewriteHttp": {},
                 "servers": [{"address": "127.0.0.1", "port": runners[1][1]}]},
                {"name": "c:ns:ing:missing:80", "protocol": "HTTP", "servers": []},
                {"name": "c:ns:tcp:3306", "proxyProtocol": True, "servers": [{"address": "127.0.0.1", "port": pport}]},
            ],
        },
    })  # fmt: skip
    pool = await env.ready("web")
    http = frontend_port(pool, "c:ns:ing")
    fe = next(f for f in pool.status.frontends if f.name == "c:ns:ing")
    assert fe.public_addresses == [env.public] and fe.private_addresses == [env.private]
    assert pool.status.addresses == ",".join(sorted([env.public, env.private]))
    inst = pool.status.instances[0]
    assert inst.holder == "m1" and inst.pid > 0 and inst.stats_port > 0
    async with aiohttp.ClientSession() as s:
        status, body = await get(s, f"http://{env.public}:{http}/exact", "FOO.com:{http}")
        assert (status, body["backend"]) == (200, "b")
        assert body["headers"]["X-Forwarded-For"] == "127.0.0.1"
        assert body["headers"]["X-Forwarded-Port"] == str(http)
        assert body["headers"]["X-Forwarded-Proto"] == "http"
        status, body = await get(s, f"http://{env.private}:{http}/exact/more", "foo.com")
        assert status == 404, body  # Exact is exact; nothing else matches → 404
        status, body = await get(s, f"http://{env.private}:{http}/any", "a.foo.com")
        assert (status, body["backend"]) == (200, "a")
        status, _ = await get(s, f"http://{env.private}:{http}/any", "a.b.foo.com")
        assert status == 404  # a wildcard covers one label
        status, _ = await get(s, f"http://{env.private}:{http}/missing", "x")
        assert status == 503  # a backend without servers
        status, stats = await get(s, f"http://{env.private}:{inst.stats_port}/metrics")
        assert status == 200 and "haproxy_process" in stats
    reader, writer = await asyncio.open_connection(env.public, frontend_port(pool, "c:ns:tcp:3306"))
    assert await reader.readline() == b"hello\n"
    writer.close()
    assert seen and seen[0][:12] == b"\r\n\r\n\x00\r\nQUIT\n" and seen[0][12] == 0x21  # PROXY v2, PROXY command
    pserver.close()
    for r, _ in runners:
        await r.cleanup()


async def test_reloads_under_load_lose_nothing_and_server_changes_need_no_reload(env: Env) -> None:
    runners = [await http_backend(n) for n in ("a", "b", "c")]
    ports = [p for _, p in runners]
    m = await env.manager("m1")

    def spec(tag: int, servers: list[int]) -> dict[str, Any]:
        return {"role": "internal", "haproxy": {
            "frontends": [{"name": "fe", "bindPort": 0, "protocol": "HTTP", "linkBackend": {
                "defaultBackend": "be", "map": [{"backend": "be", "pathBeg": f"/tag-{tag}"}]}}],
            "backends": [{"name": "be", "protocol": "HTTP",
                          "servers": [{"address": "127.0.0.1", "port": p} for p in servers]}]}}

    await env.pool("load", spec(0, ports[:1]))
    pool = await env.ready("load")
    url = f"http://{env.private}:{frontend_port(pool, 'fe')}/x"
    assert pool.status.addresses == env.private  # internal: the private address only
    failures: list[str] = []
    answered = 0
    stop = asyncio.Event()

    async def client() -> None:
        nonlocal answered
        async with aiohttp.ClientSession() as s:  # keep-alive connections across the reloads
            for _ in range(20000):  # bounded
                if stop.is_set():
                    return
                try:
                    async with s.get(url) as r:
                        await r.read()
                        if r.status != 200:
                            failures.append(str(r.status))
                        answered += 1
                except aiohttp.ClientError as e:
                    failures.append(repr(e))

    clients = [asyncio.create_task(client()) for _ in range(4)]
    run = m.running["load"]
    for tag in range(1, 11):  # ten reloads under load
        await env.client.patch(POOL, "load", {"spec": spec(tag, ports[:1])}, patch_type=_merge())
        await env.ready("load")
    assert run.instance.reloads == 10
    reloads_before = (await run.instance.show_proc()).reloads
    for servers in ([ports[0], ports[1]], [ports[1], ports[2]], [ports[2]], ports):  # servers only
        await env.client.patch(POOL, "load", {"spec": spec(10, servers)}, patch_type=_merge())
        await env.ready("load")
    stop.set()
    await asyncio.gather(*clients)
    assert failures == [] and answered > 100
    assert (await run.instance.show_proc()).reloads == reloads_before  # no reload for server changes
    assert run.instance.runtime_updates == 4
    # The file on disk is what a fresh render of the current spec gives: a reload would lose nothing.
    current = await env.get("load")
    assert run.layout is not None
    on_disk = (run.instance.run_dir / "haproxy.cfg").read_text()
    assert on_disk == render("load", current.spec, run.layout, run.instance.admin_sock)
    served: set[str] = set()
    for _ in range(12):  # a new connection each: each is balanced on its own
        async with aiohttp.ClientSession() as fresh, fresh.get(url) as r:
            served.add((await r.json())["backend"])
    assert served == {"a", "b", "c"}
    for r, _ in runners:
        await r.cleanup()


async def test_a_rejected_config_keeps_the_old_one_serving(env: Env) -> None:
    runner, port = await http_backend("a")
    await env.manager("m1")
    good = {"role": "internal", "haproxy": {
        "frontends": [{"name": "fe", "bindPort": 0, "protocol": "HTTP", "linkBackend": {"defaultBackend": "be"}}],
        "backends": [{"name": "be", "protocol": "HTTP", "servers": [{"address": "127.0.0.1", "port": port}]}]}}
    await env.pool("keep", good)
    pool = await env.ready("keep")
    url = f"http://{env.private}:{frontend_port(pool, 'fe')}/"
    bad = json.loads(json.dumps(good))
    bad["haproxy"]["backends"][0]["balance"] = "fastest"
    await env.client.patch(POOL, "keep", {"spec": bad}, patch_type=_merge())

    async def rejected() -> LoadBalancerPool:
        p = await env.get("keep")
        assert "balance 'fastest' is not one of" in p.status.instances[0].message, p.status.to_dict()
        return p

    p = await eventually_passes(rejected)
    assert p.status.instances[0].state == "Running"  # still serving the previous config
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200
    await runner.cleanup()


async def test_one_owners_refused_part_never_holds_back_the_other_owners_changes(env: Env) -> None:
    """Issue 40, item 2, on the pool manager's side: a pool shared by owners whatever wrote it (a
    hand-made spec, an older translator). Owner b's part is refused (a balance HAProxy lacks; a port
    another pool on this host binds); owner a's change in the same write is applied all the same."""
    runner, port = await http_backend("a")
    m = await env.manager("m1")
    await env.pool("holder", {"role": "internal", "haproxy": {
        "frontends": [{"name": "c:x:hold:18190", "bindPort": 18190, "linkBackend": {"defaultBackend": "c:x:hold:18190"}}],
        "backends": [{"name": "c:x:hold:18190", "servers": [{"address": "127.0.0.1", "port": port}]}]}})  # fmt: skip
    await env.ready("holder")

    def http(owner: str, ing: str, fe_port: int, balance: str = "roundrobin") -> tuple[dict[str, Any], dict[str, Any]]:
        be = f"c:{owner}:{ing}:web:80"
        return ({"name": f"c:{owner}:{ing}", "bindPort": fe_port, "protocol": "HTTP",
                 "linkBackend": {"defaultBackend": be}},
                {"name": be, "protocol": "HTTP", "balance": balance, "servers": [{"address": "127.0.0.1", "port": port}]})

    a1 = http("a", "one", 0)
    await env.pool("mixed", {"role": "internal", "haproxy": {"frontends": [a1[0]], "backends": [a1[1]]}})
    await env.ready("mixed")
    a2, b_bad, b_port = http("a", "two", 0), http("b", "bad", 0, balance="fastest"), http("b", "port", 18190)
    await env.client.patch(POOL, "mixed", {"spec": {"haproxy": {
        "frontends": [a1[0], a2[0], b_bad[0], b_port[0]], "backends": [a1[1], a2[1], b_bad[1], b_port[1]]}}},
        patch_type=_merge())  # fmt: skip

    async def applied() -> LoadBalancerPool:
        p = await env.get("mixed")
        assert "c:a:two" in {f.name for f in p.status.frontends}, p.status.to_dict()
        return p

    p = await eventually_passes(applied)
    inst = p.status.instances[0]
    assert inst.state == "Running" and p.status.ready == "1/1"
    assert "Ingress b/bad" in inst.message and "balance 'fastest'" in inst.message, inst.message
    assert "c:b:port" in inst.message and "used by pool holder" in inst.message, inst.message
    assert {f.name for f in p.status.frontends} == {"c:a:one", "c:a:two"}
    async with aiohttp.ClientSession() as s:
        status, body = await get(s, f"http://{env.private}:{frontend_port(p, 'c:a:two')}/")
        assert (status, body["backend"]) == (200, "a")
    assert m.running["holder"].state == "Running"  # the other pool keeps its port
    # The other pool goes: the port is free, the part left out for it is served now.
    await env.client.delete(POOL, "holder")

    async def port_part_served() -> None:
        p = await env.get("mixed")
        assert {f.name for f in p.status.frontends} == {"c:a:one", "c:a:two", "c:b:port"}, p.status.to_dict()
        assert "c:b:port" not in p.status.instances[0].message

    await eventually_passes(port_part_served, timeout=30.0)
    await runner.cleanup()


def _site(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "who").write_text(name)
    return directory


async def _http_process(directory: Path, name: str) -> tuple[asyncio.subprocess.Process, int]:
    """A real backend process (python's http.server) on 127.0.0.1 answering `/who` with its name."""
    directory = _site(directory, name)
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(directory), str(port),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)  # fmt: skip
        for _ in range(100):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return proc, port
            if proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    raise RuntimeError("no backend process")


async def test_a_frozen_backend_stops_getting_new_connections_within_seconds(env: Env) -> None:
    """Issue 40, item 12: the broker's MultiClusterService pool had no health checks, so a frozen
    provider's pods kept getting connections, which hung for the whole dead-cluster grace. The pool
    here is the one the broker builds (`mcsvc.haproxy.pool_spec`, a port named http) over two real
    backend processes; one is SIGSTOPped (its kernel still accepts connections)."""
    from isthmus.exposure.haproxy import pool_spec
    from isthmus.exposure.plan import Backends, Server

    (alive, alive_port), (frozen, frozen_port) = [await _http_process(env.tmp / n, n) for n in ("alive", "frozen")]
    try:
        await env.manager("m1")
        spec, _ = pool_spec(Backends(ports=[("http", 18197, "TCP")], servers={"http": [
            Server("c1", "127.0.0.1", alive_port), Server("c2", "127.0.0.1", frozen_port)]}))  # fmt: skip
        await env.pool("frozen", spec.to_dict())
        await env.ready("frozen")

        async def who(session: aiohttp.ClientSession) -> str:
            try:
                async with session.get(f"http://{env.private}:18197/who",
                                       timeout=aiohttp.ClientTimeout(total=2)) as r:  # fmt: skip
                    return await r.text()
            except (TimeoutError, aiohttp.ClientError) as e:
                raise AssertionError(f"no answer: {e!r}") from None

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:

            async def both() -> None:
                assert {await who(s) for _ in range(6)} == {"alive", "frozen"}

            await eventually_passes(both)
            os.kill(frozen.pid, signal.SIGSTOP)

            async def only_alive() -> None:  # every new connection answered, by the live one
                assert [await who(s) for _ in range(10)] == ["alive"] * 10

            await eventually_passes(only_alive, timeout=10.0)  # before: every other connection hung (60 s)
            p = await env.get("frozen")
            assert p.status.ready == "1/1"
    finally:
        for proc in (alive, frozen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            await proc.wait()


async def test_a_dead_instance_is_restarted_and_a_deleted_pool_stops(env: Env) -> None:
    runner, port = await http_backend("a")
    m = await env.manager("m1")
    await env.pool("die", {"role": "internal", "haproxy": {
        "frontends": [{"name": "fe", "bindPort": 0, "protocol": "HTTP", "linkBackend": {"defaultBackend": "be"}}],
        "backends": [{"name": "be", "protocol": "HTTP", "servers": [{"address": "127.0.0.1", "port": port}]}]}})
    pool = await env.ready("die")
    first = pool.status.instances[0].pid
    os.kill(first, signal.SIGKILL)

    async def restarted() -> LoadBalancerPool:
        p = await env.get("die")
        inst = p.status.instances[0]
        assert inst.state == "Running" and inst.pid not in (0, first) and inst.restarts == 1, p.status.to_dict()
        return p

    await eventually_passes(restarted)
    pid = m.running["die"].instance.pid
    await env.client.delete(POOL, "die")

    async def gone() -> None:
        assert "die" not in m.running
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    # A stop may take its whole sequence (soft stop 5 s, SIGTERM 2 s, SIGKILL 2 s: process.py) once
    # the deletion is seen; a loaded CI machine needed more than 15 s.
    await eventually_passes(gone, timeout=30.0)
    # Nothing of the deleted pool stays on disk (issue 40, item 13: its run directory did).
    assert not (env.tmp / "m1" / "die-0").exists()
    assert list((env.tmp / "m1").iterdir()) == []
    await runner.cleanup()


async def test_run_directories_of_pools_deleted_while_no_manager_ran_are_removed(env: Env) -> None:
    leftover = env.tmp / "m1" / "gone-while-down-0"
    leftover.mkdir(parents=True)
    (leftover / "haproxy.cfg").write_text("# left by an earlier pool manager\n")
    m = await env.manager("m1")

    async def removed() -> None:
        assert m.ready and not leftover.exists()

    await eventually_passes(removed)


async def test_a_pool_stored_with_an_invalid_name_is_reported_once_and_deletable(env: Env, apiserver: Any) -> None:
    """A name ending in a newline (stored before names were matched whole, issue 40, item 3): the
    pool manager tried to take its slot Lease, got 422 for the Lease name and retried forever, and
    nothing could delete it. The apiserver refuses such names now, so the legacy object is put in
    its store directly, as an older version of it stored it."""
    bad = "abcd\n"
    await env.pool("template", {"haproxy": {"frontends": [], "backends": []}})
    stored = copy.deepcopy(await env.client.get(POOL, "template"))
    legacy = stored.to_dict()
    legacy["metadata"] = {**legacy["metadata"], "name": bad, "uid": "legacy-uid-1"}
    legacy["metadata"].pop("resourceVersion", None)
    apiserver.store.create("isthmus.io/loadbalancerpools", legacy)
    await env.client.delete(POOL, "template")
    m = await env.manager("m1")
    await env.pool("fine", {"role": "internal", "haproxy": {"frontends": [], "backends": []}})
    await env.ready("fine")
    assert await m.reconcile(bad) is None  # reported once, not retried (it raised 422 for the Lease name)
    leases = [lease.metadata.name async for lease in env.client.list(Lease, namespace=LB_NAMESPACE)]
    assert not any(str(n).startswith("lbp-abcd") for n in leases)
    await env.client.delete(POOL, api_name(bad))
    names = [p.metadata.name async for p in env.client.list(POOL)]
    assert bad not in names


async def test_a_status_the_apiserver_refuses_sets_a_condition_instead_of_retrying_forever(env: Env) -> None:
    """The apiserver answers 413 for a status over its request limit (issue 40, item 5: a pool of
    100,000 instances did, and the manager retried forever with no condition). The limit is made
    small here by refusing pool status patches over 4 KiB as the apiserver refuses bodies over 3 MiB."""
    m = await env.manager("m1")
    real_patch = m.client.patch
    refused: list[int] = []

    async def limited_patch(res: Any, name: str, obj: Any, **kw: Any) -> Any:
        size = len(json.dumps(obj))
        if res is POOL.Status and size > 4096:
            refused.append(size)
            raise ApiError(request=httpx2.Request("PATCH", "http://127.0.0.1/"), response=httpx2.Response(413, json={
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 413,
                "reason": "RequestEntityTooLarge", "message": "Request entity too large: limit is 4096"}))
        return await real_patch(res, name, obj, **kw)

    m.client.patch = limited_patch  # type: ignore[method-assign]
    await env.pool("wide", {"count": 100, "role": "internal", "haproxy": {"frontends": [], "backends": []}})

    async def reported() -> None:
        p = await env.get("wide")
        conds = {c.type: c for c in p.status.conditions}
        assert "StatusWritten" in conds, p.status.to_dict()
        assert conds["StatusWritten"].status == "False" and conds["StatusWritten"].reason == "StatusNotWritten"
        assert "413" in conds["StatusWritten"].message and "limit is 4096" in conds["StatusWritten"].message

    await eventually_passes(reported)
    tries = len(refused)
    await asyncio.sleep(2.0)  # several renew periods: a refused status is not retried in a loop
    assert len(refused) - tries <= 2, refused
    # Fits again: written in full, the condition gone.
    await env.client.patch(POOL, "wide", {"spec": {"count": 2}}, patch_type=_merge())

    async def written() -> None:
        p = await env.get("wide")
        assert "StatusWritten" not in {c.type for c in p.status.conditions}, p.status.to_dict()
        assert p.status.ready == "1/2"

    await eventually_passes(written)


async def test_two_managers_split_the_slots_and_take_over_a_quiet_one(env: Env) -> None:
    runner, port = await http_backend("a")
    m1 = await env.manager("m1")
    await env.manager("m2", public=f"127.30.{250}.{1 + id(env) % 200}", private=f"127.31.{250}.{1 + id(env) % 200}")
    await env.pool("two", {"count": 2, "role": "internal", "haproxy": {
        "frontends": [{"name": "fe", "bindPort": 0, "protocol": "HTTP", "linkBackend": {"defaultBackend": "be"}}],
        "backends": [{"name": "be", "protocol": "HTTP", "servers": [{"address": "127.0.0.1", "port": port}]}]}})
    pool = await env.ready("two", instances=2)
    assert sorted(i.holder for i in pool.status.instances) == ["m1", "m2"]
    assert pool.status.ready == "2/2" and len(pool.status.addresses.split(",")) == 2
    # m1 goes away without a word: its slot turns Pending once its Lease expires.
    for m, task in env.managers:
        if m is m1:
            task.cancel()
            for run in list(m.running.values()):
                await run.instance.stop()
            m.running.clear()
            m.held.clear()
    env.managers = [(m, t) for m, t in env.managers if m is not m1]

    async def degraded() -> None:
        p = await env.get("two")
        assert p.status.ready == "1/2", p.status.to_dict()
        assert any(i.state == "Pending" and "m1 stopped renewing" in i.message for i in p.status.instances)

    await eventually_passes(degraded, timeout=20)
    await runner.cleanup()


def _merge() -> Any:
    from lightkube.types import PatchType

    return PatchType.MERGE
