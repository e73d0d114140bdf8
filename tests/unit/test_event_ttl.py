"""Events expire --event-ttl after their last write, as kube-apiserver's etcd leases make them."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from isthmus.apiserver.controllers.eventttl import KEY, EventTTLController, last_written
from isthmus.apiserver.storage.store import Store
from isthmus.cli.apiserver import go_duration_seconds
from isthmus.cli.main import app


def event(name: str, written: str | None = None, created: str = "2026-11-28T08:00:00Z") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "creationTimestamp": created}
    if written is not None:
        meta["managedFields"] = [
            {"manager": "a", "operation": "Update", "apiVersion": "v1", "time": "2026-11-28T08:00:05Z"},
            {"manager": "b", "operation": "Update", "apiVersion": "v1", "time": written},
        ]
    return {"apiVersion": "v1", "kind": "Event", "metadata": meta, "reason": "Started", "message": "m"}


def test_an_event_goes_ttl_after_its_last_write_with_a_deleted_event() -> None:
    now = [1000.0]
    store = Store()
    ttl = EventTTLController(store, 60, clock=lambda: now[0])
    store.on_write(ttl.on_write)
    watch = store.watch(KEY, None, None)
    store.create(KEY, event("old"))
    now[0] = 1030.0
    store.create(KEY, event("young"))
    now[0] = 1050.0
    old = store.get(KEY, "default", "old")
    assert old is not None
    store.update(KEY, {**old, "message": "again"})  # a write renews it
    store.create("/configmaps", {"metadata": {"name": "cm", "namespace": "default"}})  # not an Event
    now[0] = 1100.0
    assert ttl.expire() == 1
    assert store.get(KEY, "default", "young") is None
    assert store.get(KEY, "default", "old") is not None and store.get("/configmaps", "default", "cm") is not None
    now[0] = 1110.0
    assert ttl.expire() == 1 and store.list(KEY) == []
    events = [(e.type, e.obj["metadata"]["name"]) for e in watch.drain(10)]
    assert events[-2:] == [("DELETED", "young"), ("DELETED", "old")]
    assert ttl.expire() == 0


def test_a_restart_counts_from_the_last_write_the_object_records(tmp_path: Any) -> None:
    store = Store(str(tmp_path / "state.db"))
    store.open()
    store.create(KEY, event("recorded", written="2026-11-28T09:00:00Z"))
    store.create(KEY, event("created-only", created="2026-11-28T08:30:00Z"))
    store.close()
    again = Store(str(tmp_path / "state.db"))
    again.open()
    at = last_written(again.get(KEY, "default", "recorded") or {})
    assert at is not None and at == last_written(event("x", written="2026-11-28T09:00:00Z"))
    ttl = EventTTLController(again, 3600, clock=lambda: at + 1800)  # 09:30
    ttl.resync()
    assert ttl.expire() == 1  # created at 08:30: its hour is up; the other lasts until 10:00
    assert [e["metadata"]["name"] for e in again.list(KEY)] == ["recorded"]
    again.close()


def test_go_durations() -> None:
    assert [go_duration_seconds(t) for t in ("1h", "30m", "1h30m", "90s", "1.5h", "250ms", "0")] == [
        3600, 1800, 5400, 90, 5400, 0.25, 0]
    for bad, message in (("10", 'time: missing unit in duration "10"'), ("1x", 'time: invalid duration "1x"'),
                         ("", 'time: invalid duration ""'), ("-1h", "must not be negative")):
        with pytest.raises(ValueError, match=message):
            go_duration_seconds(bad)


def test_a_bad_event_ttl_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["apiserver", "--event-ttl", "an hour"])
    assert result.exit_code == 2
    assert result.stderr == 'error: --event-ttl an hour: time: invalid duration "an hour"\n'
