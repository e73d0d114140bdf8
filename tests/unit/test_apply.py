"""Server-side apply and managedFields bookkeeping, checked against kube's observable behaviour."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.fieldmanager.fieldmanager import server_side_apply, track_update
from isthmus.apiserver.fieldmanager.fieldpath import decode_fields, encode_fields, path_string

CONTAINER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string"},
        "args": {"type": "array", "items": {"type": "string"}},  # no list type: atomic
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
            "items": {
                "type": "object",
                "properties": {
                    "containerPort": {"type": "integer"},
                    "protocol": {"type": "string", "default": "TCP"},
                },
            },
        },
    },
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "uid": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            },
        },
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "paused": {"type": "boolean"},
                "selector": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                },
                "containers": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": CONTAINER,
                },
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "port": {"type": "integer"},
                            "targetPort": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"},
                        },
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}

T1, T2, T3, T4 = "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z", "2024-01-01T00:00:03Z", "2024-01-01T00:00:04Z"


def obj(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Thing", "metadata": {"name": "t", "namespace": "ns", **meta}}
    if spec is not None:
        out["spec"] = spec
    return out


def apply(live: dict[str, Any] | None, applied: dict[str, Any], manager: str = "a", *, force: bool = False,
          now: str = T1, schema: dict[str, Any] | None = SCHEMA, subresource: str = "") -> dict[str, Any]:
    before = (copy.deepcopy(live), copy.deepcopy(applied))
    out = server_side_apply(live, applied, manager=manager, force=force, schema=schema, api_version="apps/v1",
                            now=now, subresource=subresource)
    assert (live, applied) == before, "inputs must not be mutated"
    return out


def update(old: dict[str, Any] | None, new: dict[str, Any], manager: str = "u", *, now: str = T1,
           schema: dict[str, Any] | None = SCHEMA, subresource: str = "") -> dict[str, Any]:
    before = (copy.deepcopy(old), copy.deepcopy(new))
    out = track_update(old, new, manager=manager, schema=schema, api_version="apps/v1", now=now, subresource=subresource)
    assert (old, new) == before, "inputs must not be mutated"
    return out


def entries(o: dict[str, Any]) -> list[dict[str, Any]]:
    return list(o["metadata"].get("managedFields", []))


def fields_of(o: dict[str, Any], manager: str, operation: str | None = None) -> dict[str, Any]:
    found = [e for e in entries(o) if e["manager"] == manager and (operation is None or e["operation"] == operation)]
    assert len(found) == 1, entries(o)
    return dict(found[0]["fieldsV1"])


def edited(o: dict[str, Any], fn: Any) -> dict[str, Any]:
    new = copy.deepcopy(o)
    fn(new)
    return new


def conflict_of(fn: Any) -> ApiError:
    with pytest.raises(ApiError) as err:
        fn()
    assert err.value.code == 409 and err.value.reason == "Conflict"
    return err.value


# ================================================================ fieldsV1 encoding


class TestFieldsV1:
    def test_round_trip_and_dot(self) -> None:
        paths = {
            ("f:spec", "f:replicas"),
            ("f:metadata", "f:labels"),
            ("f:metadata", "f:labels", "f:app"),
            ("f:spec", "f:containers", 'k:{"name":"c"}'),
            ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image"),
        }
        encoded = encode_fields(paths)
        assert encoded == {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}, "f:replicas": {}},
        }
        assert decode_fields(encoded) == paths

    def test_element_order(self) -> None:
        encoded = encode_fields({("f:b",), ("f:a",), ("v:2",), ("v:10",), ('k:{"x":1}',), ("i:3",)})
        assert list(encoded) == ["f:a", "f:b", 'k:{"x":1}', "v:2", "v:10", "i:3"]

    def test_path_string(self) -> None:
        assert path_string(("f:spec", "f:containers", 'k:{"name":"nginx"}', "f:image")) == '.spec.containers[name="nginx"].image'
        assert path_string(("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}')) == '.spec.ports[port=80,protocol="TCP"]'
        assert path_string(("f:metadata", "f:finalizers", 'v:"x"')) == '.metadata.finalizers[="x"]'


# ================================================================ apply


class TestApply:
    def test_create_records_kube_shaped_entry(self) -> None:
        cfg = obj({"replicas": 2, "containers": [{"name": "c", "image": "i", "args": ["x"]}]}, labels={"app": "web"})
        out = apply(None, cfg)
        assert out["spec"] == cfg["spec"]
        assert out["metadata"]["managedFields"] == [
            {
                "manager": "a",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:containers": {'k:{"name":"c"}': {".": {}, "f:args": {}, "f:image": {}, "f:name": {}}},
                        "f:replicas": {},
                    },
                },
            }
        ]

    def test_meta_fields_are_not_tracked(self) -> None:
        out = apply(None, obj({"replicas": 1}, uid="u", resourceVersion="5"))
        assert fields_of(out, "a") == {"f:spec": {"f:replicas": {}}}

    def test_reapply_without_field_removes_it(self) -> None:
        live = apply(None, obj({"replicas": 2, "paused": True}, labels={"app": "web", "tier": "fe"}))
        out = apply(live, obj({"replicas": 2}, labels={"app": "web"}), now=T2)
        assert out["spec"] == {"replicas": 2}
        assert out["metadata"]["labels"] == {"app": "web"}
        assert fields_of(out, "a") == {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}}
        assert entries(out)[0]["time"] == T2

    def test_removing_last_label_drops_the_map(self) -> None:
        live = apply(None, obj({"replicas": 1}, labels={"app": "web"}))
        out = apply(live, obj({"replicas": 1}), now=T2)
        assert "labels" not in out["metadata"]

    def test_noop_reapply_keeps_time(self) -> None:
        cfg = obj({"replicas": 2})
        live = apply(None, cfg)
        assert apply(live, cfg, now=T2) == live

    def test_fields_not_owned_by_applier_survive(self) -> None:
        live = apply(None, obj({"replicas": 2}))
        live["status"] = {"phase": "Running"}  # written by someone untracked
        out = apply(live, obj({"replicas": 3}), now=T2)
        assert out["status"] == {"phase": "Running"} and out["spec"]["replicas"] == 3

    def test_two_appliers_share_a_field(self) -> None:
        live = apply(None, obj({"replicas": 2, "paused": False}), manager="a")
        live = apply(live, obj({"replicas": 2}), manager="b", now=T2)  # same value: shared, no conflict
        assert fields_of(live, "a") == {"f:spec": {"f:paused": {}, "f:replicas": {}}}
        assert fields_of(live, "b") == {"f:spec": {"f:replicas": {}}}
        # a stops applying replicas: b still owns it, so it stays
        out = apply(live, obj({"paused": False}), manager="a", now=T3)
        assert out["spec"] == {"replicas": 2, "paused": False}
        assert fields_of(out, "a") == {"f:spec": {"f:paused": {}}}

    def test_conflict_with_another_applier(self) -> None:
        live = apply(None, obj({"replicas": 2}), manager="a")
        err = conflict_of(lambda: apply(live, obj({"replicas": 3}), manager="b"))
        assert err.message == 'Apply failed with 1 conflict: conflict with "a": .spec.replicas'
        assert err.details == {"causes": [{"reason": "FieldManagerConflict", "message": 'conflict with "a"', "field": ".spec.replicas"}]}

    def test_conflict_with_update_manager_exact_status(self) -> None:
        live = update(None, obj({"replicas": 1}), manager="kubectl-client-side-apply")
        err = conflict_of(lambda: apply(live, obj({"replicas": 3}), manager="kubectl"))
        assert err.status() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas',
            "reason": "Conflict",
            "code": 409,
            "details": {
                "causes": [
                    {
                        "reason": "FieldManagerConflict",
                        "message": 'conflict with "kubectl-client-side-apply" using apps/v1',
                        "field": ".spec.replicas",
                    }
                ]
            },
        }

    def test_same_value_as_update_manager_is_shared(self) -> None:
        live = update(None, obj({"replicas": 1}), manager="u")
        out = apply(live, obj({"replicas": 1}), manager="a", now=T2)
        # u created spec (".") and set replicas; a now co-owns replicas
        assert fields_of(out, "u")["f:spec"] == {".": {}, "f:replicas": {}}
        assert fields_of(out, "a")["f:spec"] == {"f:replicas": {}}

    def test_several_conflicts_message(self) -> None:
        live = update(None, obj({"replicas": 1, "paused": True}), manager="u")
        live = apply(live, obj(labels={"x": "1"}), manager="b", now=T2)
        err = conflict_of(lambda: apply(live, obj({"replicas": 2, "paused": False}, labels={"x": "2"}), manager="a"))
        assert err.message == (
            "Apply failed with 3 conflicts: "
            'conflicts with "b":\n- .metadata.labels.x\n'
            'conflicts with "u" using apps/v1:\n- .spec.paused\n- .spec.replicas'
        )
        assert err.details is not None
        assert [c["field"] for c in err.details["causes"]] == [".metadata.labels.x", ".spec.paused", ".spec.replicas"]

    def test_force_takes_ownership(self) -> None:
        live = update(None, obj({"replicas": 1, "paused": True}), manager="u")
        out = apply(live, obj({"replicas": 5}), manager="a", force=True, now=T2)
        assert out["spec"] == {"replicas": 5, "paused": True}
        assert fields_of(out, "a") == {"f:spec": {"f:replicas": {}}}
        assert fields_of(out, "u")["f:spec"] == {".": {}, "f:paused": {}}

    def test_force_removes_emptied_managers(self) -> None:
        live = apply(None, obj({"replicas": 1}), manager="b")
        out = apply(live, obj({"replicas": 2}), manager="a", force=True, now=T2)
        assert [e["manager"] for e in entries(out)] == ["a"]

    def test_containers_merge_by_name(self) -> None:
        live = apply(None, obj({"containers": [{"name": "app", "image": "app:1"}]}), manager="a")
        live = apply(live, obj({"containers": [{"name": "sidecar", "image": "s:1"}]}), manager="b", now=T2)
        assert [c["name"] for c in live["spec"]["containers"]] == ["app", "sidecar"]
        # a changes its container and conflicts with no one
        live = apply(live, obj({"containers": [{"name": "app", "image": "app:2"}]}), manager="a", now=T3)
        assert live["spec"]["containers"] == [{"name": "app", "image": "app:2"}, {"name": "sidecar", "image": "s:1"}]
        # b touching a's image conflicts at the keyed path
        err = conflict_of(lambda: apply(live, obj({"containers": [{"name": "app", "image": "x"}]}), manager="b"))
        assert err.message == 'Apply failed with 1 conflict: conflict with "a": .spec.containers[name="app"].image'
        # a dropping its container removes just that one
        out = apply(live, obj({"replicas": 1}), manager="a", now=T4)
        assert out["spec"]["containers"] == [{"name": "sidecar", "image": "s:1"}]

    def test_container_kept_while_someone_else_owns_part_of_it(self) -> None:
        live = apply(None, obj({"containers": [{"name": "app", "image": "app:1", "args": ["x"]}]}), manager="a")
        live = apply(live, obj({"containers": [{"name": "app", "args": ["x"]}]}), manager="b", now=T2)
        out = apply(live, obj({"replicas": 1}), manager="a", now=T3)
        assert out["spec"]["containers"] == [{"name": "app", "args": ["x"]}]

    def test_service_ports_keyed_by_port_and_protocol(self) -> None:
        out = apply(None, obj({"ports": [{"port": 80, "targetPort": 8080}, {"port": 53, "protocol": "UDP"}]}))
        assert fields_of(out, "a") == {
            "f:spec": {
                "f:ports": {
                    'k:{"port":53,"protocol":"UDP"}': {".": {}, "f:port": {}, "f:protocol": {}},
                    'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}, "f:targetPort": {}},
                }
            }
        }
        # a defaulted protocol on the live object still matches the item the applier omits it from
        live = copy.deepcopy(out)
        live["spec"]["ports"][0]["protocol"] = "TCP"
        out2 = apply(live, obj({"ports": [{"port": 80, "targetPort": 9090}]}), now=T2)
        assert out2["spec"]["ports"] == [{"port": 80, "targetPort": 9090, "protocol": "TCP"}]

    def test_nested_list_map(self) -> None:
        out = apply(None, obj({"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}))
        item = fields_of(out, "a")["f:spec"]["f:containers"]['k:{"name":"c"}']
        assert item["f:ports"] == {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}

    def test_set_list(self) -> None:
        live = apply(None, obj(finalizers=["a.io/x"]), manager="a")
        live = apply(live, obj(finalizers=["b.io/y"]), manager="b", now=T2)
        assert live["metadata"]["finalizers"] == ["a.io/x", "b.io/y"]
        assert fields_of(live, "a") == {"f:metadata": {"f:finalizers": {'v:"a.io/x"': {}}}}
        out = apply(live, obj(), manager="a", now=T3)
        assert out["metadata"]["finalizers"] == ["b.io/y"]

    def test_atomic_list_is_owned_whole(self) -> None:
        live = apply(None, obj({"tags": ["x", "y"]}), manager="a")
        assert fields_of(live, "a") == {"f:spec": {"f:tags": {}}}
        err = conflict_of(lambda: apply(live, obj({"tags": ["x", "y", "z"]}), manager="b"))
        assert err.message.endswith(": .spec.tags")
        out = apply(live, obj({"tags": ["z"]}), manager="b", force=True, now=T2)
        assert out["spec"]["tags"] == ["z"]

    def test_atomic_list_without_list_type(self) -> None:
        live = apply(None, obj({"containers": [{"name": "c", "args": ["1"]}]}), manager="a")
        err = conflict_of(lambda: apply(live, obj({"containers": [{"name": "c", "args": ["2"]}]}), manager="b"))
        assert err.message.endswith(': .spec.containers[name="c"].args')

    def test_atomic_map(self) -> None:
        live = apply(None, obj({"selector": {"matchLabels": {"a": "b"}}}))
        assert fields_of(live, "a") == {"f:spec": {"f:selector": {}}}

    def test_labels_are_granular(self) -> None:
        live = apply(None, obj(labels={"app": "web"}), manager="a")
        live = apply(live, obj(labels={"team": "x"}), manager="b", now=T2)
        assert live["metadata"]["labels"] == {"app": "web", "team": "x"}
        out = apply(live, obj(labels={"team": "y"}), manager="b", now=T3)
        assert out["metadata"]["labels"] == {"app": "web", "team": "y"}

    def test_without_schema_maps_granular_lists_atomic(self) -> None:
        out = apply(None, obj({"a": {"b": 1}, "l": [1, 2]}), schema=None)
        assert fields_of(out, "a") == {"f:spec": {".": {}, "f:a": {".": {}, "f:b": {}}, "f:l": {}}}

    def test_preserve_unknown_fields(self) -> None:
        schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
        live = apply(None, obj({"x": {"y": 1}}), schema=schema)
        live = apply(live, obj({"z": 1}), manager="b", schema=schema, now=T2)
        assert live["spec"] == {"x": {"y": 1}, "z": 1}
        out = apply(live, obj(), schema=schema, now=T3)
        assert out["spec"] == {"z": 1}

    def test_managed_fields_in_config_rejected(self) -> None:
        with pytest.raises(ApiError) as err:
            apply(None, obj(managedFields=[]))
        assert err.value.code == 400

    def test_duplicate_keys_rejected(self) -> None:
        with pytest.raises(ApiError) as err:
            apply(None, obj({"containers": [{"name": "c"}, {"name": "c"}]}))
        assert err.value.code == 400
        assert 'duplicate entries for key [name="c"]' in err.value.message

    def test_untracked_object_gets_before_first_apply(self) -> None:
        live = obj({"replicas": 1})
        err = conflict_of(lambda: apply(live, obj({"replicas": 2})))
        assert '"before-first-apply" using apps/v1' in err.message
        out = apply(live, obj({"replicas": 1}))
        assert {e["manager"] for e in entries(out)} == {"a", "before-first-apply"}

    def test_status_subresource(self) -> None:
        live = apply(None, obj({"replicas": 1}))
        live = apply(live, {**obj(), "status": {"phase": "Ready"}}, manager="ctrl", subresource="status", now=T2)
        entry = next(e for e in entries(live) if e["manager"] == "ctrl")
        assert entry["subresource"] == "status" and entry["fieldsV1"] == {"f:status": {"f:phase": {}}}
        err = conflict_of(lambda: apply(live, {**obj(), "status": {"phase": "X"}}, manager="other", subresource="status"))
        assert err.message == 'Apply failed with 1 conflict: conflict with "ctrl" with subresource "status": .status.phase'

    def test_entries_sorted_apply_first_then_time(self) -> None:
        live = update(None, obj({"paused": True}), manager="z-upd", now=T1)
        live = apply(live, obj({"replicas": 1}), manager="b", now=T3)
        live = apply(live, obj(labels={"x": "y"}), manager="a", now=T2)
        assert [(e["operation"], e["manager"]) for e in entries(live)] == [("Apply", "a"), ("Apply", "b"), ("Update", "z-upd")]


# ================================================================ update tracking


class TestTrackUpdate:
    def test_create_marks_new_containers(self) -> None:
        out = update(None, obj({"replicas": 1, "containers": [{"name": "c", "image": "i"}]}, labels={"a": "b"}), manager="kubectl-create")
        assert out["metadata"]["managedFields"] == [
            {
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                    "f:spec": {
                        ".": {},
                        "f:containers": {".": {}, 'k:{"name":"c"}': {".": {}, "f:image": {}, "f:name": {}}},
                        "f:replicas": {},
                    },
                },
            }
        ]

    def test_update_takes_changed_fields_from_others(self) -> None:
        live = apply(None, obj({"replicas": 1, "paused": False}), manager="a")
        out = update(live, edited(live, lambda o: o["spec"].update(replicas=4)), manager="hpa", now=T2)
        assert fields_of(out, "a") == {"f:spec": {"f:paused": {}}}
        assert fields_of(out, "hpa") == {"f:spec": {"f:replicas": {}}}
        assert [e["time"] for e in entries(out)] == [T1, T2]

    def test_same_manager_accumulates(self) -> None:
        live = update(None, obj({"replicas": 1}), manager="u")
        live = update(live, edited(live, lambda o: o["spec"].update(paused=True)), manager="u", now=T2)
        assert fields_of(live, "u") == {"f:spec": {".": {}, "f:paused": {}, "f:replicas": {}}}
        assert entries(live)[0]["time"] == T2

    def test_unchanged_update_keeps_entry_and_time(self) -> None:
        live = update(None, obj({"replicas": 1}), manager="u")
        assert update(live, copy.deepcopy(live), manager="u", now=T2) == live
        # another manager writing nothing gets no entry
        assert update(live, copy.deepcopy(live), manager="other", now=T2) == live

    def test_removed_fields_leave_every_manager(self) -> None:
        live = apply(None, obj({"replicas": 1, "paused": True}), manager="a")
        out = update(live, edited(live, lambda o: o["spec"].pop("paused")), manager="u", now=T2)
        assert fields_of(out, "a") == {"f:spec": {"f:replicas": {}}}
        assert [e["manager"] for e in entries(out)] == ["a"]  # u changed nothing it could own

    def test_meta_fields_are_not_tracked(self) -> None:
        out = update(None, obj(uid="x", resourceVersion="1"))
        assert "managedFields" not in out["metadata"]

    def test_empty_managed_fields_list_keeps_server_copy(self) -> None:
        live = apply(None, obj({"replicas": 1}))
        new = edited(live, lambda o: o["metadata"].update(managedFields=[]))
        assert update(live, new, manager="u", now=T2) == live

    def test_managed_fields_reset_with_empty_entry(self) -> None:
        live = apply(None, obj({"replicas": 1}))
        new = edited(live, lambda o: o["metadata"].update(managedFields=[{}]))
        out = update(live, new, manager="u", now=T2)
        assert "managedFields" not in out["metadata"]

    def test_client_may_rewrite_managed_fields(self) -> None:
        live = apply(None, obj({"replicas": 1}))
        mine = [{"manager": "x", "operation": "Update", "apiVersion": "v1", "time": T1, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
        out = update(live, edited(live, lambda o: o["metadata"].update(managedFields=mine)), manager="u", now=T2)
        assert out["metadata"]["managedFields"] == mine

    def test_subresource_entry(self) -> None:
        live = update(None, obj({"replicas": 1}), manager="u")
        out = update(live, edited(live, lambda o: o.update(status={"phase": "Ready"})), manager="ctrl",
                     subresource="status", now=T2)
        entry = next(e for e in entries(out) if e["manager"] == "ctrl")
        assert entry["subresource"] == "status"
        assert entry["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}

    def test_update_managers_are_capped(self) -> None:
        live = update(None, obj({"replicas": 0}), manager="m00", now="2024-01-01T00:00:00Z")
        for i in range(1, 12):
            new = edited(live, lambda o, i=i: o["metadata"].setdefault("labels", {}).update({f"l{i}": "v"}))
            live = update(live, new, manager=f"m{i:02d}", now=f"2024-01-01T00:00:{i:02d}Z")
        managers = [e["manager"] for e in entries(live)]
        assert len(managers) == 10 and "ancient-changes" in managers
        assert "m00" not in managers and "m11" in managers


# ---------------------------------------------------------------- the create path's single walk


def _slow_create(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """track_update of a create through the general comparison: `[{}]` (kube's reset) makes it
    decode the given entries (none) instead of taking the create path."""
    forced = copy.deepcopy(obj)
    forced.setdefault("metadata", {})["managedFields"] = [{}]
    return track_update(None, forced, manager="m", schema=schema, api_version="v1", now="2026-01-01T00:00:00Z")


def _fast_create(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    return track_update(None, copy.deepcopy(obj), manager="m", schema=schema, api_version="v1",
                        now="2026-01-01T00:00:00Z")


def _builtin_schema(kind: str) -> dict[str, Any]:
    from isthmus.apiserver.builtins import builtin_resources

    return next(i.schema for i in builtin_resources() if i.kind == kind and i.schema is not None)


CREATED = [
    ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "namespace": "n", "uid": "u", "generation": 1, "labels": {"x": "y"},
                                "creationTimestamp": "t", "annotations": {}, "finalizers": ["f", "g", "f"]},
                   "data": {"k": "v", "b": ""}, "immutable": False}),
    ("Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "ownerReferences": [
        {"apiVersion": "v1", "kind": "X", "name": "o", "uid": "1"}]},
             "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}, {"containerPort": 80,
                                                                                              "protocol": "UDP"}],
                                      "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
                                      "args": ["x"]}, {"name": "d", "image": "j"}],
                      "tolerations": [{"key": "k"}], "nodeSelector": {"a": "b"}},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    ("Service", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                 "spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                          "selector": {"app": "a"}, "clusterIPs": ["10.0.0.1"], "type": "ClusterIP"}}),
    ("Deployment", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": {
                        "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}}),
    ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "only"}}),
]


@pytest.mark.parametrize(("kind", "obj"), CREATED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CREATED)])
def test_create_path_matches_the_general_comparison(kind: str, obj: dict[str, Any]) -> None:
    schema = _builtin_schema(kind)
    assert _fast_create(obj, schema) == _slow_create(obj, schema)
    assert _fast_create(obj, None) == _slow_create(obj, None)
    assert _fast_create(obj, SCHEMA) == _slow_create(obj, SCHEMA)


_RANDOM_KEYS = ["metadata", "spec", "status", "data", "name", "labels", "containers", "ports", "uid", "kind",
                "apiVersion", "selector", "template", "x", "protocol", "containerPort", "finalizers", "items",
                "generation", "paused", "replicas"]


def _random_objects(keys: list[str]) -> Any:
    """Small JSON objects whose keys are drawn from `keys` (hypothesis)."""
    from hypothesis import strategies as st

    key = st.sampled_from(keys)
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3))
    values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(key, inner, max_size=4)), max_leaves=12)
    return st.dictionaries(key, values, max_size=5)


def test_create_path_matches_the_general_comparison_on_random_objects() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    schemas = [None, SCHEMA, _builtin_schema("Pod"), _builtin_schema("Deployment")]

    @settings(max_examples=300, deadline=None)
    @given(_random_objects([*_RANDOM_KEYS, "managedFields"]), st.sampled_from(schemas))
    def check(obj: dict[str, Any], schema: dict[str, Any] | None) -> None:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}  # a create's object always has metadata (check_kind)
        assert _fast_create(obj, schema) == _slow_create(obj, schema)

    check()


# ---------------------------------------------------------------- an apply that creates: its single walk


def _applied_create(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    return server_side_apply(None, copy.deepcopy(obj), manager="m", force=False, schema=schema, api_version="v1",
                             now="2026-01-01T00:00:00Z")


def _applied_create_by_paths(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """What the general route writes: the applied path set, stripped, encoded through a tree."""
    from isthmus.apiserver.fieldmanager.merge import clean as _clean
    from isthmus.apiserver.fieldmanager.typed import _schema
    from isthmus.apiserver.fieldmanager.typed import applied_fields as _applied_fields
    from isthmus.apiserver.fieldmanager.typed import strip_untracked as _strip

    paths: set[tuple[str, ...]] = set()
    _applied_fields(obj, _schema(schema), (), paths)
    out: dict[str, Any] = _clean(copy.deepcopy(obj))
    fields = encode_fields(_strip(paths))
    if fields:
        out["metadata"]["managedFields"] = [{"manager": "m", "operation": "Apply", "apiVersion": "v1",
                                             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                             "fieldsV1": fields}]
    return out


APPLIED = [
    *[(k, o) for k, o in CREATED if k in ("Service", "Deployment")],
    ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"}, "annotations": {},
                                "finalizers": ["f", "g"]}, "data": {"k": "v", "b": ""}, "immutable": None}),
    ("Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
             "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                      "env": [{"name": "A", "value": "1"}], "args": ["x"]}],
                      "nodeSelector": {}}}),
    # the discovery agent's copy of another cluster's slice, its most frequent apply
    ("EndpointSlice", {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {
        "name": "svc-c2", "namespace": "n", "labels": {"multicluster.kubernetes.io/service-name": "svc",
                                                       "multicluster.kubernetes.io/source-cluster": "c2"},
        "ownerReferences": [{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                             "name": "svc", "uid": "6f1c"}]},
        "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.5"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
]


@pytest.mark.parametrize(("kind", "obj"), APPLIED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(APPLIED)])
def test_an_apply_that_creates_owns_what_the_general_route_gives_it(kind: str, obj: dict[str, Any]) -> None:
    for schema in (_builtin_schema(kind), None, SCHEMA):
        assert _applied_create(obj, schema) == _applied_create_by_paths(obj, schema)


def test_an_apply_that_creates_owns_what_the_general_route_gives_it_on_random_objects() -> None:
    from hypothesis import assume, given, settings
    from hypothesis import strategies as st

    schemas = [None, SCHEMA, _builtin_schema("Pod"), _builtin_schema("Deployment"), _builtin_schema("EndpointSlice")]

    @settings(max_examples=300, deadline=None)
    @given(_random_objects([*_RANDOM_KEYS, "endpoints"]), st.sampled_from(schemas))
    def check(obj: dict[str, Any], schema: dict[str, Any] | None) -> None:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        try:
            fast = _applied_create(obj, schema)
        except ApiError:
            assume(False)  # e.g. duplicate list-map keys: refused before any field is counted
        assert fast == _applied_create_by_paths(obj, schema)

    check()


def test_an_owned_configuration_gives_what_a_copied_one_gives() -> None:
    """owned=True (the store's apply: its configuration is a fresh copy) reuses and changes the
    configuration instead of copying it: the results are the same, nulls in maps dropped alike; a
    configuration that is not owned is left as it was."""
    from hypothesis import assume, given, settings
    from hypothesis import strategies as st

    schemas = [None, SCHEMA, _builtin_schema("Pod"), _builtin_schema("EndpointSlice")]

    def run(live: dict[str, Any] | None, config: dict[str, Any], schema: dict[str, Any] | None,
            owned: bool) -> Any:
        try:
            return server_side_apply(live, config, manager="m", force=True, schema=schema, api_version="v1",
                                     now="2026-01-01T00:00:00Z", owned=owned)
        except ApiError as e:
            return ("error", e.code, e.message)

    @settings(max_examples=300, deadline=None)
    @given(_random_objects([*_RANDOM_KEYS, "endpoints"]), st.sampled_from(schemas), st.booleans())
    def check(obj: dict[str, Any], schema: dict[str, Any] | None, over_live: bool) -> None:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        obj["metadata"]["extra"] = None  # a null to drop
        live = None
        if over_live:
            made = run(None, copy.deepcopy(obj), schema, False)
            assume(not isinstance(made, tuple))
            live = made
        before = copy.deepcopy(obj)
        copied = run(copy.deepcopy(live), obj, schema, False)
        assert obj == before  # not owned: untouched
        assert run(copy.deepcopy(live), copy.deepcopy(obj), schema, True) == copied

    check()


def test_the_compiled_walk_of_an_apply_that_creates_gives_what_the_general_steps_give(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An apply that creates takes one compiled walk (_created_apply_fields) when its configuration has
    no list-map item missing a key, no duplicate item and no set of objects; otherwise the general
    steps (the defaulted copy, _fill_keys, _duplicates, the schema walk). Both give the same object, or
    the same error, for any configuration."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from isthmus.apiserver.fieldmanager import fieldmanager as apply_mod
    from isthmus.apiserver.openapi.schema import apply_defaults

    compiled = apply_mod._created_apply_fields
    taken = {"compiled": 0, "general": 0}

    def counting(*args: Any) -> Any:
        try:
            out = compiled(*args)
        except apply_mod._NeedsGeneralWalk:
            taken["general"] += 1
            raise
        taken["compiled"] += 1 if args[2] == () else 0
        return out

    def refusing(*args: Any) -> Any:
        raise apply_mod._NeedsGeneralWalk

    schemas = [None, SCHEMA, _builtin_schema("Pod"), _builtin_schema("EndpointSlice"), _builtin_schema("Service")]

    def run(obj: dict[str, Any], schema: dict[str, Any] | None, walk: Any) -> Any:
        def default(o: dict[str, Any]) -> None:
            if schema is not None:
                apply_defaults(o, schema)
            containers = (o.get("spec") or {}).get("containers") if isinstance(o.get("spec"), dict) else None
            for c in containers if isinstance(containers, list) else []:  # kube's defaulting skips malformed ones
                for p in (c.get("ports") or []) if isinstance(c, dict) and isinstance(c.get("ports"), list) else []:
                    if isinstance(p, dict):
                        p.setdefault("protocol", "TCP")

        monkeypatch.setattr(apply_mod, "_created_apply_fields", walk)
        try:
            return server_side_apply(None, copy.deepcopy(obj), manager="m", force=False, schema=schema,
                                     api_version="v1", now="2026-01-01T00:00:00Z", default=default, owned=True)
        except ApiError as e:
            return ("error", e.code, e.message)

    port = st.fixed_dictionaries({}, optional={"containerPort": st.sampled_from([80, 443]),
                                               "protocol": st.sampled_from(["TCP", "UDP"]), "name": st.just("p")})
    container = st.fixed_dictionaries({"image": st.just("i")}, optional={
        "name": st.sampled_from(["a", "b"]), "ports": st.lists(port, max_size=3),
        "args": st.lists(st.sampled_from(["x", "y"]), max_size=2)})
    pods = st.fixed_dictionaries({"apiVersion": st.just("v1"), "kind": st.just("Pod"),
                                  "metadata": st.fixed_dictionaries({"name": st.just("p")}, optional={
                                      "finalizers": st.lists(st.sampled_from(["f", "g"]), max_size=3),
                                      "labels": st.dictionaries(st.sampled_from(["a", "b"]), st.just("v"))}),
                                  "spec": st.fixed_dictionaries({"containers": st.lists(container, max_size=3)})})

    @settings(max_examples=400, deadline=None)
    @given(st.one_of(pods, _random_objects([*_RANDOM_KEYS, "endpoints"])), st.sampled_from(schemas))
    def check(obj: dict[str, Any], schema: dict[str, Any] | None) -> None:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        assert run(obj, schema, counting) == run(obj, schema, refusing)

    check()
    assert taken["compiled"] > 50 and taken["general"] > 50  # both routes were compared, many times
