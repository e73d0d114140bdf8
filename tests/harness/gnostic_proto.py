"""A decoder for gnostic's `openapi.v2.Document` protobuf, driven only by tests/unit/fixtures/openapi/OpenAPIv2.proto.

It shares nothing with isthmus.apiserver.openapi.proto: field numbers and types come from the
upstream .proto, and every wire type is checked against the declared type, so an encoder mistake
(wrong number, wrong wire type, a field the schema does not have) raises instead of decoding.
`to_openapi` then turns the decoded messages back into the Swagger JSON shape the way kube-openapi's
readers see it: Named* entries become object keys, oneofs unwrap, `Any.yaml` is parsed as YAML.
"""

from __future__ import annotations

import re
import struct
from functools import cache
from pathlib import Path
from typing import Any

import yaml

PROTO = Path(__file__).parents[1] / "unit" / "fixtures" / "openapi" / "OpenAPIv2.proto"
_SCALARS = {"string": 2, "bool": 0, "int64": 0, "double": 1}

Field = tuple[str, str, bool]  # proto field name, type, repeated


@cache
def schema() -> tuple[dict[str, dict[int, Field]], frozenset[str]]:
    """({message: {number: (name, type, repeated)}}, names of messages that are a single oneof)."""
    text = re.sub(r"//[^\n]*", "", PROTO.read_text())
    messages: dict[str, dict[int, Field]] = {}
    oneofs = set()
    for name, body in re.findall(r"message (\w+) \{(.*?)\n\}", text, re.S):
        fields = re.findall(r"(repeated )?([\w.]+) (\w+) = (\d+);", body)
        messages[name] = {int(num): (field, typ, bool(rep)) for rep, typ, field, num in fields}
        if "oneof" in body:
            oneofs.add(name)
    return messages, frozenset(oneofs)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def decode(buf: bytes, message: str = "Document") -> dict[str, Any]:
    """Decode buf as `message`: {field name: value}, repeated fields as lists, in wire order."""
    fields = schema()[0][message]
    out: dict[str, Any] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        assert num in fields, f"{message} has no field {num}"
        name, typ, repeated = fields[num]
        expected = _SCALARS.get(typ, 2)
        assert wire == expected, f"{message}.{name}: wire type {wire}, the schema says {typ}"
        value: Any
        if wire == 0:
            raw, pos = _varint(buf, pos)
            value = bool(raw) if typ == "bool" else raw - (1 << 64) if raw >> 63 else raw
        elif wire == 1:
            value = struct.unpack("<d", buf[pos : pos + 8])[0]
            pos += 8
        else:
            n, pos = _varint(buf, pos)
            payload = buf[pos : pos + n]
            assert len(payload) == n, f"{message}.{name} runs past the end"
            pos += n
            value = payload.decode("utf-8") if typ == "string" else decode(payload, typ)
        if repeated:
            out.setdefault(name, []).append(value)
        else:
            assert name not in out, f"{message}.{name} written twice"
            out[name] = value
    return out


def _camel(name: str) -> str:
    if name == "_ref":
        return "$ref"
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def to_openapi(decoded: Any, message: str = "Document") -> Any:
    """The Swagger JSON value a decoded message stands for."""
    messages, oneofs = schema()
    if message == "Any":
        return yaml.safe_load(decoded.get("yaml", ""))
    if message in ("TypeItem", "StringArray"):
        values = decoded.get("value", [])
        return values[0] if message == "TypeItem" and len(values) == 1 else values
    if message == "ItemsItem":
        schemas = [to_openapi(s, "Schema") for s in decoded.get("schema", [])]
        return schemas[0] if len(schemas) == 1 else schemas
    fields = {name: (typ, rep) for name, typ, rep in messages[message].values()}
    if message in oneofs:
        assert len(decoded) == 1, f"{message} is a oneof, got {sorted(decoded)}"
        [(name, value)] = decoded.items()
        typ = fields[name][0]
        return value if typ in _SCALARS else to_openapi(value, typ)
    out: dict[str, Any] = {}
    for name, value in decoded.items():
        typ, repeated = fields[name]
        if typ.startswith("Named"):
            # vendor extensions, map messages, Paths.path and Responses.response_code: object keys
            value_type = messages[typ][2][1]
            for entry in value:
                v = entry.get("value", "" if value_type == "string" else {})
                out[entry.get("name", "")] = v if value_type == "string" else to_openapi(v, value_type)
        elif typ in _SCALARS:
            out[_camel(name)] = value
        elif repeated:
            out[_camel(name)] = [to_openapi(v, typ) for v in value]
        else:
            out[_camel(name)] = to_openapi(value, typ)
    return out


def decode_document(buf: bytes) -> dict[str, Any]:
    doc = to_openapi(decode(buf))
    assert isinstance(doc, dict)
    return doc
