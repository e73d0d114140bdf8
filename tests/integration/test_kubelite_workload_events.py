"""The StatefulSet, DaemonSet and ReplicaSet controllers' Events as kube's (source, reason and
wording), and a refused Pod reported as kube does (FailedCreate, the ReplicaFailure condition)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import ControllerRevision, DaemonSet, ReplicaSet, StatefulSet
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.scheduling_v1 import PriorityClass

from isthmus.local.kubelite.daemonsets import DaemonSetController
from isthmus.local.kubelite.workloads import ReplicaSetController, StatefulSetController
from isthmus.runtime import EventRecorder, SharedInformerFactory
from tests.harness.kubelite import NS, create
from tests.harness.polling import eventually

pytestmark = [pytest.mark.timeout(60)]

TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}


@pytest.fixture
async def client(apiserver: Any) -> AsyncIterator[AsyncClient]:
    client = apiserver.client()
    factory = SharedInformerFactory(client)
    pods, revisions = factory.informer(Pod), factory.informer(ControllerRevision)
    recorder = EventRecorder(client, "kube-lite")
    controllers: list[Any] = [
        StatefulSetController(client, factory.informer(StatefulSet), pods, revisions, recorder=recorder),
        DaemonSetController(client, factory.informer(DaemonSet), factory.informer(Node), pods, revisions,
                            recorder=recorder),
        ReplicaSetController(client, factory.informer(ReplicaSet), pods, recorder=recorder),
    ]
    factory.start()
    await factory.wait_synced()
    tasks = [asyncio.create_task(c.run()) for c in controllers]
    try:
        yield client
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await factory.stop()
        await recorder.aclose()


async def events_about(client: AsyncClient, kind: str, name: str) -> list[tuple[str, str, str, str]]:
    evs = sorted([e.to_dict() async for e in client.list(Event, namespace=NS)], key=lambda e: e["metadata"]["name"])
    return [(e["type"], e["reason"], e["message"], e["source"]["component"]) for e in evs
            if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name]


async def test_statefulset_and_daemonset_events(client: AsyncClient) -> None:
    await create(client, Node, {"metadata": {"name": "n1", "namespace": None}})
    sel = {"matchLabels": {"app": "x"}}
    await create(client, StatefulSet, {"metadata": {"name": "db"},
                                       "spec": {"replicas": 1, "serviceName": "db", "selector": sel,
                                                "template": TEMPLATE}})
    await create(client, DaemonSet, {"metadata": {"name": "agent"}, "spec": {"selector": sel, "template": TEMPLATE}})
    sts = await eventually(lambda: events_about(client, "StatefulSet", "db"), what="the StatefulSet's event")
    assert sts == [("Normal", "SuccessfulCreate", "create Pod db-0 in StatefulSet db successful",
                    "statefulset-controller")]
    (ds,) = await eventually(lambda: events_about(client, "DaemonSet", "agent"), what="the DaemonSet's event")
    assert ds[:2] == ("Normal", "SuccessfulCreate") and ds[2].startswith("Created pod: agent-")
    assert ds[3] == "daemonset-controller"
    await client.delete(Pod, "db-0", namespace=NS)


async def test_a_refused_pod_is_reported_on_its_replicaset(client: AsyncClient) -> None:
    template = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "priorityClassName": "gold"}}  # none such yet
    await create(client, ReplicaSet, {"metadata": {"name": "web"},
                                      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                                               "template": template}})

    async def failure() -> dict[str, Any] | None:
        rs = (await client.get(ReplicaSet, "web", namespace=NS)).to_dict()
        return next((c for c in (rs.get("status") or {}).get("conditions") or []
                     if c["type"] == "ReplicaFailure"), None)

    cond = await eventually(failure, what="the ReplicaFailure condition")
    assert (cond["status"], cond["reason"]) == ("True", "FailedCreate")
    assert cond["message"].startswith('pods "web-') and cond["message"].endswith(
        "is forbidden: no PriorityClass with name gold was found"), cond
    (ev, *_) = await events_about(client, "ReplicaSet", "web")
    assert ev[:2] == ("Warning", "FailedCreate") and ev[2] == f"Error creating: {cond['message']}"
    assert ev[3] == "replicaset-controller"
    await client.create(PriorityClass.from_dict({"metadata": {"name": "gold"}, "value": 1000}))  # type: ignore[call-overload]

    async def healed() -> bool:
        return await failure() is None and (await client.get(ReplicaSet, "web", namespace=NS)).to_dict()[
            "status"].get("replicas") == 1

    await eventually(healed, what="the condition removed once the Pod could be created")
