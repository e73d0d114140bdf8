"""/openapi/v2 as protobuf: gnostic's `openapi.v2.Document`, what kubectl decodes.

kubectl asks for the v2 document only as protobuf (client-side validation of `kind: List` items,
the v2 fallback of the fieldValidation check); a JSON body makes it fail with "proto: cannot parse
invalid wire-format data". The oracle is gnostic's OpenAPIv2.proto (tests/unit/fixtures/openapi),
read by a decoder that shares no code with the encoder.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from isthmus.apiserver.builtins import builtin_resources, crd_resources
from isthmus.apiserver.openapi.builder import openapi_v2
from isthmus.apiserver.openapi.proto import encode_document
from tests.harness.gnostic_proto import decode, decode_document

CRD: dict[str, Any] = {
    "metadata": {"name": "gizmos.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "gizmos", "kind": "Gizmo"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    # Any-typed values (default, enum) travel as YAML text
                                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                    "size": {"type": "integer", "minimum": 1, "maximum": 100.5},
                                    "name": {"type": "string", "maxLength": 63, "pattern": "^[a-z]+$"},
                                    "port": {
                                        "x-kubernetes-int-or-string": True,
                                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                                    },
                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                    "strict": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {"a": {"type": "string"}},
                                    },
                                    "tags": {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "x-kubernetes-list-type": "set",
                                    },
                                    "note": {"type": "string", "description": "Ünïcödé, \"quotes\", <html> & a\u2028b"},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def _document() -> dict[str, Any]:
    return openapi_v2(builtin_resources() + crd_resources(CRD))


def test_served_document_round_trips_through_gnostic_schema() -> None:
    """Every path, operation, parameter, response and schema of the v2 document survives the protobuf:
    decoded with only OpenAPIv2.proto, it is the JSON document again (none of its scalars is a proto3
    zero value, which protobuf, in kube as here, cannot carry)."""
    doc = _document()
    back = decode_document(encode_document(doc))
    assert back == doc
    # kubectl finds a kind's schema by the gvk vendor extension, and the order of definitions is kept
    assert list(back["definitions"]) == list(doc["definitions"])
    gizmo = back["definitions"]["com.example.v1.Gizmo"]
    assert gizmo["x-kubernetes-group-version-kind"] == [{"group": "example.com", "version": "v1", "kind": "Gizmo"}]
    spec = gizmo["properties"]["spec"]["properties"]
    assert spec["strict"]["additionalProperties"] is False
    assert spec["size"] == {"type": "integer", "minimum": 1, "maximum": 100.5}
    assert spec["note"]["description"] == "Ünïcödé, \"quotes\", <html> & a\u2028b"


def test_wire_format_follows_gnostic() -> None:
    """Byte-level rules kubectl's Go decoder depends on."""
    doc = {
        "swagger": "2.0",
        "definitions": {
            "d": {
                "type": "object",
                "additionalProperties": False,
                "minimum": -1.5,
                "maxLength": 5,
                "x-kubernetes-map-type": "atomic",
            }
        },
    }
    raw = encode_document(doc)
    # Document.swagger (1, string), then Document.definitions (9): one NamedSchema
    assert raw.startswith(b"\x0a\x032.0\x4a")
    named = decode(raw)["definitions"]["additional_properties"][0]
    assert named["name"] == "d"
    schema = named["value"]
    # a oneof member is written even when false (otherwise additionalProperties: false would read as unset)
    assert schema["additional_properties"] == {"boolean": False}
    assert schema["minimum"] == -1.5 and schema["max_length"] == 5
    assert schema["type"] == {"value": ["object"]}
    # vendor extension values are YAML text in Any.yaml, which kube-openapi yaml-decodes
    [ext] = schema["vendor_extension"]
    assert ext["name"] == "x-kubernetes-map-type"
    assert yaml.safe_load(ext["value"]["yaml"]) == "atomic"


def test_parameters_pick_gnostic_oneof_by_location() -> None:
    doc = copy.deepcopy(_document())
    path = "/api/v1/namespaces/{namespace}/configmaps/{name}"
    raw = decode(encode_document(doc))
    [item] = [p["value"] for p in raw["paths"]["path"] if p["name"] == path]
    kinds = [next(iter(p["parameter"]["non_body_parameter"])) for p in item["parameters"]]
    assert kinds == ["path_parameter_sub_schema", "path_parameter_sub_schema", "query_parameter_sub_schema"]
    put = [p["parameter"] for p in item["put"]["parameters"]]
    assert "body_parameter" in put[0] and put[0]["body_parameter"]["schema"]["_ref"].endswith(".ConfigMap")
    codes = [c["name"] for c in item["get"]["responses"]["response_code"]]
    assert codes == ["200", "401"]


def test_keys_swagger_2_does_not_have_are_left_out() -> None:
    """gnostic rejects a whole document over one unknown key; the encoder drops such keys instead."""
    doc = {
        "swagger": "2.0",
        "definitions": {"d": {"type": "object", "nullable": True, "oneOf": [{"type": "string"}], "title": "t"}},
    }
    assert decode_document(encode_document(doc)) == {"swagger": "2.0", "definitions": {"d": {"type": "object", "title": "t"}}}
