"""What every handler shares: the server's parts, JSON responses, request bodies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.authentication.authenticators import UNSECURED, Authenticator, UserInfo
from isthmus.apiserver.httpserver import JsonAnswer, LeanRequest
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.serializer import decoding, protobuf
from isthmus.apiserver.storage.store import Store

Obj = dict[str, Any]


@dataclass
class HandlerContext:
    """The server parts handlers use: reads go to `storage`, writes through `store`."""

    storage: Store
    store: GenericStore
    resources: ResourceRegistry
    max_body_bytes: int
    bookmark_interval: float
    server_address: str = ""  # host:port, known once the listener is bound
    # The server's authenticator chain (TokenReview asks it about tokens).
    authenticator: Authenticator = field(default_factory=lambda: Authenticator(open_access=True))
    # Encoded watch events, shared by the watchers of one resource: (rv, type + apiVersion) → line.
    event_cache: dict[tuple[int, str], bytes] = field(default_factory=dict)


# Where the server's authentication puts the request's user.
USER = web.RequestKey("user", UserInfo)


def user_of(request: web.Request) -> UserInfo:
    """Who sent the request, as the server's authentication decided."""
    user = request._state.get(USER)  # request.get(USER), without MutableMapping's two Python calls
    return user if isinstance(user, UserInfo) else UNSECURED


def not_found() -> ApiError:
    """A path the server has no route for."""
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def json_response(body: Any, status: int = 200, warnings: list[str] | None = None,
                  request: web.Request | None = None) -> web.Response:
    """body as JSON; request: the request answered, when the caller has it (a plain one gets a
    JsonAnswer, which the lean HTTP path writes without aiohttp's response machinery)."""
    if type(request) is LeanRequest:
        return JsonAnswer(orjson.dumps(body), status, warnings)
    resp = web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
    for w in warnings or []:
        resp.headers.add("Warning", f'299 - "{w}"')
    return resp


def status_response(e: ApiError, request: web.Request | None = None) -> web.Response:
    """A Status body byte for byte as kube-apiserver writes it (Go's encoding, trailing newline),
    with the warnings the request had gathered when the error carries them (kube sends both);
    request: as for json_response. A suggested delay (details.retryAfterSeconds) is sent as the
    Retry-After header too, as kube's ErrorNegotiated does (client-go waits for it on a 429)."""
    retry = e.details.get("retryAfterSeconds") if e.details else None
    if type(request) is LeanRequest and not retry:
        return JsonAnswer(e.body(), e.code, getattr(e, "warnings", None))
    resp = web.Response(body=e.body(), status=e.code, content_type="application/json")
    if retry:
        resp.headers["Retry-After"] = str(retry)
    for w in getattr(e, "warnings", None) or []:
        resp.headers.add("Warning", f'299 - "{w}"')
    return resp


def output(info: ResourceInfo, obj: Obj) -> Obj:
    """The object as served at the requested version (objects are stored under their storage version)."""
    if not info.strategy.plain_storage:
        obj = info.strategy.from_storage(obj)
    if obj.get("apiVersion") != info.api_version:
        return {**obj, "apiVersion": info.api_version}
    return obj


def truthy(v: str | None) -> bool:
    return v is not None and v.lower() in ("true", "1")


def decode(raw: bytes, ctype: str) -> Any:
    """A request body: kube protobuf, JSON, or YAML when the content type says so."""
    if ctype == protobuf.CONTENT_TYPE:  # kubectl's typed clients (create namespace/configmap/...)
        return decoding.protobuf_object(raw)
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "yaml" not in ctype:
            raise decoding.json_error(e, raw) from None
    else:
        decoding.check_depth(raw, value)
        return value
    try:
        value = decoding.yaml_load(raw)
    except yaml.YAMLError as e:
        raise errors.bad_request(f"error converting YAML to JSON: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise decoding.too_deep(yaml_text=True) from None
    decoding.check_depth(raw, value, yaml_text=True)
    return value


async def read_body(ctx: HandlerContext, request: web.Request) -> Any:
    if request.content_length is not None and request.content_length > ctx.max_body_bytes:
        raise errors.too_large(ctx.max_body_bytes)
    raw = await request.read()
    return decode(raw, request.content_type or "application/json")


def subresource_object(body: Any, kind: str, api_versions: tuple[str, ...]) -> dict[str, Any]:
    """The body of a POST to a subresource that takes an object of its own (a Binding, an Eviction),
    checked as kube's decoder does: an object, of `kind` and one of `api_versions` where it names them
    (the first is the one kube's message expects), metadata an object (added when absent)."""
    article = "an" if kind[:1] in "AEIOU" else "a"
    if not isinstance(body, dict):
        raise errors.bad_request(f"the object provided is unrecognized: expected {article} {kind} object")
    av, k = body.get("apiVersion"), body.get("kind")
    if av and av not in api_versions:
        raise errors.bad_request(f"the API version in the data ({av}) does not match the expected API version "
                          f"({api_versions[0]})")
    if k and k != kind:
        raise errors.bad_request(f"the kind in the data ({k}) does not match the expected kind ({kind})")
    if body.get("metadata") is None:
        body["metadata"] = {}
    if not isinstance(body["metadata"], dict):
        raise errors.bad_request("the object provided is unrecognized: metadata must be an object")
    return body
