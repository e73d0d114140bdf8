"""PATCH of an object or its status: JSON patch, merge patch, strategic merge patch, server-side apply.

As kube's patch handler: the patch type picks how the new object is built from the live one;
the generic store then runs it through the update pipeline (and retries the build on races).
Apply may create the object (201).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.apimachinery.patch import (
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)
from isthmus.apiserver.handlers import scale
from isthmus.apiserver.handlers.common import HandlerContext, json_response, output, truthy, user_of
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.serializer.decoding import StrictIssues, decode_strict, yaml_duplicate_lines

Obj = dict[str, Any]


def _require_object_patch(patch: Any) -> None:
    if not isinstance(patch, dict):
        raise errors.bad_request("the patch must be a JSON object")


async def patch_resource(ctx: HandlerContext, scope: RequestScope) -> web.Response:
    request, info = scope.request, scope.info
    assert scope.name is not None
    ctype = (request.content_type or "").lower()
    q = request.query
    raw = await request.read()
    warnings: list[str] = []
    apply = False
    force = truthy(q.get("force"))
    build: Callable[[Obj], Any]
    check = scope.field_validation != "Ignore"
    strict: StrictIssues | None = None
    if ctype == "application/json-patch+json":
        ops, strict = decode_strict(raw, "application/json", check)
        strict.patch, strict.prefix = True, "json patch "

        def build(live: Obj) -> Any:
            return apply_json_patch(live, ops, stored=True)
    elif ctype == "application/merge-patch+json":
        patch, strict = decode_strict(raw, "application/json", check)
        strict.patch = True
        _require_object_patch(patch)

        def build(live: Obj) -> Any:
            return apply_merge_patch(live, patch, stored=True)
    elif ctype == "application/strategic-merge-patch+json":
        if not info.builtin:
            raise errors.unsupported_patch_type(info.builtin)
        patch, strict = decode_strict(raw, "application/json", check)
        strict.patch = True
        _require_object_patch(patch)

        def build(live: Obj) -> Any:
            return apply_strategic_merge_patch(live, patch, info.schema, stored=True)
    elif ctype in ("application/apply-patch+yaml", "application/apply-patch+cbor"):
        if not q.get("fieldManager"):
            raise errors.invalid("meta.k8s.io", "PatchOptions", "", [errors.cause(
                "fieldManager", "Required value: is required for apply patch", "FieldValueRequired")])
        applied, dups = decode_strict(raw, "application/yaml", check)
        if dups.duplicates:
            # kube decodes the configuration leniently, then once more strictly (yaml.v2's messages)
            lines = dups.duplicates if dups.yaml else yaml_duplicate_lines(raw)
            text = "error converting YAML to JSON: yaml: unmarshal errors:\n  " + "\n  ".join(lines)
            if scope.field_validation == "Strict":
                raise errors.bad_request(f"error strict decoding YAML: {text}")
            warnings.append(text.replace("\n", " ").replace('"', '\\"'))
        if not isinstance(applied, dict):
            raise errors.bad_request("apply patch must be an object")
        if not applied.get("apiVersion") or not applied.get("kind"):
            raise errors.bad_request("apiVersion and kind must be set in an apply configuration")
        apply = True

        def build(live: Obj) -> Any:
            return clone(applied)
    else:
        raise errors.unsupported_patch_type(info.builtin)
    if scope.subresource == "scale":  # the patch applies to the Scale, not the object
        return await scale.update_scale(ctx, scope, build, apply=apply)
    out, created = await ctx.store.update(info, scope.ns, scope.name, build, subresource=scope.subresource,
                                          manager=scope.manager, dry_run=scope.dry_run,
                                          user=user_of(scope.request),
                                          field_validation=scope.field_validation, warnings=warnings, apply=apply,
                                          force=force, strict=strict)
    return json_response(output(info, out), status=201 if created else 200, warnings=warnings, request=scope.request)
