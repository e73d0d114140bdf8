"""A MultiClusterService controller per cluster over the in-process clusterset, and the writes the
exposure tests make (moved from tests/integration/test_mcsvc.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from isthmus.api.mcsvc import MultiClusterService
from isthmus.clusterset.membership import membership
from isthmus.exposure.broker import BrokerController
from isthmus.exposure.member import MemberController
from isthmus.exposure.provider import FakeLoadBalancer
from isthmus.kube.resources import resource_for
from tests.harness.clusterset import (
    ClusterSet,
    endpoint_slice,
    service,
)
from tests.harness.polling import eventually

MCS: Any = resource_for(MultiClusterService)
NS = "shop"


class Exposure:
    def __init__(self, cs: ClusterSet) -> None:
        self.cs = cs
        self.fake = FakeLoadBalancer()
        self.tasks: list[asyncio.Task[Any]] = []
        self.members: list[MemberController] = []

    async def start(self) -> None:
        for m in self.cs.clusters:
            cluster_id, info = await membership(m.client)
            ctl = MemberController(cluster=m.client, broker=info.client(), cluster_id=cluster_id,
                                   broker_namespace=info.namespace, identity=f"test-{cluster_id}")
            self.members.append(ctl)
            self.tasks.append(asyncio.create_task(ctl.run()))
        self.broker = BrokerController(self.cs.broker_client, self.fake, broker_namespace="isthmus-broker",
                                       identity="test-broker", grace=5.0)
        self.tasks.append(asyncio.create_task(self.broker.run()))
        await eventually(lambda: _true(all(c.ready for c in self.members) and self.broker.ready), timeout=30)

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(BaseException):
                await t


async def _true(value: bool) -> bool:
    return value


async def _serve(cs: ClusterSet, i: int, name: str, pod_ip: str, ports: list[dict[str, Any]] | None = None) -> None:
    ports = ports or [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "metrics", "port": 9090}]
    await cs.put(i, service(name, NS, ports=ports, cluster_ip=f"127.{201 + i}.0.{len(name)}"))
    await cs.put(i, endpoint_slice(name, NS, endpoints=[(pod_ip, True)],
                                   ports=[{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]))


async def _mcs(cs: ClusterSet, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> None:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    obj = MCS.from_dict({"apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterService",
                         "metadata": meta, "spec": spec})
    await cs.broker_client.apply(obj, field_manager="test", force=True)
