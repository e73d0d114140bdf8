"""/openapi/v2 and /openapi/v3 (index and per group version), cached until the served set changes."""

from __future__ import annotations

import orjson
from aiohttp import web

from isthmus.apiserver.handlers.common import HandlerContext, json_response, not_found
from isthmus.apiserver.openapi import builder as docs


def serve(ctx: HandlerContext, rest: list[str]) -> web.Response:
    """rest: the path after /openapi."""
    cache = ctx.resources.cache
    infos = ctx.resources.all()
    if rest == ["v2"]:
        key = "openapi/v2"
        if key not in cache:
            cache[key] = orjson.dumps(docs.openapi_v2(infos))
        return web.Response(body=cache[key], content_type="application/json")
    if rest == ["v3"]:
        return json_response(docs.openapi_v3_index(infos))
    if len(rest) >= 3 and rest[0] == "v3":
        if rest[1] == "api" and len(rest) == 3:
            group, version = "", rest[2]
        elif rest[1] == "apis" and len(rest) == 4:
            group, version = rest[2], rest[3]
        else:
            raise not_found()
        key = f"openapi/v3/{group}/{version}"
        if key not in cache:
            doc = docs.openapi_v3_group(infos, group, version)
            if doc is None:
                raise not_found()
            cache[key] = orjson.dumps(doc)
        return web.Response(body=cache[key], content_type="application/json")
    raise not_found()
