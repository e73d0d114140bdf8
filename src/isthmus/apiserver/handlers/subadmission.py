"""Admission of a create on a Pod's virtual subresource (pods/binding, pods/eviction).

kube's create handler admits the Binding or Eviction itself, as a CREATE of `pods/<subresource>`
whose kind is the body's, before its REST storage acts: mutating webhooks may change it, and
ValidatingAdmissionPolicies and validating webhooks may refuse it (an operator blocking evictions
of its Pods does that). Only the configurable plugins take part here: kube's in-tree Pod plugins
(ServiceAccount, Priority, PodSecurity) ignore subresources.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp import web

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.handlers.common import HandlerContext, user_of

Obj = dict[str, Any]


async def admit_create(ctx: HandlerContext, request: web.Request, kind: str, subresource: str, namespace: str,
                       name: str, body: Obj, dry_run: bool) -> Obj:
    """The body as admitted (mutating webhooks may have patched it); raises when refused."""
    admission = ctx.store.admission
    pods = ctx.resources.get("", "v1", "pods")
    webhooks, policies = admission.webhooks, admission.policies
    if not ((webhooks is not None and webhooks.covers(pods)) or (policies is not None and policies.covers(pods))):
        return body  # nothing configured for Pods: no cost
    info = dataclasses.replace(pods, kind=kind)
    req = AdmissionRequest("CREATE", info, subresource, namespace, name, body, None, user_of(request), dry_run)
    if webhooks is not None:
        await webhooks.mutate(req)
    if policies is not None:
        policies.validate(req)
    if webhooks is not None:
        await webhooks.validate(req)
    return req.object if isinstance(req.object, dict) else body
