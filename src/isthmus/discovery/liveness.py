"""Which peer clusters' agents have gone silent — judged only while this agent can see the broker.

Every agent beats on its own broker `Cluster` (the heartbeat annotation). A peer whose heartbeat
has not changed for longer than the grace period is *silent*: its endpoints are withdrawn from
every import here (DNS stops answering with them, the proxy stops sending to them) until it
beats again — traffic must not keep flowing to a dead cluster.

Two rules keep a broker outage from looking like every peer dying:

- Silence is measured with this process's monotonic clock from the moment a heartbeat change was
  *seen*, never from the wall-clock time written in it, so clock skew between clusters is harmless.
- Only time during which this agent reaches the broker counts. While the link is down the last
  verdict is kept as it is (agents that cannot reach the broker keep their last view); when it comes
  back, every peer gets a whole grace period again before it can be judged silent (one judged silent
  before the outage stays so until it beats).

A verdict survives the observer's restart: the agent passes `marked_silent` for a peer whose last
heartbeat the broker recorded longer than the grace ago (in the broker's clock, agent.py), and that
peer stays silent until its heartbeat changes. Nothing is written on the peer's `Cluster`: a member
may write only its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Liveness"]


@dataclass
class _Peer:
    heartbeat: str | None
    seen_at: float  # monotonic time the current heartbeat value was first seen


class Liveness:
    """Heartbeat bookkeeping for the peers of one agent. Pure: the clock is injected."""

    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self._clock = clock
        self._peers: dict[str, _Peer] = {}
        self._link_up_since: float | None = None  # None: the broker is unreachable right now
        self._verdict: frozenset[str] = frozenset()

    def observe(self, cluster: str, heartbeat: str | None, *, marked_silent: bool = False) -> None:
        """A peer's `Cluster` as the broker shows it now (added or updated)."""
        peer = self._peers.get(cluster)
        now = self._clock()
        if peer is None:
            # Already silent when we started: it stays so until it beats again, rather than getting
            # its endpoints back for a grace period.
            self._peers[cluster] = _Peer(heartbeat, float("-inf") if marked_silent else now)
        elif peer.heartbeat != heartbeat:
            peer.heartbeat, peer.seen_at = heartbeat, now

    def forget(self, cluster: str) -> None:
        """The peer left the clusterset (its `Cluster` is gone)."""
        self._peers.pop(cluster, None)

    def peers(self) -> set[str]:
        return set(self._peers)

    def link_ok(self) -> None:
        """A request to the broker just succeeded."""
        if self._link_up_since is None:
            self._link_up_since = self._clock()
            for name in self._verdict:  # silent before the outage: stays so until it beats again
                if name in self._peers:
                    self._peers[name].seen_at = float("-inf")

    def link_failed(self) -> None:
        """A request to the broker just failed for lack of a connection (not an API error)."""
        self._link_up_since = None

    @property
    def link_up(self) -> bool:
        return self._link_up_since is not None

    def silent(self) -> frozenset[str]:
        """The peers whose endpoints must not be imported now."""
        if self._link_up_since is None:
            return self._verdict  # cannot see the broker: keep the last view
        now = self._clock()
        since = self._link_up_since
        self._verdict = frozenset(
            name for name, p in self._peers.items()
            if p.seen_at == float("-inf") or now - max(p.seen_at, since) > self.grace
        )
        return self._verdict

    def silent_for(self, cluster: str) -> float | None:
        """Seconds since the peer's heartbeat last changed, as far as this agent has seen (None: unknown
        or never seen change since a restart that found it silent)."""
        p = self._peers.get(cluster)
        if p is None or p.seen_at == float("-inf"):
            return None
        return self._clock() - p.seen_at
