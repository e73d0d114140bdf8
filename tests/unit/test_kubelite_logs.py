"""Container logs kept by kube-lite: bounded, tail/since selection, following across trimming."""

from __future__ import annotations

import asyncio

from isthmus.local.kubelite.logs import ContainerLog, PodLogs, rfc3339nano


def test_select_tail_since_and_cap() -> None:
    log = ContainerLog(max_bytes=20)
    for i in range(5):
        log.write(f"line {i}")  # 7 bytes each with the newline
    lines, end = log.select()
    assert [ln.data for ln in lines] == [b"line 3\n", b"line 4\n"]  # the oldest went first
    assert end == 5
    assert [ln.data for ln in log.select(tail=1)[0]] == [b"line 4\n"]
    assert log.select(since=lines[-1].at + 1)[0] == []
    assert [ln.data for ln in log.after(3)[0]] == [b"line 3\n", b"line 4\n"]
    assert [ln.data for ln in log.after(0)[0]] == [ln.data for ln in lines]  # trimmed lines are lost


def test_rfc3339nano_like_go() -> None:
    assert rfc3339nano(0) == "1970-01-01T00:00:00Z"
    assert rfc3339nano(1.5) == "1970-01-01T00:00:01.5Z"


async def test_follow_wakes_and_ends_on_close() -> None:
    log = ContainerLog()
    waiter = asyncio.create_task(log.wait(0))
    await asyncio.sleep(0)
    assert not waiter.done()
    log.write("hello")
    await asyncio.wait_for(waiter, 1)
    closed = asyncio.create_task(log.wait(1))
    log.close()
    await asyncio.wait_for(closed, 1)
    log.write("after close")  # a stopped container prints nothing more
    assert log.end == 1


def test_new_incarnation_starts_afresh() -> None:
    logs = PodLogs()
    first = logs.pod("d/p", "uid-1")
    first.container("c").write("old")
    assert logs.pod("d/p", "uid-1") is first
    second = logs.pod("d/p", "uid-2")
    assert second is not first and first.containers["c"].closed and not second.containers
    logs.remove("d/p")
    assert logs.get("d/p") is None and second.uid == "uid-2"
