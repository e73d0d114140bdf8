"""Event recorder against the embedded apiserver: repeats aggregate into one Event."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace

from isthmus.runtime import EventRecorder

pytestmark = pytest.mark.timeout(30)


async def test_events_are_aggregated(apiserver: Any) -> None:
    c = apiserver.client()
    obj = await c.create(ConfigMap(metadata=ObjectMeta(name="web", namespace="default")))
    rec = EventRecorder(c, "isthmus-test")
    for _ in range(3):
        await rec.emit(obj, "Warning", "BadAnnotation", "port must be a number")
    rec.normal(obj, "Synced", "pool configured")  # background path
    await rec.flush()
    events = [e async for e in c.list(Event, namespace="default")]
    bad = [e for e in events if e.reason == "BadAnnotation"]
    assert len(bad) == 1
    ev = bad[0]
    assert ev.count == 3 and ev.type == "Warning" and ev.message == "port must be a number"
    assert ev.involvedObject.kind == "ConfigMap" and ev.involvedObject.name == "web"
    assert ev.involvedObject.uid == obj.metadata.uid
    assert ev.source.component == "isthmus-test"
    assert ev.lastTimestamp >= ev.firstTimestamp
    assert [e.count for e in events if e.reason == "Synced"] == [1]
    await rec.aclose()


async def test_event_for_cluster_scoped_object_and_recreate_after_delete(apiserver: Any) -> None:
    c = apiserver.client()
    ns = await c.create(Namespace(metadata=ObjectMeta(name="team-a")))
    rec = EventRecorder(c, "isthmus-test")
    await rec.emit(ns, "Normal", "Seen", "hello")
    [ev] = [e async for e in c.list(Event, namespace="default") if e.reason == "Seen"]
    await c.delete(Event, ev.metadata.name, namespace="default")
    await rec.emit(ns, "Normal", "Seen", "hello")  # patch → 404 → created again with the running count
    [ev2] = [e async for e in c.list(Event, namespace="default") if e.reason == "Seen"]
    assert ev2.count == 2 and ev2.metadata.name != ev.metadata.name
