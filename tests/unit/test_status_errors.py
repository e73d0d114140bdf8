"""Status error bodies, byte for byte as kube-apiserver writes them.

Expected bytes are derived from k8s.io/apimachinery/pkg/api/errors (the constructors' messages and
details) and Go's encoding/json Encoder applied to metav1.Status: struct field order, omitempty,
`metadata: {}` always, `details` present whenever the constructor sets it (even empty), HTML
characters escaped, and a trailing newline. Clients (and tests of clients) compare these bodies.
"""

from __future__ import annotations

import pytest

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError

HEAD = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            errors.not_found("", "configmaps", "x"),
            b'"message":"configmaps \\"x\\" not found","reason":"NotFound","details":{"name":"x","kind":"configmaps"},'
            b'"code":404}\n',
            id="NewNotFound-core",
        ),
        pytest.param(
            errors.not_found("apps", "deployments", "web"),
            b'"message":"deployments.apps \\"web\\" not found","reason":"NotFound",'
            b'"details":{"name":"web","group":"apps","kind":"deployments"},"code":404}\n',
            id="NewNotFound-group",
        ),
        pytest.param(
            # NewGenericServerResponse(404): what kube answers for an unknown resource or subresource
            errors.route_not_found(),
            b'"message":"the server could not find the requested resource","reason":"NotFound","details":{},'
            b'"code":404}\n',
            id="route-not-found",
        ),
        pytest.param(
            ApiError(404, "NotFound", "the server could not find the requested resource"),
            b'"message":"the server could not find the requested resource","reason":"NotFound","details":{},'
            b'"code":404}\n',
            id="any-NotFound-has-details",
        ),
        pytest.param(
            errors.already_exists("example.com", "widgets", "w1"),
            b'"message":"widgets.example.com \\"w1\\" already exists","reason":"AlreadyExists",'
            b'"details":{"name":"w1","group":"example.com","kind":"widgets"},"code":409}\n',
            id="NewAlreadyExists",
        ),
        pytest.param(
            errors.stale("", "configmaps", "c"),
            b'"message":"Operation cannot be fulfilled on configmaps \\"c\\": the object has been modified; please '
            b'apply your changes to the latest version and try again","reason":"Conflict",'
            b'"details":{"name":"c","kind":"configmaps"},"code":409}\n',
            id="NewConflict",
        ),
        pytest.param(
            errors.invalid(
                "",
                "Service",
                "s",
                [
                    errors.cause("spec.ports[0].port", "Invalid value: 0: must be between 1 and 65535, inclusive"),
                    errors.cause("spec.type", 'Unsupported value: "X": supported values: "ClusterIP"',
                                 "FieldValueNotSupported"),
                ],
            ),
            b'"message":"Service \\"s\\" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and '
            b'65535, inclusive, spec.type: Unsupported value: \\"X\\": supported values: \\"ClusterIP\\"]",'
            b'"reason":"Invalid","details":{"name":"s","kind":"Service","causes":['
            b'{"reason":"FieldValueInvalid","message":"Invalid value: 0: must be between 1 and 65535, inclusive",'
            b'"field":"spec.ports[0].port"},'
            b'{"reason":"FieldValueNotSupported","message":"Unsupported value: \\"X\\": supported values: '
            b'\\"ClusterIP\\"","field":"spec.type"}]},"code":422}\n',
            id="NewInvalid-two-causes",
        ),
        pytest.param(
            # one error: no brackets; details.kind is the Kind (not the resource), group set for CRDs
            errors.invalid("example.com", "Widget", "w", [errors.cause("spec.size", "Required value",
                                                                       "FieldValueRequired")]),
            b'"message":"Widget.example.com \\"w\\" is invalid: spec.size: Required value","reason":"Invalid",'
            b'"details":{"name":"w","group":"example.com","kind":"Widget","causes":[{"reason":"FieldValueRequired",'
            b'"message":"Required value","field":"spec.size"}]},"code":422}\n',
            id="NewInvalid-one-cause",
        ),
        pytest.param(
            # ErrorList.ToAggregate drops repeated messages, and one left means no brackets
            errors.invalid("", "ConfigMap", "c", [errors.cause("data", "Invalid value: x"),
                                                  errors.cause("data", "Invalid value: x")]),
            b'"message":"ConfigMap \\"c\\" is invalid: data: Invalid value: x","reason":"Invalid",'
            b'"details":{"name":"c","kind":"ConfigMap","causes":[{"reason":"FieldValueInvalid",'
            b'"message":"Invalid value: x","field":"data"},{"reason":"FieldValueInvalid","message":"Invalid value: x",'
            b'"field":"data"}]},"code":422}\n',
            id="NewInvalid-duplicates",
        ),
        pytest.param(
            errors.namespace_terminating("", "configmaps", "c", "t"),
            b'"message":"configmaps \\"c\\" is forbidden: unable to create new content in namespace t because it is '
            b'being terminated","reason":"Forbidden","details":{"name":"c","kind":"configmaps","causes":['
            b'{"reason":"NamespaceTerminating","message":"namespace t is being terminated",'
            b'"field":"metadata.namespace"}]},"code":403}\n',
            id="NewForbidden-namespace-lifecycle",
        ),
        pytest.param(
            errors.forbidden("not allowed"),
            b'"message":"forbidden: not allowed","reason":"Forbidden","details":{},"code":403}\n',
            id="NewForbidden-no-resource",
        ),
        pytest.param(
            errors.bad_request("the namespace of the provided object does not match the namespace sent on the request"),
            b'"message":"the namespace of the provided object does not match the namespace sent on the request",'
            b'"reason":"BadRequest","code":400}\n',
            id="NewBadRequest",
        ),
        pytest.param(
            errors.method_not_allowed(),
            b'"message":"the server does not allow this method on the requested resource",'
            b'"reason":"MethodNotAllowed","details":{},"code":405}\n',
            id="MethodNotAllowed-route",
        ),
        pytest.param(
            errors.method_not_supported("apps", "deployments", "deletecollection"),
            b'"message":"deletecollection is not supported on resources of kind \\"deployments.apps\\"",'
            b'"reason":"MethodNotAllowed","details":{"group":"apps","kind":"deployments"},"code":405}\n',
            id="NewMethodNotSupported",
        ),
        pytest.param(
            errors.unauthorized(),
            b'"message":"Unauthorized","reason":"Unauthorized","code":401}\n',
            id="Unauthorized",
        ),
        pytest.param(
            errors.gone("too old resource version: 5 (10)"),
            b'"message":"too old resource version: 5 (10)","reason":"Expired","code":410}\n',
            id="NewResourceExpired",
        ),
        pytest.param(
            errors.too_large(3145728),
            b'"message":"Request entity too large: limit is 3145728","reason":"RequestEntityTooLarge","code":413}\n',
            id="NewRequestEntityTooLargeError",
        ),
        pytest.param(
            errors.unsupported_media_type("text/plain"),
            b'"message":"the body of the request was in an unknown format - accepted media types include: '
            b'application/json, application/yaml, application/vnd.kubernetes.protobuf",'
            b'"reason":"UnsupportedMediaType","code":415}\n',
            id="UnsupportedMediaType",
        ),
        pytest.param(
            errors.unsupported_patch_type(builtin=True),
            b'"message":"the body of the request was in an unknown format - accepted media types include: '
            b'application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, '
            b'application/apply-patch+yaml","reason":"UnsupportedMediaType","code":415}\n',
            id="UnsupportedMediaType-patch",
        ),
        pytest.param(
            errors.not_acceptable_media_types(),
            b'"message":"only the following media types are accepted: application/json, application/yaml, '
            b'application/vnd.kubernetes.protobuf","reason":"NotAcceptable","code":406}\n',
            id="NotAcceptable",
        ),
        pytest.param(
            errors.internal("boom"),
            b'"message":"Internal error occurred: boom","reason":"InternalError",'
            b'"details":{"causes":[{"message":"boom"}]},"code":500}\n',
            id="NewInternalError",
        ),
    ],
)
def test_body_is_kube_bytes(error: ApiError, expected: bytes) -> None:
    assert error.body() == HEAD + expected


def test_go_json_escapes_and_go_quoting() -> None:
    """%q quotes names as Go does, and the Encoder escapes <, >, & and U+2028/U+2029."""
    body = errors.not_found("", "configmaps", 'a<b>&"c"\\\t\u2028é').body()
    assert body == HEAD + (
        b'"message":"configmaps \\"a\\u003cb\\u003e\\u0026\\\\\\"c\\\\\\"\\\\\\\\\\\\t\\\\u2028\xc3\xa9\\" not found",'
        b'"reason":"NotFound","details":{"name":"a\\u003cb\\u003e\\u0026\\"c\\"\\\\\\t\\u2028\xc3\xa9",'
        b'"kind":"configmaps"},"code":404}\n'
    )


def test_details_fields_in_struct_order_whatever_the_caller_built() -> None:
    e = ApiError(409, "Conflict", "m", {"causes": [{"field": "f", "message": "x", "reason": "R"}], "kind": "k",
                                        "retryAfterSeconds": 3, "name": "n", "uid": "u", "group": "g"})
    assert e.body() == HEAD + (
        b'"message":"m","reason":"Conflict","details":{"name":"n","group":"g","kind":"k","uid":"u",'
        b'"causes":[{"reason":"R","message":"x","field":"f"}],"retryAfterSeconds":3},"code":409}\n'
    )


def test_watch_error_event_line() -> None:
    """A watch from a compacted resourceVersion ends with one ERROR event line holding the Status
    (kube's watch encoder compacts the embedded Status, so no newline inside)."""
    assert errors.gone("too old resource version: 5 (10)").watch_event() == (
        b'{"type":"ERROR","object":' + HEAD
        + b'"message":"too old resource version: 5 (10)","reason":"Expired","code":410}}\n'
    )
