"""Choosing a backend for a new connection or UDP flow.

Round-robin over the ready backends, like kube-proxy's userspace mode. With ClientIP session
affinity a client IP keeps its backend while that backend stays in the set and the client came
back within the timeout (each use renews it, as kube's userspace proxier does). A failed connect
drops the client's pin so the retry — and the next connection — go elsewhere.

No I/O; the clock is injected, so tests drive time by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Sequence

from isthmus.proxy.table import Backend

__all__ = ["Balancer"]

_SWEEP_EVERY = 60.0
"""At most this often (seconds) expired affinity entries are dropped, so the map stays bounded."""


class Balancer:
    """Backend choice for one listener; mutated only from the event loop thread."""

    __slots__ = ("_affinity", "_backends", "_clock", "_last_sweep", "_members", "_next", "timeout")

    def __init__(
        self,
        backends: Sequence[Backend] = (),
        affinity_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._backends: tuple[Backend, ...] = ()
        self._members: frozenset[Backend] = frozenset()
        self._next = 0
        self._affinity: dict[str, tuple[Backend, float]] = {}
        """client IP → (backend, last used)."""
        self._last_sweep = clock()
        self.timeout: float | None = None
        self.update(backends, affinity_timeout)

    @property
    def backends(self) -> tuple[Backend, ...]:
        return self._backends

    @property
    def affinity_entries(self) -> int:
        return len(self._affinity)

    def update(self, backends: Sequence[Backend], affinity_timeout: float | None) -> None:
        """Swap in a new backend set and affinity setting; pins to backends still present survive."""
        new = tuple(backends)
        if new != self._backends:
            self._backends = new
            self._members = frozenset(new)
            self._next = self._next % len(new) if new else 0
            self._affinity = {c: e for c, e in self._affinity.items() if e[0] in self._members}
        if affinity_timeout != self.timeout:
            self.timeout = affinity_timeout
            if affinity_timeout is None:
                self._affinity.clear()

    def pick(self, client_ip: str, exclude: Container[Backend] = ()) -> Backend | None:
        """The backend for a new connection from `client_ip`, avoiding `exclude` (already failed)."""
        backends = self._backends
        if not backends:
            return None
        timeout = self.timeout
        if timeout is None:
            if not exclude:  # the hot path: plain round-robin
                b = backends[self._next]
                self._next = (self._next + 1) % len(backends)
                return b
            return self._round_robin(exclude)
        now = self._clock()
        entry = self._affinity.get(client_ip)
        if entry is not None:
            b, last = entry
            if now - last <= timeout and b in self._members and b not in exclude:
                self._affinity[client_ip] = (b, now)
                return b
        chosen = self._round_robin(exclude)
        if chosen is not None:
            self._affinity[client_ip] = (chosen, now)
        if now - self._last_sweep > min(_SWEEP_EVERY, timeout):
            self._sweep(now, timeout)
        return chosen

    def forget(self, client_ip: str, backend: Backend) -> None:
        """`backend` failed for `client_ip`: unpin it so the client is not sent there again."""
        entry = self._affinity.get(client_ip)
        if entry is not None and entry[0] == backend:
            del self._affinity[client_ip]

    def _round_robin(self, exclude: Container[Backend]) -> Backend | None:
        backends = self._backends
        n = len(backends)
        for i in range(n):
            idx = (self._next + i) % n
            b = backends[idx]
            if b not in exclude:
                self._next = (idx + 1) % n
                return b
        return None

    def _sweep(self, now: float, timeout: float) -> None:
        self._last_sweep = now
        self._affinity = {c: e for c, e in self._affinity.items() if now - e[1] <= timeout}
