"""API errors rendered as metav1.Status, the way kube-apiserver words them."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error with an HTTP code and a `Status` body. Raise it anywhere in the server."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def _details(group: str, plural: str, name: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": plural}
    if group:
        d["group"] = group
    if name:
        d["name"] = name
    return d


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(group, plural)} "{name}" not found', _details(group, plural, name))


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{_qualified(group, plural)} "{name}" already exists', _details(group, plural, name)
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
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
    """422 Invalid: `Kind.group "name" is invalid: [field: message, ...]`."""
    qual = f"{kind}.{group}" if group else kind
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qual} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def gone(message: str) -> ApiError:
    """410 Expired: a watch or list resourceVersion older than the retained history."""
    return ApiError(410, "Expired", message)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf; got {content_type!r}")


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")
