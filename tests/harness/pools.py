"""A pool manager running real HAProxy against a real apiserver, for the pool tests (moved from
tests/integration/test_haproxy_pools.py)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from isthmus.api.lb import LoadBalancerPool
from isthmus.haproxy.manager import PoolManager
from isthmus.kube.resources import resource_for
from tests.harness.polling import eventually_passes

POOL = resource_for(LoadBalancerPool)


class Env:
    def __init__(self, apiserver: Any, tmp: Path, n: int) -> None:
        self.client = apiserver.client()
        self.tmp = tmp
        self.public, self.private = f"127.30.{200 + n}.1", f"127.31.{200 + n}.1"
        self.managers: list[tuple[PoolManager, asyncio.Task[None]]] = []

    async def manager(self, identity: str, public: str | None = None, private: str | None = None) -> PoolManager:
        m = PoolManager(self.client, identity=identity, public_address=public or self.public,
                        private_address=private or self.private, state_dir=self.tmp / identity,
                        lease_duration=3, renew_period=0.5)  # fmt: skip
        self.managers.append((m, asyncio.create_task(m.run())))
        return m

    async def pool(self, name: str, spec: dict[str, Any]) -> None:
        await self.client.create(POOL.from_dict({"apiVersion": "isthmus.io/v1alpha1", "kind": "LoadBalancerPool",
                                                 "metadata": {"name": name}, "spec": spec}))

    async def get(self, name: str) -> LoadBalancerPool:
        return LoadBalancerPool.from_dict(await self.client.get(POOL, name))

    async def ready(self, name: str, instances: int = 1) -> LoadBalancerPool:
        async def probe() -> LoadBalancerPool:
            pool = await self.get(name)
            conds = {c.type: c for c in pool.status.conditions}
            assert "Ready" in conds and conds["Ready"].status == "True", pool.status.to_dict()
            assert pool.status.ready_instances == instances, pool.status.to_dict()
            assert pool.status.observed_generation == pool.metadata.generation
            return pool

        return await eventually_passes(probe)

    async def close(self) -> None:
        for m, task in self.managers:
            await m.shutdown()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
