"""Pool health and egress bindings as the metrics show them, with a real pool manager running HAProxy
and a real egress operator binding claims on an embedded apiserver (values read from the runtime's
registry, as a scrape would)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from isthmus.api.lb import LB_NAMESPACE
from isthmus.cli import admission_plugins
from isthmus.egress.operator import EgressOperator
from isthmus.haproxy.manager import PoolResource
from isthmus.kube import helpers
from isthmus.kube.helpers import install_crds
from isthmus.runtime import REGISTRY
from tests.harness.apiserver import RunningApiServer
from tests.harness.egress import ClaimRes
from tests.harness.egress import Env as EgressEnv
from tests.harness.polling import eventually_passes
from tests.harness.pools import Env as PoolEnv

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def tcp_pool(port: int = 0, count: int = 1) -> dict[str, Any]:
    return {"role": "slave_public", "count": count, "haproxy": {
        "frontends": [{"name": "c:ns:db:5432", "bindPort": port, "linkBackend": {"defaultBackend": "c:ns:db:5432"}}],
        "backends": [{"name": "c:ns:db:5432", "servers": [{"address": "127.0.0.1", "port": 9}]}],
    }}


@pytest.fixture
async def pools(apiserver: Any, tmp_path: Path) -> AsyncIterator[PoolEnv]:
    client = apiserver.client()
    await install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name=LB_NAMESPACE)))
    e = PoolEnv(apiserver, tmp_path, 37)
    try:
        yield e
    finally:
        await e.close()


async def test_pool_health(pools: PoolEnv) -> None:
    await pools.manager("metrics-m1")
    # Two instances wanted, one edge host: one runs, the other slot waits for a pool manager.
    await pools.pool("metrics-ok", tcp_pool(count=2))

    async def ok() -> bool:
        assert sample("isthmus_pool_instances_desired", pool="metrics-ok") == 2
        assert sample("isthmus_pool_instances_ready", pool="metrics-ok") == 1
        assert sample("isthmus_pool_ready", pool="metrics-ok") == 1
        assert sample("isthmus_pool_haproxy_up", pool="metrics-ok", slot="0") == 1
        assert sample("isthmus_pool_haproxy_up", pool="metrics-ok", slot="1") is None, "not this manager's slot"
        return True

    await eventually_passes(ok)
    # Counters labelled by pool have their series at 0 from the start (issue 40, item 23: none until
    # the first event, so dashboards showed "No data").
    for counter in ("reloads", "runtime_updates", "config_rejections", "instance_restarts"):
        assert sample(f"isthmus_pools_{counter}_total", pool="metrics-ok") == 0, counter
    # A frontend port another process holds: HAProxy cannot start, the pool is not Ready.
    with socket.socket() as taken:
        taken.bind((pools.private, 0))
        taken.listen()
        await pools.pool("metrics-bad", tcp_pool(port=taken.getsockname()[1]))

        async def failed() -> bool:
            assert sample("isthmus_pool_instances_desired", pool="metrics-bad") == 1
            assert sample("isthmus_pool_instances_ready", pool="metrics-bad") == 0
            assert sample("isthmus_pool_ready", pool="metrics-bad") == 0
            assert sample("isthmus_pool_haproxy_up", pool="metrics-bad", slot="0") == 0
            return True

        await eventually_passes(failed)
    await pools.client.delete(PoolResource, "metrics-ok")

    async def gone() -> bool:
        assert sample("isthmus_pool_instances_desired", pool="metrics-ok") is None
        assert sample("isthmus_pool_haproxy_up", pool="metrics-ok", slot="0") is None
        assert sample("isthmus_pools_reloads_total", pool="metrics-ok") is None  # a deleted pool's series go
        assert sample("isthmus_pools_config_rejections_total", pool="metrics-ok") is None
        return True

    await eventually_passes(gone)


async def test_translation_counters_start_at_zero(apiserver: Any) -> None:
    from isthmus.lb.controller import Translator

    Translator(apiserver.client(), "metrics-c", identity="metrics")
    for kind in ("Service", "Ingress"):
        for result in ("ok", "invalid", "error"):
            assert sample("isthmus_lb_translations_total", kind=kind, result=result) is not None, (kind, result)


@pytest.fixture
async def egress(tmp_path: Path) -> AsyncIterator[EgressEnv]:
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build([]))
    await srv.start()
    client = srv.client()
    await helpers.install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name="isthmus-system")))
    op = EgressOperator(client, identity="metrics", lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
    task = asyncio.create_task(op.run())
    try:
        await eventually_passes(lambda: asyncio.sleep(0, op.ready))
        yield EgressEnv(srv, client)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await srv.close()


async def test_egress_bindings(egress: EgressEnv) -> None:
    await egress.klass("metrics-lab", [("127.32.9.1", "127.32.9.3")])
    await egress.claim("a", "metrics-lab")
    await egress.claim("b", "metrics-lab")
    await egress.claim("c", "metrics-nosuch")  # no such class: Pending
    await egress.bound("a")
    await egress.bound("b")

    async def bound() -> bool:
        assert sample("isthmus_egress_claims", **{"class": "metrics-lab", "phase": "Bound"}) == 2
        assert sample("isthmus_egress_claims", **{"class": "metrics-nosuch", "phase": "Pending"}) == 1
        assert sample("isthmus_egress_class_capacity", **{"class": "metrics-lab"}) == 3
        assert sample("isthmus_egress_class_allocated", **{"class": "metrics-lab"}) == 2
        assert sample("isthmus_egress_source_ips", **{"class": "metrics-lab", "phase": "Bound"}) == 2
        assert sample("isthmus_egress_class_capacity", **{"class": "metrics-nosuch"}) is None
        return True

    await eventually_passes(bound)
    await egress.client.delete(ClaimRes, "a", namespace="default")  # reclaim policy Delete frees its address

    async def freed() -> bool:
        assert sample("isthmus_egress_claims", **{"class": "metrics-lab", "phase": "Bound"}) == 1
        assert sample("isthmus_egress_class_allocated", **{"class": "metrics-lab"}) == 1
        return True

    await eventually_passes(freed)
