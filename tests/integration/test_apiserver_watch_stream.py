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

from tests.conftest import RunningApiServer

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
