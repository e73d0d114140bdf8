"""GET of one object and of a collection (paged with limit/continue, or as a Table)."""

from __future__ import annotations

import base64
import bisect
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from isthmus.apiserver import errors, table
from isthmus.apiserver.handlers.common import HandlerContext, json_response, output
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.resources import ResourceInfo
from isthmus.apiserver.selectors import parse_field_selector, parse_label_selector

Obj = dict[str, Any]


def selection(request: web.Request, info: ResourceInfo, name: str | None) -> Callable[[Obj], bool] | None:
    """The labelSelector / fieldSelector (and, for watches of one object, its name) as a predicate;
    None when everything matches."""
    q = request.query
    ls = parse_label_selector(q.get("labelSelector"))
    fs = parse_field_selector(q.get("fieldSelector"), info.strategy.field_selectors, builtin=info.builtin)
    if not q.get("labelSelector") and not q.get("fieldSelector") and name is None:
        return None

    def match(obj: Obj) -> bool:
        m = obj.get("metadata", {})
        if name is not None and m.get("name") != name:
            return False
        return ls.matches(m.get("labels")) and fs.matches(obj)

    return match


def get_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    info, name = scope.info, scope.name
    assert name is not None
    obj = ctx.storage.get(info.key, scope.ns, name)
    if obj is None:
        raise errors.not_found(info.group, info.plural, name)
    if scope.as_table:
        return json_response(table.to_table(info, [output(info, obj)], resource_version=str(ctx.storage.rv),
                                            include_object=scope.request.query.get("includeObject", "Metadata")))
    return json_response(output(info, obj))


def list_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    info, q = scope.info, scope.request.query
    match = selection(scope.request, info, None)
    rv = ctx.storage.rv
    items = ctx.storage.list(info.key, scope.namespace)  # sorted by (namespace, name)
    start = 0
    cont = q.get("continue")
    if cont:
        try:
            token = orjson.loads(base64.urlsafe_b64decode(cont.encode()))
            rv = int(token["rv"])
            after = (str(token["ns"]), str(token["name"]))
        except Exception as e:
            raise errors.bad_request(f"continue key is not valid: {e}") from None
        # Seek instead of rescanning: pages stay O(page) however big the collection is.
        start = bisect.bisect_right(items, after, key=lambda o: (o["metadata"].get("namespace", ""),
                                                                 o["metadata"]["name"]))
    try:
        limit = int(q.get("limit") or 0)
    except ValueError:
        raise errors.bad_request(f"invalid limit: {q.get('limit')!r}") from None
    page: list[Obj] = []
    i = start
    while i < len(items) and (limit <= 0 or len(page) < limit):
        o = items[i]
        i += 1
        if match is None or match(o):
            page.append(o)
    more = any(match is None or match(o) for o in items[i:]) if limit > 0 and i < len(items) else False
    continue_token = None
    remaining = 0
    if more:
        last = page[-1]["metadata"]
        continue_token = base64.urlsafe_b64encode(orjson.dumps(
            {"rv": rv, "ns": last.get("namespace", ""), "name": last["name"]})).decode()
        remaining = len(items) - i if match is None else 0
    items = page
    if scope.as_table:
        return json_response(table.to_table(info, [output(info, o) for o in items], resource_version=str(rv),
                                            include_object=q.get("includeObject", "Metadata"),
                                            continue_token=continue_token))
    list_meta: Obj = {"resourceVersion": str(rv)}
    if continue_token:
        list_meta["continue"] = continue_token
        if remaining:
            list_meta["remainingItemCount"] = remaining
    out_items = items if all(o.get("apiVersion") == info.api_version for o in items[:1]) else [
        output(info, o) for o in items]
    return json_response({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": list_meta,
                          "items": out_items})
