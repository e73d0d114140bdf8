"""schema.validate / apply_defaults / prune against kube's CRD behaviour and messages."""

from __future__ import annotations

import copy
from typing import Any

from isthmus.apiserver.openapi.schema import apply_defaults, prune, validate

WIDGET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                "tags": {
                    "type": "array",
                    "maxItems": 2,
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "port": {"x-kubernetes-int-or-string": True},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port"],
                    "items": {"type": "object", "properties": {"port": {"type": "integer"}}},
                },
                "nested": {
                    "type": "object",
                    "properties": {"enabled": {"type": "boolean", "default": True}},
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "maybe": {"type": "string", "nullable": True},
            },
        },
    },
}


def _obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, **spec},
    }


def test_valid_object_has_no_causes() -> None:
    assert validate(_obj(color="blue", tags=["a", "b"], port="http", maybe=None), WIDGET) == []


def test_type_error_like_kube() -> None:
    causes = validate(_obj(size="string"), WIDGET)
    assert causes == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.size in body must be of type integer: "string"',
            "field": "spec.size",
        }
    ]


def test_required_enum_pattern_bounds_too_many() -> None:
    obj = _obj(color="green", name="ABC", tags=["a", "b", "c"])
    del obj["spec"]["size"]
    by_field = {c["field"]: c for c in validate(obj, WIDGET)}
    assert by_field["spec.size"] == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.size",
    }
    assert by_field["spec.color"]["reason"] == "FieldValueNotSupported"
    assert by_field["spec.color"]["message"] == 'Unsupported value: "green": supported values: "red", "blue"'
    assert by_field["spec.name"]["message"] == (
        "Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'"
    )
    assert by_field["spec.tags"] == {
        "reason": "FieldValueTooMany",
        "message": "Too many: 3: must have at most 2 items",
        "field": "spec.tags",
    }
    big = validate(_obj(size=20), WIDGET)
    assert big[0]["message"] == "Invalid value: 20: spec.size in body should be less than or equal to 10"
    small = validate(_obj(size=0), WIDGET)
    assert small[0]["message"] == "Invalid value: 0: spec.size in body should be greater than or equal to 1"


def test_max_length_and_int_or_string() -> None:
    causes = validate(_obj(name="abcdefg", port=True), WIDGET)
    assert {
        "reason": "FieldValueTooLong",
        "message": "Too long: may not be longer than 5",
        "field": "spec.name",
    } in causes
    assert any(c["field"] == "spec.port" and c["reason"] == "FieldValueTypeInvalid" for c in causes)
    assert validate(_obj(port=8080), WIDGET) == []


def test_list_type_duplicates() -> None:
    causes = validate(_obj(tags=["a", "a"], ports=[{"port": 1}, {"port": 1}]), WIDGET)
    assert {
        "reason": "FieldValueDuplicate",
        "message": 'Duplicate value: "a"',
        "field": "spec.tags[1]",
    } in causes
    dup = [c for c in causes if c["field"] == "spec.ports[1]"]
    assert dup and dup[0]["reason"] == "FieldValueDuplicate"


def test_nested_paths_use_indexes() -> None:
    causes = validate(_obj(ports=[{"port": "x"}]), WIDGET)
    assert causes[0]["field"] == "spec.ports[0].port"


def test_root_metadata_is_left_to_the_server() -> None:
    obj = _obj()
    obj["metadata"] = {"name": 5}
    schema = copy.deepcopy(WIDGET)
    schema["properties"]["metadata"] = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert validate(obj, schema) == []


def test_defaults_fill_absent_fields_of_present_objects_only() -> None:
    obj = _obj()
    apply_defaults(obj, WIDGET)
    assert obj["spec"]["color"] == "red"
    assert "nested" not in obj["spec"]  # absent objects are not created for their nested defaults
    obj = _obj(nested={}, color="blue")
    apply_defaults(obj, WIDGET)
    assert obj["spec"]["nested"] == {"enabled": True}
    assert obj["spec"]["color"] == "blue"


def test_defaults_replace_null_of_non_nullable() -> None:
    obj = _obj(color=None)
    apply_defaults(obj, WIDGET)
    assert obj["spec"]["color"] == "red"


def test_prune_reports_unknown_fields_and_keeps_preserved() -> None:
    obj = _obj(bogus=1, free={"anything": {"x": 1}}, labels={"a": "b"}, ports=[{"port": 1, "extra": True}])
    obj["status"] = {"x": 1}
    obj["extra"] = 2
    dropped = prune(obj, WIDGET)
    assert sorted(dropped) == ["extra", "spec.bogus", "spec.ports[0].extra", "status"]
    assert obj["spec"]["free"] == {"anything": {"x": 1}}
    assert obj["spec"]["labels"] == {"a": "b"}
    assert obj["metadata"] == {"name": "w"}  # kept: metadata has no declared properties here


def test_prune_drops_nulls_silently() -> None:
    obj = _obj(color=None, maybe=None)
    assert prune(obj, WIDGET) == []
    assert "color" not in obj["spec"]
    assert obj["spec"]["maybe"] is None


def test_embedded_resource_keeps_type_meta() -> None:
    schema = {
        "type": "object",
        "properties": {
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
            }
        },
    }
    obj = {
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"a": "b", "c": 1}}
    }
    assert prune(obj, schema, "spec") == ["spec.template.spec.c"]
    assert obj["template"]["kind"] == "Pod"


def test_formats() -> None:
    schema = {"type": "object", "properties": {"t": {"type": "string", "format": "date-time"}}}
    assert validate({"t": "2024-01-02T03:04:05Z"}, schema) == []
    assert validate({"t": "yesterday"}, schema)[0]["field"] == "t"


# ------------------------------------------------------------------ pruning over the compiled schema

_KEEP = ("apiVersion", "kind", "metadata")


def _reference_prune(v: Any, s: dict[str, Any], path: str, dropped: list[str], keep_meta: bool = False) -> None:
    """The walk prune made over the raw schema before it used the compiled nodes: the oracle."""
    if isinstance(v, dict):
        props = s.get("properties") or {}
        addl = s.get("additionalProperties")
        preserve = bool(s.get("x-kubernetes-preserve-unknown-fields")) or addl is True
        if preserve and not props and not isinstance(addl, dict):
            return
        addl_schema = addl if isinstance(addl, dict) else None
        for key in list(v):
            val = v[key]
            sub = props.get(key)
            if sub is None:
                sub = addl_schema
            if sub is not None and val is not None and not isinstance(val, (dict, list)):
                continue
            if keep_meta and key in _KEEP and not (isinstance(sub, dict) and sub.get("properties")):
                continue
            child = f"{path}.{key}" if path else key
            if sub is None:
                if not preserve:
                    del v[key]
                    dropped.append(child)
                continue
            if not isinstance(sub, dict):
                continue
            if val is None and not sub.get("nullable") and not preserve:
                del v[key]
                continue
            if isinstance(val, (dict, list)):
                _reference_prune(val, sub, child, dropped, bool(sub.get("x-kubernetes-embedded-resource")))
    elif isinstance(v, list):
        items = s.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(v):
                if isinstance(item, (dict, list)):
                    _reference_prune(item, items, f"{path}[{i}]", dropped,
                                     bool(items.get("x-kubernetes-embedded-resource")))


_NAMES = ["a", "b", "metadata", "kind", "[x]", "c.d"]


def _schemas() -> Any:
    from hypothesis import strategies as st

    leaf = st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["string", "integer", "boolean", "number"]),
        "nullable": st.booleans(),
        "description": st.just("prose"),
    })

    def containers(children: Any) -> Any:
        obj = st.fixed_dictionaries({"type": st.just("object")}, optional={
            "properties": st.dictionaries(st.sampled_from(_NAMES), children, max_size=4),
            "additionalProperties": st.one_of(st.booleans(), children),
            "x-kubernetes-preserve-unknown-fields": st.booleans(),
            "x-kubernetes-embedded-resource": st.booleans(),
            "nullable": st.booleans(),
        })
        arr = st.fixed_dictionaries({"type": st.just("array")}, optional={"items": children, "nullable": st.booleans()})
        return st.one_of(obj, arr, st.just({}))

    return st.recursive(leaf, containers, max_leaves=12)


def _values() -> Any:
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text("xy", max_size=2))
    return st.recursive(scalars, lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.sampled_from(_NAMES), kids, max_size=4)), max_leaves=15)


def test_prune_over_compiled_nodes_drops_what_the_raw_schema_walk_drops() -> None:
    """Random schemas (maps of scalars, preserved and embedded objects, nullable fields, empty
    schemas) and values: the compiled walk leaves the same object and reports the same paths."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=600, deadline=None)
    @given(_schemas(), _values(), st.sampled_from(["", "status"]))
    def check(s: dict[str, Any], value: Any, path: str) -> None:
        obj = {"apiVersion": "v1", "kind": "K", "metadata": {"name": "x", "junk": 1}, "v": value, "a": value}
        schema = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "name": {"type": "string"}}}, "v": s, "a": {"type": "object", "additionalProperties": s}}}
        if path:
            schema = s
            obj = copy.deepcopy(value) if isinstance(value, dict) else {"v": value}
        want, want_dropped = copy.deepcopy(obj), []  # type: ignore[var-annotated]
        _reference_prune(want, schema, path, want_dropped, keep_meta=path == "" or bool(
            schema.get("x-kubernetes-embedded-resource")))
        got = copy.deepcopy(obj)
        assert prune(got, schema, path) == want_dropped
        assert got == want

    check()


def test_prune_in_a_map_of_scalars_drops_nulls_silently_and_reports_what_is_inside_objects() -> None:
    schema = {"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}
    obj = {"labels": {"a": "b", "gone": None, "odd": {"x": "y"}, "n": 1}}
    assert prune(obj, schema, "spec") == ["spec.labels.odd.x"]
    assert obj == {"labels": {"a": "b", "odd": {}, "n": 1}}  # a wrong type is validation's to refuse
    clean = {"labels": {"a": "b", "gone": None}}
    assert prune(clean, schema) == [] and clean == {"labels": {"a": "b"}}
