"""Decode Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) into JSON dicts.

kubectl's typed clients POST objects as the 4-byte magic `k8s\\x00` followed by a `runtime.Unknown`
envelope whose `raw` field holds the typed message. `decode_object` turns that into exactly the dict
kube-apiserver's JSON encoder would produce for the decoded Go struct (JSON names, Go `omitempty`
rules, the custom JSON forms of Time / MicroTime / Duration / IntOrString / Quantity / FieldsV1 /
RawExtension), minus the JSON-encoder noise `null` (zero times, nil pointers and slices) and an empty
top-level `status: {}`. Anything malformed raises a 400 `ApiError`, never another exception.

The wire tables (field numbers, types, JSON names) are generated data in `_proto_tables`.
"""

from __future__ import annotations

import base64
import datetime as _dt
import re
from collections.abc import Callable
from typing import Any, Final

import orjson

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.serializer._proto_tables import (
    INLINE,
    MAP,
    MESSAGES,
    OMITEMPTY,
    POINTER,
    REPEATED,
    ROOTS,
)

__all__ = ["CONTENT_TYPE", "MAGIC", "decode_object"]

CONTENT_TYPE: Final = "application/vnd.kubernetes.protobuf"
MAGIC: Final = b"k8s\x00"

_MAX_DEPTH: Final = 100
_U64: Final = (1 << 64) - 1
_ZERO: Final[dict[str, Any]] = {"string": "", "int32": 0, "int64": 0, "bool": False, "bytes": ""}
_VARINT_TYPES: Final = frozenset({"int32", "int64", "bool"})
_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
# time.Time{}.Unix(): the Go zero time, which metav1.Time/MicroTime encode as JSON null.
_GO_ZERO_UNIX: Final = -62135596800
_QUANTITY_RE: Final = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


class _Malformed(Exception):
    """Internal: the body is not a valid message; becomes a 400 at the API boundary."""


class _Omit:
    """Sentinel: the value JSON-encodes as null (zero time, nil raw bytes) and is left out."""


_OMIT: Final = _Omit()


def decode_object(raw: bytes) -> dict[str, Any]:
    """Decode a `k8s\\x00`-prefixed runtime.Unknown protobuf body into the object's JSON dict.

    Raises `errors.bad_request` (a 400 ApiError) on a malformed body, an unsupported envelope
    (content encoding, nested content type) or a kind this decoder has no tables for.
    """
    try:
        return _decode_object(bytes(raw))
    except ApiError:
        raise
    except _Malformed as e:
        raise errors.bad_request(f"unable to decode protobuf body: {e}") from None
    except (ValueError, OverflowError, TypeError, IndexError, KeyError, RecursionError) as e:
        raise errors.bad_request(f"unable to decode protobuf body: {type(e).__name__}: {e}") from None


def _decode_object(buf: bytes) -> dict[str, Any]:
    if len(buf) < len(MAGIC) or buf[: len(MAGIC)] != MAGIC:
        raise errors.bad_request(
            "protobuf body does not start with the Kubernetes magic prefix 'k8s\\x00' (expected a runtime.Unknown envelope)"
        )
    api_version = kind = encoding = ctype = ""
    payload: tuple[int, int] | None = None
    for num, wire, val in _fields(buf, len(MAGIC), len(buf)):
        if num == 1:
            start, end = _span(wire, val, "Unknown.typeMeta")
            for tnum, twire, tval in _fields(buf, start, end):
                if tnum == 1:
                    api_version = _string(buf, _span(twire, tval, "TypeMeta.apiVersion"))
                elif tnum == 2:
                    kind = _string(buf, _span(twire, tval, "TypeMeta.kind"))
        elif num == 2:
            payload = _span(wire, val, "Unknown.raw")
        elif num == 3:
            encoding = _string(buf, _span(wire, val, "Unknown.contentEncoding"))
        elif num == 4:
            ctype = _string(buf, _span(wire, val, "Unknown.contentType"))
    if not kind:
        raise errors.bad_request("protobuf body has no kind in its runtime.Unknown typeMeta")
    if not api_version:
        raise errors.bad_request(
            f"protobuf body for kind {kind!r} has no apiVersion in its runtime.Unknown typeMeta"
        )
    if encoding:
        raise errors.bad_request(f"protobuf body uses unsupported contentEncoding {encoding!r}")
    if ctype and ctype != CONTENT_TYPE:
        raise errors.bad_request(f"protobuf envelope declares unsupported contentType {ctype!r}")
    idx = ROOTS.get(f"{api_version}/{kind}")
    if idx is None:
        idx = ROOTS.get(f"*/{kind}")
    if idx is None:
        raise errors.bad_request(
            f'no kind "{kind}" is registered for version "{api_version}" in the protobuf decoder '
            "(send it as application/json)"
        )
    start, end = payload if payload is not None else (0, 0)
    body = _message(buf, start, end, idx, 0)
    if not isinstance(body, dict):  # pragma: no cover - roots are plain messages
        raise _Malformed(f"{kind} did not decode to an object")
    if body.get("status") == {}:
        del body["status"]
    return {"apiVersion": api_version, "kind": kind, **body}


# ---------------------------------------------------------------------------------------- wire level


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise _Malformed("unexpected end of data in varint")
        b = buf[pos]
        pos += 1
        if shift < 64:
            result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:
            raise _Malformed("varint overflow")


def _fields(buf: bytes, pos: int, end: int) -> list[tuple[int, int, Any]]:
    """Split buf[pos:end] into (field number, wire type, value); value is an int or a (start, end) span."""
    out: list[tuple[int, int, Any]] = []
    while pos < end:
        key, pos = _varint(buf, pos, end)
        num, wire = key >> 3, key & 7
        if num <= 0 or num > 0x1FFFFFFF:
            raise _Malformed(f"illegal field number {num}")
        val: Any
        if wire == 0:
            val, pos = _varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise _Malformed("unexpected end of data in fixed64")
            val, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            if pos + 4 > end:
                raise _Malformed("unexpected end of data in fixed32")
            val, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if n > end - pos:
                raise _Malformed(f"length {n} of field {num} runs past the end of its message")
            val, pos = (pos, pos + n), pos + n
        else:
            raise _Malformed(f"unsupported wire type {wire} for field {num}")
        out.append((num, wire, val))
    return out


def _span(wire: int, val: Any, what: str) -> tuple[int, int]:
    if wire != 2:
        raise _Malformed(f"wrong wire type {wire} for {what} (expected length-delimited)")
    span: tuple[int, int] = val
    return span


def _string(buf: bytes, span: tuple[int, int]) -> str:
    # Go strings are bytes; its JSON encoder replaces invalid UTF-8 with U+FFFD.
    return buf[span[0] : span[1]].decode("utf-8", errors="replace")


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _scalar(buf: bytes, typ: str, wire: int, val: Any, what: str) -> Any:
    if typ in _VARINT_TYPES:
        if wire != 0:
            raise _Malformed(f"wrong wire type {wire} for {what} (expected varint)")
        if typ == "int32":
            return _signed(val, 32)
        if typ == "int64":
            return _signed(val, 64)
        return val != 0
    span = _span(wire, val, what)
    if typ == "string":
        return _string(buf, span)
    return base64.b64encode(buf[span[0] : span[1]]).decode("ascii")  # bytes


# ---------------------------------------------------------------------------------------- messages


def _message(buf: bytes, start: int, end: int, idx: int, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _Malformed("message nesting too deep")
    name, fields = MESSAGES[idx]
    special = _SPECIAL.get(name)
    if special is not None:
        return special(buf, start, end)
    vals: dict[int, Any] = {}
    for num, wire, val in _fields(buf, start, end):
        field = fields.get(num)
        if field is None:
            continue  # unknown fields are skipped, as gogo-protobuf does
        jname, typ, flags = field
        what = f"{name.rsplit('.', 1)[-1]}.{jname or typ}"
        if flags & MAP:
            key, value = _map_entry(buf, _span(wire, val, what), typ, what, depth)
            vals.setdefault(num, {})[key] = value
        elif flags & REPEATED:
            items = vals.setdefault(num, [])
            if isinstance(typ, int):
                s, e = _span(wire, val, what)
                items.append(_message(buf, s, e, typ, depth + 1))
            elif typ in _VARINT_TYPES and wire == 2:  # packed encoding
                s, e = val
                while s < e:
                    packed, s = _varint(buf, s, e)
                    items.append(_scalar(buf, typ, 0, packed, what))
            else:
                items.append(_scalar(buf, typ, wire, val, what))
        elif isinstance(typ, int):
            s, e = _span(wire, val, what)
            vals[num] = _message(buf, s, e, typ, depth + 1)
        else:
            vals[num] = _scalar(buf, typ, wire, val, what)

    out: dict[str, Any] = {}
    for num, (jname, typ, flags) in fields.items():
        if num in vals:
            v = vals[num]
            if v is _OMIT:
                continue
            if flags & (MAP | REPEATED):
                if not v:
                    continue
                if flags & REPEATED and isinstance(typ, int):
                    v = [None if x is _OMIT else x for x in v]  # Go writes null for a zero time in a list
            elif isinstance(typ, str) and flags & OMITEMPTY and not flags & POINTER and v == _ZERO[typ]:
                continue
        elif flags & INLINE and isinstance(typ, int):
            v = _message(buf, 0, 0, typ, depth + 1)
        elif isinstance(typ, str) and typ != "bytes" and not flags & (POINTER | OMITEMPTY | REPEATED | MAP):
            v = _ZERO[typ]  # Go's encoder writes non-omitempty zero scalars
        else:
            continue
        if flags & INLINE:
            if isinstance(v, dict):
                out.update(v)
        else:
            out[jname] = v
    return out


def _map_entry(buf: bytes, span: tuple[int, int], typ: str | int, what: str, depth: int) -> tuple[str, Any]:
    key = ""
    value: Any = None
    for num, wire, val in _fields(buf, span[0], span[1]):
        if num == 1:
            key = _string(buf, _span(wire, val, what + " key"))
        elif num == 2:
            if isinstance(typ, int):
                s, e = _span(wire, val, what)
                value = _message(buf, s, e, typ, depth + 1)
            else:
                value = _scalar(buf, typ, wire, val, what)
    if value is None:
        value = _message(buf, 0, 0, typ, depth + 1) if isinstance(typ, int) else _ZERO[typ]
    if value is _OMIT:
        value = None
    return key, value


# ---------------------------------------------------------------------------------------- special types


def _int_fields(buf: bytes, start: int, end: int, what: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for num, wire, val in _fields(buf, start, end):
        if num in (1, 2):
            if wire != 0:
                raise _Malformed(f"wrong wire type {wire} for {what}")
            out[num] = val
    return out


def _rfc3339(micros: int, with_micros: bool) -> str:
    try:
        t = _EPOCH + _dt.timedelta(microseconds=micros)
    except OverflowError:
        raise _Malformed("timestamp out of range") from None
    s = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    return f"{s}.{t.microsecond:06d}Z" if with_micros else f"{s}Z"


def _time(buf: bytes, start: int, end: int) -> Any:
    """metav1.Time: empty message = zero time (null); nanos are dropped, as kube's Unmarshal does."""
    if start == end:
        return _OMIT
    f = _int_fields(buf, start, end, "Time")
    seconds = _signed(f.get(1, 0), 64)
    if seconds == _GO_ZERO_UNIX:
        return _OMIT
    return _rfc3339(seconds * 1_000_000, False)


def _micro_time(buf: bytes, start: int, end: int) -> Any:
    """metav1.MicroTime: nanos truncated (toward zero) to microseconds."""
    if start == end:
        return _OMIT
    f = _int_fields(buf, start, end, "MicroTime")
    seconds, nanos = _signed(f.get(1, 0), 64), _signed(f.get(2, 0), 32)
    micros = seconds * 1_000_000 + int(nanos / 1000)
    if micros == _GO_ZERO_UNIX * 1_000_000:
        return _OMIT
    return _rfc3339(micros, True)


def _duration(buf: bytes, start: int, end: int) -> Any:
    f = _int_fields(buf, start, end, "Duration")
    return go_duration(_signed(f.get(1, 0), 64))


def go_duration(ns: int) -> str:
    """Go's time.Duration.String(), e.g. 90s -> "1m30s", 1500us -> "1.5ms"."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = -ns if neg else ns

    def frac(v: int, digits: int) -> str:
        whole, rem = divmod(v, 10**digits)
        r = f"{rem:0{digits}d}".rstrip("0")
        return f"{whole}.{r}" if r else str(whole)

    if u < 1_000_000_000:
        if u < 1_000:
            s = f"{u}ns"
        elif u < 1_000_000:
            s = frac(u, 3) + "µs"
        else:
            s = frac(u, 6) + "ms"
    else:
        secs = frac(u % 60_000_000_000, 9) + "s"
        mins_total = u // 60_000_000_000
        if mins_total:
            hours, mins = divmod(mins_total, 60)
            s = (f"{hours}h" if hours else "") + f"{mins}m" + secs
        else:
            s = secs
    return "-" + s if neg else s


def _int_or_string(buf: bytes, start: int, end: int) -> Any:
    kind, ival, sval = 0, 0, ""
    for num, wire, val in _fields(buf, start, end):
        if num == 1:
            kind = _signed(_scalar(buf, "int64", wire, val, "IntOrString.type"), 64)
        elif num == 2:
            ival = _scalar(buf, "int32", wire, val, "IntOrString.intVal")
        elif num == 3:
            sval = _string(buf, _span(wire, val, "IntOrString.strVal"))
    if kind == 0:
        return ival
    if kind == 1:
        return sval
    raise _Malformed(f"impossible IntOrString.type {kind}")


def _quantity(buf: bytes, start: int, end: int) -> Any:
    value = "0"  # an unset Quantity encodes as "0"
    for num, wire, val in _fields(buf, start, end):
        if num == 1:
            value = _string(buf, _span(wire, val, "Quantity.string"))
            if not _QUANTITY_RE.fullmatch(value):
                raise _Malformed(
                    f"quantities must match the regular expression '{_QUANTITY_RE.pattern}': {value!r}"
                )
    return value


def _raw_json(buf: bytes, start: int, end: int) -> Any:
    """runtime.RawExtension / metav1.FieldsV1: field 1 holds raw JSON, emitted verbatim (nil = null)."""
    raw: bytes | None = None
    for num, wire, val in _fields(buf, start, end):
        if num == 1:
            s, e = _span(wire, val, "raw")
            raw = buf[s:e]
    if raw is None or not raw.strip():
        return _OMIT
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _Malformed(f"embedded raw value is not JSON: {e}") from None


_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
_SPECIAL: Final[dict[str, Callable[[bytes, int, int], Any]]] = {
    _META + "Time": _time,
    _META + "MicroTime": _micro_time,
    _META + "Duration": _duration,
    _META + "FieldsV1": _raw_json,
    "k8s.io.apimachinery.pkg.runtime.RawExtension": _raw_json,
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": _int_or_string,
    "k8s.io.apimachinery.pkg.api.resource.Quantity": _quantity,
}
