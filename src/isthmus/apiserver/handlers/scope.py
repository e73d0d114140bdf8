"""A resource request's scope: which resource, namespace, name and subresource, and the write options.

As kube's handlers.RequestScope: resolved once from the path and query, before any verb runs,
so a malformed option fails the request whatever its verb.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.handlers.common import HandlerContext, not_found, truthy
from isthmus.apiserver.registry.resources import ResourceInfo


@dataclass(slots=True)
class RequestScope:
    request: web.Request
    info: ResourceInfo
    namespace: str | None  # None: all namespaces (or a cluster-scoped resource)
    name: str | None  # None: the collection
    subresource: str  # "" or "status"
    watch: bool
    as_table: bool  # Accept: ...;as=Table
    dry_run: bool
    manager: str  # fieldManager
    field_validation: str  # Ignore | Warn | Strict

    @property
    def ns(self) -> str:
        return self.namespace or ""


def _manager_from_agent(agent: str) -> str:
    """kube's default field manager: the user agent up to the first '/'."""
    manager = _MANAGERS.get(agent)
    if manager is None:
        head = agent.split("/", 1)[0].strip()
        manager = head[:128] or "unknown"
        if len(_MANAGERS) < 256:  # a few kinds of clients send a few agents
            _MANAGERS[agent] = manager
    return manager


_MANAGERS: dict[str, str] = {}
_ITEM_VERBS = {"get", "update", "patch", "delete"}
_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def _check_verb(info: ResourceInfo, method: str, name: str | None, watch: bool) -> None:
    """kube registers a route per verb the resource serves: an item path of a type with no item
    verbs (create-only reviews) does not exist (404); another method on a served path is 405."""
    if name is not None and _ITEM_VERBS.isdisjoint(info.verbs):
        raise not_found()
    if method == "GET":
        verb = "watch" if watch else ("list" if name is None else "get")
    else:
        verb = _WRITE_VERBS.get(method) or (("deletecollection" if name is None else "delete")
                                            if method == "DELETE" else "")
    if verb and verb not in info.verbs:
        raise errors.method_not_allowed()


def resolve(ctx: HandlerContext, request: web.Request, group: str, version: str, rest: list[str]) -> RequestScope:
    """rest: the path after /api/<version> or /apis/<group>/<version>."""
    q = request.query
    watch = truthy(w) if (w := q.get("watch")) is not None else False
    if rest and rest[0] == "watch":  # legacy /watch/ paths
        watch, rest = True, rest[1:]
    namespace: str | None = None
    # namespaces/<ns>/<plural>... but not namespaces/<name>/status (or /finalize): a namespace's own subresource
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise not_found()
    info = ctx.resources.get(group, version, rest[0])
    name = rest[1] if len(rest) > 1 else None
    sub = info.subresource(rest[2]) if len(rest) > 2 else ""
    if info.namespaced and namespace is None and (name is not None or request.method == "POST"):
        raise not_found()
    if not info.namespaced and namespace is not None:
        raise not_found()
    if not sub:
        _check_verb(info, request.method, name, watch)
    dry_run = q.get("dryRun") == "All"
    if q.get("dryRun") not in (None, "", "All"):
        raise errors.bad_request(f"unsupported dry run value: {q.get('dryRun')!r}")
    agent = request.headers.get("User-Agent", "")
    manager = q.get("fieldManager") or _MANAGERS.get(agent) or _manager_from_agent(agent)
    fv = q.get("fieldValidation", "Warn")
    if fv not in ("Ignore", "Warn", "Strict"):
        raise errors.bad_request(f"fieldValidation {fv!r} is invalid: valid values are Ignore, Warn, Strict")
    return RequestScope(request, info, namespace, name, sub, watch, "as=Table" in request.headers.get("Accept", ""),
                        dry_run, manager, fv)
