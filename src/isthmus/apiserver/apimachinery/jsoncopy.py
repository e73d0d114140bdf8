"""Copies of JSON data (dicts, lists and scalars), the apiserver's hot path on every write.

copy.deepcopy keeps a memo and dispatches per type: about 32 µs for an EndpointSlice. JSON data has
no shared or cyclic parts to remember, so a plain walk does the same in a third of that, and an
orjson round trip in a sixth for data that is already what storage keeps.
"""

from __future__ import annotations

from typing import Any

import orjson


def deep_copy(value: Any) -> Any:
    """A deep copy of decoded JSON or YAML: every dict and list new, scalars (immutable) shared, so
    values keep their exact types (a YAML date stays a date)."""
    if isinstance(value, dict):
        return {k: deep_copy(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def clone(obj: Any) -> Any:
    """A deep copy of stored data by an orjson round trip (what storage writes and reads back); the
    walk for what orjson cannot write (an integer past 64 bits, kept by a store without a file)."""
    try:
        return orjson.loads(orjson.dumps(obj))
    except TypeError:
        return deep_copy(obj)
