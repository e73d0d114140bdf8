"""What the queue-driven controllers share: a work queue fed by writes (workqueue.py), drained one item at a time."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.controllers.workqueue import WorkQueue

log = logging.getLogger("isthmus.apiserver")


class QueueController:
    """Items (kind, arg) are handled in order, each once however often it was put while waiting, and
    never twice at once. A 409 retries the item after its backoff (5 ms, doubling; others go on
    meanwhile); a 404 is done; any other error is logged and the item dropped, as before."""

    name = "controller"

    def __init__(self) -> None:
        self._queue: WorkQueue[tuple[str, Any]] = WorkQueue()

    def put(self, item: tuple[str, Any]) -> None:
        self._queue.add(item)

    async def handle(self, kind: str, arg: Any) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        while True:
            item = await self._queue.get()
            kind, arg = item
            retry = False
            try:
                await self.handle(kind, arg)
            except ApiError as e:
                if e.code == 409:
                    retry = True
                elif e.code != 404:
                    log.warning("%s %s %s: %s", self.name, kind, arg, e.message)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s %s %s failed", self.name, kind, arg)
            finally:
                self._queue.done(item)
            if retry:
                self._queue.add_rate_limited(item)
            else:
                self._queue.forget(item)
