"""POST to a collection: create."""

from __future__ import annotations

from aiohttp import web

from isthmus.apiserver.handlers.common import HandlerContext, json_response, output, read_body
from isthmus.apiserver.handlers.scope import RequestScope


async def create_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    body = await read_body(ctx, scope.request)
    warnings: list[str] = []
    created = await ctx.store.create(scope.info, scope.ns, body, manager=scope.manager, dry_run=scope.dry_run,
                                     field_validation=scope.field_validation, warnings=warnings)
    return json_response(output(scope.info, created), status=201, warnings=warnings)
