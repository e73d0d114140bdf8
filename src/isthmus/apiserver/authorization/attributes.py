"""What a request asks to do, as kube's RequestInfoFactory derives it from the path, and the 403 for it.

Authorization sees only these attributes, never the handler: like kube-apiserver, the server
authorizes a request before it knows whether the resource exists, so a user without access gets
403 for an unknown resource too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.authentication.authenticators import UserInfo

__all__ = ["Attributes", "forbidden", "request_attributes"]

API_PREFIXES = ("api", "apis")
# Path segments after /namespaces/<ns> that are the namespace's own subresources, not a resource.
NAMESPACE_SUBRESOURCES = ("status", "finalize")
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Attributes:
    """kube's authorizer.Attributes: who, which verb, on what (a resource, or a non-resource path)."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""  # non-resource requests
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        """`pods` or `pods/log`, as RBAC rules name a subresource."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _truthy_watch(values: list[str]) -> bool:
    return bool(values) and values[0].lower() not in ("false", "0")


def _name_from_field_selector(selector: str) -> str:
    """The name a fieldSelector pins exactly (metadata.name=x or ==x), as RequiresExactMatch finds it;
    kube only takes it when it is a valid path segment."""
    for term in selector.split(","):
        key, op, value = term.partition("==") if "==" in term else term.partition("=")
        if op and key.strip() == "metadata.name" and not value.startswith("="):
            name = value.strip()
            if name and name not in (".", "..") and "/" not in name and "%" not in name:
                return name
    return ""


def request_attributes(method: str, path: str, query: Mapping[str, str], user: UserInfo,
                       watch_values: list[str] | None = None) -> Attributes:
    """RequestInfoFactory.NewRequestInfo: a resource request under /api/<v> or /apis/<g>/<v> with at
    least a resource, else a non-resource request (the path, verb = the lowercase method).

    watch_values: every `watch` query value (default: the one in `query`). A named GET with
    ?watch=true is a watch here (this server watches that one object), where kube, which would
    serve a get, says get; every other rule is kube's.
    """
    parts = [p for p in path.split("/") if p]
    non_resource = Attributes(user, method.lower(), False, path=path)
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = _METHOD_VERBS.get(method, "")
    watching = False
    if parts[0] == "watch":  # the legacy /watch/ paths (kube's special verb)
        if len(parts) < 2:
            return non_resource  # kube: "unable to determine kind and namespace" (an error, then a 404)
        verb, watching, parts = "watch", True, parts[1:]
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    values = watch_values if watch_values is not None else ([query["watch"]] if "watch" in query else [])
    if not name and verb == "get":
        verb = "watch" if _truthy_watch(values) else "list"
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    elif name and verb == "get" and _truthy_watch(values) and not watching:
        verb = "watch"
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, True, path=path, api_group=group, api_version=version, resource=resource,
                      subresource=subresource, namespace=namespace, name=name)


def _sanitize(text: str) -> str:
    """kube's responsewriters sanitizer: the message may be shown in a browser."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def forbidden_message(a: Attributes) -> str:
    """responsewriters.forbiddenMessage."""
    user = a.user.username
    if not a.resource_request:
        return f"User {errors.go_quote(user)} cannot {a.verb} path {errors.go_quote(a.path)}"
    what = (f"User {errors.go_quote(user)} cannot {a.verb} resource {errors.go_quote(a.combined_resource)} "
            f"in API group {errors.go_quote(a.api_group)}")
    if a.namespace:
        return f"{what} in the namespace {errors.go_quote(a.namespace)}"
    return f"{what} at the cluster scope"


def forbidden(a: Attributes, reason: str = "") -> errors.ApiError:
    """The authorization filter's 403 (responsewriters.Forbidden): NewForbidden of the request's
    group and resource (not the subresource) and name, the reason appended when there is one."""
    message = _sanitize(forbidden_message(a))
    if reason:
        message = f"{message}: {reason}"
    return errors.forbidden(message, a.api_group, a.resource, a.name)
