"""DELETE of an object or of a collection, with DeleteOptions (preconditions, propagationPolicy)."""

from __future__ import annotations

import contextlib
from typing import Any

from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.handlers.common import HandlerContext, decode, json_response, output, truthy, user_of
from isthmus.apiserver.handlers.get import selection
from isthmus.apiserver.handlers.scope import RequestScope

Obj = dict[str, Any]


async def _delete_options(request: web.Request) -> Obj:
    """DeleteOptions from the body and the query (the query wins); orphanDependents as a policy."""
    q = request.query
    opts: Obj = {}
    if request.can_read_body:
        raw = await request.read()
        if raw.strip():
            body = decode(raw, request.content_type or "application/json")
            if isinstance(body, dict):
                opts.update(body)
    if q.get("propagationPolicy"):
        opts["propagationPolicy"] = q["propagationPolicy"]
    if q.get("gracePeriodSeconds"):
        opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
    if "orphanDependents" in q:
        opts["orphanDependents"] = truthy(q.get("orphanDependents"))
    policy = opts.get("propagationPolicy")
    if policy is None and "orphanDependents" in opts:
        policy = "Orphan" if opts["orphanDependents"] else "Background"
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise errors.invalid("meta.k8s.io", "DeleteOptions", "", [errors.cause(
            "propagationPolicy", f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
            '"Orphan", "nil"', "FieldValueNotSupported")])
    opts["propagationPolicy"] = policy
    return opts


async def delete_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    assert scope.name is not None
    options = await _delete_options(scope.request)
    warnings: list[str] = []
    out, _ = await ctx.store.delete(scope.info, scope.ns, scope.name, options, dry_run=scope.dry_run,
                                    user=user_of(scope.request), warnings=warnings)
    return json_response(output(scope.info, out), warnings=warnings, request=scope.request)


async def delete_collection(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    info = scope.info
    options = await _delete_options(scope.request)
    match = selection(scope.request, info, None)
    items = [o for o in ctx.storage.list(info.key, scope.namespace) if match is None or match(o)]
    out = []
    warnings: list[str] = []
    for o in items:
        m = o["metadata"]
        with contextlib.suppress(ApiError):
            deleted, _ = await ctx.store.delete(info, m.get("namespace", ""), m["name"], options,
                                                dry_run=scope.dry_run, user=user_of(scope.request), warnings=warnings)
            out.append(output(info, deleted))
    return json_response({"kind": info.list_kind, "apiVersion": info.api_version,
                          "metadata": {"resourceVersion": str(ctx.storage.rv)}, "items": out}, warnings=warnings)
