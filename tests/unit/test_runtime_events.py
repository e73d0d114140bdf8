"""Event recorder aggregation against a fake client."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from isthmus.runtime import EventRecorder

pytestmark = pytest.mark.timeout(10)


def api_error(code: int) -> ApiError:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "message": "x",
        "reason": "x",
    }
    return ApiError(
        request=httpx2.Request("GET", "http://127.0.0.1/"), response=httpx2.Response(code, json=body)
    )


class FakeClient:
    def __init__(self) -> None:
        self.created: list[Any] = []
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.patch_error: ApiError | None = None
        self.create_error: Exception | None = None

    async def create(self, obj: Any) -> Any:
        if self.create_error is not None:
            raise self.create_error
        self.created.append(obj)
        return obj

    async def patch(
        self, res: Any, name: str, body: dict[str, Any], *, namespace: str, patch_type: Any
    ) -> Any:
        if self.patch_error is not None:
            raise self.patch_error
        self.patches.append((namespace, name, body))
        return None


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def obj(name: str = "web", ns: str = "prod") -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, uid="u-1", resourceVersion="7"))


async def test_first_event_creates_then_repeats_aggregate() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "isthmus-test", instance="host1", clock=Clock())  # type: ignore[arg-type]
    for _ in range(3):
        await rec.emit(obj(), "Warning", "BadConfig", "port is not a number")
    assert len(client.created) == 1
    ev = client.created[0]
    assert ev.metadata.namespace == "prod" and ev.metadata.name.startswith("web.")
    assert (ev.type, ev.reason, ev.message, ev.count) == ("Warning", "BadConfig", "port is not a number", 1)
    assert ev.involvedObject.kind == "ConfigMap" and ev.involvedObject.apiVersion == "v1"
    assert ev.involvedObject.uid == "u-1" and ev.involvedObject.name == "web"
    assert ev.source.component == "isthmus-test" and ev.reportingInstance == "host1"
    assert [p[2]["count"] for p in client.patches] == [2, 3]
    assert all(p[1] == ev.metadata.name for p in client.patches)
    assert client.patches[1][2]["lastTimestamp"] == "2024-05-01T12:00:03Z"


async def test_different_message_or_object_is_a_new_event() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    await rec.emit(obj(), "Normal", "Synced", "a")
    await rec.emit(obj(), "Normal", "Synced", "b")
    await rec.emit(obj("other"), "Normal", "Synced", "a")
    await rec.emit(obj(), "Warning", "Synced", "a")
    assert len(client.created) == 4 and not client.patches


async def test_cluster_scoped_object_events_go_to_default_namespace() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    await rec.emit(Namespace(metadata=ObjectMeta(name="prod")), "Normal", "Seen", "hi")
    assert client.created[0].metadata.namespace == "default"
    assert client.created[0].involvedObject.kind == "Namespace"


async def test_deleted_event_is_recreated_with_running_count() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    await rec.emit(obj(), "Normal", "R", "m")
    client.patch_error = api_error(404)
    await rec.emit(obj(), "Normal", "R", "m")
    assert len(client.created) == 2 and client.created[1].count == 2
    client.patch_error = None
    await rec.emit(obj(), "Normal", "R", "m")
    assert client.patches[-1][1] == client.created[1].metadata.name
    assert client.patches[-1][2]["count"] == 3


async def test_failures_never_raise_and_background_recording_flushes() -> None:
    client = FakeClient()
    client.create_error = RuntimeError("apiserver down")
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    await rec.emit(obj(), "Normal", "R", "m")  # logged, not raised
    client.create_error = None
    rec.warning(obj(), "Bad", "x")
    rec.warning(obj(), "Bad", "x")
    rec.normal(obj(), "Good", "y")
    await rec.flush()
    assert sorted(e.reason for e in client.created) == ["Bad", "Good"]
    assert [p[2]["count"] for p in client.patches] == [2]
    await rec.aclose()


async def test_lru_bounds_memory() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c", max_tracked=2)  # type: ignore[arg-type]
    for m in ("a", "b", "c"):
        await rec.emit(obj(), "Normal", "R", m)
    await rec.emit(obj(), "Normal", "R", "a")  # forgotten: created anew
    assert len(client.created) == 4 and not client.patches


async def test_a_full_buffer_drops_events_counts_them_and_warns_once_per_burst(
        caplog: pytest.LogCaptureFixture) -> None:
    from isthmus.runtime import metrics

    client = FakeClient()
    rec = EventRecorder(client, "c", buffer=2)  # type: ignore[arg-type]
    dropped = metrics.EVENTS_EMITTED.labels("dropped")
    before = dropped._value.get()
    with caplog.at_level("WARNING", logger="isthmus.runtime.events"):
        for i in range(10):  # no await in between: the writer cannot take any yet
            rec.normal(obj(), "R", f"m{i}")
    assert dropped._value.get() - before == 8
    warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1 and "1 event(s) dropped" in warnings[0].getMessage()
    await rec.flush()
    assert [e.message for e in client.created] == ["m0", "m1"]
    rec.normal(obj(), "R", "later")  # room again: recorded
    await rec.flush()
    assert client.created[-1].message == "later"
    await rec.aclose()
