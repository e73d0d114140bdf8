"""The controller loop: informer events → keys → work queue → N workers → ``reconcile(key)``.

Level-triggered, like controller-runtime: events only say *which* key to look at; the
reconciler reads the current state from caches. Reconcile outcomes:

- returns ``None`` or ``Result()``: done; the key's backoff is reset;
- returns ``Result(requeue_after=s)``: done, look again in ``s`` seconds;
- returns ``Result(requeue=True)``: look again after the key's backoff (no error logged);
- raises: logged (a 409 Conflict briefly, anything else with its traceback), counted, and
  retried after the key's exponential backoff. It never stops the worker or the process.

Every ``run()`` starts with a fresh queue holding the key of every watched object, so a
controller that starts late, or again after regaining leadership, misses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lightkube.core.exceptions import ApiError

from isthmus.runtime import metrics
from isthmus.runtime.informer import Informer
from isthmus.runtime.objects import make_key, object_key, object_namespace, owner_refs
from isthmus.runtime.workqueue import BucketRateLimiter, ExponentialBackoff, QueueShutDown, WorkQueue

__all__ = ["Controller", "KeyMapper", "Reconciler", "Result", "enqueue_owner", "enqueue_self"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks for next. ``Result()`` means done."""

    requeue_after: float | None = None
    requeue: bool = False


Reconciler = Callable[[str], Awaitable[Result | None]]
KeyMapper = Callable[[Any], Iterable[str]]
"""Maps an object from a watched informer to the keys to reconcile."""


def enqueue_self(obj: Any) -> Iterable[str]:
    """The object's own key: the mapper for the controller's primary resource."""
    return (object_key(obj),)


def enqueue_owner(kind: str, api_group: str | None = None, *, controller_only: bool = True) -> KeyMapper:
    """Mapper to the key of the object's owner of ``kind`` (in the object's namespace).

    With ``controller_only`` (the default, like controller-runtime's ``OnlyControllerOwner``)
    only an owner reference with ``controller: true`` counts. ``api_group`` (e.g.
    ``"multicluster.x-k8s.io"``, ``""`` for core) narrows the match when kinds clash.
    """

    def mapper(obj: Any) -> Iterable[str]:
        ns = object_namespace(obj)
        keys = []
        for ref in owner_refs(obj):
            if ref.kind != kind or (controller_only and not ref.controller):
                continue
            if api_group is not None:
                group = ref.api_version.rpartition("/")[0]
                if group != api_group:
                    continue
            keys.append(make_key(ns, ref.name))
        return keys

    return mapper


@dataclass
class _Source:
    informer: Informer[Any]
    mapper: KeyMapper
    predicate: Callable[[Any | None, Any], bool] | None
    initial: bool = True


class Controller:
    """Runs ``reconcile`` for keys derived from informer events, with ``workers`` in parallel.

    ::

        c = Controller("serviceexport", reconcile, workers=4)
        c.watch(exports)                                    # its own objects
        c.watch(services, mapper=lambda s: [object_key(s)]) # a related object, same key
        c.watch(slices, mapper=enqueue_owner("ServiceImport"))
        await c.run()                                       # until cancelled

    ``run()`` waits for its informers to sync (it does not start them: the process starts
    its ``SharedInformerFactory``), then reconciles until cancelled. On cancellation the
    queue stops taking keys and in-flight reconciles get ``shutdown_grace`` seconds to finish
    (under leader election keep it below ``lease_duration - renew_deadline``, so a stepped-down
    leader is done before a successor can start).
    """

    def __init__(
        self,
        name: str,
        reconcile: Reconciler,
        *,
        workers: int = 1,
        backoff_base: float = 0.005,
        backoff_cap: float = 300.0,
        qps: float = 10.0,
        burst: int = 100,
        reconcile_timeout: float | None = None,
        shutdown_grace: float = 5.0,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.reconcile_timeout = reconcile_timeout
        self.shutdown_grace = shutdown_grace
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._qps = qps
        self._burst = burst
        self._sources: list[_Source] = []
        self._queue: WorkQueue | None = None
        self._m_duration = metrics.RECONCILE_DURATION.labels(name)
        self._m_errors = metrics.RECONCILE_ERRORS.labels(name)
        self._m_active = metrics.ACTIVE_WORKERS.labels(name)
        self._m_total = {
            r: metrics.RECONCILE_TOTAL.labels(name, r)
            for r in ("success", "error", "requeue", "requeue_after")
        }

    # ---- wiring ---------------------------------------------------------------------------

    def watch(
        self,
        informer: Informer[Any],
        mapper: KeyMapper = enqueue_self,
        *,
        predicate: Callable[[Any | None, Any], bool] | None = None,
        initial: bool = True,
    ) -> None:
        """Enqueue ``mapper(obj)`` on every add, update (old and new object) and delete.

        ``predicate(old, new)`` (``old`` is None for adds and deletes) can drop events, e.g.
        updates that only touched status. The mapper must not raise; if it does, the event
        is logged and skipped. ``initial=False``: when the controller starts, this source's
        cached objects are not mapped (its keys are a subset of other sources' keys, and mapping
        them all at once is costly, e.g. every key of a Namespace); its events still count.
        """
        src = _Source(informer, mapper, predicate, initial)
        self._sources.append(src)

        def on_add(obj: Any) -> None:
            if predicate is None or predicate(None, obj):
                self._enqueue_mapped(src, obj)

        def on_update(old: Any, new: Any) -> None:
            if predicate is None or predicate(old, new):
                self._enqueue_mapped(src, old)  # a relation may have moved: reconcile both sides
                self._enqueue_mapped(src, new)

        def on_delete(obj: Any) -> None:
            if predicate is None or predicate(None, obj):
                self._enqueue_mapped(src, obj)

        informer.add_handler(on_add, on_update, on_delete)

    def _enqueue_mapped(self, src: _Source, obj: Any) -> None:
        q = self._queue
        if q is None:
            return  # not running: run() will enqueue everything from the caches
        try:
            keys = src.mapper(obj)
            for key in keys:
                q.add(key)
        except Exception:
            log.exception("key mapper raised", extra={"controller": self.name})

    def enqueue(self, key: str) -> None:
        """Reconcile ``key`` soon (no-op when not running)."""
        if self._queue is not None:
            self._queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        if self._queue is not None:
            self._queue.add_after(key, delay)

    @property
    def queue(self) -> WorkQueue | None:
        """The queue of the current run (None when not running)."""
        return self._queue

    # ---- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile until cancelled (then shuts down gracefully and re-raises CancelledError)."""
        if self._queue is not None:
            raise RuntimeError(f"controller {self.name} is already running")
        for src in self._sources:
            if not src.informer.running and not src.informer.synced:
                log.warning(
                    "controller waits for an informer that is not started",
                    extra={"controller": self.name, "resource": src.informer.name},
                )
            await src.informer.wait_synced()
        queue = WorkQueue(
            self.name,
            backoff=ExponentialBackoff(self._backoff_base, self._backoff_cap),
            bucket=BucketRateLimiter(self._qps, self._burst),
        )
        self._queue = queue
        for src in self._sources:
            if src.initial:
                for obj in src.informer.cache.list():
                    self._enqueue_mapped(src, obj)
        log.info("controller started", extra={"controller": self.name, "workers": self.workers})
        tasks = [
            asyncio.create_task(self._worker(queue), name=f"{self.name} worker {i}")
            for i in range(self.workers)
        ]
        try:
            # asyncio.wait, not gather: cancelling run() must not cancel in-flight reconciles.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()  # workers only end on shutdown; surface a bug if one did otherwise
        finally:
            queue.shutdown()
            self._queue = None
            # Let in-flight reconciles finish (writes half-done are worse than a short wait).
            _, pending = await asyncio.wait(tasks, timeout=self.shutdown_grace)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
            log.info("controller stopped", extra={"controller": self.name})

    async def _worker(self, queue: WorkQueue) -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            try:
                await self._process(queue, key)
            finally:
                queue.done(key)

    async def _process(self, queue: WorkQueue, key: str) -> None:
        start = time.perf_counter()
        self._m_active.inc()
        try:
            async with asyncio.timeout(self.reconcile_timeout):
                result = await self.reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._m_errors.inc()
            self._m_total["error"].inc()
            retries = queue.num_requeues(key)
            extra = {"controller": self.name, "key": key, "retries": retries}
            if isinstance(e, ApiError) and e.status.code == 409:
                log.info("reconcile conflict; will retry", extra=extra)
            elif isinstance(e, TimeoutError):
                log.warning("reconcile timed out; will retry", extra=extra)
            else:
                log.exception("reconcile failed; will retry", extra=extra)
            queue.add_rate_limited(key)
            return
        finally:
            self._m_active.dec()
            self._m_duration.observe(time.perf_counter() - start)
        if result is None or (result.requeue_after is None and not result.requeue):
            self._m_total["success"].inc()
            queue.forget(key)
        elif result.requeue_after is not None:
            self._m_total["requeue_after"].inc()
            queue.forget(key)
            queue.add_after(key, result.requeue_after)
        else:
            self._m_total["requeue"].inc()
            queue.add_rate_limited(key)
