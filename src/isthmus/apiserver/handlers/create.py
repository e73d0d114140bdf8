"""POST to a collection: create."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.handlers.common import HandlerContext, json_response, output, user_of
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.registry.strategy import VirtualRequest
from isthmus.apiserver.serializer.decoding import read_body_strict


async def create_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    body, strict = await read_body_strict(scope.request, ctx.max_body_bytes, scope.field_validation)
    if not scope.info.strategy.stored:
        return virtual_create(ctx, scope, body)
    warnings: list[str] = []
    created = await ctx.store.create(scope.info, scope.ns, body, manager=scope.manager,
                                     user=user_of(scope.request), dry_run=scope.dry_run,
                                     field_validation=scope.field_validation, warnings=warnings, strict=strict)
    return json_response(output(scope.info, created), status=201, warnings=warnings, request=scope.request)


def virtual_create(ctx: HandlerContext, scope: RequestScope, body: Any) -> web.Response:
    """A create-only virtual type (reviews): validated, answered by its strategy, never stored."""
    info = scope.info
    obj = ctx.store.check_kind(info, body)
    if info.namespaced:
        obj["metadata"]["namespace"] = scope.ns
    causes = info.strategy.validate(obj)
    if causes:
        raise errors.invalid(info.group, info.kind, str(obj["metadata"].get("name") or ""), causes)
    try:
        answer = info.strategy.create_virtual(obj, VirtualRequest(user_of(scope.request), ctx.authenticator))
    except NotImplementedError:
        raise errors.method_not_supported(info.group, info.plural, "create") from None
    return json_response(answer, status=201)
