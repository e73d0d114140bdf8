"""Leader election on a coordination.k8s.io/v1 Lease, like client-go's ``leaderelection``.

- A candidate acquires the Lease when it is absent, released (empty holder) or expired.
  Expiry is judged on the *local* clock, from when this process last saw the Lease record
  change, so candidates never compare clocks with each other.
- The leader renews every ``retry_period``; if it has not renewed for ``renew_deadline``
  it steps down (its work is cancelled) — before ``lease_duration`` runs out, so no other
  candidate can have taken over while it still acts.
- Every write carries the resourceVersion it read: of two racing candidates only one wins.
- On a clean exit the leader releases the Lease (empty holder) so a successor starts at once.
- The Lease stores whole seconds: a successor waits ``ceil(lease_duration)`` after it last saw
  the record change, plus up to one ``retry_period`` (+20% jitter) to notice.

Two ways to use it::

    async with elector.leading():      # waits to acquire; raises LeadershipLost on loss
        await run_controllers()        # cancelled when leadership is lost

    await elector.run(on_started=run_controllers, on_stopped=cleanup)   # campaigns again after a loss
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from isthmus.runtime import metrics

__all__ = ["LeaderElector", "LeadershipLost"]

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """The lease could not be renewed within the renew deadline."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"


class LeaderElector:
    def __init__(
        self,
        client: AsyncClient,
        name: str,
        namespace: str = "default",
        *,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        acquire_period: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if not (lease_duration > renew_deadline > retry_period * 1.2 > 0):
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period > 0")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.acquire_period = acquire_period
        """How often a candidate asks again (default `retry_period`): a standby that polls more often
        than the leader renews takes a released Lease sooner, at the cost of reads, not writes."""
        self._clock = clock
        self._wall = wall_clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_duration = lease_duration
        self._is_leader = False
        self._last_renew = 0.0  # monotonic start of the last successful acquire/renew attempt
        self.last_contact: float | None = None
        """Monotonic time the apiserver last answered an attempt (held or not): a standby's health."""
        self.leader: str | None = None
        """The holder we last observed (None if unknown or released)."""
        self._m_leader = metrics.LEADER.labels(f"{namespace}/{name}")

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    def _set_leader(self, value: bool) -> None:
        if value != self._is_leader:
            self._is_leader = value
            self._m_leader.set(1 if value else 0)
            log.info(
                "leadership acquired" if value else "leadership ended",
                extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity},
            )

    # ---- one attempt ----------------------------------------------------------------------

    def _observe(self, spec: LeaseSpec | None, now: float) -> None:
        spec = spec or LeaseSpec()
        record = (
            spec.holderIdentity,
            spec.renewTime,
            spec.acquireTime,
            spec.leaseDurationSeconds,
            spec.leaseTransitions,
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = now
            self._observed_duration = float(spec.leaseDurationSeconds or self.lease_duration)
            holder = spec.holderIdentity or None
            if holder != self.leader:
                self.leader = holder
                log.info(
                    "lease holder changed", extra={"lease": f"{self.namespace}/{self.name}", "holder": holder}
                )

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True if we hold the Lease afterwards. API errors other than 404/409 raise."""
        wall = self._wall()
        duration = math.ceil(self.lease_duration)
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as e:
            if e.status.code != 404:
                raise
            self.last_contact = self._clock()
            fresh = Lease(
                metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                spec=LeaseSpec(
                    holderIdentity=self.identity,
                    leaseDurationSeconds=duration,
                    acquireTime=wall,
                    renewTime=wall,
                    leaseTransitions=0,
                ),
            )
            try:
                created = await self.client.create(fresh)
            except ApiError as e2:
                if e2.status.code == 409:
                    return False  # another candidate created it first
                raise
            self._observe(created.spec, self._clock())
            return True

        now = self.last_contact = self._clock()
        self._observe(lease.spec, now)
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity or ""
        if holder and holder != self.identity and self._observed_at + self._observed_duration > now:
            return False  # held by someone else, and not expired as far as we have seen
        ours = holder == self.identity
        lease.spec = LeaseSpec(
            holderIdentity=self.identity,
            leaseDurationSeconds=duration,
            acquireTime=spec.acquireTime if ours and spec.acquireTime else wall,
            renewTime=wall,
            leaseTransitions=(spec.leaseTransitions or 0) + (0 if ours else 1),
        )
        try:
            updated = await self.client.replace(lease)
        except ApiError as e:
            if e.status.code == 409:
                return False  # someone wrote in between; re-read next round
            raise
        self._observe(updated.spec, self._clock())
        return True

    async def release(self) -> bool:
        """Give the Lease up if we hold it, so a successor need not wait for expiry."""
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
            spec = lease.spec
            if spec is None or spec.holderIdentity != self.identity:
                return False
            wall = self._wall()
            lease.spec = LeaseSpec(
                holderIdentity=None,
                leaseDurationSeconds=1,
                acquireTime=wall,
                renewTime=wall,
                leaseTransitions=spec.leaseTransitions,
            )
            await self.client.replace(lease)
            log.info("lease released", extra={"lease": f"{self.namespace}/{self.name}"})
            return True
        except Exception as e:
            log.warning(
                "could not release lease", extra={"lease": f"{self.namespace}/{self.name}", "error": str(e)}
            )
            return False
        finally:
            self._set_leader(False)

    # ---- loops ----------------------------------------------------------------------------

    async def acquire(self) -> None:
        """Campaign until we hold the Lease."""
        while True:
            start = self._clock()
            try:
                async with asyncio.timeout(self.renew_deadline):
                    ok = await self.try_acquire_or_renew()
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as e:
                log.warning(
                    "lease acquire attempt failed", extra={"lease": self.name, "error": str(e) or repr(e)}
                )
                ok = False
            if ok:
                self._last_renew = start
                self._set_leader(True)
                return
            await asyncio.sleep((self.acquire_period or self.retry_period) * random.uniform(1.0, 1.2))

    async def _renew_until_lost(self) -> None:
        """Renew every retry_period; return once renew_deadline passed without a successful renewal."""
        while True:
            await asyncio.sleep(self.retry_period)
            start = self._clock()
            remaining = self._last_renew + self.renew_deadline - start
            ok = False
            if remaining > 0:
                try:
                    async with asyncio.timeout(remaining):
                        ok = await self.try_acquire_or_renew()
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("lease renew failed", extra={"lease": self.name, "error": str(e) or repr(e)})
            if ok:
                self._last_renew = start
            elif self._clock() - self._last_renew >= self.renew_deadline:
                log.error("lease not renewed within the deadline; stepping down", extra={"lease": self.name})
                self._set_leader(False)
                return

    @contextlib.asynccontextmanager
    async def leading(self) -> AsyncIterator[None]:
        """Acquire, then run the body while renewing; the body is cancelled on loss.

        Raises :class:`LeadershipLost` out of the ``async with`` when leadership is lost.
        On normal exit or cancellation the Lease is released.
        """
        await self.acquire()
        host = asyncio.current_task()
        assert host is not None
        lost = False

        def on_renew_end(t: asyncio.Task[None]) -> None:
            nonlocal lost
            if not t.cancelled():
                lost = True
                host.cancel()

        renewer = asyncio.get_running_loop().create_task(self._renew_until_lost(), name=f"lease {self.name}")
        renewer.add_done_callback(on_renew_end)
        try:
            yield
        except asyncio.CancelledError:
            if lost and host.uncancel() == 0:
                raise LeadershipLost(f"{self.namespace}/{self.name}") from None
            raise
        finally:
            renewer.remove_done_callback(on_renew_end)
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            if not lost:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(self.retry_period, 1.0)):
                        await self.release()
            self._set_leader(False)
        if lost:  # the body finished before our cancellation reached it
            raise LeadershipLost(f"{self.namespace}/{self.name}")

    async def run(
        self,
        on_started: Callable[[], Awaitable[None]],
        on_stopped: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Lead and run ``on_started()`` (cancelled on loss); campaign again after each loss.

        ``on_stopped()`` runs each time leadership ends. Returns when ``on_started`` returns
        (the Lease is released); cancel to stop (the Lease is released too).
        """
        while True:
            acquired = False
            try:
                async with self.leading():
                    acquired = True
                    await on_started()
                return
            except LeadershipLost:
                log.warning("leadership lost; campaigning again", extra={"lease": self.name})
            finally:
                if acquired and on_stopped is not None:
                    await on_stopped()
