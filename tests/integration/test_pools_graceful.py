"""Two pool managers serving one pool of size 2, and one of them stopped the way a rollout or a drain
stops it (SIGTERM: `isthmus pools`'s lame-duck period). Against a real apiserver and real HAProxy:
a replica is ready only once its instances serve, a stopping one turns not-ready at once and keeps
serving for the delay, then releases its slot, which the next replica takes at once (not after the
Lease's expiry)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace

from isthmus.api.lb import LB_NAMESPACE
from isthmus.cli.lameduck import LameDuck
from isthmus.haproxy.manager import PoolManager, lease_name
from isthmus.kube.helpers import install_crds
from tests.harness.polling import eventually_passes
from tests.harness.pools import Env

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

DELAY = 3.0
LEASE = 60
"""Far longer than the test: a slot taken over was released, not expired."""


async def http_backend(name: str) -> tuple[web.AppRunner, int]:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"backend": name})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


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


async def start(env: Env, identity: str, public: str, private: str) -> tuple[PoolManager, LameDuck]:
    """A pool manager as `isthmus pools` runs it: its Manager under the lame-duck wrapper."""
    m = PoolManager(env.client, identity=identity, public_address=public, private_address=private,
                    state_dir=env.tmp / identity, lease_duration=LEASE, renew_period=0.5)  # fmt: skip
    duck = LameDuck(m.manager, DELAY, "pools")
    await duck.start()
    return m, duck


async def test_a_stopping_replica_serves_through_the_delay_then_hands_its_slot_over(env: Env) -> None:
    runner, port = await http_backend("a")
    n = abs(hash(env.tmp)) % 200
    addresses = {"m1": (env.public, env.private), "m2": (f"127.30.251.{1 + n}", f"127.31.251.{1 + n}")}
    await env.pool("two", {"count": 2, "role": "internal", "haproxy": {
        "frontends": [{"name": "fe", "bindPort": 0, "protocol": "HTTP", "linkBackend": {"defaultBackend": "be"}}],
        "backends": [{"name": "be", "protocol": "HTTP", "servers": [{"address": "127.0.0.1", "port": port}]}]}})
    ducks: dict[str, tuple[PoolManager, LameDuck]] = {}
    try:
        for name, (public, private) in addresses.items():
            m, duck = ducks[name] = await start(env, name, public, private)

            for _ in range(2000):  # bounded: 20 s
                if duck.ready:
                    break
                await asyncio.sleep(0.01)
            # Ready means serving, from the first moment: what follows readiness (a rollout, the runc
            # speaker) may send connections here from now on.
            assert duck.ready and "two" in m.running and m.running["two"].instance.running, m.running
        pool = await env.ready("two", instances=2)
        m1, duck1 = ducks["m1"]
        slot1 = m1.held["two"][0]
        url = f"http://{env.private}:{next(i for i in pool.status.instances if i.holder == 'm1').frontends[0].port}/"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            async with http.get(url) as r:
                assert r.status == 200
            stopping = asyncio.ensure_future(duck1.stop())
            await asyncio.sleep(0)
            assert not duck1.ready  # at once: the endpoints and the speaker move away first
            ok = failed = 0
            end = time.monotonic() + DELAY - 1.0
            while time.monotonic() < end:  # what was already routed here is still answered
                try:
                    async with http.get(url) as r:
                        ok += r.status == 200
                        failed += r.status != 200
                except aiohttp.ClientError:
                    failed += 1
            lease = await env.client.get(Lease, lease_name("two", slot1), namespace=LB_NAMESPACE)
            assert lease.spec is not None and lease.spec.holderIdentity == "m1"  # still held while serving
            assert failed == 0 and ok > 5, (ok, failed)
            await stopping
        lease = await env.client.get(Lease, lease_name("two", slot1), namespace=LB_NAMESPACE)
        assert lease.spec is not None and not lease.spec.holderIdentity  # released on a graceful stop
        # The replacement takes the released slot at once, though the Lease would not expire for a minute.
        ducks["m3"] = await start(env, "m3", env.public, env.private)
        pool = await env.ready("two", instances=2)
        assert sorted(i.holder for i in pool.status.instances) == ["m2", "m3"]
        assert ducks["m3"][0].held["two"][0] == slot1
    finally:
        for name, (_m, duck) in ducks.items():
            if name != "m1":
                duck.delay = 0
                with contextlib.suppress(Exception):
                    await duck.stop()
        await runner.cleanup()


async def test_isthmus_pools_at_sigterm_serves_through_the_delay_then_exits_and_releases(
        env: Env, apiserver: Any) -> None:
    """The command as the pod runs it: SIGTERM turns /readyz 503 at once, the instance answers through
    --shutdown-delay, then the process exits 0 well within kube's grace period with its slot released."""
    import os
    import signal
    import sys

    from tests.harness.ports import free_port

    runner, port = await http_backend("a")
    await env.pool("one", {"count": 1, "role": "internal", "haproxy": {
        "frontends": [{"name": "fe", "bindPort": 0, "protocol": "HTTP", "linkBackend": {"defaultBackend": "be"}}],
        "backends": [{"name": "be", "protocol": "HTTP", "servers": [{"address": "127.0.0.1", "port": port}]}]}})
    mport = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "pools", "--kubeconfig", apiserver.kubeconfig,
        "--public-address", env.public, "--private-address", env.private, "--identity", "cli",
        "--state-dir", str(env.tmp / "cli"), "--metrics-addr", f"127.0.0.1:{mport}",
        "--shutdown-delay", str(DELAY), env={**os.environ, "POD_NAMESPACE": LB_NAMESPACE},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output = b""
    try:
        pool = await env.ready("one")
        url = f"http://{env.private}:{pool.status.instances[0].frontends[0].port}/"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:

            async def readyz() -> int:
                try:
                    async with http.get(f"http://127.0.0.1:{mport}/readyz") as r:
                        return r.status
                except aiohttp.ClientError:
                    return 0

            await eventually_passes(lambda: _equal(readyz(), 200))
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            await eventually_passes(lambda: _equal(readyz(), 503), timeout=1.0)
            ok = failed = 0
            while time.monotonic() < sent + DELAY - 1.0:
                try:
                    async with http.get(url) as r:
                        ok += r.status == 200
                        failed += r.status != 200
                except aiohttp.ClientError:
                    failed += 1
            assert failed == 0 and ok > 5, (ok, failed)
        output, _ = await asyncio.wait_for(proc.communicate(), 25)  # kube's default grace is 30 s
        assert proc.returncode == 0, output.decode()
        lease = await env.client.get(Lease, lease_name("one", 0), namespace=LB_NAMESPACE)
        assert lease.spec is not None and not lease.spec.holderIdentity
    finally:
        if proc.returncode is None:
            proc.kill()
            output, _ = await proc.communicate()
        print(output.decode())
        await runner.cleanup()


async def _equal(value: Any, want: Any) -> None:
    assert await value == want
