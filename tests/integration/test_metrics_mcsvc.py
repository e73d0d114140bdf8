"""isthmus_multicluster_services as the broker controller's cache has it, with a broker, three members,
their agents and exposure controllers, and the broker controller on the `fake` provider (the
test_mcsvc harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from lightkube.resources.core_v1 import Namespace

from isthmus.runtime import REGISTRY
from tests.harness.clusterset import ClusterSet
from tests.harness.exposure import MCS, NS, Exposure, _mcs, _serve
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[ClusterSet, Exposure]]:
    async with ClusterSet(tmp_path_factory.mktemp("mcsvc-metrics"), n=3) as cs:
        for i in range(3):
            await cs.ensure_namespace(i, NS)
        for ns in (NS, "isthmus-system"):
            await cs.broker_client.create(Namespace.from_dict({"metadata": {"name": ns}}))
        ex = Exposure(cs)
        await ex.start()
        try:
            yield cs, ex
        finally:
            await ex.stop()


def count(type_: str, ready: str) -> float:
    return REGISTRY.get_sample_value("isthmus_multicluster_services", {"type": type_, "ready": ready}) or 0.0


async def test_multicluster_services_by_type_and_readiness(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    for i in (0, 1):
        await _serve(cs, i, "web", f"127.{101 + i}.0.10")
    await _mcs(cs, "web", {"types": ["CrossCluster", "LoadBalancer"], "ports": [{"port": 80}],
                           "providerClusters": [{"name": "c1"}, {"name": "c2"}], "consumerClusters": [{"name": "c3"}]})
    # A port no provider's Service has: refused, never Ready.
    await _mcs(cs, "bad", {"types": ["CrossCluster"], "ports": [{"port": 81}],
                           "providerClusters": [{"name": "c1"}]})
    await _serve(cs, 0, "bad", "127.101.0.11")

    async def counted() -> bool:
        assert count("CrossCluster", "true") == 1 and count("LoadBalancer", "true") == 1
        assert count("CrossCluster", "false") == 1
        assert count("LoadBalancer", "false") == 0
        return True

    await eventually(counted, timeout=20, what="web Ready under both types, bad not Ready")
    await cs.broker_client.delete(MCS, "bad", namespace=NS)

    async def gone() -> bool:
        assert count("CrossCluster", "false") == 0 and count("CrossCluster", "true") == 1
        return True

    await eventually(gone, timeout=20, what="bad no longer counted")
