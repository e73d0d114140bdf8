"""API errors rendered as metav1.Status, byte for byte as kube-apiserver writes them.

Messages and details follow the constructors of k8s.io/apimachinery/pkg/api/errors (NewNotFound,
NewAlreadyExists, NewConflict, NewInvalid, NewForbidden, ...). The body is what Go's encoding/json
Encoder makes of a metav1.Status: fields in struct order (kind, apiVersion, metadata, status,
message, reason, details {name, group, kind, uid, causes [{reason, message, field}],
retryAfterSeconds}, code), empty ones omitted (metadata, a struct, is always `{}`; details is a
pointer, so present-but-empty is `{}`), `<`, `>`, `&`, U+2028 and U+2029 escaped, and a final
newline. Clients compare these bodies: render them with `ApiError.body()` (a response) or
`ApiError.watch_event()` (a watch ERROR event line), never by dumping `status()` another way.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

# Every NotFound and MethodNotAllowed kube answers carries a details object, `{}` when it has nothing
# to say: NewNotFound / NewMethodNotSupported fill it, and NewGenericServerResponse, which kube uses
# for paths it has no route for (an unknown resource or subresource), sets an empty one. kubectl
# relies on it: `kubectl debug` reads details.name of the 404 for the ephemeralcontainers
# subresource and crashes when details is absent.
_ALWAYS_DETAILED: Final = frozenset({"NotFound", "MethodNotAllowed"})

# Go's json.Encoder escapes these (HTML safety, JavaScript line separators); orjson does not.
_GO_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)

# The media types kube's serializers accept for request bodies (built-in kinds and CRDs alike, v1.32).
BODY_MEDIA_TYPES: Final = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
# The patch types kube's PATCH handler takes, in its order; custom resources have no strategic merge patch.
PATCH_MEDIA_TYPES: Final = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
CR_PATCH_MEDIA_TYPES: Final = tuple(t for t in PATCH_MEDIA_TYPES if "strategic" not in t)


class ApiError(Exception):
    """An error with an HTTP code and a `Status` body. Raise it anywhere in the server.

    details None means "no details" (omitted from the body), except for NotFound and
    MethodNotAllowed, which kube always sends with details (see _ALWAYS_DETAILED).
    """

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        if details is None and reason in _ALWAYS_DETAILED:
            details = {}
        self.details = details

    def status(self) -> dict[str, Any]:
        """The metav1.Status as a dict, keys in kube's order, empty fields omitted as Go omits them."""
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        if self.message:
            body["message"] = self.message
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = _status_details(self.details)
        if self.code:
            body["code"] = self.code
        return body

    def body(self) -> bytes:
        """The response body kube-apiserver writes for this error (JSON, ending with a newline)."""
        return go_json(self.status()) + b"\n"

    def watch_event(self) -> bytes:
        """The `{"type":"ERROR","object":<Status>}` line kube's JSON watch stream sends for this error."""
        return go_json({"type": "ERROR", "object": self.status()}) + b"\n"


def go_json(value: Any) -> bytes:
    """Compact JSON as Go's encoding/json writes it (HTML characters and U+2028/9 escaped)."""
    out = orjson.dumps(value)
    for raw, escaped in _GO_ESCAPES:
        if raw in out:
            out = out.replace(raw, escaped)
    return out


def _status_details(details: dict[str, Any]) -> dict[str, Any]:
    """metav1.StatusDetails in struct order; fields StatusDetails does not have are dropped."""
    out: dict[str, Any] = {}
    for key in ("name", "group", "kind", "uid"):
        if details.get(key):
            out[key] = details[key]
    causes = details.get("causes")
    if causes:
        out["causes"] = [
            {k: c[k] for k in ("reason", "message", "field") if c.get(k)} for c in causes if isinstance(c, dict)
        ]
    if details.get("retryAfterSeconds"):
        out["retryAfterSeconds"] = details["retryAfterSeconds"]
    return out


def go_quote(s: str) -> str:
    """Go's strconv.Quote (fmt's %q): double quotes, backslash escapes, printable runes kept."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == " " or (ch.isprintable() and not 0xD800 <= o <= 0xDFFF):  # as unicode.IsPrint
            out.append(ch)
        elif ch in _GO_SHORT:
            out.append(_GO_SHORT[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")  # not valid UTF-8 in Go: decoded as the replacement rune
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


_GO_SHORT: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _qualified(group: str, plural: str) -> str:
    """schema.GroupResource.String() (and GroupKind's): `resource.group`, or `resource` for core."""
    return f"{plural}.{group}" if group else plural


def _details(group: str, plural: str, name: str | None) -> dict[str, Any]:
    return {"name": name or "", "group": group, "kind": plural}


def not_found(group: str, plural: str, name: str) -> ApiError:
    """NewNotFound: `configmaps "x" not found`, details {name, group, kind=resource}."""
    return ApiError(
        404, "NotFound", f"{_qualified(group, plural)} {go_quote(name)} not found", _details(group, plural, name)
    )


def route_not_found() -> ApiError:
    """What kube answers for a path it has no route for (unknown resource or subresource, bad path):
    NewGenericServerResponse(404), with an empty details object."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f"{_qualified(group, plural)} {go_quote(name)} already exists",
        _details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f"Operation cannot be fulfilled on {_qualified(group, plural)} {go_quote(name)}: {why}",
        _details(group, plural, name),
    )


def stale(group: str, plural: str, name: str) -> ApiError:
    return conflict(
        group, plural, name, "the object has been modified; please apply your changes to the latest version and try again"
    )


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    """One entry of Status.details.causes (field path in kube's dotted form, e.g. spec.ports[0].port)."""
    return {"reason": reason, "message": message, "field": field}


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """NewInvalid: `Kind.group "name" is invalid: <field errors>`, details {name, group, kind=Kind, causes}.

    The field errors are field.ErrorList.ToAggregate(): each `<field>: <message>` (an empty field
    still gets its `: `), duplicates dropped, one alone as is, several as `[a, b]`; none at all
    leaves just `... is invalid`.
    """
    parts: list[str] = []
    for c in causes:
        text = f"{c.get('field', '')}: {c.get('message', '')}"
        if text not in parts:
            parts.append(text)
    message = f"{_qualified(group, kind)} {go_quote(name)} is invalid"
    if parts:
        message += ": " + (parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]")
    return ApiError(422, "Invalid", message, {"name": name, "group": group, "kind": kind, "causes": causes})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    """What kube's authentication filter answers: NewUnauthorized("Unauthorized"), no details."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(message: str, group: str = "", plural: str = "", name: str = "") -> ApiError:
    """NewForbidden(group/plural, name, err) with `message` as err's text.

    Without a resource: `forbidden: <message>`; with one: `<plural.group> is forbidden: <message>`
    or, with a name, `<plural.group> "<name>" is forbidden: <message>`. Details are always there.
    """
    if not group and not plural:
        text = f"forbidden: {message}"
    elif not name:
        text = f"{_qualified(group, plural)} is forbidden: {message}"
    else:
        text = f"{_qualified(group, plural)} {go_quote(name)} is forbidden: {message}"
    return ApiError(403, "Forbidden", text, _details(group, plural, name))


def namespace_terminating(group: str, plural: str, name: str, namespace: str) -> ApiError:
    """The NamespaceLifecycle admission plugin's 403 for a create in a terminating namespace."""
    e = forbidden(
        f"unable to create new content in namespace {namespace} because it is being terminated", group, plural, name
    )
    assert e.details is not None
    e.details["causes"] = [
        {
            "reason": "NamespaceTerminating",
            "message": f"namespace {namespace} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    return e


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    """kube's answer to a method a route does not serve (NewGenericServerResponse(405)): empty details."""
    return ApiError(405, "MethodNotAllowed", message, {})


def method_not_supported(group: str, plural: str, action: str) -> ApiError:
    """NewMethodNotSupported: `<action> is not supported on resources of kind "<plural.group>"`."""
    return ApiError(
        405,
        "MethodNotAllowed",
        f"{action} is not supported on resources of kind {go_quote(_qualified(group, plural))}",
        {"group": group, "kind": plural},
    )


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def not_acceptable_media_types(accepted: tuple[str, ...] | list[str] = BODY_MEDIA_TYPES) -> ApiError:
    """negotiation.NewNotAcceptableError: the Accept header matches no type the server can send."""
    return not_acceptable("only the following media types are accepted: " + ", ".join(accepted))


def gone(message: str) -> ApiError:
    """410 Expired (NewResourceExpired): a watch or list resourceVersion older than the retained history."""
    return ApiError(410, "Expired", message)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def unsupported_media_type(
    content_type: str = "", accepted: tuple[str, ...] | list[str] = BODY_MEDIA_TYPES
) -> ApiError:
    """negotiation.NewUnsupportedMediaTypeError: kube lists what it accepts and does not echo
    `content_type` (the parameter stays for callers that pass it)."""
    del content_type
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted),
    )


def unsupported_patch_type(builtin: bool) -> ApiError:
    """The PATCH handler's 415: kube lists the patch types the resource takes (no strategic merge
    patch for custom resources)."""
    return unsupported_media_type(accepted=PATCH_MEDIA_TYPES if builtin else CR_PATCH_MEDIA_TYPES)


def internal(message: str) -> ApiError:
    """NewInternalError: the error's text is both in the message and the one cause."""
    return ApiError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})
