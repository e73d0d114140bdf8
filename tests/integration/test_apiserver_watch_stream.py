"""A watch stream's delivery: events written in batches stay in order, bookmarks come after a quiet
bookmark interval (and not while events flow), timeoutSeconds ends the stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.harness.apiserver import RunningApiServer

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[RunningApiServer]:
    srv = RunningApiServer(tmp_path / "apiserver", bookmark_interval=0.5)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def _create(srv: RunningApiServer, name: str) -> None:
    info = srv.server.resources.get("", "v1", "configmaps")
    await srv.server.create_object(info, "default", {"metadata": {"name": name}, "data": {"k": name}}, manager="test")


async def _line(r: aiohttp.ClientResponse) -> dict[str, Any]:
    async with asyncio.timeout(10):
        line = await r.content.readline()
    assert line, "the stream ended"
    event: dict[str, Any] = json.loads(line)
    return event


async def test_a_burst_of_writes_arrives_in_order_each_event_once(apiserver: RunningApiServer) -> None:
    rv = apiserver.store.rv
    async with aiohttp.ClientSession() as s, s.get(
            apiserver.url + CMS + f"?watch=true&resourceVersion={rv}&timeoutSeconds=30") as r:
        names = [f"b{i:02d}" for i in range(30)]
        for n in names:  # no await suspends between these: the watcher wakes to all of them at once
            await _create(apiserver, n)
        events = [await _line(r) for _ in names]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", n) for n in names]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] == rv + 1 and len(set(rvs)) == len(rvs)


async def test_events_trickling_in_share_chunks_and_keep_their_order(apiserver: RunningApiServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A watcher that has just written waits out the rest of WRITE_SPACING before its next write:
    writes spread over several loop turns reach it in fewer chunks than events, still in order,
    each once. (The spacing is widened here so that a loaded machine cannot space the writes
    further apart than it.)"""
    from isthmus.apiserver.handlers import watch

    monkeypatch.setattr(watch, "WRITE_SPACING", 0.3)
    rv = apiserver.store.rv
    async with aiohttp.ClientSession() as s, s.get(
            apiserver.url + CMS + f"?watch=true&resourceVersion={rv}&timeoutSeconds=30") as r:
        names = [f"t{i:02d}" for i in range(12)]
        for n in names:
            await _create(apiserver, n)
            await asyncio.sleep(0.0005)  # each write on a loop turn of its own
        chunks, data = 0, b""
        async with asyncio.timeout(10):
            while data.count(b"\n") < len(names):
                chunk, end = await r.content.readchunk()
                assert chunk or end, "the stream ended"
                data += chunk
                chunks += end
    events = [json.loads(line) for line in data.splitlines()]
    assert [e["object"]["metadata"]["name"] for e in events] == names
    assert chunks < len(names) / 2, chunks


async def test_a_bookmark_follows_a_quiet_interval_at_the_latest_version(apiserver: RunningApiServer) -> None:
    rv = apiserver.store.rv
    async with aiohttp.ClientSession() as s, s.get(
            apiserver.url + CMS + f"?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=30") as r:
        await _create(apiserver, "first")
        added = await _line(r)
        assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "first")
        # A write to another resource moves the latest version on; the bookmark carries it.
        ns_info = apiserver.server.resources.get("", "v1", "namespaces")
        ns = await apiserver.server.create_object(ns_info, "", {"metadata": {"name": "other"}}, manager="test")
        bookmark = await _line(r)
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"]["kind"] == "ConfigMap"
        assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(ns["metadata"]["resourceVersion"])
        await _create(apiserver, "second")
        later = await _line(r)
        while later["type"] == "BOOKMARK":  # another quiet interval may have passed meanwhile
            later = await _line(r)
        assert (later["type"], later["object"]["metadata"]["name"]) == ("ADDED", "second")


async def test_timeout_seconds_ends_the_stream_after_its_events(apiserver: RunningApiServer) -> None:
    rv = apiserver.store.rv
    async with aiohttp.ClientSession() as s, s.get(
            apiserver.url + CMS + f"?watch=true&resourceVersion={rv}&timeoutSeconds=1") as r:
        await _create(apiserver, "before-timeout")
        async with asyncio.timeout(20):
            body = await r.content.read()  # to the end of the stream
    events = [json.loads(line) for line in body.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "before-timeout")]
    assert apiserver.store.watcher_count("/configmaps") == 0


async def test_a_watcher_that_stops_reading_gets_every_event_once_it_reads_again(apiserver: RunningApiServer) -> None:
    """Backpressure: a watcher that reads nothing while 6 MiB of events are written makes the
    server wait for its socket to drain (not buffer without bound, not drop the stream); once it
    reads, every event arrives in order in valid HTTP/1.1 chunks."""
    rv = apiserver.store.rv
    host, port = apiserver.url.split("://", 1)[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=60 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
        info = apiserver.server.resources.get("", "v1", "configmaps")
        names = [f"big{i:03d}" for i in range(200)]
        for n in names:
            await apiserver.server.create_object(info, "default", {"metadata": {"name": n}, "data": {"k": n * 8192}},
                                                 manager="test")
            await asyncio.sleep(0)  # let the watcher run: it writes until its socket is full, then waits
        await asyncio.sleep(0.5)
        assert apiserver.store.watcher_count("/configmaps") == 1  # waiting, not dropped
        body, events = b"", []
        async with asyncio.timeout(30):
            while len(events) < len(names):
                size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
                assert size > 0, "the stream ended early"
                body += (await reader.readexactly(size + 2))[:-2]
                *lines, body = body.split(b"\n")
                events += [json.loads(line) for line in lines]
    finally:
        writer.close()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", n) for n in names]
    assert all(e["object"]["data"]["k"] == e["object"]["metadata"]["name"] * 8192 for e in events)
