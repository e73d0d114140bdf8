"""GET of one object and of a collection (paged with limit/continue, or as a Table), with kube's
resourceVersion semantics: NotOlderThan and Exact reads, consistent pages, too large versions."""

from __future__ import annotations

import asyncio
import base64
import bisect
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.selectors import parse_field_selector, parse_label_selector
from isthmus.apiserver.handlers import scale
from isthmus.apiserver.handlers.common import HandlerContext, json_response, output
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.registry import table
from isthmus.apiserver.registry.resources import ResourceInfo

Obj = dict[str, Any]

EXACT, NOT_OLDER_THAN = "Exact", "NotOlderThan"
# kube's watch cache blockTimeout: how long a read waits for a resourceVersion not reached yet.
BLOCK_TIMEOUT = 3.0
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list.")


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


async def get_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    info, name = scope.info, scope.name
    assert name is not None
    rv_param = scope.request.query.get("resourceVersion") or ""
    if rv_param not in ("", "0"):  # not older than: wait for a version not reached yet
        await wait_for_resource_version(ctx, parse_resource_version(rv_param))
    if scope.subresource == "scale":
        return scale.get_scale(ctx, scope)
    obj = ctx.storage.get(info.key, scope.ns, name)
    if obj is None:
        raise errors.not_found(info.group, info.plural, name)
    if scope.as_table:
        return json_response(table.to_table(info, [output(info, obj)], resource_version=str(ctx.storage.rv),
                                            include_object=scope.request.query.get("includeObject", "Metadata")))
    return json_response(output(info, obj), request=scope.request)


def parse_resource_version(value: str) -> int:
    try:
        rv = int(value)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {value!r}") from None
    if rv < 0:
        raise errors.bad_request(f"invalid resource version: {value!r}")
    return rv


def too_large_resource_version(wanted: int, current: int) -> errors.ApiError:
    """storage.NewTooLargeResourceVersionError: 504 Timeout, retry in 1s."""
    return errors.ApiError(504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {current}", {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1})


async def wait_for_resource_version(ctx: HandlerContext, wanted: int) -> None:
    """kube's watch cache waitUntilFreshAndBlock: a resourceVersion not reached yet is waited for up to
    BLOCK_TIMEOUT seconds, then refused as too large."""
    if ctx.storage.rv >= wanted:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BLOCK_TIMEOUT
    while ctx.storage.rv < wanted:
        if loop.time() >= deadline:
            raise too_large_resource_version(wanted, ctx.storage.rv)
        await asyncio.sleep(0.02)


def validate_list_options(q: Any, watch: bool) -> None:
    """ValidateListOptions (with the WatchList feature, which kube v1.32 enables): what
    resourceVersionMatch and sendInitialEvents may be combined with, for a list and for a watch."""
    match = q.get("resourceVersionMatch") or ""
    initial = q.get("sendInitialEvents")  # present (even "false") or not, as kube's *bool
    causes: list[dict[str, str]] = []

    def forbid(why: str, field: str = "resourceVersionMatch") -> None:
        causes.append(errors.cause(field, f"Forbidden: {why}", "FieldValueForbidden"))

    def unsupported(values: str) -> None:
        causes.append(errors.cause("resourceVersionMatch", f"Unsupported value: {errors.go_quote(match)}: supported "
                                   f"values: {values}", "FieldValueNotSupported"))

    if watch:
        if initial is not None and match != NOT_OLDER_THAN:
            forbid(f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}")
        if match:
            if initial is None:
                forbid("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
            if match != NOT_OLDER_THAN:
                unsupported('"NotOlderThan"')
            if q.get("continue"):
                forbid("resourceVersionMatch is forbidden when continue is provided")
    else:
        if match:
            if not q.get("resourceVersion"):
                forbid("resourceVersionMatch is forbidden unless resourceVersion is provided")
            if q.get("continue"):
                forbid("resourceVersionMatch is forbidden when continue is provided")
            if match not in (EXACT, NOT_OLDER_THAN):
                unsupported('"Exact", "NotOlderThan", ""')
            if match == EXACT and q.get("resourceVersion") == "0":
                forbid('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        if initial is not None:
            forbid("sendInitialEvents is forbidden for list", "sendInitialEvents")
    if causes:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", causes)


class _ExpiredContinue(errors.ApiError):
    """410 Expired whose Status carries a continue token for the rest of the list, at the present."""

    def __init__(self, token: str) -> None:
        super().__init__(410, "Expired", INCONSISTENT_CONTINUE)
        self.token = token

    def status(self) -> dict[str, Any]:
        out = super().status()
        out["metadata"] = {"continue": self.token}
        return out


def _encode_continue(rv: int, ns: str, name: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"rv": rv, "ns": ns, "name": name})).decode()


def _snapshot(ctx: HandlerContext, info: ResourceInfo, namespace: str | None, rv: int, paging: str | None) -> list[Obj]:
    """The list as of rv (kube's exact reads); paging: the continue key when a later page asks."""
    try:
        return ctx.storage.list_at(info.key, namespace, rv)
    except errors.ApiError as e:
        if e.code != 410:
            raise
        if paging is not None:
            # handleCompactedErrorForPaging: the rest of the list, at the present, for who accepts it
            raise _ExpiredContinue(paging) from None
        raise errors.gone("The resourceVersion for the provided list is too old.") from None


async def list_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    """kube's list semantics (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list):
    no resourceVersion or "0": now; `Exact`, or a resourceVersion with a limit: the state at that
    version (410 once history moved past it); `NotOlderThan`, or a resourceVersion without a limit:
    now, once now has reached it (else 504 after waiting). A continue token carries the first
    page's version, so every page is the same snapshot."""
    info, q = scope.info, scope.request.query
    validate_list_options(q, watch=False)
    match = selection(scope.request, info, None)
    try:
        limit = int(q.get("limit") or 0)
    except ValueError:
        raise errors.bad_request(f"invalid limit: {q.get('limit')!r}") from None
    rv_param, rv_match = q.get("resourceVersion") or "", q.get("resourceVersionMatch") or ""
    rv = ctx.storage.rv
    start = 0
    cont = q.get("continue")
    if cont:
        if rv_param not in ("", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        try:
            token = orjson.loads(base64.urlsafe_b64decode(cont.encode()))
            token_rv = int(token["rv"])
            after = (str(token["ns"]), str(token["name"]))
        except Exception as e:
            raise errors.bad_request(f"continue key is not valid: {e}") from None
        if token_rv == 0 or token_rv < -1:
            raise errors.bad_request("continue key is not valid: incorrect encoded start resourceVersion (version "
                                     "meta.k8s.io/v1)")
        if token_rv > 0:  # -1: the rest at the present (the token of an expired continue)
            rv = token_rv
            items = _snapshot(ctx, info, scope.namespace, rv, _encode_continue(-1, *after))
        else:
            items = ctx.storage.list(info.key, scope.namespace)
        # Seek instead of rescanning: pages stay O(page) however big the collection is.
        start = bisect.bisect_right(items, after, key=lambda o: (o["metadata"].get("namespace", ""),
                                                                 o["metadata"]["name"]))
    elif rv_param not in ("", "0"):
        wanted = parse_resource_version(rv_param)
        await wait_for_resource_version(ctx, wanted)
        if rv_match == EXACT or (not rv_match and limit > 0):
            rv = wanted
            items = _snapshot(ctx, info, scope.namespace, rv, None)
        else:
            rv = ctx.storage.rv
            items = ctx.storage.list(info.key, scope.namespace)
    else:
        items = ctx.storage.list(info.key, scope.namespace)  # sorted by (namespace, name)
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
        continue_token = _encode_continue(rv, last.get("namespace", ""), last["name"])
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
                          "items": out_items}, request=scope.request)
