"""`isthmus dns --workers 2`: two processes on the same addresses (SO_REUSEPORT) against an
embedded apiserver, queried over real sockets; one /metrics and /readyz served by the parent."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import time
from typing import Any

import aiohttp
import dns.asyncquery
import dns.exception
import dns.message
import pytest

from isthmus.kube.helpers import install_crds
from tests.harness.ports import free_port

pytestmark = pytest.mark.timeout(90)

NAME = "dns-version.clusterset.local"


async def answered(host: str, port: int, n: int) -> int:
    """Queries from `n` fresh client sockets (so `n` source ports, spread over the workers)."""

    async def one() -> bool:
        try:
            r = await dns.asyncquery.udp(dns.message.make_query(NAME, "TXT"), host, port=port, timeout=2)
        except (dns.exception.Timeout, OSError):
            return False
        return bool(r.answer)

    return sum(await asyncio.gather(*(one() for _ in range(n))))


async def metrics(http: aiohttp.ClientSession, port: int) -> dict[str, float]:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}


async def until(check: Any, within: float = 20.0) -> Any:
    end = time.monotonic() + within
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.1)


def alive(pid: int) -> bool:
    """Running (an exited orphan may stay a zombie if nothing reaps it: that counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT spreading is Linux's")
async def test_two_workers_share_the_port_and_a_killed_one_is_restarted(apiserver: Any) -> None:
    client = apiserver.client()
    async with asyncio.timeout(20):
        await install_crds(client)
    port, mport = free_port(udp=True), free_port()
    v6 = socket.has_ipv6
    try:
        port6 = free_port(udp=True, host="::1") if v6 else 0
    except OSError:
        v6 = False
    listen = ["--listen", f"127.0.0.1:{port}"] + (["--listen", f"[::1]:{port6}"] if v6 else [])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "dns", "--kubeconfig", apiserver.kubeconfig, "--cluster-id", "c1",
        *listen, "--workers", "2", "--metrics-addr", f"127.0.0.1:{mport}", "--log-level", "info",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                try:
                    async with http.get(f"http://127.0.0.1:{mport}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await until(ready)
            workers = children(proc.pid)
            assert len(workers) == 2

            async def both_answer() -> bool:
                assert await answered("127.0.0.1", port, 100) == 100
                if v6:
                    assert await answered("::1", port6, 20) == 20
                m = await metrics(http, mport)
                return all(m.get(f'isthmus_dns_worker_queries_total{{worker="{w}"}}', 0) > 0 for w in "01")

            await until(both_answer)
            total = (await metrics(http, mport))["isthmus_dns_queries_total{qtype=\"TXT\",rcode=\"NOERROR\"}"]

            os.kill(workers[0], signal.SIGKILL)

            async def restarted() -> bool:
                now = children(proc.pid)
                return len(now) == 2 and workers[0] not in now and await ready()

            await until(restarted)
            assert workers[1] in children(proc.pid)  # the other one kept running

            async def answers_resume() -> bool:
                return await answered("127.0.0.1", port, 50) == 50

            await until(answers_resume)
            m = await metrics(http, mport)
            assert m['isthmus_dns_worker_restarts_total{worker="0"}'] == 1
            assert m['isthmus_dns_worker_restarts_total{worker="1"}'] == 0
            # counters carry on across the restart (the dead worker's last report is kept)
            assert m['isthmus_dns_queries_total{qtype="TXT",rcode="NOERROR"}'] >= total
    finally:
        workers_now = children(proc.pid) if proc.returncode is None else []
        with contextlib.suppress(ProcessLookupError):  # it may have exited already
            proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(proc.communicate(), 20)
        print(output.decode())  # shown with a failure above: why the server went
    text = output.decode()
    assert proc.returncode == 0, text
    assert "dns worker died: restarting" in text
    assert workers_now and not any(alive(pid) for pid in workers_now)  # SIGTERM stopped the workers too


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT spreading is Linux's")
async def test_workers_stop_when_the_parent_is_killed(apiserver: Any) -> None:
    """No orphan keeps the port: a worker whose parent is gone (SIGKILL, nothing cleaned up) stops."""
    client = apiserver.client()
    async with asyncio.timeout(20):
        await install_crds(client)
    port = free_port(udp=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "dns", "--kubeconfig", apiserver.kubeconfig, "--cluster-id", "c1",
        "--listen", f"127.0.0.1:{port}", "--workers", "2", "--log-level", "warning",
    )  # fmt: skip
    workers: list[int] = []
    try:

        async def serving() -> bool:
            return await answered("127.0.0.1", port, 10) == 10

        await until(serving)
        workers = children(proc.pid)
        assert len(workers) == 2
    finally:
        proc.kill()
        await proc.wait()

    async def all_gone() -> bool:
        return not any(alive(pid) for pid in workers)

    await until(all_gone)
