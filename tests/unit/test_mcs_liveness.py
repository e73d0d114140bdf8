"""isthmus.discovery.liveness: when a peer counts as silent (withdrawn from every import)."""

from __future__ import annotations

from isthmus.discovery.liveness import Liveness


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _live(grace: float = 60.0) -> tuple[Liveness, Clock]:
    clock = Clock()
    live = Liveness(grace, clock=clock)
    live.link_ok()
    return live, clock


def test_a_peer_is_silent_only_after_the_grace_period_without_a_new_heartbeat() -> None:
    live, clock = _live()
    live.observe("c2", "t0")
    clock.t += 59
    live.observe("c2", "t0")  # the same value again is not a beat
    assert live.silent() == frozenset()
    clock.t += 2
    assert live.silent() == {"c2"}
    live.observe("c2", "t1")
    assert live.silent() == frozenset()


def test_a_broker_outage_keeps_the_last_view_and_restarts_the_grace_period() -> None:
    live, clock = _live()
    live.observe("alive", "a0")
    live.observe("dead", "d0")
    clock.t += 61
    live.observe("alive", "a1")
    assert live.silent() == {"dead"}
    live.link_failed()
    clock.t += 600  # nobody's heartbeat can be seen: nothing changes either way
    assert live.silent() == {"dead"}
    live.link_ok()
    assert live.silent() == {"dead"}  # known dead before the outage: still withdrawn
    live.observe("dead", "d1")
    assert live.silent() == frozenset()
    clock.t += 59  # a whole grace period after the link came back before anyone is judged
    assert live.silent() == frozenset()
    clock.t += 2
    assert live.silent() == {"alive", "dead"}


def test_a_peer_already_marked_silent_stays_so_until_it_beats() -> None:
    live, clock = _live()
    live.observe("c2", "t0", marked_silent=True)
    assert live.silent() == {"c2"}
    assert live.silent_for("c2") is None
    clock.t += 1
    live.observe("c2", "t1", marked_silent=True)
    assert live.silent() == frozenset()


def test_a_peer_that_left_is_forgotten() -> None:
    live, clock = _live(grace=1)
    live.observe("c2", "t0")
    clock.t += 5
    assert live.silent() == {"c2"}
    live.forget("c2")
    assert live.silent() == frozenset()
    assert live.peers() == set()


def test_nothing_is_silent_before_the_broker_was_ever_reached() -> None:
    clock = Clock()
    live = Liveness(1, clock=clock)
    live.observe("c2", "t0")
    clock.t += 100
    assert live.silent() == frozenset()
    assert not live.link_up
