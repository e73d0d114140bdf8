"""JSON patch, JSON merge patch and strategic merge patch, as kube-apiserver applies them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.patch import (
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)

# ---------------------------------------------------------------- schemas (hand-written, kube extensions)

CONTAINER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string"},
        "args": {"type": "array", "items": {"type": "string"}},
        "env": {
            "type": "array",
            "x-kubernetes-patch-strategy": "merge",
            "x-kubernetes-patch-merge-key": "name",
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}}},
        },
        "resources": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

POD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "set",
                },
            },
        },
        "spec": {
            "type": "object",
            "properties": {
                "containers": {
                    "type": "array",
                    "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-patch-merge-key": "name",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": CONTAINER,
                },
                "volumes": {
                    "type": "array",
                    "x-kubernetes-patch-strategy": "merge,retainKeys",
                    "x-kubernetes-patch-merge-key": "name",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "emptyDir": {"type": "object"},
                            "configMap": {"type": "object"},
                        },
                    },
                },
                "nodeSelector": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "x-kubernetes-map-type": "atomic",
                },
                "affinity": {"type": "object", "x-kubernetes-patch-strategy": "replace"},
            },
        },
    },
}

SERVICE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "ports": {
                    "type": "array",
                    "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-patch-merge-key": "port",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "port": {"type": "integer"},
                            "targetPort": {"x-kubernetes-int-or-string": True},
                            "protocol": {"type": "string", "default": "TCP"},
                        },
                    },
                },
                "selector": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "web"}, "finalizers": ["a", "b"]},
        "spec": {
            "containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "side:1"},
            ]
        },
    }


def smp(doc: Any, patch: Any, schema: dict[str, Any] | None = POD) -> Any:
    before = copy.deepcopy(doc)
    out = apply_strategic_merge_patch(doc, patch, schema)
    assert doc == before, "the input document must not be mutated"
    return out


def cause_message(err: ApiError) -> str:
    assert err.details is not None
    return str(err.details["causes"][0]["message"])


# ================================================================ JSON patch


class TestJsonPatch:
    def test_add_replace_remove(self) -> None:
        doc = {"a": {"b": 1}, "l": [1, 2]}
        out = apply_json_patch(
            doc,
            [
                {"op": "add", "path": "/a/c", "value": 2},
                {"op": "replace", "path": "/a/b", "value": 5},
                {"op": "remove", "path": "/l/0"},
                {"op": "add", "path": "/l/-", "value": 9},
                {"op": "add", "path": "/l/0", "value": 0},
            ],
        )
        assert out == {"a": {"b": 5, "c": 2}, "l": [0, 2, 9]}
        assert doc == {"a": {"b": 1}, "l": [1, 2]}

    def test_pointer_escaping(self) -> None:
        doc = {"metadata": {"annotations": {"example.com/x~y": "1"}}}
        out = apply_json_patch(
            doc,
            [
                {"op": "replace", "path": "/metadata/annotations/example.com~1x~0y", "value": "2"},
                {"op": "add", "path": "/metadata/annotations/a~1b", "value": "3"},
            ],
        )
        assert out["metadata"]["annotations"] == {"example.com/x~y": "2", "a/b": "3"}

    def test_move_copy_test(self) -> None:
        doc = {"a": [1, 2], "b": {"x": "y"}}
        out = apply_json_patch(
            doc,
            [
                {"op": "test", "path": "/b/x", "value": "y"},
                {"op": "copy", "from": "/b", "path": "/c"},
                {"op": "move", "from": "/a/0", "path": "/a/-"},
                {"op": "move", "from": "/b/x", "path": "/b/z"},
            ],
        )
        assert out == {"a": [2, 1], "b": {"z": "y"}, "c": {"x": "y"}}

    def test_copy_is_deep(self) -> None:
        out = apply_json_patch({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}, {"op": "replace", "path": "/c/b", "value": 2}])
        assert out == {"a": {"b": 1}, "c": {"b": 2}}

    def test_root_replace(self) -> None:
        assert apply_json_patch({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}

    def test_test_is_type_strict(self) -> None:
        with pytest.raises(ApiError) as err:
            apply_json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": True}])
        assert err.value.code == 422
        assert apply_json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 1.0}]) == {"a": 1}

    def test_failed_test_is_422(self) -> None:
        with pytest.raises(ApiError) as err:
            apply_json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
        assert err.value.code == 422 and err.value.reason == "Invalid"
        assert err.value.message == "the server rejected our request due to an error in our request"
        assert cause_message(err.value) == "testing value /a failed: test failed"

    @pytest.mark.parametrize(
        ("op", "detail"),
        [
            ({"op": "add", "path": "/x/y", "value": 1}, 'add operation does not apply: doc is missing path: "/x/y": missing value'),
            ({"op": "replace", "path": "/x", "value": 1}, "replace operation does not apply: doc is missing key: /x: missing value"),
            ({"op": "remove", "path": "/x"}, "error in remove for path: '/x': Unable to remove nonexistent key: x: missing value"),
            ({"op": "move", "from": "/x", "path": "/y"}, "move operation does not apply: doc is missing from path: /x: missing value"),
            ({"op": "add", "path": "/l/5", "value": 1}, "Unable to access invalid index: 5: invalid index referenced"),
            ({"op": "remove", "path": "/l/2"}, "Unable to access invalid index: 2: invalid index referenced"),
            ({"op": "frob", "path": "/a"}, "Unexpected kind: frob"),
        ],
    )
    def test_unappliable_operations_are_422(self, op: dict[str, Any], detail: str) -> None:
        with pytest.raises(ApiError) as err:
            apply_json_patch({"a": 1, "l": [1, 2]}, [op])
        assert err.value.code == 422
        assert cause_message(err.value) == detail

    def test_missing_path_field(self) -> None:
        with pytest.raises(ApiError) as err:
            apply_json_patch({}, [{"op": "add", "value": 1}])
        assert err.value.code == 422
        assert "missing path" in cause_message(err.value)

    @pytest.mark.parametrize("ops", [{"op": "add"}, "x", [1], ["add"]])
    def test_undecodable_patch_is_400(self, ops: Any) -> None:
        with pytest.raises(ApiError) as err:
            apply_json_patch({}, ops)
        assert err.value.code == 400 and err.value.reason == "BadRequest"
        assert "cannot unmarshal" in err.value.message

    def test_atomic_on_failure(self) -> None:
        doc = {"a": 1}
        with pytest.raises(ApiError):
            apply_json_patch(doc, [{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 0}])
        assert doc == {"a": 1}

    def test_too_many_operations(self) -> None:
        with pytest.raises(ApiError) as err:
            apply_json_patch({}, [{"op": "test", "path": "", "value": {}}] * 10001)
        assert err.value.code == 413


# ================================================================ JSON merge patch


class TestMergePatch:
    def test_rfc7386(self) -> None:
        doc = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
        out = apply_merge_patch(doc, {"a": "z", "c": {"f": None, "h": {"i": None, "j": 1}}, "l": [3]})
        assert out == {"a": "z", "c": {"d": "e", "h": {"j": 1}}, "l": [3]}
        assert doc["c"] == {"d": "e", "f": "g"}

    def test_null_for_absent_key(self) -> None:
        assert apply_merge_patch({"a": 1}, {"b": None}) == {"a": 1}

    def test_object_replaces_scalar(self) -> None:
        assert apply_merge_patch({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}

    @pytest.mark.parametrize("patch", [[1], "x", None])
    def test_non_object_patch_is_400(self, patch: Any) -> None:
        with pytest.raises(ApiError) as err:
            apply_merge_patch({"a": 1}, patch)
        assert err.value.code == 400 and err.value.message == "Invalid JSON Patch"


# ================================================================ strategic merge patch


class TestStrategicMergePatch:
    def test_containers_merge_by_name(self) -> None:
        out = smp(pod(), {"spec": {"containers": [{"name": "side", "image": "side:2"}]}})
        assert out["spec"]["containers"] == [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "side:2"},
        ]

    def test_new_container_goes_before_server_only_items(self) -> None:
        # kube's ordering: items the server cannot place come first, server-only items keep their order.
        out = smp(pod(), {"spec": {"containers": [{"name": "new", "image": "n"}]}})
        assert [c["name"] for c in out["spec"]["containers"]] == ["new", "app", "side"]

    def test_nested_merge_list(self) -> None:
        out = smp(pod(), {"spec": {"containers": [{"name": "app", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]}]}})
        app = out["spec"]["containers"][0]
        assert app["image"] == "app:1"
        assert app["env"] == [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]

    def test_null_deletes_map_key_and_list_item_field(self) -> None:
        out = smp(pod(), {"metadata": {"labels": {"app": None, "tier": "fe"}}, "spec": {"containers": [{"name": "app", "env": None}]}})
        assert out["metadata"]["labels"] == {"tier": "fe"}
        assert "env" not in out["spec"]["containers"][0]

    def test_delete_list_item(self) -> None:
        out = smp(pod(), {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}})
        assert [c["name"] for c in out["spec"]["containers"]] == ["app"]

    def test_delete_item_without_merge_key_is_422(self) -> None:
        with pytest.raises(ApiError) as err:
            smp(pod(), {"spec": {"containers": [{"image": "x", "$patch": "delete"}]}})
        assert err.value.code == 422
        assert "does not contain declared merge key: name" in cause_message(err.value)

    def test_merge_item_without_merge_key_is_422(self) -> None:
        with pytest.raises(ApiError) as err:
            smp(pod(), {"spec": {"containers": [{"image": "x"}]}})
        assert err.value.code == 422

    def test_replace_list(self) -> None:
        out = smp(pod(), {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}})
        assert out["spec"]["containers"] == [{"name": "only", "image": "o"}]

    def test_replace_map(self) -> None:
        out = smp(pod(), {"metadata": {"labels": {"$patch": "replace", "x": "y"}}})
        assert out["metadata"]["labels"] == {"x": "y"}

    def test_delete_map(self) -> None:
        out = smp(pod(), {"metadata": {"labels": {"$patch": "delete"}}})
        assert "labels" not in out["metadata"]

    def test_merge_directive_is_default_merge(self) -> None:
        out = smp(pod(), {"metadata": {"labels": {"$patch": "merge", "x": "y"}}})
        assert out["metadata"]["labels"] == {"app": "web", "x": "y"}

    def test_unknown_directive(self) -> None:
        with pytest.raises(ApiError) as err:
            smp(pod(), {"metadata": {"labels": {"$patch": "frob"}}})
        assert err.value.code == 422

    def test_directives_never_reach_new_fields(self) -> None:
        out = smp({"metadata": {}}, {"metadata": {"labels": {"$patch": "replace", "a": "b", "c": None}}})
        assert out == {"metadata": {"labels": {"a": "b"}}}

    def test_finalizers_merge_as_set(self) -> None:
        out = smp(pod(), {"metadata": {"finalizers": ["b", "c"]}})
        assert out["metadata"]["finalizers"] == ["a", "b", "c"]

    def test_delete_from_primitive_list(self) -> None:
        out = smp(pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
        assert out["metadata"]["finalizers"] == ["b"]

    def test_delete_from_primitive_list_bad_format(self) -> None:
        with pytest.raises(ApiError) as err:
            smp(pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}})
        assert err.value.code == 400

    def test_set_element_order_maps(self) -> None:
        patch = {
            "spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "new"}, {"name": "app"}],
                "containers": [{"name": "new", "image": "n"}],
            }
        }
        out = smp(pod(), patch)
        assert [c["name"] for c in out["spec"]["containers"]] == ["side", "new", "app"]

    def test_set_element_order_primitives(self) -> None:
        out = smp(pod(), {"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"], "finalizers": ["c"]}})
        assert out["metadata"]["finalizers"] == ["c", "b", "a"]

    def test_set_element_order_must_cover_patch(self) -> None:
        with pytest.raises(ApiError) as err:
            smp(pod(), {"metadata": {"$setElementOrder/finalizers": ["a"], "finalizers": ["z"]}})
        assert err.value.code == 400

    def test_retain_keys(self) -> None:
        doc = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
        patch = {"spec": {"volumes": [{"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}]}}
        out = smp(doc, patch)
        assert out["spec"]["volumes"] == [{"name": "v", "configMap": {"name": "cm"}}]

    def test_retain_keys_must_cover_patch(self) -> None:
        doc = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
        patch = {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name"], "configMap": {}}]}}
        with pytest.raises(ApiError) as err:
            smp(doc, patch)
        assert err.value.code == 422

    def test_non_merge_list_replaces(self) -> None:
        doc = {"spec": {"containers": [{"name": "app", "args": ["a", "b"]}]}}
        out = smp(doc, {"spec": {"containers": [{"name": "app", "args": ["c"]}]}})
        assert out["spec"]["containers"][0]["args"] == ["c"]

    def test_replace_strategy_map(self) -> None:
        doc = {"spec": {"affinity": {"a": 1, "b": 2}}}
        assert smp(doc, {"spec": {"affinity": {"c": 3}}})["spec"]["affinity"] == {"c": 3}

    def test_service_ports_merge_by_port(self) -> None:
        doc = {"spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "https", "port": 443, "protocol": "TCP"}]}}
        out = smp(doc, {"spec": {"ports": [{"port": 443, "targetPort": 8443}, {"port": 8080}]}}, SERVICE)
        assert out["spec"]["ports"] == [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443},
            {"port": 8080},
        ]

    def test_without_schema_lists_replace(self) -> None:
        out = smp(pod(), {"spec": {"containers": [{"name": "x"}]}, "metadata": {"labels": {"z": "1"}}}, None)
        assert out["spec"]["containers"] == [{"name": "x"}]
        assert out["metadata"]["labels"] == {"app": "web", "z": "1"}

    def test_list_type_map_without_patch_strategy(self) -> None:
        schema = {"type": "object", "properties": {"items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]}}}
        out = smp({"items": [{"id": 1, "v": "a"}, {"id": 2}]}, {"items": [{"id": 1, "v": "b"}]}, schema)
        assert out == {"items": [{"id": 1, "v": "b"}, {"id": 2}]}

    def test_empty_patch_list_leaves_merging_list(self) -> None:
        assert smp(pod(), {"metadata": {"finalizers": []}})["metadata"]["finalizers"] == ["a", "b"]

    def test_top_level_not_object_is_400(self) -> None:
        with pytest.raises(ApiError) as err:
            smp(pod(), [1])
        assert err.value.code == 400
