"""Informers: list-then-watch into an indexed cache, with event handlers.

The cache stores the objects lightkube decodes: typed models (msgspec structs) for
built-in kinds, ``Generic`` dicts for ``lightkube.generic_resource`` classes (our CRDs).
Cached objects are shared by every reader: treat them as read-only, copy before editing.

The loop, like client-go's reflector:

1. list (paginated) and replace the cache, emitting add/update/delete for the differences;
2. watch from the list's resourceVersion with bookmarks, applying events as they come;
3. a cleanly closed watch (server timeout) is resumed from the last resourceVersion;
4. a 410 Gone (history compacted) relists at once; any other failure (dropped connection,
   server down, 5xx) relists after an exponential backoff with jitter.

Objects that vanished while we were not watching are reported to ``on_delete`` with their
last known state when the relist notices.

The watch uses lightkube's request building and decoding but its own stream loop, because
lightkube's ``watch`` does not ask for bookmarks, retries forever on clean closes, and
reports a 410 differently depending on whether it is an HTTP status or an ERROR event.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import gc
import logging
import random
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx2
import msgspec
from lightkube import AsyncClient
from lightkube.core import decoders
from lightkube.core import resource as lkr
from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import ALL_NS
from lightkube.core.selector import build_selector
from lightkube.resources.core_v1 import Service

from isthmus.runtime import metrics
from isthmus.runtime.objects import object_key, object_labels, object_namespace, object_resource_version

__all__ = [
    "NAMESPACE_INDEX",
    "Cache",
    "Handlers",
    "IndexFunc",
    "Informer",
    "SharedInformerFactory",
    "WatchError",
    "label_index",
    "resource_name",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
IndexFunc = Callable[[Any], Iterable[str]]
"""Maps an object to the index values it is filed under (none, one or several)."""

NAMESPACE_INDEX = "namespace"


def _namespace_index(obj: Any) -> Iterable[str]:
    ns = object_namespace(obj)
    return (ns,) if ns else ()


def label_index(label: str) -> IndexFunc:
    """Index function filing an object under the value of its ``label`` (if set)."""

    def index(obj: Any) -> Iterable[str]:
        value = object_labels(obj).get(label)
        return (value,) if value is not None else ()

    return index


def resource_name(resource: type[Any]) -> str:
    """``plural.group/version`` of a lightkube resource class, for logs and metric labels."""
    info = lkr.api_info(resource)
    rd = info.resource
    return f"{info.plural}.{rd.group}/{rd.version}" if rd.group else f"{info.plural}/{rd.version}"


class Cache(Generic[T]):
    """Objects by key (``namespace/name`` or ``name``), plus secondary indexes.

    Always has the ``namespace`` index. Written only by its informer.
    """

    def __init__(self) -> None:
        self._items: dict[str, T] = {}
        self._indexers: dict[str, IndexFunc] = {}
        # An index value filed under one key holds that key itself, a set only from the second on:
        # most values (a service's import, its kube slice) name one object, and a one-key set is
        # 216 bytes (4 MB of the discovery agent's at 10,000 services).
        self._indices: dict[str, dict[str, str | set[str]]] = {}
        self.add_indexer(NAMESPACE_INDEX, _namespace_index)

    # ---- reading --------------------------------------------------------------------------

    def get(self, key: str) -> T | None:
        return self._items.get(key)

    def get_by_name(self, name: str, namespace: str | None = None) -> T | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> builtins.list[T]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def index_keys(self, index: str, value: str) -> builtins.list[str]:
        """Keys of the objects filed under ``value`` in ``index`` (KeyError if no such index)."""
        keys = self._indices[index].get(value)
        if keys is None:
            return []
        return [keys] if isinstance(keys, str) else sorted(keys)

    def by_index(self, index: str, value: str) -> builtins.list[T]:
        items = self._items
        return [items[k] for k in self.index_keys(index, value)]

    def list_namespace(self, namespace: str) -> builtins.list[T]:
        return self.by_index(NAMESPACE_INDEX, namespace)

    def index_values(self, index: str) -> builtins.list[str]:
        return sorted(v for v, keys in self._indices[index].items() if keys)

    # ---- indexing -------------------------------------------------------------------------

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        """Add an index (built over current contents at once). Re-adding a name is an error."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        idx: dict[str, str | set[str]] = {}
        self._indices[name] = idx
        for key, obj in self._items.items():
            for v in _index_values(fn, obj):
                _file(idx, v, key)

    # ---- writing (informer only) ----------------------------------------------------------

    def _unindex(self, key: str, obj: T) -> None:
        for name, fn in self._indexers.items():
            idx = self._indices[name]
            for v in _index_values(fn, obj):
                keys = idx.get(v)
                if keys is None:
                    continue
                if isinstance(keys, str):
                    if keys == key:
                        del idx[v]
                    continue
                keys.discard(key)
                if len(keys) == 1:
                    idx[v] = next(iter(keys))
                elif not keys:
                    del idx[v]

    def _index(self, key: str, obj: T) -> None:
        for name, fn in self._indexers.items():
            idx = self._indices[name]
            try:  # _index_values, without its call
                values = tuple(fn(obj))
            except Exception:
                log.exception("index function raised; object not indexed", extra={"key": object_key(obj)})
                continue
            for v in values:
                if v not in idx:
                    idx[v] = key  # _file's first case (most values name one object), without its call
                else:
                    _file(idx, v, key)

    def _put(self, key: str, obj: T) -> T | None:
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        self._index(key, obj)
        return old

    def _remove(self, key: str) -> T | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old


def _file(idx: dict[str, str | set[str]], value: str, key: str) -> None:
    keys = idx.get(value)
    if keys is None:
        idx[value] = key
    elif isinstance(keys, str):
        if keys != key:
            idx[value] = {keys, key}
    else:
        keys.add(key)


def _index_values(fn: IndexFunc, obj: Any) -> Iterable[str]:
    try:
        return tuple(fn(obj))
    except Exception:
        log.exception("index function raised; object not indexed", extra={"key": object_key(obj)})
        return ()


@dataclass(eq=False)
class Handlers:
    """Callbacks an informer calls, in order, from its own task. Keep them quick (enqueue a key)."""

    on_add: Callable[[Any], None] | None = None
    on_update: Callable[[Any, Any], None] | None = None
    on_delete: Callable[[Any], None] | None = None


class WatchGone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


def _compact(obj: Any, drop: frozenset[str] = frozenset()) -> None:
    """Compact an object before it is cached (client-go's transform advice). Drop managedFields: no
    controller here reads them (an informer that does passes keep_managed_fields), and on objects
    written by server-side apply they are often the larger half of the object. `drop`: further
    metadata fields no reader of this informer needs (`drop_metadata`). Objects decoded as
    dicts (our CRDs) also get their strings interned: labels, kinds, namespaces, condition reasons
    repeat across thousands of objects (an ExportedService: 3.1 KB cached, 1.8 KB interned); an
    object's own name, uid, resourceVersion and times do not, and would only grow the interpreter's
    table of interned strings."""
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            # Rebuilt rather than popped: a dict keeps its table size when keys leave it.
            kept: dict[str, Any] = {}
            for k, v in meta.items():
                if k == "managedFields" or k in drop:
                    continue
                if k not in _OWN_METADATA:
                    if type(v) is str:
                        v = _intern(v)
                    elif type(v) is dict or type(v) is list:
                        _intern_strings(v)
                kept[k] = v
            obj["metadata"] = kept
        for k, v in obj.items():
            if type(v) is str:
                obj[k] = _intern(v)
            elif k != "metadata" and (type(v) is dict or type(v) is list):
                _intern_strings(v)
        return
    meta = getattr(obj, "metadata", None)
    if meta is None:
        return
    if getattr(meta, "managedFields", None) is not None:
        meta.managedFields = None
    for field in drop:
        setattr(meta, field, None)
    # Typed objects (msgspec structs): a walk of every field would cost more than it saves; intern
    # what repeats: metadata, and an EndpointSlice's addressType and ports (2.4 -> 1.6 KB a slice).
    if meta.labels:
        meta.labels = {_intern(k): _intern(v) for k, v in meta.labels.items()}
    if meta.annotations:
        meta.annotations = {_intern(k): _intern(v) for k, v in meta.annotations.items()}
    if meta.namespace:
        meta.namespace = _intern(meta.namespace)
    for ref in meta.ownerReferences or ():  # one owner (a Cluster, an import) owns many objects
        if ref.apiVersion and ref.kind:
            ref.apiVersion, ref.kind = _intern(ref.apiVersion), _intern(ref.kind)
        if ref.uid:
            ref.uid = _intern(ref.uid)
    if isinstance(getattr(obj, "addressType", None), str):
        obj.addressType = _intern(obj.addressType)
        if obj.ports:
            obj.ports = _share(("slice-ports", *((p.name, p.port, p.protocol, p.appProtocol) for p in obj.ports)),
                               obj.ports)
        for ep in obj.endpoints or ():
            if (c := ep.conditions) is not None:
                ep.conditions = _share(("conditions", c.ready, c.serving, c.terminating), c)
    elif isinstance(obj, Service):
        if (spec := obj.spec) is not None:
            if spec.ports:
                spec.ports = _share(("service-ports", *((p.name, p.port, p.protocol, p.targetPort, p.nodePort,
                                                          p.appProtocol) for p in spec.ports)), spec.ports)
            if spec.ipFamilies:
                spec.ipFamilies = _share(("ip-families", *spec.ipFamilies), spec.ipFamilies)
        status, lb = obj.status, obj.status.loadBalancer if obj.status is not None else None
        if status is not None and not status.conditions and not (lb and lb.ingress):  # no address: most Services
            obj.status = _share(("service-status", status.conditions is None, lb is None,
                                 lb is not None and lb.ingress is None), status)


_intern = sys.intern
_OWN_METADATA = frozenset({"name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"})
"""Metadata that is each object's own: never worth interning."""

_SHARED: dict[tuple[Any, ...], Any] = {}
_SHARED_MAX = 4096


def _share(key: tuple[Any, ...], value: T) -> T:
    """One instance of a small value that thousands of cached objects repeat (a service's ports, an
    endpoint's conditions, an import's cluster list): cached objects are read-only, so they may share
    it. Bounded: values that do not repeat only cost a table that is emptied when full."""
    hit = _SHARED.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]  # (typing.cast is a Python call: this runs per cached list)
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    _SHARED[key] = value
    return value


def _intern_strings(node: dict[str, Any] | list[Any]) -> None:
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        if type(v) is str:
            node[k] = _intern(v)  # type: ignore[index]  # a str key for dicts, an int for lists
        elif type(v) is dict:
            _intern_strings(v)
        elif type(v) is list:
            _intern_strings(v)
            if (key := _small_records_key(v)) is not None:
                node[k] = _share(key, v)  # type: ignore[index]


def _small_records_key(items: list[Any]) -> tuple[Any, ...] | None:
    """A key for a list of small flat records (ports, `{"cluster": …}` entries), None for anything
    else: conditions carry their own transition times and rarely repeat."""
    if len(items) > 8:
        return None
    key: list[Any] = ["records"]
    for item in items:
        if type(item) is not dict or len(item) > 4:
            return None
        for k, v in item.items():
            if type(v) not in (str, int, bool):
                return None
            key.append((k, type(v), v))  # True == 1, but not as JSON
        key.append(None)
    return tuple(key)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Take the outcome of a request nobody waits for any more, so it is not logged as lost."""
    if not fut.cancelled():
        fut.exception()


class WatchError(Exception):
    """The server refused or broke a watch."""


class _BookmarkMeta(msgspec.Struct):
    resourceVersion: str | None = None


class _Bookmark(msgspec.Struct):
    metadata: _BookmarkMeta | None = None


class _ListingGC:
    """The cyclic GC paused while lists are under way in this process, and what they brought in
    frozen once the last one ends.

    A list brings thousands of long-lived objects at once (140,000 for an agent at 10,000 services).
    The GC would walk them over and over while they arrive (a full collection at each quarter the
    heap grows) and in every full collection afterwards, though they hold no cycles: an agent's
    restart at 10,000 services took 11.8 s, 8.1 s with the GC off. So, as the apiserver pauses it
    while it loads its store: paused while any list runs, then everything alive is moved to the
    permanent generation (gc.freeze), which the GC no longer walks; refcounting still frees a cached
    object its replacement drops. The price: a reference cycle that became garbage during a list is
    never collected (a few small ones, once per list)."""

    def __init__(self) -> None:
        self._lists = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        if self._lists == 0:
            self._was_enabled = gc.isenabled()
            gc.disable()
        self._lists += 1

    def __exit__(self, *exc: object) -> None:
        self._lists -= 1
        if self._lists == 0:
            gc.freeze()
            if self._was_enabled:
                gc.enable()


_LISTING_GC = _ListingGC()


class Informer(Generic[T]):
    """List-then-watch one resource type in one namespace (``None``: all, or cluster-scoped).

    ``await informer.wait_synced()`` after :meth:`start` before trusting the cache.
    Prefer :meth:`SharedInformerFactory.informer`, which shares one informer per
    (resource, namespace, selectors) among every controller of the process.
    """

    def __init__(
        self,
        client: AsyncClient,
        resource: type[T],
        namespace: str | None = None,
        *,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        resync_period: float | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        keep_managed_fields: bool = False,
        drop_metadata: Iterable[str] = (),
    ) -> None:
        self.client = client
        self.keep_managed_fields = keep_managed_fields
        self.drop_metadata = frozenset(drop_metadata)
        """Metadata fields (as the API spells them: `uid`, `ownerReferences`) dropped before caching:
        at 10,000 services an agent caches 150,000 objects, and most never need them."""
        self.resource = resource
        self.namespaced = issubclass(resource, lkr.NamespacedResource)
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{resource.__name__} is cluster-scoped; it has no namespace")
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.resync_period = resync_period
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.cache: Cache[T] = Cache()
        self.name = resource_name(resource)
        self.relists = 0  # lists after the initial one (410s and errors)
        self._handlers: list[Handlers] = []
        self._synced = asyncio.Event()
        self._rv: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._extra_transform: Callable[[Any], None] | None = None
        self._failures = 0
        self.last_error: str | None = None
        """Why the last list or watch failed (None once a list succeeds): for status reporting."""
        ns_label = namespace or ""
        self._m_relists = {
            r: metrics.INFORMER_RELISTS.labels(self.name, ns_label, r)
            for r in ("initial", "expired", "error")
        }
        self._m_objects = metrics.INFORMER_OBJECTS.labels(self.name, ns_label)
        self._m_events = {
            t: metrics.INFORMER_EVENTS.labels(self.name, ns_label, t)
            for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
        }

    # ---- public API -----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once the first list has been applied to the cache and handlers."""
        return self._synced.is_set()

    async def wait_synced(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait for the first list; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._rv

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        self.cache.add_indexer(name, fn)

    def add_handler(
        self,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
    ) -> Handlers:
        """Register callbacks; if the cache is already filled, ``on_add`` gets every cached object now."""
        h = Handlers(on_add, on_update, on_delete)
        self._handlers.append(h)
        if on_add is not None:
            for obj in self.cache.list():
                _call(on_add, obj)
        return h

    def remove_handler(self, handlers: Handlers) -> None:
        self._handlers = [h for h in self._handlers if h is not handlers]

    def start(self) -> None:
        """Start the list/watch task on the running loop (no-op if running)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"informer {self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def run(self) -> None:
        """List and watch until cancelled. Never returns otherwise; never raises but CancelledError."""
        resync = None
        if self.resync_period:
            resync = asyncio.get_running_loop().create_task(self._resync_loop(self.resync_period))
        try:
            await self._loop()
        finally:
            if resync is not None:
                resync.cancel()

    # ---- the reflector loop ---------------------------------------------------------------

    async def _loop(self) -> None:
        reason = "initial"
        need_list = True
        gone_in_a_row = 0
        while True:
            delay = 0.0
            try:
                if need_list:
                    await self._list(reason)
                    need_list = False
                healthy = await self._watch()
                gone_in_a_row = 0
                if healthy:
                    self._failures = 0
                else:  # closed at once with nothing said: do not spin
                    self._failures += 1
                    delay = self._backoff()
            except asyncio.CancelledError:
                raise
            except WatchGone:
                log.info("watch expired (410); relisting", extra={"resource": self.name, "rv": self._rv})
                reason, need_list = "expired", True
                gone_in_a_row += 1
                if gone_in_a_row > 1:  # a relist should have cured it; back off if it did not
                    self._failures += 1
                    delay = self._backoff()
            except Exception as e:
                self._failures += 1
                reason, need_list = "error", True
                delay = self._backoff()
                self.last_error = _describe(e)
                log.warning(
                    "list/watch failed; relisting after backoff",
                    extra={"resource": self.name, "error": _describe(e), "retry_in": round(delay, 3)},
                )
            if delay > 0:
                await asyncio.sleep(delay)

    def _backoff(self) -> float:
        d = min(self.backoff_cap, self.backoff_base * 2 ** min(self._failures - 1, 20))
        return float(d * random.uniform(0.8, 1.2))

    def _selectors(self) -> dict[str, str | None]:
        """The label and field selectors a list and a watch both send (None: not sent)."""
        return {
            "labelSelector": build_selector(self.labels) if self.labels else None,
            "fieldSelector": build_selector(self.fields, for_fields=True) if self.fields else None,
        }

    def _ns_arg(self) -> str | None:
        if not self.namespaced:
            return None
        return self.namespace if self.namespace is not None else ALL_NS

    async def _list(self, reason: str) -> None:
        with _LISTING_GC:
            await self._list_paused(reason)

    async def _list_paused(self, reason: str) -> None:
        fresh: dict[str, T] = {}
        rv: str | None = None
        async with contextlib.aclosing(self._pages()) as pages:
            async for page_rv, page in pages:
                for obj in page:
                    self._transform(obj)
                    fresh[object_key(obj)] = obj
                rv = page_rv  # the last page's is the list's
        self._m_relists[reason].inc()
        if reason != "initial":
            self.relists += 1
        self._replace(fresh)
        self._rv = rv
        self.last_error = None
        log.debug("listed", extra={"resource": self.name, "count": len(fresh), "rv": rv, "reason": reason})
        self._synced.set()

    async def _pages(self) -> AsyncGenerator[tuple[str | None, list[Any]], None]:
        """The list's pages (resourceVersion, items), as lightkube's pager gives them, but each next
        page is asked for as soon as the current one is decoded: the server makes it while this
        process caches the current one (a discovery agent restarted at 10,000 services waited
        0.46 s on average beyond its own CPU for its lists, 0.35 s with this). One request ahead at
        most, as the continue token of each page is in the page before."""
        gc: Any = self.client._client  # lightkube internals: request building and decoding
        br = gc.prepare_request("list", res=self.resource, namespace=self._ns_arg(),
                                params={"limit": self.page_size, **self._selectors()})
        pending: asyncio.Future[Any] | None = asyncio.ensure_future(gc.send(gc.build_adapter_request(br)))
        try:
            while pending is not None:
                resp = await pending
                pending = None
                more, rv, items = gc.handle_response("list", resp, br)  # sets the next continue token
                if more:
                    pending = asyncio.ensure_future(gc.send(gc.build_adapter_request(br)))
                    await asyncio.sleep(0)  # its first step sends it: caching a page never yields
                yield rv, items
        finally:
            if pending is not None:  # the list was given up: its next page with it
                pending.cancel()
                pending.add_done_callback(_retrieve)

    def set_transform(self, fn: Callable[[Any], None]) -> None:
        """Change each object in place once more before it is cached, after compaction (client-go's
        SetTransform). The informer is shared: one transform, set before it starts, that changes
        nothing its readers see (the agent makes equal values of two caches one instance)."""
        if self._extra_transform is not None and self._extra_transform != fn:
            raise ValueError(f"informer {self.name} already has a transform")
        if self._task is not None:
            raise RuntimeError(f"informer {self.name} has started: set its transform before")
        self._extra_transform = fn

    def _transform(self, obj: Any) -> None:
        if not self.keep_managed_fields:
            _compact(obj, self.drop_metadata)
        if self._extra_transform is not None:
            self._extra_transform(obj)

    def _replace(self, fresh: dict[str, T]) -> None:
        cache = self.cache
        deleted = [(k, old) for k, old in cache._items.items() if k not in fresh]
        for k, _ in deleted:
            cache._remove(k)
        for k, obj in fresh.items():
            old = cache._put(k, obj)
            if old is None:
                self._dispatch_add(obj)
            elif object_resource_version(old) != object_resource_version(obj):
                self._dispatch_update(old, obj)
        for _, old in deleted:
            self._dispatch_delete(old)
        self._m_objects.set(len(cache))

    async def _watch(self) -> bool:
        """One watch request. Returns True if it was healthy, False if it closed at once, empty."""
        gc: Any = self.client._client  # lightkube internals: request building and decoding
        params: dict[str, Any] = {
            "allowWatchBookmarks": "true",
            # Spread reconnects like client-go: timeoutSeconds in [T, 2T).
            "timeoutSeconds": str(int(self.watch_timeout * (1 + random.random()))),
            "resourceVersion": self._rv,
            **self._selectors(),
        }
        br = gc.prepare_request(
            "list", res=self.resource, namespace=self._ns_arg(), watch=True, params=params
        )
        # The server ends the watch at timeoutSeconds; the read timeout only catches a dead peer.
        br.timeout = httpx2.Timeout(10.0, read=float(self.watch_timeout) * 2 + 30)
        started = time.monotonic()
        got_event = False
        resp = await gc.send(gc.build_adapter_request(br), stream=True)
        try:
            if resp.status_code == 410:
                raise WatchGone()
            if resp.status_code >= 400:
                body = await resp.aread()
                raise WatchError(f"watch answered HTTP {resp.status_code}: {body[:300]!r}")
            async for line in _event_lines(resp.aiter_bytes()):
                self._handle_event(line)
                if not got_event:
                    got_event = True
                    self._failures = 0
        finally:
            await resp.aclose()
        return got_event or time.monotonic() - started >= 1.0

    def _handle_event(self, line: bytes) -> None:
        ev = decoders.decode_watch_event(line)
        kind = ev.type
        if kind == "ERROR":
            status = decoders.decode_status(ev.object)
            if status.code == 410:
                raise WatchGone()
            raise WatchError(f"watch ERROR event: {status.code} {status.reason}: {status.message}")
        if kind == "BOOKMARK":
            bm = msgspec.json.decode(ev.object, type=_Bookmark)
            if bm.metadata is not None and bm.metadata.resourceVersion:
                self._rv = bm.metadata.resourceVersion
            self._m_events[kind].inc()
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("unknown watch event type ignored", extra={"resource": self.name, "type": kind})
            return
        obj: T = decoders.decode_object(ev.object, self.resource)
        self._transform(obj)
        key = object_key(obj)
        rv = object_resource_version(obj)
        if rv:
            self._rv = rv
        self._m_events[kind].inc()
        if kind == "DELETED":
            old = self.cache._remove(key)
            if old is not None:
                self._m_objects.set(len(self.cache))
                self._dispatch_delete(obj)
            return
        old = self.cache._put(key, obj)
        if old is None:
            self._m_objects.set(len(self.cache))
            self._dispatch_add(obj)
        else:
            self._dispatch_update(old, obj)

    async def _resync_loop(self, period: float) -> None:
        """Periodically replay every cached object as an update, for controllers that poll outside state."""
        while True:
            await asyncio.sleep(period)
            if self.synced:
                for obj in self.cache.list():
                    self._dispatch_update(obj, obj)

    # ---- dispatch -------------------------------------------------------------------------

    def _dispatch_add(self, obj: T) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                try:  # _call, without its call: this runs for every object a list or watch brings
                    h.on_add(obj)
                except Exception:
                    log.exception("informer event handler raised")

    def _dispatch_update(self, old: T, new: T) -> None:
        for h in self._handlers:
            if h.on_update is not None:
                try:  # as in _dispatch_add
                    h.on_update(old, new)
                except Exception:
                    log.exception("informer event handler raised")

    def _dispatch_delete(self, obj: T) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                _call(h.on_delete, obj)


async def _event_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A watch stream's events, one JSON document per line, as bytes: httpx's aiter_lines would
    decode them to text and split in Python, and the decoder wants bytes again. An event larger
    than a read spans chunks: they are joined once its line ends; an unfinished last line (the
    connection dropped mid-event) is no event."""
    pending: list[bytes] = []
    async for chunk in chunks:
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk)
            chunk, pending = b"".join(pending), []
        lines = chunk.split(b"\n")
        if tail := lines.pop():
            pending.append(tail)
        for line in lines:
            if line.strip():
                yield line


def _call(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("informer event handler raised")


def _describe(e: BaseException) -> str:
    if isinstance(e, ApiError):
        return f"{e.status.code} {e.status.reason}: {e.status.message}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _selector_key(sel: dict[str, Any] | None, for_fields: bool = False) -> str:
    return build_selector(sel, for_fields=for_fields) if sel else ""


class SharedInformerFactory:
    """One informer per (resource class, namespace, selectors) for the whole process.

    ``informer()`` before or after ``start()``: informers created after start begin at once.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        resync_period: float | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
    ) -> None:
        self.client = client
        self.resync_period = resync_period
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self._informers: dict[tuple[type[Any], str | None, str, str], Informer[Any]] = {}
        self._started = False

    def informer(
        self,
        resource: type[T],
        namespace: str | None = None,
        *,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
        keep_managed_fields: bool = False,
        drop_metadata: Iterable[str] = (),
    ) -> Informer[T]:
        """The shared informer for these arguments; `keep_managed_fields` (default: stripped, see
        `_compact`) and `drop_metadata` must agree among its users."""
        key = (resource, namespace, _selector_key(labels), _selector_key(fields, True))
        inf = self._informers.get(key)
        if inf is not None and inf.keep_managed_fields != keep_managed_fields:
            raise ValueError(f"informer {inf.name} is already shared with keep_managed_fields={inf.keep_managed_fields}")
        if inf is not None and inf.drop_metadata != frozenset(drop_metadata):
            raise ValueError(f"informer {inf.name} is already shared with drop_metadata={sorted(inf.drop_metadata)}")
        if inf is None:
            inf = Informer(
                self.client,
                resource,
                namespace,
                labels=labels,
                fields=fields,
                keep_managed_fields=keep_managed_fields,
                drop_metadata=drop_metadata,
                page_size=self.page_size,
                watch_timeout=self.watch_timeout,
                resync_period=self.resync_period,
            )
            self._informers[key] = inf
            if self._started:
                inf.start()
        return inf

    @property
    def informers(self) -> list[Informer[Any]]:
        return list(self._informers.values())

    def start(self) -> None:
        self._started = True
        for inf in self._informers.values():
            inf.start()

    async def wait_synced(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until every informer created so far has synced; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                for inf in list(self._informers.values()):
                    await inf.wait_synced()
        except TimeoutError:
            return False
        return True

    @property
    def synced(self) -> bool:
        return all(inf.synced for inf in self._informers.values())

    async def stop(self) -> None:
        self._started = False
        await asyncio.gather(*(inf.stop() for inf in self._informers.values()))
