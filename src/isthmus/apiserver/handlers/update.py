"""PUT of an object or its status: replace."""

from __future__ import annotations

from aiohttp import web

from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.handlers import scale
from isthmus.apiserver.handlers.common import HandlerContext, json_response, output, user_of
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.serializer.decoding import read_body_strict


async def update_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    assert scope.name is not None
    body, strict = await read_body_strict(scope.request, ctx.max_body_bytes, scope.field_validation)
    if scope.subresource == "scale":
        return await scale.update_scale(ctx, scope, lambda current: clone(body))
    warnings: list[str] = []
    out, _ = await ctx.store.update(scope.info, scope.ns, scope.name, lambda live: clone(body),
                                    user=user_of(scope.request),
                                    subresource=scope.subresource, manager=scope.manager, dry_run=scope.dry_run,
                                    field_validation=scope.field_validation, warnings=warnings, strict=strict)
    return json_response(output(scope.info, out), warnings=warnings, request=scope.request)
