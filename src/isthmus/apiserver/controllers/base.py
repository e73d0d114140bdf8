"""What the queue-driven controllers share: a work queue fed by writes, drained one item at a time."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError

log = logging.getLogger("isthmus.apiserver")


class QueueController:
    """Items (kind, arg) are handled in order; a 409 puts the item back, a 404 drops it."""

    name = "controller"

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(self, item: tuple[str, Any]) -> None:
        self._queue.put_nowait(item)

    async def handle(self, kind: str, arg: Any) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        while True:
            kind, arg = await self._queue.get()
            try:
                await self.handle(kind, arg)
            except ApiError as e:
                if e.code not in (404, 409):
                    log.warning("%s %s %s: %s", self.name, kind, arg, e.message)
                elif e.code == 409:
                    self.put((kind, arg))
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s %s %s failed", self.name, kind, arg)
