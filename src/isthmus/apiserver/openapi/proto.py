"""/openapi/v2 as kube-apiserver serves it: JSON or gnostic's protobuf `openapi.v2.Document`.

kubectl asks for `/openapi/v2` with `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`
only (client-side validation, e.g. of every item of a `kind: List`, and the v2 fallback of the
fieldValidation check) and decodes the body with gnostic-models' openapiv2/OpenAPIv2.proto. kube
builds that protobuf by parsing the JSON document with gnostic (`openapi_v2.ParseDocument`) and
marshalling it; `encode_document` does the same from the dict, following gnostic's compiler rules:

- JSON keys are the camelCase proto field names (`$ref` is `_ref`); keys starting with `x-` are
  vendor extensions (`NamedAny`), in document order.
- `Any` values (vendor extension values, `default`, `example`, `enum` items) carry their YAML text
  in `Any.yaml`; JSON is YAML, so the value's JSON goes there (kube-openapi yaml-decodes it).
- oneofs are chosen as gnostic's parser would: `in` picks the parameter kind, `$ref` a JsonReference,
  `type: file` a FileSchema, `type`/`flow` the security scheme.
- proto3: zero scalars are left out; a present message (even `{}`) is written; fields in number order.

Keys gnostic would reject (not in Swagger 2.0) are left out rather than failing the whole document.

`v2_response` does kube-openapi's handler part: Accept negotiation (406 when nothing matches), the
ETag (uppercase hex SHA-512 of the JSON, the same for both encodings) and `If-None-Match` → 304.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable
from typing import Any, Final

import orjson
from aiohttp import web

from isthmus.apiserver.openapi import builder
from isthmus.apiserver.registry.resources import ResourceInfo

__all__ = ["PROTO_CONTENT_TYPE", "encode_document", "negotiate", "v2_response"]

PROTO_CONTENT_TYPE: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_PROTO_SUBTYPES: Final = (
    "com.github.proto-openapi.spec.v2@v1.0+protobuf",  # what kubectl / client-go ask for
    "com.github.proto-openapi.spec.v2.v1.0+protobuf",
)

# ---------------------------------------------------------------------------------------- the schema

# gnostic-models openapiv2/OpenAPIv2.proto, one entry per message: "jsonKey:number:type" with `*` for
# repeated; s/b/d/i = string/bool/double/int64. Special keys: `x-` = the vendor extensions (NamedAny
# from keys starting with x-), `*` = every key of the object as Named<type> (the map messages), `/` =
# keys starting with "/" (Paths), `code` = HTTP status codes and "default" (Responses).
_SPEC: Final = {
    "ApiKeySecurity": "type:1:s name:2:s in:3:s description:4:s x-:5:*NamedAny",
    "BasicAuthenticationSecurity": "type:1:s description:2:s x-:3:*NamedAny",
    "BodyParameter": "description:1:s name:2:s in:3:s required:4:b schema:5:Schema x-:6:*NamedAny",
    "Contact": "name:1:s url:2:s email:3:s x-:4:*NamedAny",
    "Default": "*:1:*NamedAny",
    "Definitions": "*:1:*NamedSchema",
    "Document": "swagger:1:s info:2:Info host:3:s basePath:4:s schemes:5:*s consumes:6:*s produces:7:*s "
    "paths:8:Paths definitions:9:Definitions parameters:10:ParameterDefinitions responses:11:ResponseDefinitions "
    "security:12:*SecurityRequirement securityDefinitions:13:SecurityDefinitions tags:14:*Tag "
    "externalDocs:15:ExternalDocs x-:16:*NamedAny",
    "Examples": "*:1:*NamedAny",
    "ExternalDocs": "description:1:s url:2:s x-:3:*NamedAny",
    "FileSchema": "format:1:s title:2:s description:3:s default:4:Any required:5:*s type:6:s readOnly:7:b "
    "externalDocs:8:ExternalDocs example:9:Any x-:10:*NamedAny",
    "FormDataParameterSubSchema": "required:1:b in:2:s description:3:s name:4:s allowEmptyValue:5:b type:6:s "
    "format:7:s items:8:PrimitivesItems collectionFormat:9:s default:10:Any maximum:11:d exclusiveMaximum:12:b "
    "minimum:13:d exclusiveMinimum:14:b maxLength:15:i minLength:16:i pattern:17:s maxItems:18:i minItems:19:i "
    "uniqueItems:20:b enum:21:*Any multipleOf:22:d x-:23:*NamedAny",
    "Header": "type:1:s format:2:s items:3:PrimitivesItems collectionFormat:4:s default:5:Any maximum:6:d "
    "exclusiveMaximum:7:b minimum:8:d exclusiveMinimum:9:b maxLength:10:i minLength:11:i pattern:12:s "
    "maxItems:13:i minItems:14:i uniqueItems:15:b enum:16:*Any multipleOf:17:d description:18:s x-:19:*NamedAny",
    "HeaderParameterSubSchema": "required:1:b in:2:s description:3:s name:4:s type:5:s format:6:s "
    "items:7:PrimitivesItems collectionFormat:8:s default:9:Any maximum:10:d exclusiveMaximum:11:b minimum:12:d "
    "exclusiveMinimum:13:b maxLength:14:i minLength:15:i pattern:16:s maxItems:17:i minItems:18:i "
    "uniqueItems:19:b enum:20:*Any multipleOf:21:d x-:22:*NamedAny",
    "Headers": "*:1:*NamedHeader",
    "Info": "title:1:s version:2:s description:3:s termsOfService:4:s contact:5:Contact license:6:License "
    "x-:7:*NamedAny",
    "JsonReference": "$ref:1:s description:2:s",
    "License": "name:1:s url:2:s x-:3:*NamedAny",
    "Oauth2AccessCodeSecurity": "type:1:s flow:2:s scopes:3:Oauth2Scopes authorizationUrl:4:s tokenUrl:5:s "
    "description:6:s x-:7:*NamedAny",
    "Oauth2ApplicationSecurity": "type:1:s flow:2:s scopes:3:Oauth2Scopes tokenUrl:4:s description:5:s "
    "x-:6:*NamedAny",
    "Oauth2ImplicitSecurity": "type:1:s flow:2:s scopes:3:Oauth2Scopes authorizationUrl:4:s description:5:s "
    "x-:6:*NamedAny",
    "Oauth2PasswordSecurity": "type:1:s flow:2:s scopes:3:Oauth2Scopes tokenUrl:4:s description:5:s x-:6:*NamedAny",
    "Oauth2Scopes": "*:1:*NamedString",
    "Operation": "tags:1:*s summary:2:s description:3:s externalDocs:4:ExternalDocs operationId:5:s "
    "produces:6:*s consumes:7:*s parameters:8:*ParametersItem responses:9:Responses schemes:10:*s "
    "deprecated:11:b security:12:*SecurityRequirement x-:13:*NamedAny",
    "ParameterDefinitions": "*:1:*NamedParameter",
    "PathItem": "$ref:1:s get:2:Operation put:3:Operation post:4:Operation delete:5:Operation "
    "options:6:Operation head:7:Operation patch:8:Operation parameters:9:*ParametersItem x-:10:*NamedAny",
    "PathParameterSubSchema": "required:1:b in:2:s description:3:s name:4:s type:5:s format:6:s "
    "items:7:PrimitivesItems collectionFormat:8:s default:9:Any maximum:10:d exclusiveMaximum:11:b minimum:12:d "
    "exclusiveMinimum:13:b maxLength:14:i minLength:15:i pattern:16:s maxItems:17:i minItems:18:i "
    "uniqueItems:19:b enum:20:*Any multipleOf:21:d x-:22:*NamedAny",
    "Paths": "x-:1:*NamedAny /:2:*NamedPathItem",
    "PrimitivesItems": "type:1:s format:2:s items:3:PrimitivesItems collectionFormat:4:s default:5:Any "
    "maximum:6:d exclusiveMaximum:7:b minimum:8:d exclusiveMinimum:9:b maxLength:10:i minLength:11:i "
    "pattern:12:s maxItems:13:i minItems:14:i uniqueItems:15:b enum:16:*Any multipleOf:17:d x-:18:*NamedAny",
    "Properties": "*:1:*NamedSchema",
    "QueryParameterSubSchema": "required:1:b in:2:s description:3:s name:4:s allowEmptyValue:5:b type:6:s "
    "format:7:s items:8:PrimitivesItems collectionFormat:9:s default:10:Any maximum:11:d exclusiveMaximum:12:b "
    "minimum:13:d exclusiveMinimum:14:b maxLength:15:i minLength:16:i pattern:17:s maxItems:18:i minItems:19:i "
    "uniqueItems:20:b enum:21:*Any multipleOf:22:d x-:23:*NamedAny",
    "Response": "description:1:s schema:2:SchemaItem headers:3:Headers examples:4:Examples x-:5:*NamedAny",
    "ResponseDefinitions": "*:1:*NamedResponse",
    "Responses": "code:1:*NamedResponseValue x-:2:*NamedAny",
    "Schema": "$ref:1:s format:2:s title:3:s description:4:s default:5:Any multipleOf:6:d maximum:7:d "
    "exclusiveMaximum:8:b minimum:9:d exclusiveMinimum:10:b maxLength:11:i minLength:12:i pattern:13:s "
    "maxItems:14:i minItems:15:i uniqueItems:16:b maxProperties:17:i minProperties:18:i required:19:*s "
    "enum:20:*Any additionalProperties:21:AdditionalPropertiesItem type:22:TypeItem items:23:ItemsItem "
    "allOf:24:*Schema properties:25:Properties discriminator:26:s readOnly:27:b xml:28:Xml "
    "externalDocs:29:ExternalDocs example:30:Any x-:31:*NamedAny",
    "SecurityDefinitions": "*:1:*NamedSecurityDefinitionsItem",
    "SecurityRequirement": "*:1:*NamedStringArray",
    "Tag": "name:1:s description:2:s externalDocs:3:ExternalDocs x-:4:*NamedAny",
    "Xml": "name:1:s namespace:2:s prefix:3:s attribute:4:b wrapped:5:b x-:6:*NamedAny",
}

# Named<X> messages are {1: name (string), 2: value (X)}.
_NAMED: Final = {
    "NamedAny": "Any",
    "NamedHeader": "Header",
    "NamedParameter": "Parameter",
    "NamedPathItem": "PathItem",
    "NamedResponse": "Response",
    "NamedResponseValue": "ResponseValue",
    "NamedSchema": "Schema",
    "NamedSecurityDefinitionsItem": "SecurityDefinitionsItem",
    "NamedString": "s",
    "NamedStringArray": "StringArray",
}

_Field = tuple[str, int, bool, str]  # json key, number, repeated, type
_MESSAGES: Final[dict[str, tuple[_Field, ...]]] = {
    name: tuple(
        (key, int(num), typ.startswith("*"), typ.lstrip("*"))
        for key, num, typ in (f.rsplit(":", 2) for f in spec.split())
    )
    for name, spec in _SPEC.items()
}

_CODE: Final = re.compile(r"^([0-9]{3})$|^(default)$")
_MAP_KEYS: Final[dict[str, Callable[[str], bool]]] = {
    "x-": lambda k: k.startswith("x-"),
    "*": lambda k: True,
    "/": lambda k: k.startswith("/"),
    "code": lambda k: _CODE.fullmatch(k) is not None,
}

# ---------------------------------------------------------------------------------------- wire level


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s are ten bytes of two's complement
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _str(num: int, s: str) -> bytes:
    return _len(num, s.encode("utf-8", "replace"))  # proto3 strings must be valid UTF-8


# ---------------------------------------------------------------------------------------- encoding


def encode_document(doc: dict[str, Any]) -> bytes:
    """The gnostic `openapi.v2.Document` protobuf of a Swagger 2.0 document (a JSON dict)."""
    return _message("Document", doc)


def _yaml(value: Any) -> str:
    """Any.yaml: the value as YAML. JSON is YAML; the characters YAML would not keep are escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# C1 controls, NEL/line/paragraph separators, BOM, lone surrogates and non-characters: YAML treats
# them as line breaks or rejects them in a stream, so they go as \u escapes (valid in JSON and YAML).
_YAML_UNSAFE: Final = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]")


def _any(value: Any) -> bytes:
    return _str(2, _yaml(value))


def _scalar(num: int, typ: str, v: Any) -> bytes:
    """A proto3 scalar field; zero values and values of the wrong JSON type are left out."""
    if typ == "s":
        return _str(num, v) if isinstance(v, str) and v else b""
    if typ == "b":
        return _varint(num << 3) + b"\x01" if v is True else b""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v:
        return b""
    if typ == "i":
        return _varint(num << 3) + _varint(v) if isinstance(v, int) else b""
    return _varint(num << 3 | 1) + struct.pack("<d", float(v))  # double


def _value(num: int, typ: str, v: Any) -> bytes:
    if typ in ("s", "b", "d", "i"):
        return _scalar(num, typ, v)
    body = _encode(typ, v)
    return b"" if body is None else _len(num, body)


def _encode(typ: str, v: Any) -> bytes | None:
    """The payload of message `typ` for JSON value v, None when v cannot be one."""
    if typ == "Any":
        return _any(v)
    special = _ONEOFS.get(typ)
    if special is not None:
        return special(v)
    if not isinstance(v, dict):
        return None
    return _message(typ, v)


def _message(name: str, obj: dict[str, Any]) -> bytes:
    out = bytearray()
    for key, num, repeated, typ in _MESSAGES[name]:
        pick = _MAP_KEYS.get(key)
        if pick is not None:
            value_type = _NAMED[typ]
            for k, v in obj.items():
                if isinstance(k, str) and pick(k):
                    named = _str(1, k) if k else b""
                    named += _value(2, value_type, v)
                    out += _len(num, named)
            continue
        if key not in obj:
            continue
        v = obj[key]
        if repeated:
            for item in v if isinstance(v, list) else ():
                if typ == "s":  # a repeated string keeps its empty items
                    out += _str(num, item) if isinstance(item, str) else b""
                else:
                    out += _value(num, typ, item)
        else:
            out += _value(num, typ, v)
    return bytes(out)


# ---------------------------------------------------------------------------------------- oneofs


def _oneof(num: int, typ: str, v: Any) -> bytes | None:
    body = _encode(typ, v)
    return None if body is None else _len(num, body)


def _type_item(v: Any) -> bytes | None:
    values = [v] if isinstance(v, str) else v if isinstance(v, list) else None
    if values is None:
        return None
    return b"".join(_str(1, x) for x in values if isinstance(x, str))


def _items_item(v: Any) -> bytes | None:
    schemas = [v] if isinstance(v, dict) else [s for s in v if isinstance(s, dict)] if isinstance(v, list) else None
    if schemas is None:
        return None
    return b"".join(_len(1, _message("Schema", s)) for s in schemas)


def _additional_properties(v: Any) -> bytes | None:
    if isinstance(v, bool):  # a oneof member: written even when false
        return _varint(2 << 3) + (b"\x01" if v else b"\x00")
    return _oneof(1, "Schema", v)


def _parameter(v: Any) -> bytes | None:
    if not isinstance(v, dict):
        return None
    if v.get("in") == "body":
        return _oneof(1, "BodyParameter", v)
    return _oneof(2, "NonBodyParameter", v)


_NON_BODY: Final = {
    "header": (1, "HeaderParameterSubSchema"),
    "formData": (2, "FormDataParameterSubSchema"),
    "query": (3, "QueryParameterSubSchema"),
    "path": (4, "PathParameterSubSchema"),
}


def _non_body_parameter(v: Any) -> bytes | None:
    where = v.get("in") if isinstance(v, dict) else None
    if not isinstance(where, str) or where not in _NON_BODY:
        return None
    num, typ = _NON_BODY[where]
    return _oneof(num, typ, v)


def _ref_or(num: int, typ: str) -> Callable[[Any], bytes | None]:
    def encode(v: Any) -> bytes | None:
        if isinstance(v, dict) and "$ref" in v:
            return _oneof(2, "JsonReference", v)
        return _oneof(num, typ, v)

    return encode


def _schema_item(v: Any) -> bytes | None:
    if isinstance(v, dict) and v.get("type") == "file":
        return _oneof(2, "FileSchema", v)
    return _oneof(1, "Schema", v)


_OAUTH2_FLOWS: Final = {"implicit": 3, "password": 4, "application": 5, "accessCode": 6}
_SECURITY_MESSAGES: Final = {
    1: "BasicAuthenticationSecurity",
    2: "ApiKeySecurity",
    3: "Oauth2ImplicitSecurity",
    4: "Oauth2PasswordSecurity",
    5: "Oauth2ApplicationSecurity",
    6: "Oauth2AccessCodeSecurity",
}


def _security_definitions_item(v: Any) -> bytes | None:
    if not isinstance(v, dict):
        return None
    kind = v.get("type")
    num = {"basic": 1, "apiKey": 2}.get(kind) if isinstance(kind, str) else None
    if kind == "oauth2":
        flow = v.get("flow")
        num = _OAUTH2_FLOWS.get(flow) if isinstance(flow, str) else None
    return None if num is None else _oneof(num, _SECURITY_MESSAGES[num], v)


def _string_array(v: Any) -> bytes | None:
    if not isinstance(v, list):
        return None
    return b"".join(_str(1, x) for x in v if isinstance(x, str))


_ONEOFS: Final[dict[str, Callable[[Any], bytes | None]]] = {
    "TypeItem": _type_item,
    "ItemsItem": _items_item,
    "AdditionalPropertiesItem": _additional_properties,
    "Parameter": _parameter,
    "NonBodyParameter": _non_body_parameter,
    "ParametersItem": _ref_or(1, "Parameter"),
    "ResponseValue": _ref_or(1, "Response"),
    "SchemaItem": _schema_item,
    "SecurityDefinitionsItem": _security_definitions_item,
    "StringArray": _string_array,
}

# ---------------------------------------------------------------------------------------- serving


class _Served:
    """The JSON bytes and ETag of one v2 document; the protobuf is encoded on first request."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.json = orjson.dumps(doc)
        self.etag = hashlib.sha512(self.json).hexdigest().upper()
        self._proto: bytes | None = None

    @property
    def proto(self) -> bytes:
        if self._proto is None:
            self._proto = encode_document(self.doc)
        return self._proto


# The encodings of the latest resource set only (a few MB): a new CRD makes a new document anyway,
# and v3 traffic, which churns openapi's shared LRU, never evicts what kubectl's next call needs.
_latest: list[tuple[tuple[Any, ...], list[ResourceInfo], _Served]] = []


def _served(resources: list[ResourceInfo]) -> _Served:
    key = builder.resources_key(resources)
    if _latest and _latest[0][0] == key:
        return _latest[0][2]
    served = _Served(builder.openapi_v2(resources))
    _latest[:] = [(key, list(resources), served)]  # the resources keep the key's schema ids valid
    return served


def _accept_clauses(header: str) -> list[tuple[str, str]]:
    """goautoneg.ParseAccept: (type, subtype) by descending q, then concrete before wildcards."""
    clauses: list[tuple[float, int, int, int, str, str]] = []
    for i, part in enumerate(header.split(",")):
        media, _, params = part.strip().partition(";")
        typ, slash, sub = media.strip().partition("/")
        if not slash:
            if typ != "*":
                continue
            sub = "*"
        q = 1.0
        for param in params.split(";"):
            name, eq, val = param.strip().partition("=")
            if eq and name.strip() == "q":
                try:
                    q = float(val.strip())
                except ValueError:
                    q = 0.0
        clauses.append((-q, typ == "*", sub == "*", i, typ, sub))
    clauses.sort()
    return [(typ, sub) for *_, typ, sub in clauses]


def negotiate(accept: str) -> str | None:
    """"json" or "proto" as kube-openapi's /openapi/v2 handler picks (empty Accept = */*), None = 406."""
    offered = [("json", "json")] + [(s, "proto") for s in _PROTO_SUBTYPES]
    for typ, sub in _accept_clauses(accept or "*/*"):
        if typ not in ("application", "*"):
            continue
        for subtype, kind in offered:
            if sub in (subtype, "*"):
                return kind
    return None


def _etag_matches(header: str | None, etag: str) -> bool:
    """If-None-Match with Go http.ServeContent's weak comparison (`*` matches everything)."""
    if not header:
        return False
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == f'"{etag}"':
            return True
    return False


def v2_response(request: web.BaseRequest, resources: list[ResourceInfo]) -> web.Response:
    """GET /openapi/v2: the document as JSON or gnostic protobuf, per the Accept header."""
    kind = negotiate(request.headers.get("Accept", ""))
    headers = {"Vary": "Accept"}
    if kind is None:
        return web.Response(status=406, headers=headers)  # kube-openapi answers 406 with no body
    served = _served(resources)
    headers["ETag"] = f'"{served.etag}"'
    if request.method in ("GET", "HEAD") and _etag_matches(request.headers.get("If-None-Match"), served.etag):
        return web.Response(status=304, headers=headers)
    if kind == "json":
        return web.Response(body=served.json, headers=headers, content_type="application/json")
    return web.Response(body=served.proto, headers=headers, content_type=PROTO_CONTENT_TYPE)
