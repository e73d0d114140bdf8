"""Values read through their schema (structured-merge-diff's typed package): list kinds and keys, the
field set an applied configuration sets, and the comparison of two objects into added, changed and
removed paths (fieldpath.py spells the paths).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from isthmus.apiserver.fieldmanager.fieldpath import (
    STRIPPED_EXACT,
    STRIPPED_TREE,
    Path,
    compact_json,
    path_string,
)
from isthmus.apiserver.openapi.schema import resolve_all_of


class Missing:
    """Marks an absent value while comparing (distinct from JSON null)."""


MISSING: Final = Missing()


# ================================================================ schema helpers


_schema = resolve_all_of


def field_schema(schema: dict[str, Any] | None, key: str) -> tuple[dict[str, Any] | None, bool]:
    """(schema of the key, declared as a struct field?). Undeclared keys are map entries."""
    if schema is None:
        return None, False
    props = schema.get("properties")
    if isinstance(props, dict) and key in props:
        sub = props[key]
        return (sub if type(sub) is dict and "allOf" not in sub else _schema(sub)), True  # most: no allOf
    sub = schema.get("additionalProperties")
    return (sub if type(sub) is dict and "allOf" not in sub else _schema(sub)), False


@dataclass(frozen=True)
class _ListKind:
    kind: str  # "atomic" | "set" | "map"
    keys: tuple[str, ...] = ()


_ATOMIC_LIST: Final = _ListKind("atomic")


def list_kind_of(schema: dict[str, Any] | None) -> _ListKind:
    """x-kubernetes-list-type decides; schemas without it fall back to the patch strategy (as kube's
    OpenAPI→SMD conversion does); anything else — including no schema — is atomic."""
    if schema is None:
        return _ATOMIC_LIST
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = tuple(k for k in schema.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str))
        return _ListKind("map", keys) if keys else _ATOMIC_LIST
    if list_type == "set":
        return _ListKind("set")
    if list_type == "atomic":
        return _ATOMIC_LIST
    strategy = schema.get("x-kubernetes-patch-strategy")
    if isinstance(strategy, str) and "merge" in strategy.split(","):
        key = schema.get("x-kubernetes-patch-merge-key")
        return _ListKind("map", (key,)) if isinstance(key, str) and key else _ListKind("set")
    return _ATOMIC_LIST


def is_granular_map(value: Any, schema: dict[str, Any] | None) -> bool:
    return isinstance(value, dict) and (schema or {}).get("x-kubernetes-map-type") != "atomic"


def is_granular_list(value: Any, schema: dict[str, Any] | None) -> bool:
    if not isinstance(value, list):
        return False
    hit = _LIST_KINDS.get(id(schema))  # _list_kind's answer, without its call (it is asked per list)
    if hit is None or hit[0] is not schema:
        if len(_LIST_KINDS) >= 4096:
            _LIST_KINDS.clear()  # CRD schemas replaced many times over: start again
        hit = _LIST_KINDS[id(schema)] = (schema, list_kind_of(schema))
    return hit[1].kind != "atomic"


_LIST_KINDS: dict[int, tuple[dict[str, Any] | None, _ListKind]] = {}


def item_element(item: Any, schema: dict[str, Any] | None) -> str:
    """The path element of a list item: k:{keys} for list-maps, v:value for sets."""
    kind = list_kind_of(schema)
    if kind.kind == "map" and isinstance(item, dict):
        return "k:" + compact_json(_key_values(item, kind.keys, _schema((schema or {}).get("items"))))
    return "v:" + compact_json(item)


def _key_values(item: dict[str, Any], keys: tuple[str, ...], items: dict[str, Any] | None) -> dict[str, Any]:
    """The list-map key fields of an item; an absent key takes its schema default (Service ports' protocol)."""
    props = (items or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for k in keys:
        if k in item:
            out[k] = item[k]
        else:
            sub = _schema(props.get(k))
            if sub is not None and "default" in sub:
                out[k] = sub["default"]
    return out


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def same_value(a: Any, b: Any) -> bool:
    """_json_equal, answered in C for nearly every pair: JSON-equal values are equal in Python, and
    Python-equal values that serialize to the same bytes are JSON-equal; only a pair Python calls
    equal and orjson writes differently (1 and 1.0, or true and 1) takes the walk."""
    if a is b:
        return True
    if a != b:
        return False
    try:
        if orjson.dumps(a) == orjson.dumps(b):
            return True
    except TypeError:
        pass
    return _json_equal(a, b)


def items_of(value: list[Any], schema: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """(path element, item) of a granular list; the first of duplicate elements wins."""
    seen: set[str] = set()
    out: list[tuple[str, Any]] = []
    for item in value:
        pe = item_element(item, schema)
        if pe not in seen:
            seen.add(pe)
            out.append((pe, item))
    return out


def find_duplicates(value: Any, schema: dict[str, Any] | None, path: Path = ()) -> str | None:
    """The first granular list with two items of the same key (an applied configuration may not have one)."""
    if is_granular_map(value, schema):
        for key, child in value.items():
            if not isinstance(child, (dict, list)):
                continue  # nothing below a scalar
            found = find_duplicates(child, field_schema(schema, key)[0], (*path, "f:" + key))
            if found:
                return found
    elif is_granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        seen: set[str] = set()
        for item in value:
            pe = item_element(item, schema)
            if pe in seen:
                return f"{path_string(path)}: duplicate entries for key {path_string((pe,))}"
            seen.add(pe)
            if isinstance(item, (dict, list)):
                found = find_duplicates(item, items_schema, (*path, pe))
                if found:
                    return found
    return None


def fill_keys(config: Any, defaulted: Any, schema: dict[str, Any] | None, path: Path, filled: set[Path]) -> None:
    """Give the list-map items of an applied configuration the key fields defaulting gives them.

    structured-merge-diff identifies an item by its key fields, taking a key's default when the item
    omits it (a container port without `protocol` is the item {containerPort, protocol: TCP}), and
    kube defaults the object it stores: without this, the applied item and the stored one have
    different keys and a second apply of the same configuration holds both ("Duplicate value").
    `defaulted` is the configuration after the kind's defaulting; lists keep their order and length
    under defaulting, so items correspond by index. The filled key fields are recorded in `filled`
    (their paths): the applier does not own what it did not set, as in kube.
    """
    if is_granular_map(config, schema) and isinstance(defaulted, dict):
        for key, child in config.items():
            if key in defaulted and isinstance(child, (dict, list)):  # nothing to fill below a scalar
                fill_keys(child, defaulted[key], field_schema(schema, key)[0], (*path, "f:" + key), filled)
    elif is_granular_list(config, schema) and isinstance(defaulted, list) and len(defaulted) == len(config):
        kind = list_kind_of(schema)
        items_schema = _schema((schema or {}).get("items"))
        for item, dflt in zip(config, defaulted, strict=True):
            if not isinstance(item, dict) or not isinstance(dflt, dict):
                continue
            added = []
            if kind.kind == "map":
                for k in kind.keys:
                    if k not in item and dflt.get(k) is not None:
                        item[k] = dflt[k]
                        added.append(k)
            item_path = (*path, item_element(item, schema))
            filled.update((*item_path, "f:" + k) for k in added)
            if kind.kind == "map":
                fill_keys(item, dflt, items_schema, item_path, filled)


# ================================================================ field sets


def strip_untracked(paths: Iterable[Path]) -> set[Path]:
    return {
        p for p in paths if p not in STRIPPED_EXACT and p[: len(STRIPPED_TREE)] != STRIPPED_TREE
    }


def applied_fields(value: Any, schema: dict[str, Any] | None, path: Path, out: set[Path]) -> None:
    """The fields an applied configuration sets (structured-merge-diff's ToFieldSet): leaves, atomic
    values, null/empty struct fields, every map entry and every list item."""
    if is_granular_map(value, schema):
        for key, child in value.items():
            child_path = (*path, "f:" + key)
            if not isinstance(child, (dict, list)):
                out.add(child_path)  # a leaf: what the call below would add, without it
                continue
            sub, declared = field_schema(schema, key)
            applied_fields(child, sub, child_path, out)
            if child == {} or not declared:
                out.add(child_path)
    elif is_granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        for pe, item in items_of(value, schema):
            child_path = (*path, pe)
            out.add(child_path)
            if pe.startswith("k:"):
                applied_fields(item, items_schema, child_path, out)
    elif path:
        out.add(path)


@dataclass
class _Comparison:
    added: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)

    @property
    def changed(self) -> set[Path]:
        return self.added | self.modified


def _children(value: Any, schema: dict[str, Any] | None) -> dict[str, tuple[Any, dict[str, Any] | None]]:
    """Granular children of a value by path element, with their schemas."""
    if is_granular_map(value, schema):
        return {"f:" + k: (v, field_schema(schema, k)[0]) for k, v in value.items()}
    if is_granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        return {pe: (item, items_schema if pe.startswith("k:") else None) for pe, item in items_of(value, schema)}
    return {}


def _granular(value: Any, schema: dict[str, Any] | None) -> str:
    if is_granular_map(value, schema):
        return "map"
    if is_granular_list(value, schema):
        return "list"
    return ""


def _add_all(value: Any, schema: dict[str, Any] | None, path: Path, added: set[Path]) -> None:
    """_compare of a value against nothing: its path and every granular path below it are added
    (the whole of a create goes through here, so it walks without building _children's dicts)."""
    added.add(path)
    if isinstance(value, dict):
        if schema is None:
            for key, child in value.items():
                _add_all(child, None, (*path, "f:" + key), added)
            return
        if schema.get("x-kubernetes-map-type") == "atomic":
            return
        props = schema.get("properties")
        if not isinstance(props, dict):
            props = {}
        for key, child in value.items():  # field_schema, inlined
            sub = props.get(key) if key in props else schema.get("additionalProperties")
            _add_all(child, _schema(sub), (*path, "f:" + key), added)
    elif is_granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        for pe, item in items_of(value, schema):
            _add_all(item, items_schema if pe.startswith("k:") else None, (*path, pe), added)


def _compare(old: Any, new: Any, schema: dict[str, Any] | None, path: Path, out: _Comparison) -> None:
    """What changed from old to new: a path absent before is added (containers included, which is what
    gives Update entries their "." markers), a leaf with another value is modified, a vanished path and
    its whole subtree are removed."""
    if isinstance(old, Missing) and isinstance(new, Missing):
        return
    if isinstance(old, Missing):
        _add_all(new, schema, path, out.added)
        return
    if isinstance(new, Missing):
        out.removed.add(path)
        for pe, (child, sub) in _children(old, schema).items():
            _compare(child, MISSING, sub, (*path, pe), out)
        return
    if not isinstance(old, (dict, list)) and not isinstance(new, (dict, list)):
        # Two leaves (most pairs), decided as below without its calls: neither is granular. Equal
        # values of one type but float are JSON-equal; same_value decides the rest (1 and 1.0, 0.0 and -0.0).
        if not (old is new or (type(old) is type(new) and type(old) is not float and old == new)) \
                and not same_value(old, new):
            out.modified.add(path)
        return
    old_kind, new_kind = _granular(old, schema), _granular(new, schema)
    if old_kind and old_kind == new_kind:
        if same_value(old, new):
            return  # an unchanged subtree (most of an object, and all of it on a no-op apply)
        old_children, new_children = _children(old, schema), _children(new, schema)
        for pe, (child, sub) in new_children.items():
            _compare(old_children[pe][0] if pe in old_children else MISSING, child, sub, (*path, pe), out)
        for pe, (child, sub) in old_children.items():
            if pe not in new_children:
                _compare(child, MISSING, sub, (*path, pe), out)
        return
    if old is None and new_kind:
        # null → container: the children are new, the field itself was already there.
        for pe, (child, sub) in _children(new, schema).items():
            _compare(MISSING, child, sub, (*path, pe), out)
        return
    if old_kind or new_kind:
        # The shape changed (e.g. map → scalar): the old subtree goes, the new one comes.
        for pe, (child, sub) in _children(old, schema).items():
            _compare(child, MISSING, sub, (*path, pe), out)
        for pe, (child, sub) in _children(new, schema).items():
            _compare(MISSING, child, sub, (*path, pe), out)
        if path:
            out.modified.add(path)
        return
    if not same_value(old, new):
        out.modified.add(path)


def compare_objects(old: dict[str, Any], new: dict[str, Any], schema: dict[str, Any] | None) -> _Comparison:
    out = _Comparison()
    _compare(old, new, schema, (), out)
    out.added = strip_untracked(out.added) - {()}
    out.modified = strip_untracked(out.modified) - {()}
    out.removed = strip_untracked(out.removed) - {()}
    return out
