"""The lame-duck wrapper: not ready at once, the inner component told and still running for the delay,
stopped after it."""

from __future__ import annotations

import asyncio

import pytest

from isthmus.cli.lameduck import LameDuck


class Inner:
    def __init__(self) -> None:
        self.ready = True
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")

    def lame_duck(self) -> None:
        self.events.append("lame_duck")

    async def stop(self) -> None:
        self.events.append("stop")


async def test_stop_turns_not_ready_tells_the_inner_and_stops_it_after_the_delay() -> None:
    inner = Inner()
    duck = LameDuck(inner, 0.5, "x")
    await duck.start()
    assert duck.ready
    stopping = asyncio.ensure_future(duck.stop())
    await asyncio.sleep(0.1)
    assert not duck.ready
    assert inner.events == ["start", "lame_duck"]  # still serving: not stopped yet
    await stopping
    assert inner.events == ["start", "lame_duck", "stop"]


async def test_wait_is_the_inners_or_never() -> None:
    class Finite(Inner):
        async def wait(self) -> None:
            raise RuntimeError("ended")

    with pytest.raises(RuntimeError, match="ended"):
        await LameDuck(Finite(), 0).wait()
    forever = asyncio.ensure_future(LameDuck(Inner(), 0).wait())
    await asyncio.sleep(0.05)
    assert not forever.done()
    forever.cancel()


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        LameDuck(Inner(), -1)


async def test_one_never_ready_stops_at_once() -> None:
    inner = Inner()
    inner.ready = False  # e.g. a DNS server still waiting for `isthmus join`: no endpoint sends it anything
    duck = LameDuck(inner, 30.0, "x")
    await duck.start()
    async with asyncio.timeout(2):
        await duck.stop()
    assert inner.events == ["start", "lame_duck", "stop"]
