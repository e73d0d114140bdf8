"""POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token: TokenRequest (kube's TokenREST).

A TokenRequest (authentication.k8s.io/v1) is answered with a bound ServiceAccount token; nothing
is stored. Defaults, validation, bound objects, the kubelet's 3607 s extension and every error
are worded as kube-apiserver 1.32's pkg/registry/core/serviceaccount/storage/token.go.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.authentication.serviceaccounts import (
    EXTENDED_EXPIRATION_SECONDS,
    WARN_ONLY_EXPIRATION_SECONDS,
    ServiceAccountTokens,
)
from isthmus.apiserver.handlers.common import HandlerContext, json_response, read_body

Obj = dict[str, Any]

GROUP, KIND, API_VERSION = "authentication.k8s.io", "TokenRequest", "authentication.k8s.io/v1"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600


def is_token_request(group: str, version: str, rest: list[str]) -> bool:
    """Whether a resource path (after /api/v1) is a ServiceAccount's token subresource."""
    return (group == "" and version == "v1" and len(rest) == 5 and rest[0] == "namespaces"
            and rest[2] == "serviceaccounts" and rest[4] == "token")


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _ref_group(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


async def serve(ctx: HandlerContext, request: web.Request, rest: list[str], tokens: ServiceAccountTokens) -> web.Response:
    if request.method != "POST":
        raise errors.method_not_allowed()
    namespace, name = rest[1], rest[3]
    body = await read_body(ctx, request)
    if not isinstance(body, dict):
        raise errors.bad_request("the body of a TokenRequest must be an object")
    if body.get("kind") not in (None, "", KIND) or body.get("apiVersion") not in (None, "", API_VERSION):
        raise errors.bad_request(f"the body of the request was in an unknown format: expected {API_VERSION} "
                                 f"{KIND}, got {body.get('apiVersion')} {body.get('kind')}")
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    if meta.get("name") and meta["name"] != name:
        raise errors.invalid(GROUP, KIND, name, [errors.cause(
            "metadata.name", f"Invalid value: {errors.go_quote(str(meta['name']))}: must match the service "
                             "account name if specified")])
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise errors.invalid(GROUP, KIND, name, [errors.cause(
            "metadata.namespace", f"Invalid value: {errors.go_quote(str(meta['namespace']))}: must match the "
                                  "service account namespace if specified")])
    sa = ctx.storage.get("/serviceaccounts", namespace, name)
    if sa is None:
        raise errors.not_found("", "serviceaccounts", name)

    spec: Obj = dict(body.get("spec") or {}) if isinstance(body.get("spec"), dict) else {}
    audiences = spec.get("audiences")
    if not isinstance(audiences, list) or not audiences:
        audiences = list(tokens.api_audiences)
    audiences = [str(a) for a in audiences]
    expiration = spec.get("expirationSeconds")
    if expiration is None:
        expiration = DEFAULT_EXPIRATION_SECONDS
    if not isinstance(expiration, int) or isinstance(expiration, bool):
        raise errors.bad_request("spec.expirationSeconds must be an integer")
    causes = []
    if expiration < MIN_EXPIRATION_SECONDS:
        causes.append(errors.cause("spec.expirationSeconds",
                                   f"Invalid value: {expiration}: may not specify a duration less than 10 minutes"))
    if expiration > 1 << 32:
        causes.append(errors.cause("spec.expirationSeconds",
                                   f"Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"))
    if causes:
        raise errors.invalid(GROUP, KIND, "", causes)
    now = time.time()

    pod = secret = node = None
    ref = spec.get("boundObjectRef")
    if isinstance(ref, dict) and ref:
        ref_name = str(ref.get("name") or "")
        group, version = _ref_group(str(ref.get("apiVersion") or ""))
        kind = str(ref.get("kind") or "")
        if group == "" and kind == "Pod":
            pod = ctx.storage.get("/pods", namespace, ref_name)
            if pod is None:
                raise errors.not_found("", "pods", ref_name)
            if ((pod.get("spec") or {}).get("serviceAccountName") or "default") != name:
                raise errors.bad_request(f"cannot bind token for serviceaccount {errors.go_quote(name)} to pod "
                                         "running with different serviceaccount name.")
            node_name = (pod.get("spec") or {}).get("nodeName")
            node = ctx.storage.get("/nodes", "", node_name) if node_name else None
            uid = pod["metadata"].get("uid")
        elif group == "" and kind == "Node":
            node = ctx.storage.get("/nodes", "", ref_name)
            if node is None:
                raise errors.not_found("", "nodes", ref_name)
            uid = node["metadata"].get("uid")
        elif group == "" and kind == "Secret":
            secret = ctx.storage.get("/secrets", namespace, ref_name)
            if secret is None:
                raise errors.not_found("", "secrets", ref_name)
            uid = secret["metadata"].get("uid")
        else:
            raise errors.bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(group, kind, ref_name, f"the UID in the bound object reference ({ref['uid']}) does "
                                  "not match the UID in record. The object might have been deleted and then recreated")

    # kube's --service-account-extend-token-expiration (on by default): what kubelets ask for is
    # valid for a year, warnafter marking the expiry they asked for.
    exp, warn_after = expiration, 0
    if pod is not None and expiration == WARN_ONLY_EXPIRATION_SECONDS and tokens.is_api_audience(audiences):
        exp, warn_after = EXTENDED_EXPIRATION_SECONDS, expiration
    token, _ = tokens.issue(sa, audiences, exp, pod=pod, secret=secret, node=node, warn_after=warn_after)

    spec_out: Obj = {"audiences": audiences, "expirationSeconds": expiration,
                     "boundObjectRef": ref if isinstance(ref, dict) and ref else None}
    out: Obj = {"kind": KIND, "apiVersion": API_VERSION,
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _rfc3339(now)},
                "spec": spec_out,
                "status": {"token": token, "expirationTimestamp": _rfc3339(now + expiration)}}
    return json_response(out, status=201)
