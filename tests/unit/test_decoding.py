"""Strict JSON decoding: the quick no-duplicates check agrees with the full decode."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isthmus.apiserver.serializer.decoding import _decode_with_duplicates, json_duplicates

TRICKY = [
    b'{"a":1,"a":2}',
    b'{"a" :1,"a":2}',
    b'{"a":1, "b": {"c":1,"c" : 2}}',
    b'{"a\\":":1,"a":2,"a":3}',  # a key holding an escaped quote and a colon
    b'{"a":"x\\":","a":2}',
    b'{"a":"x\\":","b":2}',
    b'{"a":[{"k":1,"k":1}],"b":"\\":\\":"}',
    # A repeat hidden by a quote or colon the text escapes as \u: re-encoded, they show as `":`.
    b'{"a":1,"a":2,"s":"\\u0022:"}',
    b'{"a":1,"a":2,"s":"\\"\\u003a"}',
    b'{"a":1,"a":2,"s":"\\"\\u003A"}',
    b'{"a":{"x":1},"a":2}',
    b'{"a":9223372036854775807,"b":-9223372036854775808,"c":18446744073709551616}',
    b'{"a":1}\n',
    b' {\t"a"\n:\r1 } ',
    b'{"a":NaN}',
    b'{"a":123456789012345678901234567890}',
    b'{"a":"\\ud800"}',
    b'[{"a":1},{"a":1,"a":1}]',
    b'{"":1,"":2}',
    b'not json',
    b'{"a":1,}',
    b"\xef\xbb\xbf{}",
]


@pytest.mark.parametrize("raw", TRICKY)
def test_quick_check_agrees_with_the_full_decode(raw: bytes) -> None:
    assert json_duplicates(raw) == _decode_with_duplicates(raw)


keys = st.sampled_from(["a", "b", "", 'q"', 'x":y', "\\", "é", "k:"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                    st.sampled_from(['":', '\\":', '"', "", "x"]))


def _text(value: Any, draw: Any) -> str:
    """JSON text of value where objects are lists of pairs (so keys may repeat), with random spacing."""
    ws = draw(st.sampled_from(["", " ", "\n", " \t"]))
    if isinstance(value, tuple):  # an object
        return "{" + ",".join(f"{ws}{json.dumps(k)}{draw(st.sampled_from(['', '', ' ']))}:{ws}{_text(v, draw)}"
                              for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(ws + _text(v, draw) for v in value) + "]"
    return json.dumps(value)


values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(st.tuples(keys, inner), max_size=4).map(tuple)), max_leaves=15)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_quick_check_agrees_on_random_texts(data: Any) -> None:
    raw = _text(data.draw(values), data.draw).encode()
    assert json_duplicates(raw) == _decode_with_duplicates(raw)
