"""Watches on the store: one watcher's bounded, filtered queue of events, and the event itself.

The store (`store.py`) pushes each write's event to the watches of its resource synchronously and
replays its history to a watch that resumes; a watch that falls WATCH_QUEUE_SIZE events behind is
ended as too slow, as kube-apiserver's cacher ends a watcher whose channel is full.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]

WATCH_QUEUE_SIZE = 10_000


class WatchOwner(Protocol):
    """What a watch needs of its store: to be let go of when it ends."""

    def _unregister(self, w: Watch) -> None: ...


@dataclass(slots=True)
class WatchEvent:
    type: str  # "ADDED" | "MODIFIED" | "DELETED"
    key: str  # resource key, '<group>/<plural>'
    obj: Obj  # the object after the change (for DELETED: the last state, with the deletion's new rv)
    prev: Obj | None  # the object before (None for ADDED); lets watchers turn selector exits into DELETED
    rv: int


class Watch:
    """A live watch. Iterate it for events; `close()` ends it. Ends by itself if the consumer is too slow.

    Events are filtered (namespace, selector) when they are produced, so only relevant events
    count toward the bound. History replayed at creation is kept apart from the bound: a
    resume may legitimately replay more than a queue's worth of events.
    """

    __slots__ = (
        "_buf",
        "_closed",
        "_ended",
        "_key",
        "_match",
        "_maxsize",
        "_namespace",
        "_overflowed",
        "_replay",
        "_store",
        "_waiter",
    )

    def __init__(
        self,
        store: WatchOwner | None,
        key: str,
        namespace: str | None,
        match: Callable[[Obj], bool] | None,
        replay: list[WatchEvent],
        maxsize: int = WATCH_QUEUE_SIZE,
    ) -> None:
        self._store = store
        self._key = key
        self._namespace = namespace
        self._match = match
        self._replay: deque[WatchEvent] = deque(replay)
        self._buf: deque[WatchEvent] = deque()
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False  # no more events will be queued (buffered ones still drain)
        self._closed = False  # hard close: iteration stops now
        self._overflowed = False

    @property
    def closed(self) -> bool:
        """True once no further live events will be delivered."""
        return self._ended

    @property
    def overflowed(self) -> bool:
        """True if the watch was ended because its consumer fell behind."""
        return self._overflowed

    def _filter(self, ev: WatchEvent) -> WatchEvent | None:
        """Namespace filter plus kube's selector transitions (enter → ADDED, leave → DELETED)."""
        if self._namespace is not None and (ev.obj["metadata"].get("namespace") or "") != self._namespace:
            return None
        match = self._match
        if match is None:
            return ev
        if ev.type == "ADDED":
            return ev if match(ev.obj) else None
        if ev.type == "DELETED":
            return ev if match(ev.prev if ev.prev is not None else ev.obj) else None
        now = match(ev.obj)
        before = ev.prev is not None and match(ev.prev)
        if now and before:
            return ev
        if now:
            return WatchEvent("ADDED", ev.key, ev.obj, ev.prev, ev.rv)
        if before:
            return WatchEvent("DELETED", ev.key, ev.obj, ev.prev, ev.rv)
        return None

    def _push(self, ev: WatchEvent) -> None:
        """Called by the store on each write of this watch's resource (synchronously)."""
        if self._ended:
            return
        out = self._filter(ev)
        if out is None:
            return
        if len(self._buf) >= self._maxsize:
            # The consumer is too slow: end the stream (buffered events still drain, so the
            # client sees a gap-free prefix and re-watches from its last resourceVersion).
            self._overflowed = True
            self._end()
            return
        self._buf.append(out)
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _end(self) -> None:
        self._ended = True
        if self._store is not None:
            self._store._unregister(self)
            self._store = None
        self._wake()

    def wake(self) -> None:
        """Make a pending `wait()` return now (a consumer's own timer: timeouts, bookmarks)."""
        self._wake()

    def drain(self, limit: int = 1000) -> list[WatchEvent]:
        """The events ready now, in order, at most `limit` ([] if none): replayed history first, then
        live ones.

        A consumer that writes a whole batch at once pays one socket write per wake-up instead
        of one per event; the limit keeps a long replay from becoming one huge write."""
        out: list[WatchEvent] = []
        if self._closed:
            return out
        replay = self._replay
        while replay and len(out) < limit:
            ev = self._filter(replay.popleft())
            if ev is not None:
                out.append(ev)
        buf = self._buf
        if replay or not buf:
            return out
        if len(out) + len(buf) <= limit:
            out.extend(buf)
            buf.clear()
        else:
            while buf and len(out) < limit:
                out.append(buf.popleft())
        return out

    @property
    def ready(self) -> bool:
        """Events wait to be drained."""
        return not self._closed and bool(self._replay or self._buf)

    @property
    def done(self) -> bool:
        """Nothing more will come: closed, or ended with nothing left to drain."""
        return self._closed or (self._ended and not self._replay and not self._buf)

    async def wait(self) -> None:
        """Until an event is ready, the watch ends, or `wake()` is called (returns at once if one is ready)."""
        if self._closed or self._ended or self._replay or self._buf:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._closed:
                raise StopAsyncIteration
            while self._replay:
                ev = self._filter(self._replay.popleft())
                if ev is not None:
                    return ev
            if self._buf:
                return self._buf.popleft()
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """End the watch now; pending events are dropped."""
        self._closed = True
        self._replay.clear()
        self._buf.clear()
        self._end()

