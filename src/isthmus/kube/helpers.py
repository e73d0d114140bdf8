"""Write helpers every controller uses: server-side apply, status patch, create-or-update with
conflict retry, ensure-deleted, CRD installation.

Each accepts our pydantic models (`isthmus.api` Resources, converted at the boundary) and
lightkube objects alike, and returns the same kind it was given.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast, overload

from lightkube import ApiError, AsyncClient
from lightkube.core import resource as lk_resource
from lightkube.core.generic_client import METHOD_MAPPING, BasicRequest
from lightkube.core.resource import api_info
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from isthmus.api.base import Resource
from isthmus.kube.resources import resource_for
from isthmus.kube.transport import UNSENT, answer_unread

T = TypeVar("T")
M = TypeVar("M", bound=Resource)

DEFAULT_CONFLICT_RETRIES = 5


# --- errors -------------------------------------------------------------------------------------


def status_code(err: BaseException) -> int | None:
    """HTTP status of a lightkube ApiError (None for anything else)."""
    if isinstance(err, ApiError) and err.status is not None:
        code = err.status.code
        return int(code) if code is not None else None
    return None


def is_not_found(err: BaseException) -> bool:
    return status_code(err) == 404


def is_conflict(err: BaseException) -> bool:
    """409: stale resourceVersion (Conflict) or create of an existing name (AlreadyExists)."""
    return status_code(err) == 409


# --- conversion between the caller's type and lightkube's ---------------------------------------


def _lk_class(res: type[Any]) -> type[Any]:
    if issubclass(res, Resource):
        return resource_for(res)
    return res


def _back(res: type[T], lk_obj: Any) -> T:
    """The server's answer as the caller's type."""
    if issubclass(res, Resource):
        return cast(T, res.from_dict(lk_obj))
    if type(lk_obj) is res:
        return lk_obj
    return cast(T, cast(Any, res).from_dict(lk_obj.to_dict()))


def _name_ns_of(data: dict[str, Any]) -> tuple[str, str | None]:
    meta = data.get("metadata") or {}
    return meta.get("name") or "", meta.get("namespace")


# --- writes prepared here -----------------------------------------------------------------------


class _Where:
    """What a write's path and body need to know of a lightkube resource (lightkube's prepare_request
    works it out again on every request)."""

    __slots__ = ("action", "api_version", "kind", "namespaced", "plural", "root")

    def __init__(self, res: type[Any]) -> None:
        info = api_info(res)
        base = info.parent or info.resource
        self.root = f"apis/{base.group}/{base.version}" if base.group else f"api/{base.version}"
        self.plural, self.action = info.plural, info.action
        self.namespaced = issubclass(res, lk_resource.NamespacedResource | lk_resource.NamespacedSubResource)
        self.api_version, self.kind = info.resource.api_version, info.resource.kind


_WHERE: dict[type[Any], _Where] = {}


def _where(res: type[Any]) -> _Where:
    where = _WHERE.get(res)
    if where is None:
        where = _WHERE[res] = _Where(res)
    return where


async def _send(client: AsyncClient, method: str, res: type[Any], name: str, namespace: str | None,
                data: dict[str, Any], params: dict[str, str], content_type: str | None = None) -> Any:
    """One write (lightkube's "post", "put" or "patch" of `res`'s object `name`), prepared here as
    lightkube's prepare_request would and sent by kube/transport.py's fast path; UNSENT when this
    client's requests cannot go that way (the caller then goes through lightkube)."""
    generic = cast(Any, client)._client
    prepared = getattr(generic.request, "prepared", None)
    if prepared is None or generic._dry_run or not name:
        return UNSENT
    where = _where(res)
    if where.namespaced:
        namespace = namespace or generic.namespace
        if not namespace:
            return UNSENT  # lightkube words the error
        url = f"{where.root}/namespaces/{namespace}/{where.plural}"
    else:
        url = f"{where.root}/{where.plural}"
    if method != "post":
        url += f"/{name}"
    if where.action:
        if method == "post":
            return UNSENT  # a subresource made by POST (a Binding...) names its parent: lightkube knows how
        url += f"/{where.action}"
    if "fieldManager" not in params and generic._field_manager is not None:
        params["fieldManager"] = generic._field_manager
    br = BasicRequest(method=METHOD_MAPPING[method], url=url, response_type=res, params=params, data=data,
                      headers={"Content-Type": content_type} if content_type else None)
    return await prepared(method, br)


def _body(obj: Any) -> tuple[dict[str, Any], type[Any]]:
    """A model's or lightkube object's body as sent (apiVersion and kind filled in, as lightkube's
    prepare_request fills them), and its lightkube resource."""
    data: dict[str, Any] = cast(Any, obj).to_dict()
    res = _lk_class(type(obj))
    where = _where(res)
    data["apiVersion"] = data.get("apiVersion") or where.api_version
    data["kind"] = data.get("kind") or where.kind
    return data, res


def _patch_params(field_manager: str, force: bool) -> dict[str, str]:
    """A patch's query as lightkube's `patch` orders it (force is for apply patches only)."""
    return {"force": "true", "fieldManager": field_manager} if force else {"fieldManager": field_manager}


# --- reads --------------------------------------------------------------------------------------


async def get(client: AsyncClient, res: type[T], name: str, *, namespace: str | None = None) -> T:
    """GET as the caller's type (a model class or a lightkube resource); ApiError 404 if absent."""
    lk = await cast(Any, client).get(_lk_class(res), name, namespace=namespace)
    return _back(res, lk)


async def get_or_none(
    client: AsyncClient, res: type[T], name: str, *, namespace: str | None = None
) -> T | None:
    """GET, or None when the object does not exist."""
    try:
        return await get(client, res, name, namespace=namespace)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise


async def list_all(
    client: AsyncClient,
    res: type[T],
    *,
    namespace: str | None = None,
    labels: Mapping[str, Any] | None = None,
) -> list[T]:
    """LIST as the caller's type; `namespace=lightkube.ALL_NS` ("*") lists every namespace."""
    lister = cast(Any, client).list(_lk_class(res), namespace=namespace, labels=labels)
    return [_back(res, item) async for item in lister]


# --- writes -------------------------------------------------------------------------------------


async def apply(client: AsyncClient, obj: T, *, field_manager: str, force: bool = False) -> T:
    """Server-side apply `obj` as `field_manager` (one per component, e.g. "isthmus-mcs-agent").

    Send only the fields this component owns: the server merges them with other managers' and
    a field another manager owns is a 409 unless `force` (controllers reconciling their own
    objects usually force). A resourceVersion in `obj` makes the apply conditional on it.
    """
    return _back(type(obj), await _apply(client, obj, field_manager, force))


async def apply_quiet(client: AsyncClient, obj: Any, *, field_manager: str, force: bool = False) -> None:
    """`apply` for a caller that drops the answer: the stored object is not decoded into a model."""
    with answer_unread():
        await _apply(client, obj, field_manager, force)


async def _apply(client: AsyncClient, obj: Any, field_manager: str, force: bool) -> Any:
    data, res = _body(obj)
    meta = data.setdefault("metadata", {})
    meta.pop("managedFields", None)  # kube rejects apply bodies carrying them (e.g. a re-applied read)
    answer = await _send(client, "patch", res, meta.get("name") or "", meta.get("namespace"), data,
                         _patch_params(field_manager, force), PatchType.APPLY.value)
    if answer is not UNSENT:
        return answer
    return await cast(Any, client).apply(res.from_dict(data), field_manager=field_manager, force=force,
                                         namespace=meta.get("namespace"))


async def create(client: AsyncClient, obj: T, *, field_manager: str | None = None) -> T:
    """POST `obj` (a model or a lightkube object); returns what the server stored, as the caller's type."""
    return _back(type(obj), await _store(client, obj, "post", field_manager))


async def replace(client: AsyncClient, obj: T, *, field_manager: str | None = None) -> T:
    """PUT `obj` (conditional on its resourceVersion, when it has one); returns what the server stored."""
    return _back(type(obj), await _store(client, obj, "put", field_manager))


async def _store(client: AsyncClient, obj: Any, method: str, field_manager: str | None) -> Any:
    data, res = _body(obj)
    name, namespace = _name_ns_of(data)
    answer = await _send(client, method, res, name, namespace, data,
                         {"fieldManager": field_manager} if field_manager else {})
    if answer is not UNSENT:
        return answer
    call = cast(Any, client).create if method == "post" else cast(Any, client).replace
    return await call(res.from_dict(data), field_manager=field_manager)


async def merge_patch(client: AsyncClient, res: Any, name: str, body: dict[str, Any], *, field_manager: str,
                      namespace: str | None = None) -> bool:
    """JSON merge patch of `res` (a resource or its `.Status`); a resourceVersion in `body` makes it
    conditional (409 raises). An object deleted meanwhile is not an error: returns False."""
    try:
        await cast(Any, client).patch(res, name, body, namespace=namespace, patch_type=PatchType.MERGE,
                                      field_manager=field_manager)
    except ApiError as err:
        if not is_not_found(err):
            raise
        return False
    return True


async def patch_status(
    client: AsyncClient,
    obj: T,
    *,
    field_manager: str,
    force: bool = True,
    patch_type: PatchType = PatchType.APPLY,
) -> T:
    """Write `obj`'s status through the status subresource; returns the updated object.

    Default is server-side apply (forced: status belongs to its controller), so conditions,
    a list keyed by type, merge with other managers' conditions. `PatchType.MERGE` replaces
    lists wholesale instead.
    """
    return _back(type(obj), await _patch_status(client, obj, field_manager, force, patch_type))


async def patch_status_quiet(client: AsyncClient, obj: Any, *, field_manager: str, force: bool = True,
                             patch_type: PatchType = PatchType.APPLY) -> None:
    """`patch_status` for a caller that drops the answer: the stored object is not decoded into a model."""
    with answer_unread():
        await _patch_status(client, obj, field_manager, force, patch_type)


async def _patch_status(client: AsyncClient, obj: Any, field_manager: str, force: bool,
                        patch_type: PatchType) -> Any:
    res = type(obj)
    if isinstance(obj, Resource):  # our models: only the status is dumped, not the whole object
        name, namespace = obj.metadata.name or "", obj.metadata.namespace
        status_model = getattr(obj, "status", None)
        data = {"apiVersion": obj.api_version, "kind": obj.kind,
                "status": status_model.to_dict() if status_model is not None else {}}
    else:
        data = obj.to_dict()  # lightkube objects
        name, namespace = _name_ns_of(data)
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    body: dict[str, Any]
    if patch_type == PatchType.APPLY:
        body = {"apiVersion": data.get("apiVersion"), "kind": data.get("kind"), "metadata": meta}
        if not body["apiVersion"]:  # lightkube models read back may lack them; the resource knows
            where = _where(_lk_class(res))
            body["apiVersion"], body["kind"] = where.api_version, where.kind
        body["status"] = data.get("status") or {}
    else:
        body = {"status": data.get("status") or {}}
    status = _lk_class(res).Status
    answer = await _send(client, "patch", status, name, namespace, body,
                         _patch_params(field_manager, force and patch_type == PatchType.APPLY), patch_type.value)
    if answer is not UNSENT:
        return answer
    return await cast(Any, client).patch(status, name, body, namespace=namespace,
                                         patch_type=patch_type, field_manager=field_manager, force=force)


@overload
async def create_or_update(
    client: AsyncClient,
    res: type[T],
    name: str,
    mutate: Callable[[T | None], T],
    *,
    namespace: str | None = None,
    retries: int = DEFAULT_CONFLICT_RETRIES,
    field_manager: str | None = None,
) -> T: ...


@overload
async def create_or_update(
    client: AsyncClient,
    res: type[T],
    name: str,
    mutate: Callable[[T | None], T | None],
    *,
    namespace: str | None = None,
    retries: int = DEFAULT_CONFLICT_RETRIES,
    field_manager: str | None = None,
) -> T | None: ...


async def create_or_update(
    client: AsyncClient,
    res: type[T],
    name: str,
    mutate: Callable[[T | None], T | None],
    *,
    namespace: str | None = None,
    retries: int = DEFAULT_CONFLICT_RETRIES,
    field_manager: str | None = None,
) -> T | None:
    """Read-modify-write with optimistic concurrency: the level-triggered way to change an object
    several writers share (e.g. the aggregated ServiceImport).

    `mutate(current)` gets a private copy of the stored object (None when absent) and returns the
    desired object, or None for "leave it (don't create it)". Creates when absent, replaces (PUT
    with the read resourceVersion) when different, skips the write when equal. A 409 (someone
    else wrote first, or created it first) re-reads and calls `mutate` again, up to `retries`
    times. Status is not written this way for kinds with a status subresource: use patch_status.
    Returns the stored object (None if absent and mutate declined).
    """
    lk_res = _lk_class(res)
    for attempt in range(retries + 1):
        current = await get_or_none(client, res, name, namespace=namespace)
        desired = mutate(copy.deepcopy(current))
        if desired is None:
            return current
        data = cast(Any, desired).to_dict()
        meta = data.setdefault("metadata", {})
        meta["name"] = name
        if namespace is not None:
            meta["namespace"] = namespace
        try:
            if current is None:
                meta.pop("resourceVersion", None)
                lk = await cast(Any, client).create(
                    lk_res.from_dict(data), namespace=namespace, field_manager=field_manager
                )
                return _back(res, lk)
            stored = cast(Any, current).to_dict()
            if data == stored:
                return current
            meta["resourceVersion"] = stored["metadata"].get("resourceVersion")
            lk = await cast(Any, client).replace(
                lk_res.from_dict(data), namespace=namespace, field_manager=field_manager
            )
            return _back(res, lk)
        except ApiError as err:
            if not is_conflict(err) or attempt == retries:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def ensure_deleted(
    client: AsyncClient,
    res: type[Any],
    name: str,
    *,
    namespace: str | None = None,
    wait: bool = False,
) -> bool:
    """Delete if present; a 404 is success. Returns whether this call deleted something.

    With `wait`, return only once the object is gone (finalizers done); bound it with
    `asyncio.timeout` if needed.
    """
    lk_res = _lk_class(res)
    try:
        await cast(Any, client).delete(lk_res, name, namespace=namespace)
    except ApiError as err:
        if not is_not_found(err):
            raise
        return False
    if wait:
        await wait_deleted(client, lk_res, name, namespace=namespace)
    return True


async def wait_deleted(
    client: AsyncClient, res: type[Any], name: str, *, namespace: str | None = None
) -> None:
    """Until the object does not exist: read it, then watch from that resourceVersion (no race)."""
    current = await get_or_none(client, _lk_class(res), name, namespace=namespace)
    if current is None:
        return
    rv = current.metadata.resourceVersion
    watch = cast(Any, client).watch(
        _lk_class(res), namespace=namespace, fields={"metadata.name": name}, resource_version=rv
    )
    try:
        async for event, _obj in watch:
            if event == "DELETED":
                return
    finally:
        await watch.aclose()


# --- CRDs ---------------------------------------------------------------------------------------


async def install_crds(
    client: AsyncClient,
    crds: Iterable[Mapping[str, Any]] | None = None,
    *,
    field_manager: str = "isthmus",
) -> list[str]:
    """Apply CRD manifests (default: every generated CRD) and wait until each is Established,
    i.e. served. Idempotent; returns the CRD names. Bound it with `asyncio.timeout`."""
    if crds is None:
        from isthmus.api.crdgen import all_crds

        crds = all_crds()
    names = []
    for manifest in crds:
        crd = cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(dict(manifest)))
        await client.apply(crd, field_manager=field_manager, force=True)
        names.append(str(manifest["metadata"]["name"]))
    for name in names:
        await wait_established(client, name)
    return names


async def wait_established(client: AsyncClient, name: str) -> None:
    """Until the CRD's Established condition is True (its resource is being served)."""
    current = await client.get(CustomResourceDefinition, name)
    if _established(current):
        return
    await client.wait(CustomResourceDefinition, name, for_conditions=["Established"])


def _established(crd: CustomResourceDefinition) -> bool:
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def describe_error(err: BaseException) -> str:
    """An exception as users should read it: its text, or its type when the text is empty.

    Timeouts in httpx and asyncio carry no text at all (`ReadTimeout: ` is not a reason).
    """
    text = str(err).strip()
    name = type(err).__name__
    if not text:
        return name
    return text if name in text else f"{name}: {text}"


def is_namespace_terminating(err: BaseException) -> bool:
    """403 on create because the namespace is being deleted (kube's NamespaceLifecycle admission)."""
    if status_code(err) != 403:
        return False
    status = getattr(err, "status", None)
    details = getattr(status, "details", None)
    causes = getattr(details, "causes", None) or []
    if any(getattr(c, "reason", None) == "NamespaceTerminating" for c in causes):
        return True
    return "being terminated" in (getattr(status, "message", None) or "")
