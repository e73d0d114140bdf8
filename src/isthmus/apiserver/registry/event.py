"""Events, core/v1 and events.k8s.io/v1: their selectable fields and kubectl's columns (the same for both)."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.table import (
    NAME_DESC,
    Column,
    col,
    name_of,
    parse_time,
    since,
)

Obj = dict[str, Any]


def _event_fields(obj: Obj) -> Obj:
    """events.k8s.io/v1 objects mapped to the core fields kube's event printer reads."""
    if "regarding" in obj or "note" in obj or "deprecatedCount" in obj:
        return {
            "involvedObject": obj.get("regarding") or {},
            "message": obj.get("note"),
            "firstTimestamp": obj.get("deprecatedFirstTimestamp"),
            "lastTimestamp": obj.get("deprecatedLastTimestamp"),
            "count": obj.get("deprecatedCount"),
            "source": obj.get("deprecatedSource") or {},
            "eventTime": obj.get("eventTime"),
            "series": obj.get("series"),
            "reportingComponent": obj.get("reportingController"),
            "reportingInstance": obj.get("reportingInstance"),
            "type": obj.get("type"),
            "reason": obj.get("reason"),
            "metadata": obj.get("metadata"),
        }
    return obj


def _event(raw: Obj, now: float) -> list[Any]:
    obj = _event_fields(raw)
    first = since(obj.get("firstTimestamp"), now)
    if parse_time(obj.get("firstTimestamp")) is None:
        first = since(obj.get("eventTime"), now)
    last = (
        since(obj.get("lastTimestamp"), now) if parse_time(obj.get("lastTimestamp")) is not None else first
    )
    count = int(obj.get("count") or 0)
    series = obj.get("series")
    if isinstance(series, dict):
        last = since(series.get("lastObservedTime"), now)
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    inv = obj.get("involvedObject") if isinstance(obj.get("involvedObject"), dict) else {}
    assert isinstance(inv, dict)
    kind = str(inv.get("kind") or "").lower()
    target = f"{kind}/{inv['name']}" if inv.get("name") else kind
    src = obj.get("source") if isinstance(obj.get("source"), dict) else {}
    assert isinstance(src, dict)
    if src.get("component"):
        source = str(src["component"]) + (f", {src['host']}" if src.get("host") else "")
    else:
        source = str(obj.get("reportingComponent") or "")
        if obj.get("reportingInstance"):
            source += f", {obj['reportingInstance']}"
    return [
        last,
        str(obj.get("type") or ""),
        str(obj.get("reason") or ""),
        target,
        str(inv.get("fieldPath") or ""),
        source,
        str(obj.get("message") or "").strip(),
        first,
        count,
        name_of(raw),
    ]


COLUMNS: list[Column] = [
    col("Last Seen", desc="Time when last this event was observed"),
    col("Type", desc="Type of this event (Normal, Warning), new types could be added in the future."),
    col("Reason", desc="The reason for this event."),
    col("Object", desc="The object that this event is about."),
    col("Subobject", desc="The subobject that this event is about.", priority=1),
    col("Source", desc="The component reporting this event.", priority=1),
    col("Message", desc="A human-readable description of the status of this operation."),
    col("First Seen", desc="The time at which the event was first recorded.", priority=1),
    col("Count", "integer", "The number of times this event has occurred.", priority=1),
    col("Name", "string", NAME_DESC, "name", priority=1),
]


class EventStrategy(Strategy):
    """core/v1 Event."""

    field_selectors = fields(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    )

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _event(obj, now)


class EventsV1Strategy(EventStrategy):
    """events.k8s.io/v1 Event."""

    field_selectors = fields(
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    )
