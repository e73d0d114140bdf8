"""Rate-limited work queue, the asyncio counterpart of client-go's ``workqueue``.

Guarantees, the same as client-go's:

- a key waiting in the queue is stored once, however many times it is added (dedup);
- a key is handed to at most one worker at a time: adding a key that is being processed
  marks it dirty, and it is queued again when the worker calls :meth:`WorkQueue.done`;
- :meth:`WorkQueue.add_rate_limited` delays a key by the larger of its own exponential
  backoff (``base * 2**failures``, capped) and a global token bucket, so one failing key
  backs off alone while a storm of failures cannot hammer the API server;
- after :meth:`WorkQueue.shutdown`, :meth:`WorkQueue.get` raises :class:`QueueShutDown`
  and adds are ignored; workers finish the key they hold.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from isthmus.runtime import metrics

__all__ = ["BucketRateLimiter", "ExponentialBackoff", "QueueShutDown", "WorkQueue"]

_TIMER_GRAIN = 0.001
"""uvloop's (libuv's) timer resolution, in seconds."""


class QueueShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down (and drained, if asked)."""


class ExponentialBackoff:
    """Per-key exponential backoff: ``base * 2**failures`` seconds, at most ``cap``."""

    def __init__(self, base: float = 0.005, cap: float = 300.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        """Record one more failure of ``key`` and return how long it must wait."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if n >= 64:  # 2**64 overflows a float's usefulness long before; the cap applies anyway
            return self.cap
        return float(min(self.base * (2**n), self.cap))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """Global token bucket (``qps`` refill, ``burst`` size): delay to wait for the next token.

    Tokens are reserved on call, like ``rate.Limiter.Reserve`` in Go, so successive calls get
    successively later slots.
    """

    def __init__(
        self, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self) -> float:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps


class WorkQueue:
    """A deduplicating, rate-limited FIFO of string keys for N async workers.

    Use from one event loop only. Typical worker::

        while True:
            key = await q.get()          # raises QueueShutDown when stopping
            try:
                ...
            finally:
                q.done(key)
    """

    def __init__(
        self,
        name: str = "",
        *,
        backoff: ExponentialBackoff | None = None,
        bucket: BucketRateLimiter | None = None,
    ) -> None:
        self.name = name
        self.backoff = backoff if backoff is not None else ExponentialBackoff()
        self.bucket = bucket if bucket is not None else BucketRateLimiter()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()  # keys that need processing (queued, or re-added while processing)
        self._processing: set[str] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._delayed: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._shutting_down = False
        self._drain = False
        self._idle: asyncio.Event | None = None
        # The depth is read when scraped, not set on every add and get (a Gauge's set is Python
        # code and a lock: an agent adds a key a dozen times per service while it resyncs).
        metrics.WORKQUEUE_DEPTH.labels(name).set_function(self._queue.__len__)
        self._adds = metrics.WORKQUEUE_ADDS.labels(name)
        self._retries = metrics.WORKQUEUE_RETRIES.labels(name)

    # ---- adding ---------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Queue ``key`` now unless it is already waiting; if a worker holds it, queue it after ``done``."""
        if self._shutting_down or key in self._dirty:
            return
        self._adds.inc()
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake_one()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending delayed add for it wins.

        The key is never queued before ``delay`` has passed, on either event loop: the deadline is
        kept on ``time.monotonic`` and checked when the timer fires, because uvloop counts its
        timers in whole milliseconds (``call_later`` rounds the delay, so one under 0.5 ms ran at
        once, and its clock is floored to the millisecond): it fired up to 0.5 ms early.
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        at = time.monotonic() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            if pending[0] <= at:
                return
            pending[1].cancel()
        self._arm(key, at, delay)

    def _arm(self, key: str, at: float, delay: float) -> None:
        handle = asyncio.get_running_loop().call_later(delay, self._fire_delayed, key, at)
        self._delayed[key] = (at, handle)

    def add_rate_limited(self, key: str) -> None:
        """Queue ``key`` after its backoff (and the global bucket's) delay: the retry path."""
        self._retries.inc()
        self.add_after(key, max(self.backoff.when(key), self.bucket.when()))

    def forget(self, key: str) -> None:
        """Reset ``key``'s failure count: call after it succeeds."""
        self.backoff.forget(key)

    def num_requeues(self, key: str) -> int:
        return self.backoff.failures(key)

    def _fire_delayed(self, key: str, at: float) -> None:
        early = at - time.monotonic()
        if early > 0:
            # A millisecond timer fired before the deadline: wait out the rest (a whole millisecond
            # at least, so uvloop does not round it to "now" again).
            self._arm(key, at, max(early, _TIMER_GRAIN))
            return
        self._delayed.pop(key, None)
        self.add(key)

    # ---- consuming ------------------------------------------------------------------------

    async def get(self) -> str:
        """Wait for a key and mark it as being processed; the caller must call :meth:`done`."""
        while not self._queue or (self._shutting_down and not self._drain):
            if self._shutting_down:
                raise QueueShutDown(self.name)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                # If we were woken and then cancelled, pass the wake-up on so no key is stranded.
                if fut.done() and not fut.cancelled():
                    self._wake_one()
                else:
                    try:
                        self._waiters.remove(fut)
                    except ValueError:
                        pass
                raise
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        """Release ``key``; if it was added while processing, it is queued again."""
        self._processing.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._wake_one()
        if not self._processing and self._idle is not None:
            self._idle.set()

    def _wake_one(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    # ---- lifecycle ------------------------------------------------------------------------

    def shutdown(self, drain: bool = False) -> None:
        """Stop accepting keys. ``drain=True`` lets workers take what is already queued first."""
        self._shutting_down = True
        self._drain = drain
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        if not drain:
            self._queue.clear()
            self._dirty.clear()
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait_idle(self) -> None:
        """Wait until no worker holds a key (use after :meth:`shutdown`)."""
        if not self._processing:
            return
        self._idle = asyncio.Event()
        await self._idle.wait()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Keys waiting (not counting delayed keys or keys being processed)."""
        return len(self._queue)

    @property
    def processing(self) -> frozenset[str]:
        return frozenset(self._processing)

    @property
    def pending_delayed(self) -> int:
        return len(self._delayed)
