"""isthmus.api.base: wire format, metav1.Time, and condition helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from isthmus.api.base import (
    Condition,
    ObjectMeta,
    ResourceList,
    conditions_equal,
    find_condition,
    format_time,
    is_condition_true,
    merge_conditions,
    new_condition,
    remove_condition,
    set_condition,
)
from isthmus.api.mcs import ServiceExport

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_time_is_utc_whole_seconds_with_z() -> None:
    meta = ObjectMeta.model_validate({"creationTimestamp": "2024-05-01T14:00:00.123456+02:00"})
    assert meta.creation_timestamp == T0
    assert meta.to_dict() == {"creationTimestamp": "2024-05-01T12:00:00Z"}
    assert format_time(datetime(2024, 5, 1, 12, 0, 0)) == "2024-05-01T12:00:00Z"  # naive = UTC
    assert format_time(T0.astimezone(timezone(timedelta(hours=-7)))) == "2024-05-01T12:00:00Z"


def test_object_meta_round_trip_camel_case_and_omits_unset() -> None:
    wire = {
        "name": "web",
        "namespace": "ns",
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2024-05-01T12:00:00Z",
        "labels": {"a": "b"},
        "annotations": {"x": "y"},
        "finalizers": ["f"],
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "u-0", "controller": True}
        ],
        "managedFields": [{"manager": "m", "operation": "Apply"}],
    }
    meta = ObjectMeta.model_validate(wire)
    assert meta.resource_version == "42"
    assert meta.owner_references and meta.owner_references[0].api_version == "v1"
    assert meta.to_dict() == wire
    assert ObjectMeta(name="x").to_dict() == {"name": "x"}
    assert ObjectMeta.model_validate({"name": "x", "selfLink": "ignored"}).to_dict() == {"name": "x"}


def test_condition_wire_shape_and_validation() -> None:
    c = new_condition("Ready", True, "Exported", "ok", observed_generation=2, at=T0)
    assert c.to_dict() == {
        "type": "Ready",
        "status": "True",
        "observedGeneration": 2,
        "lastTransitionTime": "2024-05-01T12:00:00Z",
        "reason": "Exported",
        "message": "ok",
    }
    assert Condition.model_validate(c.to_dict()) == c
    assert new_condition("Ready", False, "Pending").status == "False"
    assert new_condition("Ready", "Unknown", "Pending").status == "Unknown"
    with pytest.raises(ValidationError):
        Condition(type="Ready", status="Yes", reason="X")
    with pytest.raises(ValidationError):
        Condition(type="Ready", status="True", reason="not a reason")
    with pytest.raises(ValidationError):
        Condition(type="bad type!", status="True", reason="X")
    # comma-joined reasons (several conflicts on one condition) are valid kube reasons
    assert Condition(type="Conflict", status="True", reason="PortConflict,TypeConflict").reason


def test_set_condition_preserves_transition_time_when_status_unchanged() -> None:
    conds: list[Condition] = []
    assert set_condition(conds, new_condition("Ready", False, "Pending", at=T0))
    assert conds[0].last_transition_time == T0

    # same status, new reason/message: updated, time kept
    assert set_condition(conds, new_condition("Ready", False, "Failed", "boom", at=T1))
    assert (conds[0].reason, conds[0].message, conds[0].last_transition_time) == ("Failed", "boom", T0)

    # identical: no change reported
    assert not set_condition(conds, new_condition("Ready", False, "Failed", "boom", at=T1))

    # status flips: time moves
    assert set_condition(conds, new_condition("Ready", True, "Exported", at=T1))
    assert (conds[0].status, conds[0].last_transition_time) == ("True", T1)

    # explicit `at` wins over the new condition's own time
    assert set_condition(conds, new_condition("Ready", False, "Failed", at=T0), at=T1 + timedelta(hours=1))
    assert conds[0].last_transition_time == T1 + timedelta(hours=1)
    assert len(conds) == 1


def test_observed_generation_change_is_a_change_but_keeps_time() -> None:
    conds = [new_condition("Valid", True, "Valid", observed_generation=1, at=T0)]
    assert set_condition(conds, new_condition("Valid", True, "Valid", observed_generation=2, at=T1))
    assert conds[0].observed_generation == 2 and conds[0].last_transition_time == T0


def test_find_remove_is_true() -> None:
    conds = [new_condition("Valid", True, "Valid", at=T0), new_condition("Ready", False, "Pending", at=T0)]
    assert find_condition(conds, "Ready") is conds[1]
    assert find_condition(None, "Ready") is None
    assert is_condition_true(conds, "Valid") and not is_condition_true(conds, "Ready")
    assert not is_condition_true(conds, "Conflict")
    assert remove_condition(conds, "Valid") and not remove_condition(conds, "Valid")
    assert [c.type for c in conds] == ["Ready"]


def test_merge_conditions_is_pure_and_preserves_times() -> None:
    observed = [new_condition("Valid", True, "Valid", at=T0), new_condition("Ready", False, "Pending", at=T0)]
    snapshot = [c.model_copy() for c in observed]
    desired = [
        new_condition("Ready", False, "Pending", "waiting", at=T1),
        new_condition("Conflict", False, "NoConflicts", at=T1),
    ]
    merged = merge_conditions(observed, desired)
    assert observed == snapshot  # input untouched
    assert [c.type for c in merged] == ["Valid", "Ready", "Conflict"]
    ready = find_condition(merged, "Ready")
    assert ready is not None and ready.last_transition_time == T0 and ready.message == "waiting"
    conflict = find_condition(merged, "Conflict")
    assert conflict is not None and conflict.last_transition_time == T1

    only = merge_conditions(observed, desired, keep_others=False)
    assert [c.type for c in only] == ["Ready", "Conflict"]
    assert conditions_equal(merged, list(reversed(merged)))
    assert not conditions_equal(merged, only)


def test_resource_type_meta_is_filled_and_checked() -> None:
    se = ServiceExport(metadata=ObjectMeta(name="web", namespace="ns"))
    assert (se.api_version, se.kind) == ("multicluster.x-k8s.io/v1beta1", "ServiceExport")
    assert se.name == "web" and se.namespace == "ns"
    with pytest.raises(ValidationError):
        ServiceExport.model_validate({"apiVersion": "v1", "kind": "ServiceExport"})
    with pytest.raises(ValidationError):
        ServiceExport.model_validate({"kind": "ServiceImport"})


def test_resource_list_parses_items() -> None:
    lst = ResourceList[ServiceExport].model_validate(
        {
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceExportList",
            "metadata": {"resourceVersion": "7", "continue": "abc"},
            "items": [{"metadata": {"name": "a", "namespace": "n"}}],
        }
    )
    assert lst.metadata.resource_version == "7" and lst.metadata.continue_ == "abc"
    assert lst.items[0].kind == "ServiceExport"
    assert lst.to_dict()["metadata"] == {"resourceVersion": "7", "continue": "abc"}
