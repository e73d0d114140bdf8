"""A lame-duck period at shutdown, as CoreDNS's `health { lameduck 5s }`.

When a pod is deleted its endpoints are marked terminating and every node's proxy stops sending it new
traffic — but not at the same instant: the EndpointSlice update takes time to reach each proxy (and a
proxy still forwards what it already chose). A server that stops answering at SIGTERM loses those
requests. So at SIGTERM it turns not-ready at once (its readiness probe fails, the endpoints controller
drops it), keeps serving for a delay, and only then stops. The pod's terminationGracePeriodSeconds must
exceed the delay, or the kubelet's SIGKILL ends the period early.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

__all__ = ["DEFAULT_SHUTDOWN_DELAY", "LameDuck", "Stoppable"]

log = logging.getLogger(__name__)

DEFAULT_SHUTDOWN_DELAY = 5.0
"""Seconds, as CoreDNS's usual `lameduck 5s`: longer than an EndpointSlice takes to reach the proxies."""


class Stoppable(Protocol):
    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class LameDuck:
    """`inner` with a lame-duck period before its stop (a `run_component` Component).

    `stop()` makes `ready` False at once, calls `inner.lame_duck()` if it has one (a component that
    serves its own readiness, or has children to tell), waits `delay` seconds while `inner` keeps
    serving, then stops it. `wait()` is `inner.wait()` if it has one (so a component that ends on its
    own still ends the command), else never returns."""

    def __init__(self, inner: Stoppable, delay: float, name: str = "") -> None:
        if delay < 0:
            raise ValueError("the shutdown delay cannot be negative")
        self.inner = inner
        self.delay = delay
        self.name = name
        self.draining = False

    @property
    def ready(self) -> bool:
        return not self.draining and bool(self.inner.ready)

    async def start(self) -> None:
        await self.inner.start()

    async def wait(self) -> None:
        wait = getattr(self.inner, "wait", None)
        if wait is None:
            await asyncio.Event().wait()
        else:
            await wait()

    async def stop(self) -> None:
        serving = bool(self.inner.ready)  # one that was never ready has no endpoint to drain (a DNS server awaiting join)
        self.draining = True
        lame_duck: Any = getattr(self.inner, "lame_duck", None)
        if lame_duck is not None:
            lame_duck()
        if self.delay > 0 and serving:
            log.info(
                "stopping: not ready, still serving for the shutdown delay",
                extra={"component": self.name, "delay_s": self.delay},
            )
            await asyncio.sleep(self.delay)
        await self.inner.stop()
