"""Merge and prune for server-side apply (structured-merge-diff's merge): an applied configuration merged
into the live object (granular maps and lists by key, atomic values replaced), then the fields the
manager applied before and no longer does removed, unless another manager owns them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from isthmus.apiserver.fieldmanager.fieldpath import Path
from isthmus.apiserver.fieldmanager.typed import (
    MISSING,
    field_schema,
    is_granular_list,
    is_granular_map,
    item_element,
    items_of,
)
from isthmus.apiserver.openapi.schema import resolve_all_of


def merge_applied(live: Any, config: Any, schema: dict[str, Any] | None) -> Any:
    """Merge an applied configuration into the live value: granular maps and lists merge by key,
    everything else is replaced by the configuration. A null in the configuration removes the field."""
    if is_granular_map(live, schema) and is_granular_map(config, schema):
        out = dict(live)
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            elif not isinstance(value, (dict, list)):
                out[key] = value  # what merge_applied and clean make of a scalar, without their calls
            else:
                out[key] = merge_applied(out[key], value, field_schema(schema, key)[0]) if key in out else clean(value)
        return out
    if is_granular_list(live, schema) and is_granular_list(config, schema):
        return _merge_list(live, config, schema)
    return clean(config)


def clean(value: Any) -> Any:
    """A configured value as stored: nulls inside maps mean "unset" and are dropped."""
    if isinstance(value, dict):
        return {k: clean(v) if isinstance(v, (dict, list)) else v for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [clean(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def without_nulls(value: Any) -> Any:
    """`clean` in place, for a configuration the caller owns: the same value, its maps' nulls removed."""
    if isinstance(value, dict):
        nulls = [k for k, v in value.items() if v is None]
        for k in nulls:
            del value[k]
        for v in value.values():
            if isinstance(v, dict | list):
                without_nulls(v)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict | list):
                without_nulls(v)
    return value


def _merge_list(live: list[Any], config: list[Any], schema: dict[str, Any] | None) -> list[Any]:
    """Configured items in configured order; live-only items keep their place after the item they followed."""
    items_schema = resolve_all_of((schema or {}).get("items"))
    live_items = items_of(live, schema)
    config_items = items_of(config, schema)
    live_by = dict(live_items)
    config_keys = {pe for pe, _ in config_items}
    out: list[Any] = []
    done: set[str] = set()

    def emit_config(pe: str, item: Any) -> None:
        if pe in live_by and pe.startswith("k:"):
            out.append(merge_applied(live_by[pe], item, items_schema))
        else:
            out.append(clean(item))
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
            node, sub = node[key], field_schema(sub, key)[0]
        elif isinstance(node, list) and is_granular_list(node, sub):
            index = next((i for i, item in enumerate(node) if item_element(item, sub) == pe), -1)
            if index < 0:
                return
            if last:
                node.pop(index)
                return
            node, sub = node[index], resolve_all_of((sub or {}).get("items"))
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
                return MISSING
            node, sub = node[pe[2:]], field_schema(sub, pe[2:])[0]
        elif isinstance(node, list) and is_granular_list(node, sub):
            found = [item for item in node if item_element(item, sub) == pe]
            if not found:
                return MISSING
            node, sub = found[0], resolve_all_of((sub or {}).get("items"))
        else:
            return MISSING
    return node


def prune_removed(
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
        if _is_item_key(path) or _value_at(merged, path, schema) is MISSING:
            continue
        _remove_path(merged, path, schema)
        for n in range(len(path) - 1, 1, -1):
            parent = path[:n]
            value = _value_at(merged, parent, schema)
            if parent in kept or not isinstance(value, (dict, list)) or value:
                break
            _remove_path(merged, parent, schema)
    return merged
