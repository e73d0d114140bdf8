"""The scale subresource: an autoscaling/v1 Scale view of an object's replicas (kube's ScaleREST).

GET builds the Scale from the object (spec.replicas, status.replicas, the selector as a string);
PUT and PATCH (every patch type, apply included) change the Scale, and only its spec.replicas goes
back to the object, through the generic store as a write of the main resource (status kept, a
resourceVersion in the Scale is a precondition). Where a kind keeps these is its strategy's
`scale_strategy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.apimachinery.patch import apply_merge_patch
from isthmus.apiserver.handlers.common import HandlerContext, json_response, user_of
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.registry.resources import ResourceInfo
from isthmus.apiserver.registry.strategy import ScaleStrategy

Obj = dict[str, Any]

SCALE_API_VERSION = "autoscaling/v1"


def _strategy(info: ResourceInfo) -> ScaleStrategy:
    ss = info.strategy.scale_strategy
    if ss is None:  # resolve() serves scale only where there is one
        raise errors.route_not_found()
    return ss


def to_scale(info: ResourceInfo, obj: Obj) -> Obj:
    """kube's scaleFrom<Kind>: metadata (name, namespace, uid, resourceVersion, creationTimestamp),
    spec.replicas (omitted when 0: omitempty), status.replicas and status.selector (omitempty)."""
    ss = _strategy(info)
    m = obj.get("metadata") or {}
    meta = {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if m.get(k)}
    spec: Obj = {}
    if ss.replicas(obj):
        spec["replicas"] = ss.replicas(obj)
    status: Obj = {"replicas": ss.status_replicas_of(obj)}
    selector = ss.selector(obj)
    if selector:
        status["selector"] = selector
    return {"kind": "Scale", "apiVersion": SCALE_API_VERSION, "metadata": meta, "spec": spec, "status": status}


def _validate(info: ResourceInfo, name: str, scale: Any) -> int:
    """The desired Scale's spec.replicas, after kube's checks (ValidateScale and the decoder's)."""
    if not isinstance(scale, dict):
        raise errors.bad_request("the object provided is unrecognized: expected a Scale object")
    av, kind = scale.get("apiVersion"), scale.get("kind")
    if kind and kind != "Scale":
        raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind (Scale)")
    if av and av != SCALE_API_VERSION:
        raise errors.bad_request(f"the API version in the data ({av}) does not match the expected API version "
                                 f"({SCALE_API_VERSION})")
    m = scale.get("metadata") if isinstance(scale.get("metadata"), dict) else {}
    assert isinstance(m, dict)
    if m.get("name") and m["name"] != name:
        raise errors.bad_request(f"the name of the object ({m['name']}) does not match the name on the URL ({name})")
    spec = scale.get("spec") if isinstance(scale.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    replicas = spec.get("replicas", 0)
    if replicas is None:
        replicas = 0
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise errors.invalid("autoscaling", "Scale", name, [errors.cause(
            "spec.replicas", f"Invalid value: {errors.go_quote(str(replicas))}: must be an integer")])
    if replicas < 0:
        raise errors.invalid("autoscaling", "Scale", name, [errors.cause(
            "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")])
    return replicas


def get_scale(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    info, name = scope.info, scope.name
    assert name is not None
    obj = ctx.storage.get(info.key, scope.ns, name)
    if obj is None:
        raise errors.not_found(info.group, info.plural, name)
    return json_response(to_scale(info, obj))


async def update_scale(ctx: HandlerContext, scope: RequestScope, build_scale: Callable[[Obj], Any], *,
                       apply: bool = False) -> web.Response:
    """Write what build_scale(current Scale) returns (an apply configuration merged over it when
    `apply`); only spec.replicas reaches the object."""
    info, name = scope.info, scope.name
    assert name is not None
    ss = _strategy(info)

    def build(live: Obj) -> Obj:
        current = to_scale(info, live)
        desired = build_scale(clone(current))
        if apply and isinstance(desired, dict):
            desired = apply_merge_patch(current, desired)
        replicas = _validate(info, name, desired)
        ss.set_replicas(live, replicas)
        rv = ((desired.get("metadata") or {}).get("resourceVersion") if isinstance(desired, dict) else None)
        live["metadata"]["resourceVersion"] = rv or live["metadata"].get("resourceVersion")
        return live

    warnings: list[str] = []
    out, _ = await ctx.store.update(info, scope.ns, name, build, manager=scope.manager, dry_run=scope.dry_run,
                                    field_validation="Ignore", warnings=warnings,
                                    user=user_of(scope.request))
    return json_response(to_scale(info, out), warnings=warnings)
