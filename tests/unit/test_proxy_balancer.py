"""Backend choice: round-robin, ClientIP affinity with timeout, failover (isthmus.proxy.balancer)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from isthmus.proxy import Backend, Balancer

A, B, C = Backend("127.1.0.1", 80), Backend("127.1.0.2", 80), Backend("127.1.0.3", 80)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_empty_picks_nothing() -> None:
    assert Balancer().pick("127.0.0.2") is None


def test_round_robin() -> None:
    b = Balancer([A, B, C])
    assert [b.pick("127.0.0.2") for _ in range(6)] == [A, B, C, A, B, C]


def test_round_robin_spreads_evenly_after_updates() -> None:
    b = Balancer([A, B])
    b.pick("x")
    b.update([A, B, C], None)
    counts = Counter(b.pick("x") for _ in range(300))
    assert counts == {A: 100, B: 100, C: 100}


def test_exclude_skips_failed_backends() -> None:
    b = Balancer([A, B, C])
    assert b.pick("x", exclude={A}) == B
    assert b.pick("x", exclude={A, B, C}) is None


def test_update_to_empty() -> None:
    b = Balancer([A])
    b.update([], None)
    assert b.pick("x") is None


def test_affinity_pins_a_client() -> None:
    clock = Clock()
    b = Balancer([A, B, C], affinity_timeout=60, clock=clock)
    first = b.pick("127.0.0.2")
    other = b.pick("127.0.0.3")
    assert first != other
    for _ in range(10):
        clock.now += 30  # each use renews the pin
        assert b.pick("127.0.0.2") == first


def test_affinity_expires() -> None:
    clock = Clock()
    b = Balancer([A, B], affinity_timeout=60, clock=clock)
    assert b.pick("c") == A
    clock.now += 61
    assert b.pick("c") == B


def test_affinity_moves_when_the_backend_leaves_and_survives_other_changes() -> None:
    clock = Clock()
    b = Balancer([A, B, C], affinity_timeout=60, clock=clock)
    assert b.pick("c") == A
    b.update([A, C], 60)
    assert b.pick("c") == A
    b.update([B, C], 60)
    moved = b.pick("c")
    assert moved in (B, C)
    b.update([A, B, C], 60)
    assert b.pick("c") == moved  # not snapped back to A


def test_forget_after_a_failed_connect() -> None:
    b = Balancer([A, B], affinity_timeout=60, clock=Clock())
    assert b.pick("c") == A
    b.forget("c", A)
    assert b.pick("c", exclude={A}) == B
    assert b.pick("c") == B  # the new pin holds


def test_forget_ignores_another_backend() -> None:
    b = Balancer([A, B], affinity_timeout=60, clock=Clock())
    assert b.pick("c") == A
    b.forget("c", B)
    assert b.pick("c") == A


def test_excluded_pinned_backend_falls_over_without_unpinning_elsewhere() -> None:
    b = Balancer([A, B], affinity_timeout=60, clock=Clock())
    assert b.pick("c") == A
    assert b.pick("c", exclude={A}) == B


def test_turning_affinity_off_clears_pins() -> None:
    b = Balancer([A, B], affinity_timeout=60, clock=Clock())
    b.pick("c")
    b.update([A, B], None)
    assert b.affinity_entries == 0
    assert [b.pick("c") for _ in range(2)] == [B, A]


def test_expired_pins_are_swept() -> None:
    clock = Clock()
    b = Balancer([A, B], affinity_timeout=10, clock=clock)
    for i in range(100):
        b.pick(f"127.0.1.{i}")
    clock.now += 11
    b.pick("127.0.0.9")
    assert b.affinity_entries == 1


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=6, unique=True),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 120)), max_size=60),
)
def test_picks_are_always_current_backends(members: list[int], steps: list[tuple[int, int]]) -> None:
    clock = Clock()
    backends = [Backend(f"127.1.0.{i}", 80) for i in members]
    b = Balancer(backends, affinity_timeout=60, clock=clock)
    pins: dict[str, tuple[Backend, float]] = {}
    for client, dt in steps:
        clock.now += dt
        ip = f"127.0.0.{client}"
        got = b.pick(ip)
        assert got in backends
        pin = pins.get(ip)
        if pin is not None and clock.now - pin[1] <= 60:
            assert got == pin[0]
        pins[ip] = (got, clock.now) if got is not None else pins[ip]
