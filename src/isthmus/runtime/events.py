"""Kubernetes Events (core/v1) about our objects, aggregated like client-go's recorder.

The first occurrence of (object, type, reason, message) creates an Event named
``<object name>.<hex nanoseconds>``; each repeat patches that Event's ``count`` and
``lastTimestamp`` instead of creating another, so a hot retry loop leaves one Event with a
high count, not thousands. If the Event was deleted meanwhile (404), a new one is created
carrying the running count. Memory of recent events is an LRU of ``max_tracked`` entries.

Recording never fails the caller: :meth:`EventRecorder.event` only queues (bounded; drops
with a log line when full) and a background task writes; :meth:`EventRecorder.emit` awaits
the write but logs instead of raising.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.core import resource as lkr
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from isthmus.runtime import metrics
from isthmus.runtime.objects import object_name, object_namespace, object_resource_version, object_uid

__all__ = ["NORMAL", "WARNING", "EventRecorder", "container_field_path", "object_reference"]

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
DROP_LOG_SECONDS = 10.0
"""At most one warning this often about Events dropped because the buffer was full."""


def object_reference(obj: Any, field_path: str | None = None) -> ObjectReference:
    """ObjectReference to ``obj``; apiVersion and kind come from its lightkube class (list items lack
    them) or, for a dict (``to_dict()`` of a cached object), from its own fields. ``field_path``
    names a part of it, as the kubelet's ``spec.containers{name}`` for a container's Events."""
    if isinstance(obj, Mapping):
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
    else:
        try:
            rd = lkr.api_info(type(obj)).resource
            api_version, kind = rd.api_version, rd.kind
        except AttributeError:
            api_version, kind = getattr(obj, "apiVersion", None), getattr(obj, "kind", None)
    return ObjectReference(
        apiVersion=api_version,
        kind=kind,
        name=object_name(obj),
        namespace=object_namespace(obj),
        uid=object_uid(obj),
        resourceVersion=object_resource_version(obj),
        fieldPath=field_path,
    )


def container_field_path(container: str, *, init: bool = False) -> str:
    """The kubelet's fieldPath of a container's Events (``spec.containers{web}``)."""
    return f"spec.{'initContainers' if init else 'containers'}{{{container}}}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: datetime


_Key = tuple[str | None, str | None, str, str | None, str | None, str | None, str, str, str]
_Pending = tuple[Any, str, str, str, str | None]
_MACHINE = object()
"""``host`` left out: the machine's name, as before ``host`` could be given."""


class EventRecorder:
    """Writes Events for ``component`` (shown as the Event's source).

    ``host`` is the Event's ``source.host``: by default this machine's name; the kubelet's
    recorder gives its node's name, kube's controllers none (``""``: left out, as kube's are).
    :meth:`child` makes a recorder for another component (kube-lite's kubelet and controllers
    each report under kube's name) that this one's :meth:`flush` and :meth:`aclose` include."""

    def __init__(
        self,
        client: AsyncClient,
        component: str,
        *,
        instance: str | None = None,
        host: Any = _MACHINE,
        max_tracked: int = 4096,
        buffer: int = 1000,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance or socket.gethostname()
        self.host: str | None = self.instance if host is _MACHINE else (str(host) if host else None)
        self.max_tracked = max_tracked
        self._buffer = buffer
        self._clock = clock
        self._seen: OrderedDict[_Key, _Seen] = OrderedDict()
        self._lock = asyncio.Lock()
        self._pending: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=buffer)
        self._task: asyncio.Task[None] | None = None
        self._dropped = 0  # since the last warning about it
        self._dropped_logged = -DROP_LOG_SECONDS
        self._children: dict[tuple[str, str | None, str], EventRecorder] = {}

    def child(self, component: str, *, host: str | None = None, instance: str | None = None) -> EventRecorder:
        """The recorder of ``component`` (one per component, host and instance: asking twice gives
        the same one, so its aggregation of repeats holds), written and closed with this one.
        ``reportingInstance`` is ``instance``, else ``host``, else left out — client-go's legacy
        recorder reports ``source.host`` there, which kube's controllers leave empty."""
        key = (component, host, instance if instance is not None else (host or ""))
        rec = self._children.get(key)
        if rec is None:
            rec = EventRecorder(
                self.client, component, instance=key[2] or "-", host=host or "", max_tracked=self.max_tracked,
                buffer=self._buffer, clock=self._clock,
            )
            rec.instance = key[2]
            self._children[key] = rec
        return rec

    # ---- recording ------------------------------------------------------------------------

    def event(self, obj: Any, type: str, reason: str, message: str, *, field_path: str | None = None) -> None:
        """Record an Event in the background (call from within the event loop)."""
        try:
            self._pending.put_nowait((obj, type, reason, message, field_path))
        except asyncio.QueueFull:
            # client-go drops too when its queue is full; one line per burst, not per Event (at
            # 10,000 exported services a line each was 1 % of the discovery agent's CPU).
            metrics.EVENTS_EMITTED.labels("dropped").inc()
            self._dropped += 1
            now = time.monotonic()
            if now - self._dropped_logged >= DROP_LOG_SECONDS:
                log.warning("event buffer full: %d event(s) dropped (isthmus_events_total{outcome=\"dropped\"})",
                            self._dropped, extra={"reason": reason})
                self._dropped, self._dropped_logged = 0, now
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="event recorder")

    def normal(self, obj: Any, reason: str, message: str, *, field_path: str | None = None) -> None:
        self.event(obj, NORMAL, reason, message, field_path=field_path)

    def warning(self, obj: Any, reason: str, message: str, *, field_path: str | None = None) -> None:
        self.event(obj, WARNING, reason, message, field_path=field_path)

    async def emit(self, obj: Any, type: str, reason: str, message: str, *, field_path: str | None = None) -> None:
        """Write the Event now (create or aggregate). Errors are logged, not raised."""
        try:
            await self._write(obj, type, reason, message, field_path)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            metrics.EVENTS_EMITTED.labels("failed").inc()
            log.warning(
                "could not write event", extra={"reason": reason, "error": str(e) or e.__class__.__name__}
            )

    async def flush(self) -> None:
        """Wait until every queued event has been written (or failed), this recorder's children's too."""
        await self._pending.join()
        for rec in list(self._children.values()):
            await rec.flush()

    async def aclose(self) -> None:
        """Flush, then stop the background writer (and the children's)."""
        for rec in list(self._children.values()):
            await rec.aclose()
        if self._task is not None:
            await self.flush()
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _drain(self) -> None:
        while True:
            obj, type_, reason, message, field_path = await self._pending.get()
            try:
                await self.emit(obj, type_, reason, message, field_path=field_path)
            finally:
                self._pending.task_done()

    # ---- writing --------------------------------------------------------------------------

    async def _write(self, obj: Any, type_: str, reason: str, message: str, field_path: str | None = None) -> None:
        ref = object_reference(obj, field_path)
        ns = ref.namespace or "default"  # client-go's home for events about cluster-scoped objects
        # client-go's event key includes the uid: a Pod made again under its old name (a
        # StatefulSet's) gets Events of its own, not the previous one's count.
        key: _Key = (ref.apiVersion, ref.kind, ref.name or "", ref.namespace, ref.uid, field_path, type_, reason,
                     message)
        now = self._clock()
        async with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                seen.count += 1
                self._seen.move_to_end(key)
                try:
                    await self.client.patch(
                        Event,
                        seen.name,
                        {"count": seen.count, "lastTimestamp": _fmt_time(now)},
                        namespace=seen.namespace,
                        patch_type=PatchType.MERGE,
                    )
                    metrics.EVENTS_EMITTED.labels("aggregated").inc()
                    return
                except ApiError as e:
                    if e.status.code != 404:
                        raise
                    # Deleted (expired) meanwhile: start a new Event carrying the running count.
                    count, first = seen.count, seen.first
            else:
                count, first = 1, now
            name = f"{ref.name}.{time.time_ns():x}"
            ev = Event(
                metadata=ObjectMeta(name=name, namespace=ns),
                involvedObject=ref,
                type=type_,
                reason=reason,
                message=message,
                count=count,
                firstTimestamp=first.replace(microsecond=0),
                lastTimestamp=now.replace(microsecond=0),
                source=EventSource(component=self.component, host=self.host),
                reportingComponent=self.component,
                reportingInstance=self.instance or None,
            )
            await self.client.create(ev)
            metrics.EVENTS_EMITTED.labels("created").inc()
            self._seen[key] = _Seen(name=name, namespace=ns, count=count, first=first)
            self._seen.move_to_end(key)
            while len(self._seen) > self.max_tracked:
                self._seen.popitem(last=False)
