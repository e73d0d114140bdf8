"""The work queue of the server's own controllers, with client-go's workqueue guarantees.

The same semantics as the components' queue (isthmus/runtime/workqueue.py, client-go's
rate-limiting workqueue), kept here because the apiserver imports nothing of Isthmus (that one
also feeds the components' Prometheus metrics):

- an item waiting in the queue is stored once, however many times it is added (dedupe);
- an item is handed to one worker at a time: adding an item that is being processed marks it
  dirty, and it is queued again when the worker calls `done`;
- `add_rate_limited` delays an item by the larger of its own exponential backoff
  (`base * 2**failures`, capped) and a global token bucket, so one failing item backs off alone
  while a storm of failures cannot hammer the store; `forget` resets an item's failures.

Items are any hashable values (the controllers queue `(kind, arg)` tuples). Use from one event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class ExponentialBackoff(Generic[T]):
    """Per-item exponential backoff: `base * 2**failures` seconds, at most `cap`."""

    def __init__(self, base: float = 0.005, cap: float = 300.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        """Record one more failure of `item` and return how long it must wait."""
        n = self._failures.get(item, 0)
        self._failures[item] = n + 1
        if n >= 64:  # the cap applies long before
            return self.cap
        return float(min(self.base * (2**n), self.cap))

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def failures(self, item: T) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """Global token bucket (`qps` refill, `burst` size): the delay until the next token.

    Tokens are reserved on call, like Go's `rate.Limiter.Reserve`: successive calls get
    successively later slots."""

    def __init__(self, qps: float = 10.0, burst: int = 100) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()

    def when(self) -> float:
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


class WorkQueue(Generic[T]):
    """A deduplicating, rate-limited FIFO for async workers. A worker::

        item = await q.get()
        try:
            ...            # then q.forget(item) on success, or q.add_rate_limited(item) to retry
        finally:
            q.done(item)
    """

    def __init__(self, backoff: ExponentialBackoff[T] | None = None, bucket: BucketRateLimiter | None = None) -> None:
        self.backoff: ExponentialBackoff[T] = backoff if backoff is not None else ExponentialBackoff()
        self.bucket = bucket if bucket is not None else BucketRateLimiter()
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()  # items that need processing (queued, or added again while processing)
        self._processing: set[T] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._delayed: dict[T, tuple[float, asyncio.TimerHandle]] = {}

    def add(self, item: T) -> None:
        """Queue `item` now unless it is already waiting; if a worker holds it, queue it after `done`."""
        if item in self._dirty:
            return
        self._dirty.add(item)
        if item in self._processing:
            return
        self._queue.append(item)
        self._wake_one()

    def add_after(self, item: T, delay: float) -> None:
        """Queue `item` after `delay` seconds; an earlier pending delayed add of it wins."""
        if delay <= 0:
            self.add(item)
            return
        at = time.monotonic() + delay
        pending = self._delayed.get(item)
        if pending is not None:
            if pending[0] <= at:
                return
            pending[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire_delayed, item)
        self._delayed[item] = (at, handle)

    def add_rate_limited(self, item: T) -> None:
        """Queue `item` after its backoff (and the global bucket's) delay: the retry path."""
        self.add_after(item, max(self.backoff.when(item), self.bucket.when()))

    def forget(self, item: T) -> None:
        """Reset `item`'s failures: call once it succeeded (or will never be retried)."""
        self.backoff.forget(item)

    def _fire_delayed(self, item: T) -> None:
        self._delayed.pop(item, None)
        self.add(item)

    async def get(self) -> T:
        """Wait for an item and mark it as being processed; the caller must call `done`."""
        while not self._queue:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                # Woken and then cancelled: pass the wake-up on, so no item is stranded.
                if fut.done() and not fut.cancelled():
                    self._wake_one()
                elif fut in self._waiters:
                    self._waiters.remove(fut)
                raise
        item = self._queue.popleft()
        self._processing.add(item)
        self._dirty.discard(item)
        return item

    def done(self, item: T) -> None:
        """Release `item`; if it was added while being processed, it is queued again."""
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.append(item)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def __len__(self) -> int:
        """Items waiting (not counting delayed ones or those being processed)."""
        return len(self._queue)
