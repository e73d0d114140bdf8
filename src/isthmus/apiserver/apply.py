"""Server-side apply and managedFields (fieldsV1) bookkeeping.

Modelled on sigs.k8s.io/structured-merge-diff as kube-apiserver uses it:

- A *field set* is a set of paths. A path is a tuple of fieldsV1 path elements, spelled exactly as in
  fieldsV1: ``f:<name>`` (struct/map field), ``k:<json of the list-map keys>`` (list-map item),
  ``v:<json value>`` (set item), ``i:<n>`` (positional item). A path in the set is *owned*; a path with
  owned descendants is only a prefix unless it is owned too (fieldsV1 writes that as ``".": {}``).
- Apply: the manager owns exactly what its configuration sets (struct fields only as leaves; map entries
  and list items always, so they get ``"."``). Update: the manager gains what the write added or changed.
- A write that changes or adds a path owned by another manager conflicts (Apply) or silently takes it
  over (Update, or Apply with force). Removed paths leave every manager.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from isthmus.apiserver.apimachinery.errors import ApiError, bad_request
from isthmus.apiserver.apimachinery.jsoncopy import clone, deep_copy
from isthmus.apiserver.openapi.schema import resolve_all_of

Path = tuple[str, ...]

APPLY: Final = "Apply"
UPDATE: Final = "Update"
BEFORE_FIRST_APPLY: Final = "before-first-apply"
ANCIENT_CHANGES: Final = "ancient-changes"
MAX_UPDATE_MANAGERS: Final = 10

# Paths never tracked (kube's stripped meta fields). apiVersion/kind never conflict: they are not fields.
_STRIPPED_EXACT: Final[frozenset[Path]] = frozenset(
    {
        ("f:apiVersion",),
        ("f:kind",),
        ("f:metadata",),
        ("f:metadata", "f:name"),
        ("f:metadata", "f:namespace"),
        ("f:metadata", "f:creationTimestamp"),
        ("f:metadata", "f:selfLink"),
        ("f:metadata", "f:uid"),
        ("f:metadata", "f:clusterName"),
        ("f:metadata", "f:generation"),
        ("f:metadata", "f:resourceVersion"),
        ("f:metadata", "f:deletionTimestamp"),
        ("f:metadata", "f:deletionGracePeriodSeconds"),
    }
)
_STRIPPED_TREE: Final[Path] = ("f:metadata", "f:managedFields")


class _Missing:
    """Marks an absent value while comparing (distinct from JSON null)."""


_MISSING: Final = _Missing()


# ================================================================ schema helpers


_schema = resolve_all_of


def _field(schema: dict[str, Any] | None, key: str) -> tuple[dict[str, Any] | None, bool]:
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


def _list_kind(schema: dict[str, Any] | None) -> _ListKind:
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


def _granular_map(value: Any, schema: dict[str, Any] | None) -> bool:
    return isinstance(value, dict) and (schema or {}).get("x-kubernetes-map-type") != "atomic"


def _granular_list(value: Any, schema: dict[str, Any] | None) -> bool:
    if not isinstance(value, list):
        return False
    hit = _LIST_KINDS.get(id(schema))  # _list_kind's answer, without its call (it is asked per list)
    if hit is None or hit[0] is not schema:
        if len(_LIST_KINDS) >= 4096:
            _LIST_KINDS.clear()  # CRD schemas replaced many times over: start again
        hit = _LIST_KINDS[id(schema)] = (schema, _list_kind(schema))
    return hit[1].kind != "atomic"


_LIST_KINDS: dict[int, tuple[dict[str, Any] | None, _ListKind]] = {}


def _plain_json(value: Any) -> bool:
    """Whether orjson writes value exactly as json.dumps below would: strings, booleans, null and
    64-bit integers (floats differ in exponent form), in dicts with string keys and lists."""
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return bool(-(2**63) <= value < 2**64)
    if t is dict:
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    if t is list:
        return all(_plain_json(v) for v in value)
    return False


def _compact(value: Any) -> str:
    if _plain_json(value):  # list-map keys and set values nearly always: one C call
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _item_element(item: Any, schema: dict[str, Any] | None) -> str:
    """The path element of a list item: k:{keys} for list-maps, v:value for sets."""
    kind = _list_kind(schema)
    if kind.kind == "map" and isinstance(item, dict):
        return "k:" + _compact(_key_values(item, kind.keys, _schema((schema or {}).get("items"))))
    return "v:" + _compact(item)


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


def _same(a: Any, b: Any) -> bool:
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


def _items(value: list[Any], schema: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """(path element, item) of a granular list; the first of duplicate elements wins."""
    seen: set[str] = set()
    out: list[tuple[str, Any]] = []
    for item in value:
        pe = _item_element(item, schema)
        if pe not in seen:
            seen.add(pe)
            out.append((pe, item))
    return out


def _duplicates(value: Any, schema: dict[str, Any] | None, path: Path = ()) -> str | None:
    """The first granular list with two items of the same key (an applied configuration may not have one)."""
    if _granular_map(value, schema):
        for key, child in value.items():
            if not isinstance(child, (dict, list)):
                continue  # nothing below a scalar
            found = _duplicates(child, _field(schema, key)[0], (*path, "f:" + key))
            if found:
                return found
    elif _granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        seen: set[str] = set()
        for item in value:
            pe = _item_element(item, schema)
            if pe in seen:
                return f"{path_string(path)}: duplicate entries for key {path_string((pe,))}"
            seen.add(pe)
            if isinstance(item, (dict, list)):
                found = _duplicates(item, items_schema, (*path, pe))
                if found:
                    return found
    return None


def _fill_keys(config: Any, defaulted: Any, schema: dict[str, Any] | None, path: Path, filled: set[Path]) -> None:
    """Give the list-map items of an applied configuration the key fields defaulting gives them.

    structured-merge-diff identifies an item by its key fields, taking a key's default when the item
    omits it (a container port without `protocol` is the item {containerPort, protocol: TCP}), and
    kube defaults the object it stores: without this, the applied item and the stored one have
    different keys and a second apply of the same configuration holds both ("Duplicate value").
    `defaulted` is the configuration after the kind's defaulting; lists keep their order and length
    under defaulting, so items correspond by index. The filled key fields are recorded in `filled`
    (their paths): the applier does not own what it did not set, as in kube.
    """
    if _granular_map(config, schema) and isinstance(defaulted, dict):
        for key, child in config.items():
            if key in defaulted and isinstance(child, (dict, list)):  # nothing to fill below a scalar
                _fill_keys(child, defaulted[key], _field(schema, key)[0], (*path, "f:" + key), filled)
    elif _granular_list(config, schema) and isinstance(defaulted, list) and len(defaulted) == len(config):
        kind = _list_kind(schema)
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
            item_path = (*path, _item_element(item, schema))
            filled.update((*item_path, "f:" + k) for k in added)
            if kind.kind == "map":
                _fill_keys(item, dflt, items_schema, item_path, filled)


# ================================================================ field sets


def _strip(paths: Iterable[Path]) -> set[Path]:
    return {
        p for p in paths if p not in _STRIPPED_EXACT and p[: len(_STRIPPED_TREE)] != _STRIPPED_TREE
    }


def _applied_fields(value: Any, schema: dict[str, Any] | None, path: Path, out: set[Path]) -> None:
    """The fields an applied configuration sets (structured-merge-diff's ToFieldSet): leaves, atomic
    values, null/empty struct fields, every map entry and every list item."""
    if _granular_map(value, schema):
        for key, child in value.items():
            child_path = (*path, "f:" + key)
            if not isinstance(child, (dict, list)):
                out.add(child_path)  # a leaf: what the call below would add, without it
                continue
            sub, declared = _field(schema, key)
            _applied_fields(child, sub, child_path, out)
            if child == {} or not declared:
                out.add(child_path)
    elif _granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        for pe, item in _items(value, schema):
            child_path = (*path, pe)
            out.add(child_path)
            if pe.startswith("k:"):
                _applied_fields(item, items_schema, child_path, out)
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
    if _granular_map(value, schema):
        return {"f:" + k: (v, _field(schema, k)[0]) for k, v in value.items()}
    if _granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        return {pe: (item, items_schema if pe.startswith("k:") else None) for pe, item in _items(value, schema)}
    return {}


def _granular(value: Any, schema: dict[str, Any] | None) -> str:
    if _granular_map(value, schema):
        return "map"
    if _granular_list(value, schema):
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
        for key, child in value.items():  # _field, inlined
            sub = props.get(key) if key in props else schema.get("additionalProperties")
            _add_all(child, _schema(sub), (*path, "f:" + key), added)
    elif _granular_list(value, schema):
        items_schema = _schema((schema or {}).get("items"))
        for pe, item in _items(value, schema):
            _add_all(item, items_schema if pe.startswith("k:") else None, (*path, pe), added)


def _compare(old: Any, new: Any, schema: dict[str, Any] | None, path: Path, out: _Comparison) -> None:
    """What changed from old to new: a path absent before is added (containers included, which is what
    gives Update entries their "." markers), a leaf with another value is modified, a vanished path and
    its whole subtree are removed."""
    if isinstance(old, _Missing) and isinstance(new, _Missing):
        return
    if isinstance(old, _Missing):
        _add_all(new, schema, path, out.added)
        return
    if isinstance(new, _Missing):
        out.removed.add(path)
        for pe, (child, sub) in _children(old, schema).items():
            _compare(child, _MISSING, sub, (*path, pe), out)
        return
    if not isinstance(old, (dict, list)) and not isinstance(new, (dict, list)):
        # Two leaves (most pairs), decided as below without its calls: neither is granular. Equal
        # values of one type but float are JSON-equal; _same decides the rest (1 and 1.0, 0.0 and -0.0).
        if not (old is new or (type(old) is type(new) and type(old) is not float and old == new)) \
                and not _same(old, new):
            out.modified.add(path)
        return
    old_kind, new_kind = _granular(old, schema), _granular(new, schema)
    if old_kind and old_kind == new_kind:
        if _same(old, new):
            return  # an unchanged subtree (most of an object, and all of it on a no-op apply)
        old_children, new_children = _children(old, schema), _children(new, schema)
        for pe, (child, sub) in new_children.items():
            _compare(old_children[pe][0] if pe in old_children else _MISSING, child, sub, (*path, pe), out)
        for pe, (child, sub) in old_children.items():
            if pe not in new_children:
                _compare(child, _MISSING, sub, (*path, pe), out)
        return
    if old is None and new_kind:
        # null → container: the children are new, the field itself was already there.
        for pe, (child, sub) in _children(new, schema).items():
            _compare(_MISSING, child, sub, (*path, pe), out)
        return
    if old_kind or new_kind:
        # The shape changed (e.g. map → scalar): the old subtree goes, the new one comes.
        for pe, (child, sub) in _children(old, schema).items():
            _compare(child, _MISSING, sub, (*path, pe), out)
        for pe, (child, sub) in _children(new, schema).items():
            _compare(_MISSING, child, sub, (*path, pe), out)
        if path:
            out.modified.add(path)
        return
    if not _same(old, new):
        out.modified.add(path)


def _compare_objects(old: dict[str, Any], new: dict[str, Any], schema: dict[str, Any] | None) -> _Comparison:
    out = _Comparison()
    _compare(old, new, schema, (), out)
    out.added = _strip(out.added) - {()}
    out.modified = _strip(out.modified) - {()}
    out.removed = _strip(out.removed) - {()}
    return out


# ================================================================ fieldsV1 encoding


_ELEMENT_RANK: Final = {"f": 0, "k": 1, "v": 2, "i": 3}


def _element_sort_key(pe: str) -> tuple[int, str, Any]:
    """structured-merge-diff orders path elements: fields, then keys, then values, then indexes."""
    if pe.startswith("f:"):
        return 0, pe[2:], 0  # a field, by far the most common element
    kind, _, rest = pe.partition(":")
    rank = _ELEMENT_RANK.get(kind, 4)
    if kind == "i" and rest.isdigit():
        return rank, "", int(rest)
    if kind == "k":
        try:
            keys = json.loads(rest)
            return rank, "", [(k, _value_sort_key(keys[k])) for k in sorted(keys)]
        except (ValueError, TypeError, AttributeError):
            pass
    if kind == "v":
        try:
            return rank, "", _value_sort_key(json.loads(rest))
        except ValueError:
            pass
    return rank, rest, 0


def _value_sort_key(v: Any) -> tuple[int, Any]:
    if v is None:
        return 0, 0
    if isinstance(v, bool):
        return 2, int(v)
    if isinstance(v, (int, float)):
        return 1, v
    if isinstance(v, str):
        return 3, v
    return 4, _compact(v)


@dataclass
class _Node:
    members: set[str] = field(default_factory=set)
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(paths: Iterable[Path]) -> _Node:
    root = _Node()
    for path in paths:
        if not path:
            continue
        node = root
        for pe in path[:-1]:
            node = node.children.setdefault(pe, _Node())
        node.members.add(path[-1])
    return root


def encode_fields(paths: Iterable[Path]) -> dict[str, Any]:
    """A field set as kube's fieldsV1 JSON object (sorted like structured-merge-diff writes it)."""

    def encode(node: _Node) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for pe in sorted(node.members | node.children.keys(), key=_element_sort_key):
            if pe in node.children:
                inner = encode(node.children[pe])
                out[pe] = {".": {}, **inner} if pe in node.members else inner
            else:
                out[pe] = {}
        return out

    return encode(_tree(paths))


def decode_fields(fields: Any) -> set[Path]:
    """fieldsV1 JSON → field set. Anything malformed is dropped rather than failing the write."""
    out: set[Path] = set()

    def walk(obj: Any, prefix: Path) -> None:
        if not isinstance(obj, dict):
            return
        for key, sub in obj.items():
            if key == ".":
                if prefix:
                    out.add(prefix)
            elif isinstance(sub, dict) and sub:
                walk(sub, (*prefix, key))
            else:
                out.add((*prefix, key))

    walk(fields, ())
    return out


def _iterate(paths: Iterable[Path]) -> Iterator[Path]:
    """structured-merge-diff's iteration order: a level's members first, then each child's subtree."""

    def walk(node: _Node, prefix: Path) -> Iterator[Path]:
        for pe in sorted(node.members, key=_element_sort_key):
            yield (*prefix, pe)
        for pe in sorted(node.children, key=_element_sort_key):
            yield from walk(node.children[pe], (*prefix, pe))

    return walk(_tree(paths), ())


def path_string(path: Path) -> str:
    """A path the way kube prints it in conflicts: .spec.containers[name="nginx"].image, [="x"], [0]."""
    out: list[str] = []
    for pe in path:
        kind, _, rest = pe.partition(":")
        if kind == "f":
            out.append("." + rest)
        elif kind == "k":
            try:
                keys = json.loads(rest)
                out.append("[" + ",".join(f"{k}={_compact(keys[k])}" for k in sorted(keys)) + "]")
            except (ValueError, TypeError):
                out.append(f"[{rest}]")
        elif kind == "v":
            out.append(f"[={rest}]")
        elif kind == "i":
            out.append(f"[{rest}]")
        else:
            out.append(pe)
    return "".join(out)


# ================================================================ managedFields entries


@dataclass
class _Entry:
    manager: str
    operation: str
    api_version: str
    time: str | None
    subresource: str
    fields: set[Path]

    @property
    def ident(self) -> tuple[str, str, str, str]:
        # Appliers are one entry whatever version they apply with; updaters are one entry per version.
        return (self.manager, self.operation, "" if self.operation == APPLY else self.api_version, self.subresource)

    def encode(self) -> dict[str, Any]:
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = _encoded(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def describe(self) -> str:
        """kube's printManager: "name" [with subresource "s"] [using apiVersion (updaters)]."""
        text = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource, ensure_ascii=False)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


def _decode_entries(raw: Any) -> list[_Entry]:
    """Entries of metadata.managedFields, merging duplicates of one identity (as kube's decoder does)."""
    entries: dict[tuple[str, str, str, str], _Entry] = {}
    if not isinstance(raw, list):
        return []
    for item in raw:
        if not isinstance(item, dict):
            continue
        op = item.get("operation")
        manager = item.get("manager")
        if op not in (APPLY, UPDATE) or not isinstance(manager, str):
            continue  # [{}] is kube's documented way to reset managedFields
        entry = _Entry(
            manager=manager,
            operation=op,
            api_version=str(item.get("apiVersion") or ""),
            time=item.get("time") if isinstance(item.get("time"), str) else None,
            subresource=str(item.get("subresource") or ""),
            fields=_decoded(item.get("fieldsV1")),
        )
        prev = entries.get(entry.ident)
        if prev is not None:
            prev.fields |= entry.fields
            prev.time = max(filter(None, (prev.time, entry.time)), default=None)
        else:
            entries[entry.ident] = entry
    return list(entries.values())


# Every write decodes each manager's fieldsV1 and encodes it again, and nearly always to the same
# tree, which the object's previous write encoded: remembering the recent trees both ways saves
# about 15 µs per manager per write. The encoded trees are shared between stored objects, which
# nothing modifies in place.
_FIELDS_CACHE_SIZE = 2048
_decoded_cache: dict[bytes, frozenset[Path]] = {}
_encoded_cache: dict[frozenset[Path], dict[str, Any]] = {}


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _FIELDS_CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _decoded(fields: Any) -> set[Path]:
    """_strip(decode_fields(fields)), a set of its own for the caller to change."""
    try:
        key = orjson.dumps(fields)
    except TypeError:
        return _strip(decode_fields(fields))
    paths = _decoded_cache.get(key)
    if paths is None:
        paths = frozenset(_strip(decode_fields(fields)))
        _remember(_decoded_cache, key, paths)
    return set(paths)


def _encoded(paths: set[Path]) -> dict[str, Any]:
    """encode_fields(paths), shared with every other object holding the same field set."""
    key = frozenset(paths)
    out = _encoded_cache.get(key)
    if out is None:
        out = encode_fields(key)
        _remember(_encoded_cache, key, out)
        _remember(_decoded_cache, orjson.dumps(out), key)  # what the next write of the object decodes
    return out


def _cap_updaters(entries: list[_Entry]) -> list[_Entry]:
    """Like kube, keep at most MAX_UPDATE_MANAGERS Update entries: the oldest fold into an
    "ancient-changes" entry per apiVersion."""
    updaters = sorted((e for e in entries if e.operation == UPDATE), key=lambda e: (e.time or "", e.manager))
    excess = len(updaters) - MAX_UPDATE_MANAGERS
    if excess <= 0:
        return entries
    keep = [e for e in entries if e.operation != UPDATE]
    buckets: dict[str, _Entry] = {}
    for e in updaters:
        if e.manager == ANCIENT_CHANGES:
            buckets.setdefault(e.api_version, e)
    result = [e for e in updaters if e.manager != ANCIENT_CHANGES]
    i = 0
    while len(result) + len(buckets) > MAX_UPDATE_MANAGERS and i < len(result):
        e = result[i]
        bucket = buckets.get(e.api_version)
        if bucket is None:
            buckets[e.api_version] = _Entry(ANCIENT_CHANGES, UPDATE, e.api_version, e.time, "", set(e.fields))
        else:
            bucket.fields |= e.fields
            bucket.time = max(filter(None, (bucket.time, e.time)), default=None)
        result.pop(i)
    return keep + result + list(buckets.values())


def _encode_entries(entries: list[_Entry]) -> list[dict[str, Any]]:
    live = [e for e in entries if e.fields]
    live = _cap_updaters(live)
    # kube's order: Apply before Update, then oldest first, then by manager, version, subresource.
    live.sort(key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource))
    return [e.encode() for e in live]


def _without_managed_fields(obj: dict[str, Any], *, deep: bool = True, stored: bool = False) -> dict[str, Any]:
    """A copy without metadata.managedFields. deep=False copies only the top level and metadata: enough
    when the caller only reads the rest (track_update), and it is the hot path of every write.
    stored: obj is what storage holds, so an orjson round trip copies it (six times quicker)."""
    out: dict[str, Any]
    if deep:
        out = clone(obj) if stored else deep_copy(obj)
    else:
        out = dict(obj)
        if isinstance(out.get("metadata"), dict):
            out["metadata"] = dict(out["metadata"])
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return out


def _with_managed_fields(obj: dict[str, Any], entries: list[_Entry]) -> dict[str, Any]:
    encoded = _encode_entries(entries)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        if not encoded:
            return obj
        meta = obj["metadata"] = {}
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)  # kube omits an empty list
    return obj


def _managed_fields(obj: dict[str, Any] | None) -> Any:
    meta = (obj or {}).get("metadata")
    return meta.get("managedFields") if isinstance(meta, dict) else None


# ================================================================ merge and prune (apply)


def _merge(live: Any, config: Any, schema: dict[str, Any] | None) -> Any:
    """Merge an applied configuration into the live value: granular maps and lists merge by key,
    everything else is replaced by the configuration. A null in the configuration removes the field."""
    if _granular_map(live, schema) and _granular_map(config, schema):
        out = dict(live)
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            elif not isinstance(value, (dict, list)):
                out[key] = value  # what _merge and _clean make of a scalar, without their calls
            else:
                out[key] = _merge(out[key], value, _field(schema, key)[0]) if key in out else _clean(value)
        return out
    if _granular_list(live, schema) and _granular_list(config, schema):
        return _merge_list(live, config, schema)
    return _clean(config)


def _clean(value: Any) -> Any:
    """A configured value as stored: nulls inside maps mean "unset" and are dropped."""
    if isinstance(value, dict):
        return {k: _clean(v) if isinstance(v, (dict, list)) else v for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def _without_nulls(value: Any) -> Any:
    """`_clean` in place, for a configuration the caller owns: the same value, its maps' nulls removed."""
    if isinstance(value, dict):
        nulls = [k for k, v in value.items() if v is None]
        for k in nulls:
            del value[k]
        for v in value.values():
            if isinstance(v, dict | list):
                _without_nulls(v)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict | list):
                _without_nulls(v)
    return value


def _merge_list(live: list[Any], config: list[Any], schema: dict[str, Any] | None) -> list[Any]:
    """Configured items in configured order; live-only items keep their place after the item they followed."""
    items_schema = _schema((schema or {}).get("items"))
    live_items = _items(live, schema)
    config_items = _items(config, schema)
    live_by = dict(live_items)
    config_keys = {pe for pe, _ in config_items}
    out: list[Any] = []
    done: set[str] = set()

    def emit_config(pe: str, item: Any) -> None:
        if pe in live_by and pe.startswith("k:"):
            out.append(_merge(live_by[pe], item, items_schema))
        else:
            out.append(_clean(item))
        done.add(pe)

    ci = 0
    for pe, item in live_items:
        if pe in config_keys:
            # Emit configured items up to and including this one, in configured order.
            while ci < len(config_items) and pe not in done:
                cpe, citem = config_items[ci]
                ci += 1
                if cpe not in done:
                    emit_config(cpe, citem)
        else:
            out.append(item)
    for cpe, citem in config_items[ci:]:
        if cpe not in done:
            emit_config(cpe, citem)
    return out


def _remove_path(obj: Any, path: Path, schema: dict[str, Any] | None) -> None:
    """Delete the value at path from obj in place (no-op if it is not there)."""
    node, sub = obj, schema
    for depth, pe in enumerate(path):
        last = depth == len(path) - 1
        if pe.startswith("f:") and isinstance(node, dict):
            key = pe[2:]
            if key not in node:
                return
            if last:
                del node[key]
                return
            node, sub = node[key], _field(sub, key)[0]
        elif isinstance(node, list) and _granular_list(node, sub):
            index = next((i for i, item in enumerate(node) if _item_element(item, sub) == pe), -1)
            if index < 0:
                return
            if last:
                node.pop(index)
                return
            node, sub = node[index], _schema((sub or {}).get("items"))
        else:
            return


def _prefixes(paths: Iterable[Path]) -> set[Path]:
    out: set[Path] = set()
    for p in paths:
        for n in range(1, len(p) + 1):
            out.add(p[:n])
    return out


def _is_item_key(path: Path) -> bool:
    """Whether path ends at a key field of a list-map item (removing it would break the item)."""
    if len(path) < 2 or not path[-2].startswith("k:") or not path[-1].startswith("f:"):
        return False
    try:
        keys = json.loads(path[-2][2:])
    except ValueError:
        return False
    return isinstance(keys, dict) and path[-1][2:] in keys


def _value_at(obj: Any, path: Path, schema: dict[str, Any] | None) -> Any:
    node, sub = obj, schema
    for pe in path:
        if pe.startswith("f:") and isinstance(node, dict):
            if pe[2:] not in node:
                return _MISSING
            node, sub = node[pe[2:]], _field(sub, pe[2:])[0]
        elif isinstance(node, list) and _granular_list(node, sub):
            found = [item for item in node if _item_element(item, sub) == pe]
            if not found:
                return _MISSING
            node, sub = found[0], _schema((sub or {}).get("items"))
        else:
            return _MISSING
    return node


def _prune(
    merged: dict[str, Any],
    last: set[Path],
    owned: set[Path],
    schema: dict[str, Any] | None,
) -> dict[str, Any]:
    """Remove what the applier owned last time and no longer applies, unless some manager (the applier
    included) still owns it or something below it. Containers left empty by that removal go too (what
    Go's omitempty makes of them in kube), unless someone owns them."""
    if not last:
        return merged
    kept = _prefixes(owned)
    for path in sorted(last - kept, key=len):
        if _is_item_key(path) or _value_at(merged, path, schema) is _MISSING:
            continue
        _remove_path(merged, path, schema)
        for n in range(len(path) - 1, 1, -1):
            parent = path[:n]
            value = _value_at(merged, parent, schema)
            if parent in kept or not isinstance(value, (dict, list)) or value:
                break
            _remove_path(merged, parent, schema)
    return merged


# ================================================================ public API


def _conflict_error(conflicts: list[tuple[_Entry, Path]]) -> ApiError:
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {e.describe()}", "field": path_string(p)}
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {path_string(p)}"
    else:
        lines: list[str] = []
        current: _Entry | None = None
        for e, p in conflicts:
            if e is not current:
                lines.append(f"conflicts with {e.describe()}:")
                current = e
            lines.append(f"- {path_string(p)}")
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    schema: dict[str, Any] | None,
    api_version: str,
    now: str,
    subresource: str = "",
    default: Callable[[dict[str, Any]], None] | None = None,
    owned: bool = False,
) -> dict[str, Any]:
    """Merge `applied` (the manager's full intent) into `live` (None = create) and return the new object
    with metadata.managedFields updated: the manager owns exactly the fields it applied; fields it applied
    before and omits now are removed unless another manager owns them; a field owned by another manager
    with a different value → errors.ApiError 409 Conflict (causes per field, kube's message) unless force,
    which transfers ownership. Lists merge per x-kubernetes-list-type (map by list-map-keys / set / atomic).

    default: the kind's defaulting (in place); list-map items of the configuration are compared by
    their keys as defaulted (see _fill_keys).

    owned: `applied` is the caller's own copy, which the result may take parts of and which may be
    changed (the store's apply decodes a fresh one per attempt): no copy of it is made."""
    root, schema = schema, _schema(schema)
    if _managed_fields(applied) is not None:
        raise bad_request("metadata.managedFields must be nil")
    config = applied if owned else _without_managed_fields(applied)
    if live is None:
        try:
            encoded = _created_apply_fields(config, _fields_root(root), ())  # before nulls go (owned)
        except _NeedsGeneralWalk:
            pass
        else:
            return _apply_created(config, encoded, manager, api_version, now, subresource, owned)
    filled: set[Path] = set()
    if default is not None:
        defaulted = clone(config)  # in C; read only for the keys defaulting fills, so exact types do not matter
        default(defaulted)
        _fill_keys(config, defaulted, schema, (), filled)
    duplicate = _duplicates(config, schema)
    if duplicate:
        gv = str(applied.get("apiVersion") or api_version)
        gvk = f"{gv if '/' in gv else '/' + gv}, Kind={applied.get('kind', '')}"
        raise bad_request(f"failed to create typed patch object ({gvk}): {duplicate}")

    base = _without_managed_fields(live, stored=True) if live is not None else {}
    entries = _decode_entries(_managed_fields(live))
    if live is not None and not entries:
        # An object nobody tracked yet: its current fields belong to "before-first-apply", so the first
        # applier conflicts with them instead of silently taking them (kube does the same).
        untracked = _compare_objects({}, base, schema).changed
        if untracked:
            entries.append(_Entry(BEFORE_FIRST_APPLY, UPDATE, api_version, now, subresource, untracked))

    me = _Entry(manager, APPLY, api_version, None, subresource, set())
    previous = next((e for e in entries if e.ident == me.ident), None)
    others = [e for e in entries if e.ident != me.ident]
    last = previous.fields if previous is not None else set()

    fields: set[Path] = set()
    _applied_fields(config, schema, (), fields)
    me.fields = _strip(fields) - filled
    if live is None:
        me.time = now
        return _with_managed_fields(_clean(config), [me])

    merged = _merge(base, config, schema)
    if not isinstance(merged, dict):
        merged = {}
    owned_by_anyone = set(me.fields).union(*(e.fields for e in others))
    result = _prune(merged, last, owned_by_anyone, schema)

    comparison = _compare_objects(base, result, schema)
    changed = comparison.changed
    conflicts: list[tuple[_Entry, Path]] = []
    for other in sorted(others, key=lambda e: e.ident):
        conflicts.extend((other, p) for p in _iterate(other.fields & changed))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for other in others:
        other.fields -= changed
        other.fields -= comparison.removed

    object_changed = bool(changed or comparison.removed)
    if previous is not None and not object_changed and previous.fields == me.fields and previous.time:
        me.time = previous.time  # a no-op apply leaves managedFields as they were
    else:
        me.time = now
    return _with_managed_fields(result, [*others, me])


def _apply_created(config: dict[str, Any], encoded: dict[str, Any], manager: str, api_version: str, now: str,
                   subresource: str, owned: bool) -> dict[str, Any]:
    """The object an apply creates: the configuration without nulls, its manager's one entry."""
    created: dict[str, Any] = _without_nulls(config) if owned else _clean(config)
    if encoded:
        meta = created.get("metadata")
        if not isinstance(meta, dict):
            meta = created["metadata"] = {}
        meta["managedFields"] = [{"manager": manager, "operation": APPLY, "apiVersion": api_version,
                                  "time": now, "fieldsType": "FieldsV1", "fieldsV1": encoded,
                                  **({"subresource": subresource} if subresource else {})}]
    return created


_STRIPPED_TOP: Final = frozenset(p[0] for p in _STRIPPED_EXACT if len(p) == 1)
_STRIPPED_META: Final = frozenset(p[1] for p in _STRIPPED_EXACT if len(p) == 2 and p[0] == "f:metadata")
_UNSET: Final = object()


class _FieldsNode:
    """A schema (allOf resolved) as a create's managedFields walk reads it, worked out once: whether
    a map is atomic and a list granular, and each field's schema. Kept per schema (_fields_root)."""

    __slots__ = ("_addl", "_items", "_kids", "_props", "atomic_map", "granular_list", "list_kind", "s")

    def __init__(self, s: dict[str, Any]) -> None:
        self.s = s
        self.atomic_map = s.get("x-kubernetes-map-type") == "atomic"
        self.list_kind = _list_kind(s)
        self.granular_list = self.list_kind.kind != "atomic"
        props = s.get("properties")
        self._props: dict[str, Any] = props if isinstance(props, dict) else {}
        self._kids: dict[str, _FieldsNode | None] = {}
        self._addl: Any = _UNSET
        self._items: Any = _UNSET

    def kid(self, key: str) -> _FieldsNode | None:
        if key in self._props:
            node = self._kids.get(key, _UNSET)
            if node is _UNSET:
                node = self._kids[key] = _fields_node(self._props[key])
            return node  # type: ignore[return-value]
        if self._addl is _UNSET:  # a map's keys are data: one node for all of them
            self._addl = _fields_node(self.s.get("additionalProperties"))
        return self._addl  # type: ignore[no-any-return]

    def items(self) -> _FieldsNode | None:
        if self._items is _UNSET:
            self._items = _fields_node(self.s.get("items"))
        return self._items  # type: ignore[no-any-return]

    def declares(self, key: str) -> bool:
        return key in self._props


def _fields_node(s: Any) -> _FieldsNode | None:
    resolved = _schema(s)
    return None if resolved is None else _FieldsNode(resolved)


_FIELDS_ROOTS: dict[int, tuple[dict[str, Any], _FieldsNode | None]] = {}


def _fields_root(schema: dict[str, Any] | None) -> _FieldsNode | None:
    """The compiled root of a kind's schema (by identity; the entry keeps the schema alive, so its id
    is never reused meanwhile)."""
    if schema is None:
        return None
    hit = _FIELDS_ROOTS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    if len(_FIELDS_ROOTS) >= 4096:
        _FIELDS_ROOTS.clear()  # CRD schemas replaced many times over: start again
    node = _fields_node(schema)
    _FIELDS_ROOTS[id(schema)] = (schema, node)
    return node


def _created_fields(obj: dict[str, Any], node: _FieldsNode | None) -> dict[str, Any]:
    """The fieldsV1 of every granular path of a created object, as encode_fields(_strip(paths)) writes
    the paths _add_all finds, built in one walk: a create owns all of its object, so it needs no
    comparison, no path set and no tree. Only the top level and metadata's fields can be stripped."""
    out: dict[str, Any] = {}
    if node is not None and node.atomic_map:
        return out
    for k in sorted(obj):  # fields sort by name (_element_sort_key)
        child = obj[k]
        pe = "f:" + k
        if not isinstance(child, (dict, list)):
            if pe not in _STRIPPED_TOP:
                out[pe] = {}  # a leaf: as _enter enters it, without its schema
            continue
        sub = node.kid(k) if node is not None else None
        if pe == "f:metadata" and isinstance(child, dict) and not (sub is not None and sub.atomic_map):
            inner: dict[str, Any] = {}
            for mk in sorted(child):
                mpe = "f:" + mk
                if mpe == "f:managedFields":
                    continue
                v = child[mk]
                if not isinstance(v, (dict, list)):
                    if mpe not in _STRIPPED_META:
                        inner[mpe] = {}
                else:  # _enter, without its call: v is a container
                    _put(inner, mpe, _fields_of(v, sub.kid(mk) if sub is not None else None), mpe not in _STRIPPED_META)
            if inner:
                out[pe] = inner  # metadata itself is stripped
        else:
            _put(out, pe, _fields_of(child, sub), pe not in _STRIPPED_TOP)  # _enter: child is a container
    return out


def _enter(out: dict[str, Any], pe: str, child: Any, node: _FieldsNode | None, member: bool = True) -> None:
    """_fields_of one child, entered in its parent's fieldsV1 (`out`) under `pe`; member: whether the
    child's own path is in the set."""
    _put(out, pe, _fields_of(child, node) if isinstance(child, (dict, list)) else None, member)


def _fields_of(value: Any, node: _FieldsNode | None) -> dict[str, Any]:
    """The fieldsV1 below a value, none of it stripped."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if node is not None and node.atomic_map:
            return out
        for k in sorted(value):
            child = value[k]
            if isinstance(child, (dict, list)):
                inner = _fields_of(child, node.kid(k) if node is not None else None)
                out["f:" + k] = {".": {}, **inner} if inner else {}
            else:
                out["f:" + k] = {}  # a leaf, the most common child
    elif node is not None and node.granular_list:
        items = _items(value, node.s)
        items.sort(key=lambda c: _element_sort_key(c[0]))
        items_node = node.items()
        for pe, item in items:
            _enter(out, pe, item, items_node if pe.startswith("k:") else None)
    return out


def _created_child(out: dict[str, Any], pe: str, child: Any, node: _FieldsNode | None, path: Path | None,
                   member: bool = True) -> None:
    """_created_apply_fields of one child, entered in its parent's (`out`) under `pe`; member: whether
    the child's own path is in the set."""
    below: Path | None = None
    if path is not None:
        child_path = (*path, pe)
        if child_path == _STRIPPED_TREE:
            return
        member = member and child_path not in _STRIPPED_EXACT
        below = child_path if len(child_path) < 2 else None
    _put(out, pe, _created_apply_fields(child, node, below) if isinstance(child, (dict, list)) else None, member)


def _put(out: dict[str, Any], pe: str, inner: dict[str, Any] | None, member: bool) -> None:
    """A child's fieldsV1 (`inner`, None for a leaf) entered in its parent's under `pe`; member: whether
    the child's own path is in the set (then "." marks it where it has children)."""
    if inner:
        out[pe] = {".": {}, **inner} if member else inner
    elif member:
        out[pe] = {}


class _NeedsGeneralWalk(Exception):
    """_created_apply_fields met what only server_side_apply's general steps handle."""


def _created_apply_fields(value: Any, node: _FieldsNode | None, path: Path | None) -> dict[str, Any]:
    """The fieldsV1 of an apply that creates (its only entry): encode_fields(_strip(paths)) of the
    paths _applied_fields finds, built in one walk over the compiled schema (_FieldsNode). path:
    where value is, while it is shallow enough (depth < 2) for _strip to concern its children; None
    below. The walk also stands for _duplicates and _fill_keys: it raises _NeedsGeneralWalk where
    they would act (the general steps then run, path set and all) — a list-map item
    without one of its keys (defaulting may give it one), a duplicate item (the general path names
    the first, as kube does), a set of objects or a list item that is a list (_duplicates looks
    inside them). A configuration without any of these needs neither the defaulted copy nor a
    second walk, which is nearly every apply that creates."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if node is not None and node.atomic_map:
            return out
        for k in sorted(value):  # fields sort by name (_element_sort_key)
            child = value[k]
            if isinstance(child, dict):
                sub = node.kid(k) if node is not None else None
                inner = sub is None or not sub.atomic_map
            elif isinstance(child, list):
                sub = node.kid(k) if node is not None else None
                inner = sub is not None and sub.granular_list
            else:
                sub, inner = None, False
            if not inner and path is None:
                out["f:" + k] = {}  # a leaf below what can be stripped: the most common child
                continue
            member = not inner or child == {} or node is None or not node.declares(k)
            _created_child(out, "f:" + k, child if inner else None, sub, path, member)
    elif isinstance(value, list) and node is not None and node.granular_list:
        kind = node.list_kind
        seen: set[str] = set()
        keyed_items: list[tuple[str, Any]] = []
        for item in value:
            if kind.kind == "map" and isinstance(item, dict):
                keys: dict[str, Any] = {}
                for k in kind.keys:
                    if k not in item:
                        raise _NeedsGeneralWalk
                    keys[k] = item[k]
                pe = "k:" + _compact(keys)
            elif isinstance(item, (dict, list)):
                raise _NeedsGeneralWalk
            else:
                pe = "v:" + _compact(item)
            if pe in seen:
                raise _NeedsGeneralWalk
            seen.add(pe)
            keyed_items.append((pe, item))
        if len(keyed_items) > 1:  # (a sort key of a keyed item decodes its keys)
            keyed_items.sort(key=lambda c: _element_sort_key(c[0]))
        items_node = node.items()
        for pe, item in keyed_items:
            keyed = pe.startswith("k:")
            _created_child(out, pe, item if keyed else None, items_node if keyed else None, path)
    return out


def track_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    schema: dict[str, Any] | None,
    api_version: str,
    now: str,
    subresource: str = "",
) -> dict[str, Any]:
    """For non-apply writes (create/update/patch): record an `Update` operation entry for `manager`
    owning the fields it changed/set, and remove those fields from other managers' sets. Returns new with
    metadata.managedFields set."""
    # A client may rewrite managedFields on the main resource; an empty list (or none) means "keep what
    # the server has", so clients unaware of managedFields never wipe them (kube's rule). [{}] resets.
    meta = new.get("metadata")
    given = meta.get("managedFields") if isinstance(meta, dict) else None  # _managed_fields(new)
    if old is None and not (isinstance(given, list) and given and not subresource):
        # A create with no entries to keep: the manager gets the whole object, in one walk. (The
        # calls _without_managed_fields(new, deep=False) and _fields_root would make are inlined:
        # this runs for every create.)
        created = dict(new)
        if isinstance(meta, dict):
            meta = created["metadata"] = dict(meta)
            meta.pop("managedFields", None)
        hit = _FIELDS_ROOTS.get(id(schema)) if schema is not None else None
        fields = _created_fields(created, hit[1] if hit is not None and hit[0] is schema else _fields_root(schema))
        if fields:
            encoded: dict[str, Any] = {"manager": manager, "operation": UPDATE, "apiVersion": api_version}
            if now:
                encoded["time"] = now
            encoded["fieldsType"] = "FieldsV1"
            encoded["fieldsV1"] = fields  # as _Entry.encode writes it
            if subresource:
                encoded["subresource"] = subresource
            if not isinstance(meta, dict):
                meta = created["metadata"] = {}
            meta["managedFields"] = [encoded]
        return created
    schema = _schema(schema)
    source = given if isinstance(given, list) and given and not subresource else _managed_fields(old)
    entries = _decode_entries(source)

    before = _without_managed_fields(old, deep=False) if old is not None else {}
    after = _without_managed_fields(new, deep=False)
    comparison = _compare_objects(before, after, schema)
    changed = comparison.changed

    me = _Entry(manager, UPDATE, api_version, None, subresource, set())
    previous = next((e for e in entries if e.ident == me.ident), None)
    for entry in entries:
        entry.fields -= changed
        entry.fields -= comparison.removed
    others = [e for e in entries if e is not previous]
    if changed:
        me.fields = (previous.fields if previous is not None else set()) | changed
        me.time = now
        entries = [*others, me]
    return _with_managed_fields(after, entries)
