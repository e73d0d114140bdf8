"""Field paths and sets as fieldsV1 spells them (structured-merge-diff's fieldpath package).

A *field set* is a set of paths. A path is a tuple of fieldsV1 path elements, spelled exactly as in
fieldsV1: ``f:<name>`` (struct/map field), ``k:<json of the list-map keys>`` (list-map item),
``v:<json value>`` (set item), ``i:<n>`` (positional item). A path in the set is *owned*; a path with
owned descendants is only a prefix unless it is owned too (fieldsV1 writes that as ``".": {}``).
Here: the paths never tracked, and a set's fieldsV1 JSON both ways, in structured-merge-diff's order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

Path = tuple[str, ...]

# Paths never tracked (kube's stripped meta fields). apiVersion/kind never conflict: they are not fields.
STRIPPED_EXACT: Final[frozenset[Path]] = frozenset(
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
STRIPPED_TREE: Final[Path] = ("f:metadata", "f:managedFields")


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


def compact_json(value: Any) -> str:
    if _plain_json(value):  # list-map keys and set values nearly always: one C call
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


# ================================================================ fieldsV1 encoding


_ELEMENT_RANK: Final = {"f": 0, "k": 1, "v": 2, "i": 3}


def element_sort_key(pe: str) -> tuple[int, str, Any]:
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
    return 4, compact_json(v)


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
        for pe in sorted(node.members | node.children.keys(), key=element_sort_key):
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


def iterate_paths(paths: Iterable[Path]) -> Iterator[Path]:
    """structured-merge-diff's iteration order: a level's members first, then each child's subtree."""

    def walk(node: _Node, prefix: Path) -> Iterator[Path]:
        for pe in sorted(node.members, key=element_sort_key):
            yield (*prefix, pe)
        for pe in sorted(node.children, key=element_sort_key):
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
                out.append("[" + ",".join(f"{k}={compact_json(keys[k])}" for k in sorted(keys)) + "]")
            except (ValueError, TypeError):
                out.append(f"[{rest}]")
        elif kind == "v":
            out.append(f"[={rest}]")
        elif kind == "i":
            out.append(f"[{rest}]")
        else:
            out.append(pe)
    return "".join(out)
