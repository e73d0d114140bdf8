"""Events, core/v1 and events.k8s.io/v1: one resource, stored as core/v1 (kube's /registry/events).

events.k8s.io/v1 reads and writes the same objects, converted as kube's pkg/apis/events/v1
conversion does; its field selectors are kube's field label conversion onto the core fields, read
from the stored object. kubectl's columns are the same for both.
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.selectors import FieldGetter, field_value
from isthmus.apiserver.registry.strategy import Cause, Strategy, fields
from isthmus.apiserver.registry.table import NAME_DESC, Column, col, name_of, parse_time, since

Obj = dict[str, Any]

CORE, EVENTS_V1 = "v1", "events.k8s.io/v1"
# events.k8s.io/v1 field → core/v1 field (Convert_v1_Event_To_core_Event); the others keep their names.
V1_TO_CORE = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
CORE_TO_V1 = {v: k for k, v in V1_TO_CORE.items()}


def _rename(obj: Obj, names: dict[str, str], api_version: str) -> Obj:
    out: Obj = {}
    for k, v in obj.items():
        out[names.get(k, k)] = v
    out["apiVersion"] = api_version
    return out


def v1_to_core(obj: Obj) -> Obj:
    """An events.k8s.io/v1 Event as core/v1 stores it; a core one as is."""
    if obj.get("apiVersion") != EVENTS_V1:
        return obj
    return _rename(obj, V1_TO_CORE, CORE)


def core_to_v1(obj: Obj) -> Obj:
    """A stored core/v1 Event as events.k8s.io/v1 serves it; one already in that version as is."""
    if obj.get("apiVersion") != CORE:
        return obj
    return _rename(obj, CORE_TO_V1, EVENTS_V1)


def _source(obj: Obj) -> str:
    """The internal Event's `source` field: source.component, else the reporting controller."""
    return field_value(obj, "source.component") or field_value(obj, "reportingComponent")


# kube's ToSelectableFields (pkg/registry/core/event/strategy.go), on the stored core/v1 object.
CORE_FIELDS: dict[str, FieldGetter] = {
    **fields(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "type",
    ),
    "source": _source,
}
# AddFieldLabelConversionsForEvent (pkg/apis/events/v1/conversion.go): events.k8s.io/v1 labels →
# the core fields above. The core spellings are not accepted in this version.
V1_FIELD_LABELS = {
    "reason": "reason",
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
    "source": "source",
    "type": "type",
}
V1_FIELDS: dict[str, FieldGetter] = {label: CORE_FIELDS[core] for label, core in V1_FIELD_LABELS.items()}


def _event(raw: Obj, now: float) -> list[Any]:
    obj = v1_to_core(raw)  # kube prints the internal (core-shaped) object
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
    """core/v1 Event: the storage version."""

    field_selectors = CORE_FIELDS

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _event(obj, now)


class EventsV1Strategy(EventStrategy):
    """events.k8s.io/v1 Event: served from, and written to, the core/v1 objects."""

    field_selectors = V1_FIELDS
    # kube requires eventTime of a new events.k8s.io/v1 Event only (ValidateEventCreate): an update
    # through this version of an Event created in core/v1 without one is fine.
    schema_required = False

    def validate(self, obj: Obj) -> list[Cause]:
        if not obj.get("eventTime"):
            return [errors.cause("eventTime", "Required value", "FieldValueRequired")]
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        return []

    def to_storage(self, obj: Obj) -> Obj:
        return v1_to_core(obj)

    def from_storage(self, obj: Obj) -> Obj:
        return core_to_v1(obj)
