"""A running apiserver whose state.db is truncated, replaced or removed under it (issue 40 item 7):
it must stop acknowledging writes it cannot keep, say why, and fail its health checks as kube's
does when etcd fails. Before: every write after the damage was a 201 and /readyz stayed `ok`."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.storage.datadir import DataDirError
from tests.harness.apiserver import RunningApiServer

CMS = "/api/v1/namespaces/default/configmaps"


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def _req(srv: RunningApiServer, method: str, path: str, body: Any = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body)
    headers = {"Content-Type": "application/json"} if data is not None else {}
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, data=data, headers=headers) as r:
        return r.status, await r.text()


def _truncate(db: Path) -> None:
    with open(db, "r+b") as f:
        f.truncate(0)


def _replace(db: Path) -> None:
    other = db.with_name("other.db")
    other.write_bytes(db.read_bytes())  # a copy of the database, as a restore under a running server
    os.replace(other, db)


def _remove(db: Path) -> None:
    db.unlink()


@pytest.mark.parametrize(("damage", "problem"), [
    (_truncate, "was truncated to 0 bytes (it had "),
    (_replace, "was replaced by another file"),
    (_remove, "was removed"),
])
async def test_writes_are_refused_and_readiness_fails_once_state_db_is_damaged(
        apiserver: RunningApiServer, damage: Callable[[Path], None], problem: str) -> None:
    assert (await _req(apiserver, "POST", CMS, _cm("before")))[0] == 201
    apiserver.store.sync()  # in SQLite, not only in the journal
    assert await _req(apiserver, "GET", "/readyz") == (200, "ok")
    db = apiserver.data_dir / "state.db"

    damage(db)

    # the server notices within a second on its own; a probe asks at once
    status, text = await _req(apiserver, "GET", "/readyz")
    assert (status, text) == (500, "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n"
                                   "[-]etcd-readiness failed: reason withheld\nreadyz check failed\n")
    assert (await _req(apiserver, "GET", "/healthz"))[0] == 500
    assert (await _req(apiserver, "GET", "/livez"))[0] == 500
    status, text = await _req(apiserver, "GET", "/readyz/etcd")
    assert status == 500 and text.startswith(f"internal server error: database {db} {problem}")

    cause = f"storage write failed: database {db} {problem}"
    changed = {**_cm("before"), "data": {"k": "changed"}}
    for method, path, body in [("POST", CMS, _cm("after")), ("PUT", CMS + "/before", changed),
                               ("DELETE", CMS + "/before", None)]:
        status, text = await _req(apiserver, method, path, body)
        answer = json.loads(text)
        assert (status, answer["reason"]) == (500, "InternalError"), (method, text)
        assert answer["message"].startswith(f"Internal error occurred: {cause}"), answer["message"]
        assert "it refuses writes it could not keep" in answer["message"]
    # nothing was acknowledged, nothing changed: reads still answer from memory
    status, text = await _req(apiserver, "GET", CMS)
    assert status == 200 and [(i["metadata"]["name"], i["data"]) for i in json.loads(text)["items"]] == [
        ("before", {"k": "v"})]


async def test_a_server_that_stopped_on_a_truncated_database_does_not_start_empty(tmp_path: Path) -> None:
    srv = RunningApiServer(tmp_path / "apiserver")
    await srv.start()
    try:
        assert (await _req(srv, "POST", CMS, _cm("before")))[0] == 201
        srv.store.sync()
        _truncate(srv.data_dir / "state.db")
        for _ in range(100):  # the journal's thread looks every second
            if srv.store.failure is not None:
                break
            await asyncio.sleep(0.05)
        assert srv.store.failure is not None
        assert (await _req(srv, "POST", CMS, _cm("after")))[0] == 500
    finally:
        await srv.server.stop()
    assert (srv.data_dir / "state.db").stat().st_size == 0  # nothing written into it on the way out
    with pytest.raises(DataDirError, match="is empty"):
        await srv.restart()


async def test_a_truncated_journal_refuses_writes_instead_of_crashing_the_server(apiserver: RunningApiServer) -> None:
    """The journal is a memory map: a write into the pages a truncation cut off would kill the
    process (SIGBUS). The store notices the truncation and refuses the writes first."""
    assert (await _req(apiserver, "POST", CMS, _cm("before")))[0] == 201
    journal = apiserver.data_dir / "state.db-log"
    _truncate(journal)
    for _ in range(100):  # inotify wakes the store's check at once; without it, within a second
        if apiserver.store.failure is not None:
            break
        await asyncio.sleep(0.05)
    status, text = await _req(apiserver, "POST", CMS, _cm("after"))
    assert status == 500 and f"journal {journal} was truncated" in json.loads(text)["message"]
    assert (await _req(apiserver, "GET", "/readyz"))[0] == 500
