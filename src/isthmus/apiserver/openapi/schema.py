"""Structural OpenAPI v3 schemas: validation (kube's 422 causes), defaulting and pruning.

Messages follow kube-apiserver's CRD validation: kube-openapi's validator words the detail
(`spec.x in body should match '^a$'`) and apiextensions wraps it in a field.Error whose body is
`<Type>: <value>: <detail>` (see `_body`). Field paths use kube's form: `spec.ports[0].port`.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from isthmus.apiserver.apimachinery.errors import cause

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
EMBEDDED = "x-kubernetes-embedded-resource"
LIST_TYPE = "x-kubernetes-list-type"
LIST_MAP_KEYS = "x-kubernetes-list-map-keys"

_ROOT_KEPT = ("apiVersion", "kind", "metadata")


# ---------------------------------------------------------------- value formatting (Go's field.Error)


def resolve_all_of(schema: Any) -> dict[str, Any] | None:
    """Resolve `allOf` wrappers (the shape inlined $refs often take) into one schema dict."""
    if not isinstance(schema, dict):
        return None
    if "allOf" not in schema:
        return schema
    merged: dict[str, Any] = {}
    for sub in schema.get("allOf") or []:
        resolved = resolve_all_of(sub)
        if resolved:
            merged.update(resolved)
    merged.update({k: v for k, v in schema.items() if k != "allOf"})
    return merged


def go_sharp(v: Any) -> str:
    """Go's %#v for decoded JSON (map[string]interface {}, []interface {}), used for composite bad values."""
    if isinstance(v, dict):
        inner = ", ".join(f"{json.dumps(k)}:{go_sharp(x)}" for k, x in sorted(v.items()))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(v, list):
        return "[]interface {}{" + ", ".join(go_sharp(x) for x in v) + "}"
    return go_value(v)


def go_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return go_sharp(v)


def _go_float(f: float) -> str:
    """Go's %v of a float64: shortest repr, no trailing '.0', exponent form for large values."""
    if math.isfinite(f) and f == int(f) and abs(f) < 1e21:
        return str(int(f))
    return repr(f)


def _body(kind: str, value: Any, detail: str) -> str:
    """field.Error.ErrorBody(): `Invalid value: "x": detail`."""
    text = f"{kind}: {go_value(value)}"
    return f"{text}: {detail}" if detail else text


def _invalid(path: str, value: Any, detail: str) -> dict[str, str]:
    return cause(path, _body("Invalid value", value, detail), "FieldValueInvalid")


def _num(v: float) -> str:
    """%v of the schema bound (a float64 in kube-openapi)."""
    return _go_float(float(v))


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


# The Python type whose values are certainly of a schema type (_is_type decides the others: bools
# are not integers, integral floats are; a number is an int or a float).
_PLAIN_TYPES: dict[str, type] = {"string": str, "object": dict, "array": list, "boolean": bool, "integer": int}


def _is_type(v: Any, t: str) -> bool:
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    if t == "null":
        return v is None
    return True


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(go_pattern(pattern))
    except re.error:
        return None


def go_pattern(pattern: str) -> str:
    r"""A schema `pattern` (Go RE2 syntax) as Python's re reads it the same way.

    Outside multi-line mode Go's `$` matches only at the very end of the text, Python's also before
    a final newline (so `^[a-z]+$` would pass "abc<newline>"): each such `$` becomes `\Z`, and Go's `\z`
    (Python has none) becomes `\Z` too. A pattern that turns multi-line mode on keeps its `$`."""
    if "$" not in pattern and "\\z" not in pattern:
        return pattern
    multiline = re.search(r"\(\?[a-zA-Z]*m", pattern) is not None
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            out.append("\\Z" if nxt == "z" and not in_class else ch + nxt)
            i += 2
        elif in_class:
            in_class = ch != "]"
            out.append(ch)
            i += 1
        elif ch == "[":
            in_class = True
            j = i + 1
            j += pattern[j : j + 1] == "^"
            j += pattern[j : j + 1] == "]"  # a leading ']' is a member of the class, not its end
            out.append(pattern[i:j])
            i = j
        else:
            out.append("\\Z" if ch == "$" and not multiline else ch)
            i += 1
    return "".join(out)


# ---------------------------------------------------------------- formats

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _format_ok(fmt: str, v: str) -> bool:
    """The string formats kube's CRD validation checks (others are accepted as annotations)."""
    if fmt == "date-time":
        if not _DATE_TIME.fullmatch(v):
            return False
        try:
            datetime.fromisoformat(v.replace("Z", "+00:00").replace("z", "+00:00").replace("t", "T"))
        except ValueError:
            return False
        return True
    if fmt == "date":
        try:
            datetime.strptime(v, "%Y-%m-%d")
        except ValueError:
            return False
        return bool(_DATE.fullmatch(v))
    if fmt == "byte":
        try:
            base64.b64decode(v, validate=True)
        except ValueError:
            return False
        return True
    if fmt == "uuid":
        return bool(_UUID.fullmatch(v))
    if fmt == "ipv4":
        parts = v.split(".")
        return len(parts) == 4 and all(p.isdigit() and int(p) <= 255 and str(int(p)) == p for p in parts)
    return True


# ---------------------------------------------------------------- validation


def validate(obj: Any, schema: dict[str, Any], path: str = "") -> list[dict[str, str]]:
    """Causes (errors.cause shape, kube's field paths and messages) for every violation of the schema:
    type, required, enum, pattern, format, minimum/maximum (exclusive), minLength/maxLength, minItems/maxItems,
    minProperties/maxProperties, uniqueItems, list-type set/map uniqueness, nullable, int-or-string,
    x-kubernetes-validations is out of scope. Empty list = valid.

    At the root (path ""), `metadata` is skipped: the server validates ObjectMeta itself."""
    errs: list[dict[str, str]] = []
    if schema:
        _node(schema).check(obj, path, errs, path == "")  # _validate, without its call
    return errs


# Keys that never make _validate report anything on a value of the schema's type.
_PROSE = frozenset({"type", "description", "title", "example", "externalDocs"})
# Keys _validate_value acts on: a schema without any has no value checks to run.
_VALUE_KEYS = frozenset({"enum", "maxLength", "minLength", "pattern", "format", "maximum", "minimum", "multipleOf"})
_EXACT_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "boolean": (bool,), "integer": (int,),
                                             "number": (int, float)}


class _Node:
    """One schema, compiled for validation: what it checks, looked up once instead of on every value.
    Children are compiled on first use (schemas may be deep, and are walked only where values are)."""

    __slots__ = (
        "addl",
        "allof",
        "arr",
        "combined",
        "embedded",
        "exact",
        "ios",
        "ios_only",
        "item_node",
        "items",
        "kids",
        "list_type",
        "nullable",
        "obj",
        "preserve",
        "props",
        "s",
        "scalar_map",
        "type",
        "values",
    )

    def __init__(self, s: dict[str, Any]) -> None:
        self.s = s
        self.nullable = bool(s.get("nullable"))
        t = s.get("type")
        self.type = t if isinstance(t, str) else None
        self.ios = bool(s.get(INT_OR_STRING))
        self.ios_only = self.ios and t is None
        self.values = not _VALUE_KEYS.isdisjoint(s)
        self.allof = list(s.get("allOf") or [])
        self.combined = bool(s.get("anyOf") or s.get("oneOf") or isinstance(s.get("not"), dict))
        # Anything an object's own check needs besides its properties.
        self.obj = bool(s.get("required") or "maxProperties" in s or "minProperties" in s)
        self.arr = bool("maxItems" in s or "minItems" in s or s.get("uniqueItems"))
        self.list_type = s.get(LIST_TYPE) in ("set", "map")
        self.props: dict[str, Any] = s.get("properties") or {}
        addl = s.get("additionalProperties")
        self.addl = addl if isinstance(addl, dict) else None
        self.kids: dict[str, _Node | None] = {}
        items = s.get("items")
        self.items = items if isinstance(items, dict) else None
        self.item_node: _Node | None = None  # _node(items), kept once a list was walked
        # Values of these exact types pass this schema untouched: it checks their type and nothing else.
        self.exact: tuple[type, ...] = ()
        if self.type in _EXACT_TYPES and s.keys() <= _PROSE:
            self.exact = _EXACT_TYPES[self.type]
        self.preserve = bool(s.get(PRESERVE)) or addl is True  # pruning: unknown fields are kept
        self.embedded = bool(s.get(EMBEDDED))
        # A map of one scalar type (labels, annotations, a ConfigMap's data): its values of that type
        # are all it holds, and pruning has nothing to do in it.
        self.scalar_map: tuple[type, ...] = ()
        if not self.props and self.addl and not self.preserve:
            self.scalar_map = _node(self.addl).exact

    def kid(self, key: str) -> _Node | None:
        try:
            return self.kids[key]
        except KeyError:
            pass
        sub = self.props.get(key)
        if sub is None:
            sub = self.addl
        node = _node(sub) if isinstance(sub, dict) and sub else None
        if len(self.kids) < 256:  # a map's keys are data: keep only a schema's own properties' worth
            self.kids[key] = node
        return node

    def check(self, v: Any, path: str, errs: list[dict[str, str]], root: bool = False) -> None:
        if v is None:
            if self.nullable:
                return
            if self.type is not None or self.ios or "type" in self.s:
                errs.append(_type_error(path, "integer,string" if self.ios else self.s["type"], v))
            return
        t = self.type
        if self.ios_only:
            if not (_is_type(v, "integer") or isinstance(v, str)):
                errs.append(_type_error(path, "integer,string", v))
                return
        elif t is not None and type(v) is not _PLAIN_TYPES.get(t) and not _is_type(v, t):
            errs.append(_type_error(path, t, v))
            return
        s = self.s
        if self.values:
            _validate_value(v, s, path, errs)
        for sub in self.allof:
            _validate(v, sub, path, errs)
        if self.combined:
            _validate_combined(v, s, path, errs)
        if isinstance(v, dict):
            if self.obj:
                _validate_object(v, s, path, errs, root)
            kids = self.kids
            for key, val in v.items():
                if root and key == "metadata":
                    continue
                node = kids[key] if key in kids else self.kid(key)  # the cached node without a call, mostly
                if node is None or (node.exact and type(val) in node.exact):
                    continue
                node.check(val, f"{path}.{key}" if path else key, errs)
        elif isinstance(v, list):
            if self.arr:
                _validate_array(v, s, path, errs)
            items = self.items
            if items:
                node = self.item_node
                if node is None:
                    node = self.item_node = _node(items)
                if node is not None:
                    exact = node.exact
                    for i, item in enumerate(v):
                        if not (exact and type(item) in exact):
                            node.check(item, f"{path}[{i}]", errs)
            if self.list_type:
                _validate_list_type(v, s, path, errs)


_NODES: dict[int, tuple[dict[str, Any], _Node]] = {}


def _node(s: dict[str, Any]) -> _Node:
    """The compiled form of s (by identity; the entry keeps s alive, so its id is never reused meanwhile)."""
    hit = _NODES.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    node = _Node(s)
    if len(_NODES) >= _DEFAULTS_CACHE_MAX:
        _NODES.clear()  # CRD schemas replaced many times over: start again
    _NODES[id(s)] = (s, node)
    return node


def _validate(v: Any, s: dict[str, Any], path: str, errs: list[dict[str, str]], root: bool = False) -> None:
    if s:
        _node(s).check(v, path, errs, root)


def _validate_combined(v: Any, s: dict[str, Any], path: str, errs: list[dict[str, str]]) -> None:
    """anyOf, oneOf and not: value validations only (structural schemas forbid types inside them)."""
    if s.get("anyOf"):
        if not any(not validate_sub(v, sub, path) for sub in s["anyOf"]):
            errs.append(_invalid(path, v, f'"{path}" must validate at least one schema (anyOf)'))
    if s.get("oneOf"):
        ok = sum(1 for sub in s["oneOf"] if not validate_sub(v, sub, path))
        if ok != 1:
            errs.append(_invalid(path, v, f'"{path}" must validate one and only one schema (oneOf)'))
    if isinstance(s.get("not"), dict) and not validate_sub(v, s["not"], path):
        errs.append(_invalid(path, v, f'"{path}" must not validate the schema (not)'))


def validate_sub(v: Any, s: dict[str, Any], path: str) -> list[dict[str, str]]:
    errs: list[dict[str, str]] = []
    _validate(v, s, path, errs)
    return errs


def _type_error(path: str, want: str, v: Any) -> dict[str, str]:
    # kube-openapi reports the *type name* of the bad value, quoted: must be of type integer: "string"
    got = _type_name(v)
    detail = f"{path} in body must be of type {want}: {json.dumps(got)}"
    return cause(path, _body("Invalid value", got, detail), "FieldValueTypeInvalid")


def _validate_value(v: Any, s: dict[str, Any], path: str, errs: list[dict[str, str]]) -> None:
    enum = s.get("enum")
    # A string equals only an equal string in JSON: `in` decides it without encoding anything.
    if enum is not None and not (v in enum if isinstance(v, str) else any(_json_equal(v, e) for e in enum)):
        values = [e if isinstance(e, str) else json.dumps(e) for e in enum]
        detail = "supported values: " + ", ".join(json.dumps(x, ensure_ascii=False) for x in values)
        errs.append(cause(path, _body("Unsupported value", v, detail), "FieldValueNotSupported"))
    if isinstance(v, str):
        if "maxLength" in s and len(v) > s["maxLength"]:
            errs.append(
                cause(path, f"Too long: may not be longer than {s['maxLength']}", "FieldValueTooLong")
            )
        if "minLength" in s and len(v) < s["minLength"]:
            errs.append(_invalid(path, v, f"{path} in body should be at least {s['minLength']} chars long"))
        pattern = s.get("pattern")
        if isinstance(pattern, str):
            rx = _regex(pattern)
            if rx is not None and not rx.search(v):
                errs.append(_invalid(path, v, f"{path} in body should match '{pattern}'"))
        fmt = s.get("format")
        if isinstance(fmt, str) and not _format_ok(fmt, v):
            errs.append(_invalid(path, v, f"{path} in body must be of type {fmt}: {json.dumps(v)}"))
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        _validate_number(v, s, path, errs)


def _validate_number(v: float, s: dict[str, Any], path: str, errs: list[dict[str, str]]) -> None:
    if "maximum" in s:
        mx = s["maximum"]
        if s.get("exclusiveMaximum") and v >= mx:
            errs.append(_invalid(path, v, f"{path} in body should be less than {_num(mx)}"))
        elif v > mx:
            errs.append(_invalid(path, v, f"{path} in body should be less than or equal to {_num(mx)}"))
    if "minimum" in s:
        mn = s["minimum"]
        if s.get("exclusiveMinimum") and v <= mn:
            errs.append(_invalid(path, v, f"{path} in body should be greater than {_num(mn)}"))
        elif v < mn:
            errs.append(_invalid(path, v, f"{path} in body should be greater than or equal to {_num(mn)}"))
    mult = s.get("multipleOf")
    if isinstance(mult, (int, float)) and mult > 0:
        q = v / mult
        if not math.isclose(q, round(q), rel_tol=0, abs_tol=1e-9):
            errs.append(_invalid(path, v, f"{path} in body should be a multiple of {_num(mult)}"))
    fmt = s.get("format")
    if isinstance(fmt, str) and fmt in _INT_RANGES and _is_type(v, "integer"):
        lo, hi = _INT_RANGES[fmt]
        if not lo <= int(v) <= hi:
            errs.append(_invalid(path, v, f"{path} in body must be of type {fmt}: {json.dumps(go_value(v))}"))


def _validate_object(
    v: dict[str, Any], s: dict[str, Any], path: str, errs: list[dict[str, str]], root: bool
) -> None:
    """required, maxProperties, minProperties (the properties themselves: _Node.check)."""
    for key in s.get("required") or []:
        if key not in v or (v[key] is None and not _nullable(s, key)):
            if root and key == "metadata":
                continue
            errs.append(cause(_child(path, key), "Required value", "FieldValueRequired"))
    n = len(v)
    if "maxProperties" in s and n > s["maxProperties"]:
        errs.append(
            cause(
                path,
                _body("Too many", n, f"must have at most {s['maxProperties']} items"),
                "FieldValueTooMany",
            )
        )
    if "minProperties" in s and n < s["minProperties"]:
        errs.append(_invalid(path, n, f"{path} in body should have at least {s['minProperties']} properties"))


def _nullable(s: dict[str, Any], key: str) -> bool:
    sub = (s.get("properties") or {}).get(key)
    return bool(isinstance(sub, dict) and sub.get("nullable"))


def _validate_array(v: list[Any], s: dict[str, Any], path: str, errs: list[dict[str, str]]) -> None:
    """maxItems, minItems, uniqueItems."""
    n = len(v)
    if "maxItems" in s and n > s["maxItems"]:
        errs.append(
            cause(path, _body("Too many", n, f"must have at most {s['maxItems']} items"), "FieldValueTooMany")
        )
    if "minItems" in s and n < s["minItems"]:
        errs.append(_invalid(path, v, f"{path} in body should have at least {s['minItems']} items"))
    if s.get("uniqueItems") and _has_duplicates(v):
        errs.append(_invalid(path, v, f"{path} in body shouldn't contain duplicates"))
    # Then _Node.check checks each item, then _validate_list_type their uniqueness.


def _validate_list_type(v: list[Any], s: dict[str, Any], path: str, errs: list[dict[str, str]]) -> None:
    """x-kubernetes-list-type set and map: no duplicate items, no duplicate keys."""
    items = s.get("items")
    list_type = s.get(LIST_TYPE)
    if list_type == "set":
        seen: list[Any] = []
        for i, item in enumerate(v):
            if any(_json_equal(item, x) for x in seen):
                errs.append(cause(f"{path}[{i}]", _body("Duplicate value", item, ""), "FieldValueDuplicate"))
            else:
                seen.append(item)
    elif list_type == "map":
        keys = [k for k in s.get(LIST_MAP_KEYS) or [] if isinstance(k, str)]
        seen_keys: set[tuple[Any, ...]] = set()
        for i, item in enumerate(v):
            if not isinstance(item, dict):
                continue
            kv = {k: _key_value(item, k, items) for k in keys}
            token = tuple(map(_token, kv.values()))
            if token in seen_keys:
                errs.append(cause(f"{path}[{i}]", _body("Duplicate value", kv, ""), "FieldValueDuplicate"))
            seen_keys.add(token)


def _token(v: Any) -> Any:
    """A value's identity as its JSON text would give it (1, 1.0, "1" and true all differ), without
    writing the text for the scalars list-map keys almost always are."""
    t = type(v)
    if t is str or t is int or t is bool:
        return t, v
    if v is None:
        return None
    if t is float:
        return t, repr(v)
    return json.dumps(v, sort_keys=True)


def _key_value(item: dict[str, Any], key: str, items: Any) -> Any:
    """A list-map key's value; an absent key counts as its schema default, as kube's list-map uniqueness does."""
    if key in item:
        return item[key]
    if isinstance(items, dict):
        return ((items.get("properties") or {}).get(key) or {}).get("default")
    return None


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(
        json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)
    )


def _has_duplicates(v: list[Any]) -> bool:
    tokens = [json.dumps(x, sort_keys=True) for x in v]
    return len(set(tokens)) != len(tokens)


# ---------------------------------------------------------------- defaulting


def apply_defaults(obj: Any, schema: dict[str, Any]) -> None:
    """Fill `default` values in place (kube's rules: defaults apply to absent fields, recursively).

    Like kube's structural defaulting: a property's default applies when its parent object exists and the
    property is absent (or null while not nullable); defaults are then walked into, so nested defaults of a
    defaulted object apply too. Absent objects are never created just to hold nested defaults."""
    hit = _DEFAULTS_CACHE.get(id(schema))
    if hit is not None and hit[0] is schema and not hit[1]:
        return  # most kinds: no default anywhere (_default's first check, without its calls)
    _default(obj, schema)


# Schemas (by identity, each kept alive with its answer so an id is never reused while cached)
# → whether a `default` appears anywhere in them. Most built-in types declare none, or only in
# a few subtrees: the defaulting walk skips every subtree without one.
_DEFAULTS_CACHE: dict[int, tuple[dict[str, Any], bool]] = {}
_DEFAULTS_CACHE_MAX = 20_000


def _has_defaults(s: dict[str, Any]) -> bool:
    hit = _DEFAULTS_CACHE.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    found = _mentions_default(s)
    if len(_DEFAULTS_CACHE) >= _DEFAULTS_CACHE_MAX:
        _DEFAULTS_CACHE.clear()  # CRD schemas replaced many times over: start again
    _DEFAULTS_CACHE[id(s)] = (s, found)
    return found


def _mentions_default(v: Any) -> bool:
    """A "default" key anywhere in a schema (also inside enum values or examples: then the walk just runs)."""
    if isinstance(v, dict):
        return "default" in v or any(_mentions_default(x) for x in v.values())
    if isinstance(v, list):
        return any(_mentions_default(x) for x in v)
    return False


def _default(v: Any, s: dict[str, Any]) -> None:
    if not s or not _has_defaults(s):
        return
    if isinstance(v, dict):
        props: dict[str, Any] = s.get("properties") or {}
        for key, sub in props.items():
            if not isinstance(sub, dict) or "default" not in sub:
                continue
            if key not in v or (v[key] is None and not sub.get("nullable")):
                v[key] = copy.deepcopy(sub["default"])
        addl = s.get("additionalProperties")
        for key, val in v.items():
            sub = props.get(key)
            if sub is None and isinstance(addl, dict):
                sub = addl
            if isinstance(sub, dict):
                _default(val, sub)
    elif isinstance(v, list):
        items = s.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(v):
                if item is None and "default" in items and not items.get("nullable"):
                    v[i] = copy.deepcopy(items["default"])
                _default(v[i], items)
    for sub in s.get("allOf") or []:
        if isinstance(sub, dict):
            _default(v, sub)


# ---------------------------------------------------------------- pruning


def prune(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Drop fields the schema does not declare (unless x-kubernetes-preserve-unknown-fields), in place.
    apiVersion/kind/metadata at the root and of embedded resources are kept. Returns the dropped paths
    (for fieldValidation=Strict/Warn).

    metadata is walked when the schema declares its properties (ObjectMeta), so `metadata.foo` is
    reported the way kube reports it. Nulls of non-nullable fields are dropped silently, as kube does
    before defaulting."""
    dropped: list[str] = []
    node = _node(schema)
    _prune(obj, node, path, dropped, keep_meta=(path == "" or node.embedded))
    return dropped


def _prune(v: Any, node: _Node, path: Any, dropped: list[str], keep_meta: bool = False) -> None:
    """path: the value's path as nested (parent, key) pairs, made into text only for what is dropped
    (most writes drop nothing, and their walk made a string per container before)."""
    if isinstance(v, dict):
        props, addl, preserve = node.props, node.addl, node.preserve
        if preserve and not props and addl is None:
            return
        if node.scalar_map:
            exact = node.scalar_map
            for val in v.values():
                if type(val) not in exact:
                    break
            else:
                return
        for key in list(v):
            val = v[key]
            sub = props.get(key)
            if sub is None:
                sub = addl
            if sub is not None and val is not None and not isinstance(val, (dict, list)):
                continue  # a declared scalar: kept, nothing below it
            if keep_meta and key in _ROOT_KEPT and not (isinstance(sub, dict) and sub.get("properties")):
                continue
            if sub is None:
                if not preserve:
                    del v[key]
                    dropped.append(_path_text((path, key)))
                continue
            if not isinstance(sub, dict):
                continue
            if val is None:
                if not sub.get("nullable") and not preserve:
                    del v[key]
                continue
            # val is a dict or a list (a scalar has nothing to prune); kid() keeps no node for an empty schema
            kid = node.kids.get(key) or node.kid(key) or _node(sub)  # the cached node without a call, mostly
            _prune(val, kid, (path, key), dropped, keep_meta=kid.embedded)
    elif isinstance(v, list):
        items = node.items
        if items is not None:
            each = node.item_node
            if each is None:
                each = node.item_node = _node(items)
            for i, item in enumerate(v):
                if isinstance(item, (dict, list)):
                    _prune(item, each, (path, i), dropped, keep_meta=each.embedded)


def _path_text(path: Any) -> str:
    """The text of a path of nested (parent, key) pairs: a.b[0].c"""
    keys: list[str | int] = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    text = path or ""
    for key in reversed(keys):
        text = f"{text}[{key}]" if isinstance(key, int) else _child(text, key)
    return text
