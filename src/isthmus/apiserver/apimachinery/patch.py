"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Behaviour and status codes follow kube-apiserver (which uses evanphx/json-patch and
k8s.io/apimachinery strategicpatch):

- a JSON patch that cannot be decoded (not a list of objects) → 400 BadRequest;
- a JSON patch that decodes but cannot be applied (unknown op, missing path, failed `test`,
  bad index) → 422 Invalid with kube's generic message; the library's own explanation is kept
  in `details.causes` so users can see what went wrong;
- a malformed merge patch → 400 "Invalid JSON Patch";
- a malformed strategic merge patch directive → 400, a semantically impossible one → 422.
"""

from __future__ import annotations

import json
from typing import Any, Final

from isthmus.apiserver.apimachinery.errors import ApiError, bad_request
from isthmus.apiserver.apimachinery.jsoncopy import clone, deep_copy
from isthmus.apiserver.openapi.schema import resolve_all_of
from isthmus.apiserver.serializer.decoding import MAX_DEPTH, nesting_over, too_deep

# kube-apiserver refuses bigger JSON patches (maxJSONPatchOperations).
MAX_JSON_PATCH_OPERATIONS: Final = 10000

_REJECTED: Final = "the server rejected our request due to an error in our request"

DIRECTIVE: Final = "$patch"
RETAIN_KEYS: Final = "$retainKeys"
DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList/"
SET_ELEMENT_ORDER: Final = "$setElementOrder/"

PATCH_STRATEGY: Final = "x-kubernetes-patch-strategy"
PATCH_MERGE_KEY: Final = "x-kubernetes-patch-merge-key"
LIST_TYPE: Final = "x-kubernetes-list-type"
LIST_MAP_KEYS: Final = "x-kubernetes-list-map-keys"


def _unprocessable(detail: str) -> ApiError:
    """kube answers apply-time patch failures with a 422 whose message is generic; keep the detail as a cause."""
    return ApiError(422, "Invalid", _REJECTED, {"causes": [{"message": detail}]})


def _go_type(v: Any) -> str:
    """The JSON type name Go's encoding/json uses in "cannot unmarshal X into ..." messages."""
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "bool"
    return "number"


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality: unlike Python's ==, true is not 1 and 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# ================================================================ JSON patch (RFC 6902)


class _Missing(Exception):
    """A JSON pointer step that does not resolve; the operation turns it into its own message."""


def _pointer(path: Any, op: str) -> list[str]:
    if not isinstance(path, str):
        raise _unprocessable(f"{op} operation failed to decode path: operation missing path field: missing value")
    if path == "":
        return []
    if not path.startswith("/"):
        raise _Missing(path)
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, size: int, *, allow_end: bool) -> int:
    """An array index token: decimal digits without leading zeros, within bounds."""
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _unprocessable(f"Unable to access invalid index: {token}: invalid index referenced")
    idx = int(token)
    if idx > size or (idx == size and not allow_end):
        raise _unprocessable(f"Unable to access invalid index: {idx}: invalid index referenced")
    return idx


def _resolve(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens:
        if isinstance(cur, dict):
            if t not in cur:
                raise _Missing(t)
            cur = cur[t]
        elif isinstance(cur, list):
            if t == "-" or not t.isdigit() or (len(t) > 1 and t[0] == "0") or int(t) >= len(cur):
                raise _Missing(t)
            cur = cur[int(t)]
        else:
            raise _Missing(t)
    return cur


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    try:
        parent = _resolve(doc, tokens[:-1])
    except _Missing:
        raise _unprocessable(f'add operation does not apply: doc is missing path: "{path}": missing value') from None
    key = tokens[-1]
    if isinstance(parent, dict):
        parent[key] = value
    elif isinstance(parent, list):
        if key == "-":
            parent.append(value)
        else:
            parent.insert(_index(key, len(parent), allow_end=True), value)
    else:
        raise _unprocessable(f'add operation does not apply: doc is missing path: "{path}": missing value')
    return doc


def _remove(doc: Any, tokens: list[str], path: str) -> tuple[Any, Any]:
    """Remove the value at tokens; returns (doc, removed value)."""
    if not tokens:
        raise _unprocessable(f"error in remove for path: '{path}': Unable to remove nonexistent key: : missing value")
    key = tokens[-1]
    try:
        parent = _resolve(doc, tokens[:-1])
    except _Missing:
        raise _unprocessable(f"error in remove for path: '{path}': Unable to remove nonexistent key: {key}: missing value") from None
    if isinstance(parent, dict) and key in parent:
        return doc, parent.pop(key)
    if isinstance(parent, list):
        return doc, parent.pop(_index(key, len(parent), allow_end=False))
    raise _unprocessable(f"error in remove for path: '{path}': Unable to remove nonexistent key: {key}: missing value")


def _replace(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    missing = f"replace operation does not apply: doc is missing key: {path}: missing value"
    try:
        parent = _resolve(doc, tokens[:-1])
    except _Missing:
        raise _unprocessable(missing) from None
    key = tokens[-1]
    if isinstance(parent, dict) and key in parent:
        parent[key] = value
    elif isinstance(parent, list):
        parent[_index(key, len(parent), allow_end=False)] = value
    else:
        raise _unprocessable(missing)
    return doc


def _value(op: dict[str, Any], kind: str) -> Any:
    if "value" not in op:
        raise _unprocessable(f"{kind} operation has no value: missing value")
    return deep_copy(op["value"])


def apply_json_patch(doc: Any, ops: Any, *, stored: bool = False) -> Any:
    """Apply RFC 6902 operations to a deep copy of doc (stored: as apply_merge_patch). Errors →
    errors.ApiError (kube: 422/400 wording)."""
    if ops is None:  # Go decodes `null` into an empty patch
        return deep_copy(doc)
    if not isinstance(ops, list):
        raise bad_request(f"json: cannot unmarshal {_go_type(ops)} into Go value of type jsonpatch.Patch")
    for op in ops:
        if not isinstance(op, dict):
            raise bad_request(f"json: cannot unmarshal {_go_type(op)} into Go value of type jsonpatch.Operation")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError(
            413,
            "RequestEntityTooLarge",
            f"Request entity too large: The allowed maximum operations in a JSON patch is "
            f"{MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}",
        )
    result = clone(doc) if stored else deep_copy(doc)
    for op in ops:
        result = _apply_op(result, op)
    return result


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    if kind not in ("add", "remove", "replace", "move", "copy", "test"):
        raise _unprocessable(f"Unexpected kind: {kind if isinstance(kind, str) else 'unknown'}")
    path = op.get("path")
    try:
        tokens = _pointer(path, kind)
    except _Missing:
        raise _unprocessable(f'{kind} operation does not apply: doc is missing path: "{path}": missing value') from None
    assert isinstance(path, str)
    if kind == "add":
        return _add(doc, tokens, _shallow_enough(_value(op, kind), tokens), path)
    if kind == "remove":
        return _remove(doc, tokens, path)[0]
    if kind == "replace":
        return _replace(doc, tokens, _shallow_enough(_value(op, kind), tokens), path)
    if kind == "test":
        expected = op.get("value")
        try:
            actual = _resolve(doc, tokens)
        except _Missing:
            if expected is None:  # evanphx: testing a missing path against null succeeds
                return doc
            raise _unprocessable(f"testing value {path} failed: test failed") from None
        if not json_equal(actual, expected):
            raise _unprocessable(f"testing value {path} failed: test failed")
        return doc
    # move / copy
    frm = op.get("from")
    if not isinstance(frm, str):
        raise _unprocessable(f"{kind} operation failed to decode from: operation missing from field: missing value")
    try:
        from_tokens = _pointer(frm, kind)
        value = _resolve(doc, from_tokens)
    except _Missing:
        raise _unprocessable(f"{kind} operation does not apply: doc is missing from path: {frm}: missing value") from None
    if kind == "copy":
        return _add(doc, tokens, deep_copy(_shallow_enough(value, tokens)), path)
    if from_tokens == tokens:
        return doc
    if tokens[: len(from_tokens)] == from_tokens:
        raise _unprocessable(f"move operation does not apply: cannot move {frm} into its own child {path}")
    doc, value = _remove(doc, from_tokens, frm)
    return _add(doc, tokens, _shallow_enough(value, tokens), path)


def _shallow_enough(value: Any, tokens: list[str]) -> Any:
    """`value`, unless placing it at `tokens` would nest the object past MAX_DEPTH (a patch of any
    depth could otherwise deepen an object one bounded body at a time)."""
    if isinstance(value, (dict, list)) and (char := nesting_over(value, MAX_DEPTH - len(tokens))) is not None:
        raise too_deep(yaml_text=False, char=char)
    return value


# ================================================================ JSON merge patch (RFC 7386)


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return deep_copy(patch) if isinstance(patch, list) else patch
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def apply_merge_patch(doc: Any, patch: Any, *, stored: bool = False) -> Any:
    """RFC 7386 on a deep copy of doc (null deletes, objects merge, everything else replaces);
    stored: doc is what storage holds, copied by an orjson round trip (jsoncopy.clone, in C)."""
    if not isinstance(patch, dict):
        # evanphx/json-patch (kube) refuses a non-object merge patch for an object document.
        raise bad_request("Invalid JSON Patch")
    return _merge(clone(doc) if stored else deep_copy(doc), patch)


# ================================================================ strategic merge patch


class _Deleted:
    """Sentinel: a map carried `$patch: delete`, so its parent drops the key."""


_DELETED: Final = _Deleted()


_schema = resolve_all_of


def _field_schema(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if schema is None:
        return None
    props = schema.get("properties")
    if isinstance(props, dict) and key in props:
        return _schema(props[key])
    return _schema(schema.get("additionalProperties"))


def _strategies(schema: dict[str, Any] | None) -> list[str]:
    raw = (schema or {}).get(PATCH_STRATEGY)
    return [s.strip() for s in raw.split(",")] if isinstance(raw, str) else []


def _list_meta(schema: dict[str, Any] | None) -> tuple[bool, tuple[str, ...]]:
    """(merge?, merge keys) of a list field: the patch strategy first (what kube's SMP reads), then
    x-kubernetes-list-type for schemas that only carry list-type information."""
    if schema is None:
        return False, ()
    strategies = _strategies(schema)
    if "merge" in strategies:
        key = schema.get(PATCH_MERGE_KEY)
        return True, ((key,) if isinstance(key, str) and key else ())
    if "replace" in strategies:
        return False, ()
    list_type = schema.get(LIST_TYPE)
    if list_type == "map":
        keys = tuple(k for k in schema.get(LIST_MAP_KEYS) or [] if isinstance(k, str))
        return bool(keys), keys
    if list_type == "set":
        return True, ()
    return False, ()


def _items_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    return _schema((schema or {}).get("items"))


def _identity(item: Any, keys: tuple[str, ...], items: dict[str, Any] | None) -> Any:
    """What identifies a list element: its merge-key values (absent keys count as their schema default),
    or the value itself for primitive lists."""
    if not keys:
        return item
    if not isinstance(item, dict):
        return None
    props = (items or {}).get("properties") or {}
    return [item[k] if k in item else (_schema(props.get(k)) or {}).get("default") for k in keys]


def _has_keys(item: dict[str, Any], keys: tuple[str, ...], items: dict[str, Any] | None) -> bool:
    props = (items or {}).get("properties") or {}
    return all(k in item or "default" in (_schema(props.get(k)) or {}) for k in keys)


def _find(lst: list[Any], ident: Any, keys: tuple[str, ...], items: dict[str, Any] | None) -> int:
    for i, x in enumerate(lst):
        if (not keys or isinstance(x, dict)) and json_equal(_identity(x, keys, items), ident):
            return i
    return -1


def _no_merge_key(item: Any, keys: tuple[str, ...]) -> ApiError:
    return _unprocessable(f"map: {json.dumps(item, sort_keys=True)} does not contain declared merge key: {','.join(keys)}")


def apply_strategic_merge_patch(doc: Any, patch: Any, schema: dict[str, Any] | None, *, stored: bool = False) -> Any:
    """Kubernetes strategic merge patch, using the schema's x-kubernetes-patch-merge-key /
    x-kubernetes-patch-strategy (and list-type/map-keys) to merge lists by key; directives
    $patch (replace/merge/delete), $retainKeys, $deleteFromPrimitiveList/<field>, $setElementOrder/<field>."""
    if not isinstance(patch, dict):
        raise bad_request(f"json: cannot unmarshal {_go_type(patch)} into Go value of type map[string]interface {{}}")
    original = (clone(doc) if stored else deep_copy(doc)) if isinstance(doc, dict) else {}
    result = _smp_map(original, deep_copy(patch), _schema(schema))
    return {} if isinstance(result, _Deleted) else result


def _smp_fresh(value: Any, schema: dict[str, Any] | None) -> Any:
    """A patch value with nothing to merge into: still process its directives and drop its nulls,
    so no `$patch` or null ever reaches storage."""
    if isinstance(value, dict):
        return _smp_map({}, value, schema)
    if isinstance(value, list):
        return _smp_list([], value, schema)
    return value


def _smp_map(original: dict[str, Any], patch: dict[str, Any], schema: dict[str, Any] | None) -> Any:
    if DIRECTIVE in patch:
        directive = patch.pop(DIRECTIVE)
        if directive == "replace":
            return _smp_map({}, patch, schema)
        if directive == "delete":
            return _DELETED
        if directive != "merge":
            raise _unprocessable(f"unknown patch type: {directive} in map: {json.dumps(patch, sort_keys=True)}")

    if RETAIN_KEYS in patch:
        retain = patch.pop(RETAIN_KEYS)
        if not isinstance(retain, list):
            raise bad_request("invalid patch format of retainKeys")
        keep = {k for k in retain if isinstance(k, str)}
        for key, value in patch.items():
            if value is None or key.startswith((DELETE_FROM_PRIMITIVE_LIST, SET_ELEMENT_ORDER)):
                continue
            if key not in keep:
                raise _unprocessable("patch content doesn't match retainKeys list")
        for key in list(original):
            if key not in keep:
                del original[key]

    for key in [k for k in patch if k.startswith(SET_ELEMENT_ORDER)]:
        _set_element_order(original, patch, key, schema)

    # Deletions from primitive lists apply to the original before the patch's own items are merged.
    for key in [k for k in patch if k.startswith(DELETE_FROM_PRIMITIVE_LIST)]:
        doomed = patch.pop(key)
        if not isinstance(doomed, list):
            raise bad_request("invalid patch format of primitive list")
        field = key[len(DELETE_FROM_PRIMITIVE_LIST) :]
        current = original.get(field)
        if isinstance(current, list):
            original[field] = [x for x in current if not any(json_equal(x, d) for d in doomed)]

    for key, value in patch.items():
        if value is None:
            original.pop(key, None)
            continue
        sub = _field_schema(schema, key)
        current = original.get(key)
        if isinstance(current, dict) and isinstance(value, dict) and "replace" not in _strategies(sub):
            merged = _smp_map(current, value, sub)
        elif isinstance(current, list) and isinstance(value, list):
            merged = _smp_list(current, value, sub)
        else:
            merged = _smp_fresh(value, sub)
        if isinstance(merged, _Deleted):
            original.pop(key, None)
        else:
            original[key] = merged
    return original


def _smp_list(original: list[Any], patch: list[Any], schema: dict[str, Any] | None) -> list[Any]:
    merge, keys = _list_meta(schema)
    items = _items_schema(schema)
    if not merge:
        return [_smp_fresh(x, items) if isinstance(x, dict) else x for x in patch]
    if not patch:
        return original  # kube: an empty patch list leaves a merging list alone
    if any(isinstance(x, list) for x in patch):
        raise _unprocessable("lists of lists are not supported")

    if not any(isinstance(x, dict) for x in patch):
        # Primitive list: union, de-duplicated, patch order for patch items, server order otherwise.
        merged: list[Any] = []
        for x in original + patch:
            if not any(json_equal(x, y) for y in merged):
                merged.append(x)
        in_patch = [x for x in merged if any(json_equal(x, p) for p in patch)]
        server_only = [x for x in merged if not any(json_equal(x, p) for p in patch)]
        return _normalize(in_patch, server_only, patch, original, (), None)

    if not keys:
        # A merging list of maps without a merge key cannot be merged; replace it like a plain list.
        return [_smp_fresh(x, items) if isinstance(x, dict) else x for x in patch]

    plain: list[dict[str, Any]] = []
    replace = False
    for item in patch:
        if not isinstance(item, dict):
            raise _unprocessable(f"unable to merge list element {json.dumps(item)}: not a map")
        if DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[DIRECTIVE]
        if directive == "delete":
            if not _has_keys(item, keys, items):
                raise _no_merge_key(item, keys)
            ident = _identity(item, keys, items)
            original = [o for o in original if not (isinstance(o, dict) and json_equal(_identity(o, keys, items), ident))]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            plain.append({k: v for k, v in item.items() if k != DIRECTIVE})
        else:
            raise _unprocessable(f"unknown patch type: {directive} in map: {json.dumps(item, sort_keys=True)}")
    if replace:
        return [_smp_fresh(x, items) for x in plain]

    result = list(original)
    for item in plain:
        if not _has_keys(item, keys, items):
            raise _no_merge_key(item, keys)
        i = _find(result, _identity(item, keys, items), keys, items)
        if i >= 0:
            merged_item = _smp_map(result[i], item, items)
            if isinstance(merged_item, _Deleted):
                result.pop(i)
            else:
                result[i] = merged_item
        else:
            fresh = _smp_fresh(item, items)
            if not isinstance(fresh, _Deleted):
                result.append(fresh)
    idents = [_identity(p, keys, items) for p in plain]
    in_patch = [x for x in result if any(json_equal(_identity(x, keys, items), i) for i in idents)]
    server_only = [x for x in result if not any(json_equal(_identity(x, keys, items), i) for i in idents)]
    return _normalize(in_patch, server_only, plain, original, keys, items)


def _position(order: list[Any], x: Any, keys: tuple[str, ...], items: dict[str, Any] | None) -> int:
    return _find(order, _identity(x, keys, items), keys, items)


def _normalize(
    in_patch: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    keys: tuple[str, ...],
    items: dict[str, Any] | None,
) -> list[Any]:
    """kube's element ordering: patch items in patch order, server-only items in server order, then the
    two interleaved so server-only items keep their place relative to items the server already had
    (items new to the server come before the server-only items they cannot be placed against)."""

    def sort_by(lst: list[Any], order: list[Any]) -> list[Any]:
        ranked = [(_position(order, x, keys, items), n, x) for n, x in enumerate(lst)]
        ranked.sort(key=lambda r: (r[0] < 0, r[0], r[1]))
        return [x for _, _, x in ranked]

    left = sort_by(server_only, server_order)
    right = sort_by(in_patch, patch_order)
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li = _position(server_order, left[i], keys, items)
            ri = _position(server_order, right[j], keys, items)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _set_element_order(original: dict[str, Any], patch: dict[str, Any], key: str, schema: dict[str, Any] | None) -> None:
    """`$setElementOrder/<field>`: merge the field's patch list (if any) and order the result as listed."""
    order = patch.pop(key)
    if not isinstance(order, list):
        raise bad_request("invalid patch format of setElementOrder list")
    field = key[len(SET_ELEMENT_ORDER) :]
    sub = _field_schema(schema, field)
    _, keys = _list_meta(sub)
    items = _items_schema(sub)
    current = original.get(field)
    current_list = current if isinstance(current, list) else None
    patch_list = patch.pop(field, None)
    if patch_list is not None and not isinstance(patch_list, list):
        patch[field] = patch_list  # not a list: let the normal loop replace it
        patch_list = None

    if patch_list is not None:
        # Every (non-directive) patch item must appear in the order list, in the same relative order.
        pos = -1
        for item in patch_list:
            if isinstance(item, dict) and DIRECTIVE in item:
                continue
            p = _position(order, item, keys, items)
            if p <= pos:
                raise bad_request("invalid patch format of setElementOrder list")
            pos = p

    if current_list is not None and patch_list is None:
        merged = current_list
    elif patch_list is not None:
        merged = _smp_list(current_list or [], patch_list, sub)
    else:
        return
    in_order = [x for x in merged if _position(order, x, keys, items) >= 0]
    rest = [x for x in merged if _position(order, x, keys, items) < 0]
    original[field] = _normalize(in_order, rest, order, current_list or [], keys, items)
