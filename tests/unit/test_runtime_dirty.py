"""DirtyKeys: many touches between two loop turns make one flush with every key."""

from __future__ import annotations

import asyncio

from isthmus.runtime.dirty import DirtyKeys


async def test_touches_before_arming_only_accumulate() -> None:
    flushed: list[set[str]] = []
    d = DirtyKeys(lambda: flushed.append(d.take()))
    d.touch("a/x", "a/y")
    await asyncio.sleep(0)
    assert flushed == [] and d.pending
    assert d.take() == {"a/x", "a/y"} and not d.pending


async def test_armed_touches_coalesce_into_one_flush_per_turn() -> None:
    flushed: list[set[str]] = []
    d = DirtyKeys(lambda: flushed.append(d.take()))
    d.armed = True
    for _ in range(100):
        d.touch("ns/svc")
    d.touch("ns/other")
    d.touch()  # no keys: nothing scheduled on its own
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert flushed == [{"ns/svc", "ns/other"}]
    d.touch("ns/svc")
    await asyncio.sleep(0)
    assert flushed == [{"ns/svc", "ns/other"}, {"ns/svc"}]


async def test_an_owner_flushing_itself_leaves_the_scheduled_flush_empty() -> None:
    flushed: list[set[str]] = []
    d = DirtyKeys(lambda: flushed.append(d.take()))
    d.armed = True
    d.touch("ns/a")
    flushed.append(d.take())  # the owner flushes synchronously first
    await asyncio.sleep(0)
    assert flushed == [{"ns/a"}, set()]
