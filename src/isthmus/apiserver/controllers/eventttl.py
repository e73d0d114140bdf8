"""Events expire: kube-apiserver's --event-ttl.

kube stores every Event under an etcd lease of --event-ttl (one hour by default), renewed by each
write of the Event: an hour after its last create or update it is gone, with a DELETED watch event
and without admission or finalizers. Without it, Events (one or more per pod start, export,
leader change...) pile up for as long as the cluster runs, in memory and on disk.

Here each Event's expiry is kept beside the store: a write sets it to now + ttl; at start, a
stored Event's last write is the newest time its managedFields record (its creation time when
they record none), as a lease would have survived the restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from isthmus.apiserver.registry.table import parse_time
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

log = logging.getLogger("isthmus.apiserver")

KEY = "/events"  # core/v1 and events.k8s.io/v1 Events, one resource (kube's /registry/events)
DEFAULT_TTL = 3600.0


def last_written(obj: dict[str, Any]) -> float | None:
    """When an Event was last written, as far as the object says (epoch seconds)."""
    meta = obj.get("metadata") or {}
    times = [parse_time(e.get("time")) for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    known = [t for t in times if t is not None]
    return max(known) if known else parse_time(meta.get("creationTimestamp"))


class EventTTLController:
    write_keys = (KEY,)
    """Deletes each Event `ttl` seconds after its last write (checked every `interval` seconds)."""

    def __init__(self, storage: Store, ttl: float = DEFAULT_TTL, *, interval: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.ttl = ttl
        self.interval = interval if interval is not None else min(60.0, max(ttl / 10, 0.1))
        self.clock = clock
        self._expiry: dict[tuple[str, str], float] = {}

    def resync(self) -> None:
        """Expiries of the Events already stored (at start)."""
        now = self.clock()
        for obj in self.storage.list(KEY):
            meta = obj["metadata"]
            written = last_written(obj)
            self._expiry[(meta.get("namespace", ""), meta["name"])] = (written if written is not None else now) + self.ttl

    def on_write(self, ev: WatchEvent) -> None:
        if ev.key != KEY:
            return
        meta = ev.obj["metadata"]
        k = (meta.get("namespace", ""), meta["name"])
        if ev.type == "DELETED":
            self._expiry.pop(k, None)
        else:
            self._expiry[k] = self.clock() + self.ttl

    def expire(self) -> int:
        """Delete the Events whose time is up; returns how many went."""
        now = self.clock()
        due = [k for k, t in self._expiry.items() if t <= now]
        for ns, name in due:
            self._expiry.pop((ns, name), None)
            if self.storage.get(KEY, ns, name) is not None:
                self.storage.delete(KEY, ns, name)
        return len(due)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                gone = self.expire()
                if gone:
                    log.debug("event TTL: %d expired Events deleted", gone)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event TTL")
