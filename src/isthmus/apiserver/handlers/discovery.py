"""Discovery: /version, the root paths, /api, /apis, an API group, a group version's resources.

As kube's endpoints/discovery. Resource lists are cached as bytes until the set of served
resources changes (kubectl reads every one of them on each cache refresh).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from aiohttp import web

from isthmus.apiserver.builtins import GROUP_ORDER
from isthmus.apiserver.handlers.common import HandlerContext, json_response, not_found

Obj = dict[str, Any]

KUBE_VERSION = {"major": "1", "minor": "32"}
STATUS_VERBS = ["get", "patch", "update"]


def version() -> web.Response:
    return json_response({**KUBE_VERSION, "gitVersion": "v1.32.0-isthmus", "gitCommit": "isthmus",
                          "gitTreeState": "clean", "buildDate": "2026-11-21T00:00:00Z", "goVersion": "python3.11",
                          "compiler": "cpython", "platform": "linux/amd64"})


def root(ctx: HandlerContext) -> web.Response:
    out = {"/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/openapi/v2", "/openapi/v3",
           "/version"}
    for info in ctx.resources.all():
        if info.group:
            out.add(f"/apis/{info.group}")
            out.add(f"/apis/{info.group}/{info.version}")
    return json_response({"paths": sorted(out)})


def legacy_versions(ctx: HandlerContext) -> web.Response:
    """/api: the core group's versions."""
    return json_response({"kind": "APIVersions", "versions": ["v1"],
                          "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                          "serverAddress": ctx.server_address}]})


def _version_priority(v: str) -> tuple[int, int, int]:
    """Kube's version ordering: GA > beta > alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
    if not m:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)


def _group_versions(ctx: HandlerContext) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for info in ctx.resources.all():
        if info.group:
            vs = groups.setdefault(info.group, [])
            if info.version not in vs:
                vs.append(info.version)
    for vs in groups.values():
        vs.sort(key=_version_priority)
    return groups


def _group(ctx: HandlerContext, name: str) -> Obj | None:
    versions = _group_versions(ctx).get(name)
    if not versions:
        return None
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": gvs, "preferredVersion": gvs[0]}


def group(ctx: HandlerContext, name: str) -> web.Response:
    """/apis/<group>."""
    g = _group(ctx, name)
    if g is None:
        raise not_found()
    return json_response(g)


def group_list(ctx: HandlerContext) -> web.Response:
    """/apis."""
    groups = []
    # kube's order: the built-in groups as kube-apiserver lists them, then the others by name.
    order = {g: i for i, g in enumerate(GROUP_ORDER)}
    for name in sorted(_group_versions(ctx), key=lambda g: (order.get(g, len(order)), g)):
        g = _group(ctx, name)
        if g:
            groups.append({k: v for k, v in g.items() if k not in ("kind", "apiVersion")})
    return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


def resource_list(ctx: HandlerContext, group: str, version: str) -> web.Response:
    """/api/<version> or /apis/<group>/<version>: an APIResourceList."""
    gv = f"{group}/{version}" if group else version
    cached = ctx.resources.cache.get(gv)
    if cached is None:
        resources = []
        for info in sorted(ctx.resources.all(), key=lambda i: i.plural):
            if info.group != group or info.version != version:
                continue
            if info.discovery is not None:  # a built-in: kube's own entries
                resources.extend(info.discovery)
                continue
            r: Obj = {"name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
                      "kind": info.kind, "verbs": info.verbs}
            if info.short_names:
                r["shortNames"] = info.short_names
            if info.categories:
                r["categories"] = info.categories
            resources.append(r)
            if info.has_status:
                resources.append({"name": f"{info.plural}/status", "singularName": "",
                                  "namespaced": info.namespaced, "kind": info.kind, "verbs": STATUS_VERBS})
        if not resources:
            raise not_found()
        doc: Obj = {"kind": "APIResourceList", "groupVersion": gv, "resources": resources}
        if group:  # kube's legacy /api/v1 list carries no apiVersion
            doc["apiVersion"] = "v1"
        cached = orjson.dumps(doc)
        ctx.resources.cache[gv] = cached
    return web.Response(body=cached, content_type="application/json")
