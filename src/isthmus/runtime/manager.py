"""The Manager: what every long-running component is built on (controller-runtime's manager).

A component no longer writes out its own skeleton (campaign for a Lease; while leading build
informers, start them, wait for their sync, run the controllers; on loss or stop tear it all
down and hand the Lease back). It describes its controllers, and the Manager runs them:

    manager = Manager("lb", election=LeaderElection(client, TRANSLATOR_LEASE_NAME, LB_NAMESPACE,
                                                    identity=identity))
    manager.setup(self._wire)                  # called at the start of every leadership term
    manager.on_exit(recorder.aclose)           # once run() ends, whatever the reason

    def _wire(self, term: Term) -> None:       # synchronous: wiring only, no requests
        self.services = term.informer(client, Service)     # shared: one per kind per client
        c = Controller("lb", self.reconcile, workers=4)
        c.watch(self.services)
        term.add(c)                            # runs while leading
        term.on_synced(self._after_sync)       # awaited once the caches synced, before ready

    await manager.run()                        # until cancelled; or run_component(.., lambda: manager)

What it owns:

- **Informers, fresh each term.** `Term.informer(client, kind, ...)` is the term's shared informer
  (one `SharedInformerFactory` per client: every controller of the component asking for the same
  kind, scope and selectors gets the same informer). They start when the term starts and stop when
  it ends, so a standby watches nothing and a new leader starts from fresh caches. The caches are
  waited for client by client, in the order the term first asked for each; a client given
  `while_unsynced` gets that callback every `every` seconds while its informers have not synced (an
  unreachable broker is reported rather than waited for in silence).
- **Leader election** (`runtime/leader.py`): with `election` the terms run while the Lease is held,
  and a lost Lease cancels the term and campaigns again; without it (a component whose replicas
  all work, such as the pool manager) `run()` is one term. `stop()` hands the Lease back at once
  (bounded by `release_timeout`), so a standby takes over without waiting for it to expire.
- **Runnables**: `Term.add(controller_or_coroutine_function)` for this term only (a `Controller`
  made in the setup); `Manager.add(fn, leader_only=True)` for every term, `leader_only=False` to run
  from `run()`'s start to its end whatever the Lease (a token refresher). The first runnable to
  fail ends the term, and `run()`, with its error.
- **Readiness**: `ready` is True from the end of the term's `on_synced` hooks to the end of the term
  (leading, synced, started), and while every `ready_when(check)` passes. `healthy` is `ready` for a
  leader and, for a standby, "the apiserver answered its election within a Lease duration": what a
  component with several replicas serves as readiness (kube-controller-manager's standbys are healthy
  too), since a readiness that needs the Lease never lets a second replica become ready and so
  deadlocks a RollingUpdate. Health and metrics are served by whoever runs the Manager:
  `run_component` (cli/app.py) serves `/metrics` from the runtime's REGISTRY and `/readyz` from
  `ready`, since a Manager is a `Component` (`ready`, `start`, `wait`, `stop`). Several Managers run
  in one process side by side (`isthmus controller-manager`), each with its own Lease.

Hook order in a term: setups (in registration order) → informers start → sync waits → `on_synced`
hooks → ready → runnables → (end) not ready → `on_stopped` hooks → informers stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from lightkube import AsyncClient

from isthmus.runtime.informer import Informer, SharedInformerFactory
from isthmus.runtime.leader import LeaderElector

__all__ = ["RELEASE_TIMEOUT", "LeaderElection", "Manager", "Runnable", "Term"]

log = logging.getLogger(__name__)

T = TypeVar("T")
RELEASE_TIMEOUT = 3.0
"""How long `stop()` tries to hand the Lease back."""

Hook = Callable[[], Awaitable[Any]]


@runtime_checkable
class _Runs(Protocol):
    def run(self) -> Awaitable[Any]: ...


Runnable = _Runs | Hook
"""A `Controller` (anything with `run()`), or a coroutine function taking no argument."""


def _start(runnable: Runnable) -> Awaitable[Any]:
    return runnable.run() if isinstance(runnable, _Runs) else runnable()


def _name(runnable: Runnable) -> str:
    return str(getattr(runnable, "name", None) or getattr(runnable, "__qualname__", None) or runnable)


@dataclass(frozen=True)
class LeaderElection:
    """The Lease a component's terms run under (see `LeaderElector` for the timings)."""

    client: AsyncClient
    name: str
    namespace: str = "default"
    identity: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def elector(self) -> LeaderElector:
        return LeaderElector(self.client, self.name, self.namespace, identity=self.identity,
                             lease_duration=self.lease_duration, renew_deadline=self.renew_deadline,
                             retry_period=self.retry_period)


@dataclass
class _Factory:
    client: Any
    factory: SharedInformerFactory
    while_unsynced: Hook | None
    every: float


class Term:
    """One term of a component (a leadership term; the whole run without an election): its
    informers, runnables and hooks. Given to each setup function at the term's start."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._factories: list[_Factory] = []
        self._runnables: list[Runnable] = []
        self._synced: list[Hook] = []
        self._stopped: list[Hook] = []

    def informers(self, client: Any, *, while_unsynced: Hook | None = None,
                  every: float = 30.0) -> SharedInformerFactory:
        """The term's informer factory for `client` (one per client). `while_unsynced`: awaited
        every `every` seconds while that factory's informers have not all synced."""
        for f in self._factories:
            if f.client is client:
                if while_unsynced is not None:
                    f.while_unsynced, f.every = while_unsynced, every
                return f.factory
        factory = SharedInformerFactory(client)
        self._factories.append(_Factory(client, factory, while_unsynced, every))
        return factory

    def informer(self, client: Any, resource: type[T], namespace: str | None = None, **kwargs: Any) -> Informer[T]:
        """The term's shared informer of `resource` through `client` (see `SharedInformerFactory.informer`)."""
        return self.informers(client).informer(resource, namespace, **kwargs)

    @property
    def factories(self) -> list[SharedInformerFactory]:
        return [f.factory for f in self._factories]

    def add(self, *runnables: Runnable) -> None:
        """Run these while the term lasts (started together once it is ready)."""
        self._runnables.extend(runnables)

    def on_synced(self, hook: Hook) -> None:
        """Await `hook` once every informer synced, before the term is ready (in registration order)."""
        self._synced.append(hook)

    def on_stopped(self, hook: Hook) -> None:
        """Await `hook` when the term ends, before its informers stop (errors are logged)."""
        self._stopped.append(hook)


class Manager:
    """Runs one component: its terms under an optional Lease, its runnables, its readiness."""

    def __init__(self, name: str, *, election: LeaderElection | None = None,
                 release_timeout: float = RELEASE_TIMEOUT) -> None:
        self.name = name
        self.elector: LeaderElector | None = election.elector() if election is not None else None
        self.release_timeout = release_timeout
        self._setups: list[Callable[[Term], None]] = []
        self._leader: list[Runnable] = []
        self._always: list[Runnable] = []
        self._exit: list[Hook] = []
        self._stop: list[Hook] = []
        self._checks: list[Callable[[], bool]] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.term: Term | None = None
        """The term running now (None between terms)."""

    # ---- registration ---------------------------------------------------------------------

    def setup(self, fn: Callable[[Term], None]) -> None:
        """Call `fn(term)` at the start of every term: it asks the term for informers and adds the
        term's controllers and hooks. Synchronous: no request is made before the informers start."""
        self._setups.append(fn)

    def add(self, runnable: Runnable, *, leader_only: bool = True) -> None:
        """Run `runnable` in every term (`leader_only`), or from `run()`'s start to its end."""
        (self._leader if leader_only else self._always).append(runnable)

    def ready_when(self, check: Callable[[], bool]) -> None:
        """`ready` also needs `check()` (a component whose readiness is more than synced caches:
        the egress gateway is ready once it programmed its rules)."""
        self._checks.append(check)

    def stand_by(self, poll: float) -> None:
        """One of several replicas: while standing by, read the Lease every `poll` seconds (at most the
        retry period), so a Lease handed back at the leader's stop is taken within about `poll` rather
        than a whole retry period. Reads only: the leader still renews every retry period."""
        if self.elector is not None:
            self.elector.acquire_period = min(poll, self.elector.retry_period)

    def on_exit(self, hook: Hook) -> None:
        """Await `hook` when `run()` ends, whatever the reason (close recorders)."""
        self._exit.append(hook)

    def on_stop(self, hook: Hook) -> None:
        """Await `hook` in `stop()`, after `run()` ended and the Lease was handed back (errors logged)."""
        self._stop.append(hook)

    # ---- state ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Leading (or no election), every cache synced, the `on_synced` hooks done, and every
        `ready_when` check passing."""
        return self._ready.is_set() and all(check() for check in self._checks)

    @property
    def healthy(self) -> bool:
        """`ready` while leading (or without an election). A standby is healthy while its elector heard
        from the apiserver within a Lease duration: it could take over if the leader went, which is all
        a standby owes; one cut off from the apiserver could not, and is not. The `ready_when` checks
        are about a leader's work, so a standby is not held to them."""
        if self.elector is None or self.elector.is_leader:
            return self.ready
        contact = self.elector.last_contact
        return contact is not None and time.monotonic() - contact <= self.elector.lease_duration

    async def wait_ready(self) -> None:
        """Until the term's `on_synced` hooks are done (`ready_when` checks are not waited for)."""
        await self._ready.wait()

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    # ---- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Run terms (campaigning for the Lease, again after each loss) until cancelled or a
        runnable fails; the always-on runnables alongside."""
        try:
            if not self._always:
                await self._terms()
                return
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._terms(), name=f"{self.name} terms")
                for r in self._always:
                    tg.create_task(_as_coroutine(r), name=f"{self.name} {_name(r)}")
        finally:
            for hook in self._exit:
                await hook()

    async def _terms(self) -> None:
        if self.elector is None:
            await self._term()
            return
        while True:
            await self.elector.run(self._term)

    async def _term(self) -> None:
        term = Term(self.name)
        for fn in self._setups:
            fn(term)
        runnables = [*term._runnables, *self._leader]
        self.term = term
        try:
            for f in term._factories:
                f.factory.start()
            for f in term._factories:
                if f.while_unsynced is None:
                    await f.factory.wait_synced()
                    continue
                while not await f.factory.wait_synced(timeout=f.every):
                    await f.while_unsynced()
            for hook in term._synced:
                await hook()
            self._ready.set()
            if len(runnables) == 1:
                await _start(runnables[0])
            elif runnables:
                async with asyncio.TaskGroup() as tg:
                    for r in runnables:
                        tg.create_task(_as_coroutine(r), name=f"{self.name} {_name(r)}")
            else:
                await asyncio.Event().wait()  # nothing to run but the caches: until cancelled
        finally:
            self._ready.clear()
            self.term = None
            for hook in term._stopped:
                try:
                    await hook()
                except Exception:
                    log.exception("a term's stop hook failed", extra={"component": self.name})
            for f in term._factories:
                await f.factory.stop()

    async def release(self) -> None:
        """Hand the Lease back if held (bounded by `release_timeout`; never raises)."""
        if self.elector is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.release_timeout):
                await self.elector.release()

    # ---- as a Component (cli/app.py's run_component) --------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=self.name)

    async def wait(self) -> None:
        """Returns (or raises) when `run()` ends on its own."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Cancel `run()`, hand the Lease back, then the `on_stop` hooks."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.release()
        for hook in self._stop:
            try:
                await hook()
            except Exception:
                log.exception("a stop hook failed", extra={"component": self.name})


async def _as_coroutine(runnable: Runnable) -> None:
    await _start(runnable)
