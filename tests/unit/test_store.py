"""The store's contract: rv sequence, persistence, private files, refusing damaged files, history/410,
watch semantics, callbacks."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.storage.journal import StoreInUse, UnusableStore
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import Obj, Watch, WatchEvent

CM = "/configmaps"
NS = "/namespaces"


def obj(name: str, ns: str = "default", labels: dict[str, str] | None = None, **extra: Any) -> Obj:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **extra}


async def take(w: Watch, n: int, within: float = 2.0) -> list[WatchEvent]:
    out: list[WatchEvent] = []

    async def run() -> None:
        async for ev in w:
            out.append(ev)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), within)
    return out


async def drain(w: Watch, within: float = 2.0) -> list[WatchEvent]:
    """Everything until the watch ends."""
    return [ev async for ev in _until_end(w, within)]


async def _until_end(w: Watch, within: float) -> Any:
    it = w.__aiter__()
    while True:
        try:
            yield await asyncio.wait_for(it.__anext__(), within)
        except StopAsyncIteration:
            return


def summary(evs: list[WatchEvent]) -> list[tuple[str, str, int]]:
    return [(e.type, e.obj["metadata"]["name"], e.rv) for e in evs]


# ----- resourceVersion and CRUD ---------------------------------------------------------


def test_rv_sequence_and_stored_copy() -> None:
    s = Store()
    s.open()
    assert s.rv == 0
    a = obj("a")
    stored = s.create(CM, a)
    assert s.rv == 1 and stored["metadata"]["resourceVersion"] == "1"
    assert "resourceVersion" not in a["metadata"], "caller's object is not modified"
    assert s.get(CM, "default", "a") is stored
    up = s.update(CM, {**stored, "data": {"k": "v"}})
    assert up["metadata"]["resourceVersion"] == "2" and s.get(CM, "default", "a") is up
    gone = s.delete(CM, "default", "a")
    assert gone["metadata"]["resourceVersion"] == "3" and gone["data"] == {"k": "v"}
    assert s.get(CM, "default", "a") is None and s.rv == 3
    s.create(NS, obj("default", ns=""))
    assert s.rv == 4 and s.get(NS, "", "default") is not None


def test_guards_against_callers_mistakes() -> None:
    s = Store()
    s.create(CM, obj("a"))
    with pytest.raises(ApiError) as e:
        s.create(CM, obj("a"))
    assert e.value.code == 409 and e.value.message == 'configmaps "a" already exists'
    with pytest.raises(ApiError) as e:
        s.update(CM, obj("zz"))
    assert e.value.code == 404
    with pytest.raises(ApiError) as e:
        s.delete("apps/deployments", "default", "zz")
    assert e.value.message == 'deployments.apps "zz" not found'
    assert s.rv == 1, "failed writes do not bump the rv"


def test_list_sorted_by_namespace_and_name_and_count() -> None:
    s = Store()
    names = [(f"ns-{random.randrange(20):02d}", f"o-{i:05d}") for i in range(10_000)]
    random.shuffle(names)
    for ns, name in names:
        s.create(CM, obj(name, ns))
    assert s.count(CM) == 10_000
    got = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in s.list(CM)]
    assert got == sorted(names)
    one = [o["metadata"]["name"] for o in s.list(CM, "ns-07")]
    assert one == sorted(n for ns, n in names if ns == "ns-07")
    assert s.list(CM, "nope") == [] and s.list("/other") == [] and s.count("/other") == 0
    # The index stays right across writes after it was built.
    s.delete(CM, *names[0])
    s.create(CM, obj("a-first", "ns-07"))
    s.create(CM, obj("z-last", "ns-99"))
    got = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in s.list(CM)]
    assert got == sorted([*names[1:], ("ns-07", "a-first"), ("ns-99", "z-last")])
    assert s.list(CM, "ns-07")[0]["metadata"]["name"] == "a-first"


def test_list_returns_a_fresh_list_each_time() -> None:
    s = Store()
    s.create(CM, obj("a"))
    first = s.list(CM)
    first.append(obj("junk"))
    assert len(s.list(CM)) == 1
    up = s.update(CM, {**s.list(CM)[0], "data": {"x": "1"}})
    assert s.list(CM) == [up], "an update invalidates the cached list"


def test_namespace_prefix_does_not_leak_into_neighbours() -> None:
    s = Store()
    for ns in ("a", "a-b", "ab", "a\x01"):
        s.create(CM, obj("x", ns))
    assert [o["metadata"]["namespace"] for o in s.list(CM, "a")] == ["a"]


# ----- persistence ----------------------------------------------------------------------


def test_persistence_across_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite")
    s = Store(path)
    s.open()
    s.create(CM, obj("b", data={"k": "ü"}))
    s.create(CM, obj("a"))
    s.create(NS, obj("default", ns=""))
    up = s.update(CM, {**s.get(CM, "default", "a"), "data": {"n": 1}})  # type: ignore[dict-item]
    s.close()

    s2 = Store(path)
    s2.open()
    assert s2.rv == 4
    assert s2.get(CM, "default", "a") == up
    assert s2.get(CM, "default", "b")["data"] == {"k": "ü"}  # type: ignore[index]
    assert [o["metadata"]["name"] for o in s2.list(CM)] == ["a", "b"]
    assert s2.count(NS) == 1
    # Deletes are persisted and never make the rv go backwards.
    s2.delete(CM, "default", "a")
    s2.delete(CM, "default", "b")
    s2.close()

    s3 = Store(path)
    s3.open()
    assert s3.rv == 6 and s3.count(CM) == 0
    assert s3.create(CM, obj("c"))["metadata"]["resourceVersion"] == "7"
    s3.close()


OLD_LAYOUTS = {
    "without rowid": """CREATE TABLE objects (key TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
        rv INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (key, namespace, name)) WITHOUT ROWID;""",
    "rowid with a unique index": """CREATE TABLE objects (key TEXT NOT NULL, namespace TEXT NOT NULL,
        name TEXT NOT NULL, rv INTEGER NOT NULL, data BLOB NOT NULL, UNIQUE (key, namespace, name));""",
}


@pytest.mark.parametrize("layout", OLD_LAYOUTS)
def test_a_data_dir_of_an_older_layout_is_converted_and_keeps_everything(tmp_path: Path, layout: str) -> None:
    """Data dirs written before the rowid-only layout: their objects, order and rv survive the
    conversion, and later writes land on the converted rows."""
    path = str(tmp_path / "db.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(OLD_LAYOUTS[layout] + """
        CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO meta (k, v) VALUES ('rv', 9);""")
    for rv, name in ((3, "b"), (5, "a"), (7, "ü")):
        o = obj(name, data={"n": str(rv)})
        o["metadata"]["resourceVersion"] = str(rv)
        db.execute("INSERT INTO objects VALUES (?, ?, ?, ?, ?)", (CM, "default", name, rv, json.dumps(o)))
    db.close()

    s = Store(path)
    s.open()
    assert s.rv == 9
    assert [(o["metadata"]["name"], o["data"]["n"]) for o in s.list(CM)] == [("a", "5"), ("b", "3"), ("ü", "7")]
    s.update(CM, {**s.get(CM, "default", "a"), "data": {"n": "again"}})  # type: ignore[dict-item]
    s.create(CM, obj("c"))
    s.delete(CM, "default", "b")
    s.create(CM, obj("b", data={"n": "back"}))  # a new row: the deleted one is gone
    s.close()
    check = sqlite3.connect(path)
    columns = [r[1] for r in check.execute("PRAGMA table_info(objects)")]
    assert columns == ["id", "key", "namespace", "name", "rv", "data"]
    assert check.execute("SELECT name, rv FROM objects ORDER BY name").fetchall() == \
        [("a", 10), ("b", 13), ("c", 11), ("ü", 7)]
    check.close()

    s2 = Store(path)
    s2.open()
    assert s2.rv == 13
    assert [(o["metadata"]["name"], o.get("data", {}).get("n")) for o in s2.list(CM)] == \
        [("a", "again"), ("b", "back"), ("c", None), ("ü", "7")]
    s2.close()


_WRITER = """
import sys, time
from isthmus.apiserver.storage.store import Store
s = Store(sys.argv[1])
s.open()
for i in range(50):
    s.create({cm!r}, {{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": f"o{{i}}", "namespace": "default"}}}})
s.delete({cm!r}, "default", "o0")
print("written", flush=True)
time.sleep(60)
"""


def test_committed_writes_survive_a_killed_process(tmp_path: Path) -> None:
    """Every write is committed before it returns: after a SIGKILL (no close, no checkpoint) the
    next opener sees them all, and the dead process's hold on the database is gone with it."""
    path = str(tmp_path / "db.sqlite")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER.format(cm=CM), path], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "written\n"
        with pytest.raises(StoreInUse, match="in use by another process"):
            Store(path, lock_wait=0.2).open()  # held while the writer lives
    finally:
        writer.kill()
        writer.wait()
    other = Store(path)
    other.open()
    assert other.rv == 51 and other.count(CM) == 49
    other.close()


def test_history_after_restart_starts_at_restored_rv(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite")
    s = Store(path)
    s.open()
    for i in range(10):
        s.create(CM, obj(f"o{i}"))
    s.close()
    s2 = Store(path)
    s2.open()
    assert s2.oldest_rv == 10
    s2.watch(CM, None, 10).close()  # exactly the restored rv resumes
    with pytest.raises(ApiError) as e:
        s2.watch(CM, None, 5)
    assert e.value.code == 410 and e.value.reason == "Expired"
    assert e.value.message == "too old resource version: 5 (10)"
    s2.close()


def test_unserializable_object_is_rejected_without_side_effects(tmp_path: Path) -> None:
    s = Store(str(tmp_path / "db.sqlite"))
    s.open()
    with pytest.raises(ApiError) as e:
        s.create(CM, obj("a", data={"bad": {1, 2}}))
    assert e.value.code == 500
    assert s.rv == 0 and s.get(CM, "default", "a") is None
    assert s.create(CM, obj("a"))["metadata"]["resourceVersion"] == "1"
    s.close()


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_database_wal_and_journal_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """They hold Secrets; SQLite's own default would be 0644 under the usual umask 022. There is no
    -shm file: the store holds the database exclusively, and SQLite keeps the WAL index in memory."""
    path = tmp_path / "state.db"
    old = os.umask(0o022)
    try:
        s = Store(str(path))
        s.open()
        s.create(CM, obj("a"))
        modes = {p.name: _mode(p) for p in tmp_path.iterdir()}
        s.close()
    finally:
        os.umask(old)
    assert modes == {"state.db": 0o600, "state.db-wal": 0o600, "state.db-log": 0o600}


def test_existing_readable_database_is_made_private_on_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = Store(str(path))
    s.open()
    s.create(CM, obj("a"))
    s.close()
    os.chmod(path, 0o644)
    (tmp_path / "state.db-shm").write_bytes(b"\0" * 32768)  # left by an older version, which shared its WAL index
    os.chmod(tmp_path / "state.db-shm", 0o644)
    s2 = Store(str(path))
    s2.open()
    assert s2.get(CM, "default", "a") is not None
    assert {p.name: _mode(p) for p in tmp_path.iterdir()} == {
        "state.db": 0o600, "state.db-wal": 0o600, "state.db-shm": 0o600, "state.db-log": 0o600}
    s2.close()


def _foreign_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE other (a)")
    db.commit()
    db.close()


def _truncated_store(path: Path) -> None:
    s = Store(str(path))
    s.open()
    for i in range(200):
        s.create(CM, obj(f"o{i}", data={"k": "v" * 200}))
    s.close()
    path.write_bytes(path.read_bytes()[:4096 * 3])


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    (lambda p: p.write_bytes(b"not a database at all, just some text\n" * 50), "is not an SQLite database"),
    (_foreign_sqlite, "has no isthmus tables (objects, meta)"),
    (_truncated_store, "is unreadable (database disk image is malformed)"),
], ids=["empty", "garbage", "foreign", "truncated"])
def test_unusable_database_is_refused_and_left_untouched(tmp_path: Path, make: Any, problem: str) -> None:
    """Opening must not turn a damaged store into a fresh, empty one (that loses every object silently)."""
    path = tmp_path / "state.db"
    make(path)
    before = path.read_bytes()
    with pytest.raises(UnusableStore) as e:
        Store(str(path)).open()
    assert str(e.value) == f"database {path} {problem}"
    assert path.read_bytes() == before


# ----- history and watches --------------------------------------------------------------


async def test_watch_replays_history_then_live_without_gaps() -> None:
    s = Store()
    s.create(CM, obj("a"))  # rv 1
    s.create("/secrets", obj("s"))  # rv 2: another resource, not replayed
    s.update(CM, {**s.get(CM, "default", "a"), "data": {}})  # type: ignore[dict-item]  # rv 3
    w = s.watch(CM, None, 1)
    s.create(CM, obj("b"))  # rv 4
    s.delete(CM, "default", "a")  # rv 5
    evs = await take(w, 3)
    assert summary(evs) == [("MODIFIED", "a", 3), ("ADDED", "b", 4), ("DELETED", "a", 5)]
    assert evs[2].obj["metadata"]["resourceVersion"] == "5"
    assert evs[2].prev is not None and evs[2].prev["metadata"]["resourceVersion"] == "3"
    w.close()
    assert s.watcher_count() == 0


async def test_watch_from_zero_replays_everything_and_none_means_future_only() -> None:
    s = Store()
    s.create(CM, obj("a"))
    s.create(CM, obj("b"))
    w0 = s.watch(CM, None, 0)
    wn = s.watch(CM, None, None)
    s.create(CM, obj("c"))
    assert summary(await take(w0, 3)) == [("ADDED", "a", 1), ("ADDED", "b", 2), ("ADDED", "c", 3)]
    assert summary(await take(wn, 1)) == [("ADDED", "c", 3)]


async def test_watch_namespace_filter() -> None:
    s = Store()
    w = s.watch(CM, "team-a", 0)
    s.create(CM, obj("x", "team-b"))
    s.create(CM, obj("y", "team-a"))
    assert summary(await take(w, 1)) == [("ADDED", "y", 2)]


async def test_history_cap_and_410() -> None:
    s = Store(history=5)
    for i in range(8):
        s.create(CM, obj(f"o{i}"))  # rvs 1..8; retained 4..8
    assert s.oldest_rv == 3
    with pytest.raises(ApiError) as e:
        s.watch(CM, None, 2)
    assert e.value.code == 410 and e.value.message == "too old resource version: 2 (3)"
    w = s.watch(CM, None, 3)
    assert [ev.rv for ev in await take(w, 5)] == [4, 5, 6, 7, 8]


async def test_history_keeps_five_minutes_of_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """As etcd compacted every five minutes: an idle cluster's steady writes (leases, heartbeats) do
    not pile up in memory until the count cap, and a watch from before the window gets 410."""
    now = [1000.0]
    monkeypatch.setattr("isthmus.apiserver.storage.store.time.monotonic", lambda: now[0])
    s = Store()
    for i in range(400):  # one write a second for 400 s
        s.create(CM, obj(f"o{i}"))
        now[0] += 1.0
    s.create(CM, obj("last"))  # rv 401, at 1400 s: everything before 1100 s is gone
    assert 95 <= s.oldest_rv <= 101
    with pytest.raises(ApiError) as e:
        s.watch(CM, None, 50)
    assert e.value.code == 410
    w = s.watch(CM, None, 300)
    assert [ev.rv for ev in await take(w, 101)] == list(range(301, 402))
    unbounded = Store(history_seconds=0)
    now[0] = 0.0
    for i in range(400):
        unbounded.create(CM, obj(f"o{i}"))
        now[0] += 1.0
    assert unbounded.oldest_rv == 0


async def test_history_is_per_resource() -> None:
    s = Store(history=3)
    s.create(CM, obj("a"))  # rv 1
    for i in range(3):
        s.create("/secrets", obj(f"s{i}"))  # rvs 2..4 push rv 1 out of the global window
    assert s.oldest_rv == 1
    assert s.oldest_rv_for("/secrets") == 0, "secrets lost nothing"
    w = s.watch("/secrets", None, 0)
    assert [ev.rv for ev in await take(w, 3)] == [2, 3, 4]
    with pytest.raises(ApiError):
        s.watch(CM, None, 0)
    s.watch(CM, None, 1).close()


async def test_compact_forces_410() -> None:
    s = Store()
    for i in range(5):
        s.create(CM, obj(f"o{i}"))
    s.compact(3)
    assert s.oldest_rv == 3
    with pytest.raises(ApiError):
        s.watch(CM, None, 2)
    assert [ev.rv for ev in await take(s.watch(CM, None, 3), 2)] == [4, 5]
    s.compact()
    assert s.oldest_rv == 5
    with pytest.raises(ApiError) as e:
        s.watch(CM, None, 4)
    assert e.value.message == "too old resource version: 4 (5)"
    w = s.watch(CM, None, 5)
    s.create(CM, obj("new"))
    assert summary(await take(w, 1)) == [("ADDED", "new", 6)]


async def test_selector_enter_and_leave() -> None:
    s = Store()
    s.create(CM, obj("a", labels={"app": "web"}))  # rv 1
    w = s.watch(CM, None, 0, match=lambda o: o["metadata"].get("labels", {}).get("app") == "web")
    s.create(CM, obj("b", labels={"app": "db"}))  # rv 2: never matches → skipped
    a = s.get(CM, "default", "a")
    assert a is not None
    a = s.update(CM, {**a, "data": {"x": "1"}})  # rv 3: still matches → MODIFIED
    a = s.update(CM, {**a, "metadata": {**a["metadata"], "labels": {"app": "db"}}})  # rv 4: leaves
    b = s.get(CM, "default", "b")
    assert b is not None
    s.update(CM, {**b, "metadata": {**b["metadata"], "labels": {"app": "web"}}})  # rv 5: enters
    s.delete(CM, "default", "a")  # rv 6: did not match before → skipped
    s.delete(CM, "default", "b")  # rv 7: matched → DELETED
    evs = await take(w, 5)
    assert summary(evs) == [
        ("ADDED", "a", 1),
        ("MODIFIED", "a", 3),
        ("DELETED", "a", 4),
        ("ADDED", "b", 5),
        ("DELETED", "b", 7),
    ]
    assert evs[2].obj["metadata"]["labels"] == {"app": "db"}, "leave carries the new object"


async def test_overflow_closes_slow_watcher_but_drains_a_gap_free_prefix() -> None:
    s = Store(watch_queue=10)
    slow = s.watch(CM, None, None)
    fast = s.watch(CM, None, None)
    got_fast: list[int] = []

    async def consume() -> None:
        async for ev in fast:
            got_fast.append(ev.rv)
            if len(got_fast) == 30:
                return

    task = asyncio.create_task(consume())
    for i in range(30):
        s.create(CM, obj(f"o{i}"))
        await asyncio.sleep(0)
    await asyncio.wait_for(task, 2)
    assert got_fast == list(range(1, 31))
    assert slow.closed and slow.overflowed and not fast.overflowed
    assert [ev.rv for ev in await drain(slow)] == list(range(1, 11))
    assert s.watcher_count(CM) == 1


async def test_close_watches_ends_streams() -> None:
    s = Store()
    w1 = s.watch(CM, None, None)
    w2 = s.watch("/secrets", None, None)
    s.create(CM, obj("a"))
    results = asyncio.gather(drain(w1), drain(w2))
    await asyncio.sleep(0)
    s.close_watches()
    r1, r2 = await results
    assert r2 == [] and summary(r1) in ([], [("ADDED", "a", 1)])
    assert s.watcher_count() == 0
    # A closed watch gets nothing more, and new watches work.
    s.create(CM, obj("b"))
    assert await drain(w1) == []
    w3 = s.watch(CM, None, 1)
    assert summary(await take(w3, 1)) == [("ADDED", "b", 2)]


async def test_close_wakes_a_waiting_consumer() -> None:
    s = Store()
    w = s.watch(CM, None, None)
    task = asyncio.create_task(drain(w))
    await asyncio.sleep(0.01)
    w.close()
    assert await asyncio.wait_for(task, 1) == []
    w.close()  # idempotent


async def test_many_watchers_each_see_every_event_in_order() -> None:
    s = Store()
    ws = [s.watch(CM, None, None) for _ in range(100)]
    tasks = [asyncio.create_task(take(w, 50)) for w in ws]
    for i in range(50):
        s.create(CM, obj(f"o{i}"))
        if i % 7 == 0:
            await asyncio.sleep(0)
    for t in tasks:
        assert [ev.rv for ev in await t] == list(range(1, 51))


# ----- callbacks ------------------------------------------------------------------------


def test_on_write_callbacks_in_order_and_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    s = Store()
    seen: list[str] = []

    def boom(ev: WatchEvent) -> None:
        seen.append(f"boom {ev.type}")
        raise RuntimeError("callback bug")

    s.on_write(lambda ev: seen.append(f"first {ev.type} {ev.rv}"))
    s.on_write(boom)
    s.on_write(lambda ev: seen.append(f"third {ev.type}"))
    with caplog.at_level(logging.ERROR):
        stored = s.create(CM, obj("a"))
    assert stored["metadata"]["resourceVersion"] == "1" and s.get(CM, "default", "a") is stored
    assert seen == ["first ADDED 1", "boom ADDED", "third ADDED"]
    assert "callback bug" in caplog.text


def test_on_write_callbacks_with_keys_see_only_those_resources_in_registration_order() -> None:
    s = Store()
    seen: list[str] = []
    s.on_write(lambda ev: seen.append(f"all {ev.key}"))
    s.on_write(lambda ev: seen.append(f"secrets {ev.key}"), keys=["/secrets"])
    s.create(CM, obj("a"))  # told to `all` only
    s.on_write(lambda ev: seen.append(f"both {ev.key}"), keys=("/secrets", CM))  # registered after a write
    s.create("/secrets", obj("s"))
    s.create(CM, obj("b"))
    assert seen == [f"all {CM}", "all /secrets", "secrets /secrets", "both /secrets", f"all {CM}", f"both {CM}"]


async def test_callback_writes_come_after_in_rv_order() -> None:
    """A GC-like callback that deletes dependents: watchers still see strict rv order."""
    s = Store()
    s.create(CM, obj("owner"))
    s.create(CM, obj("child"))

    def gc(ev: WatchEvent) -> None:
        if ev.type == "DELETED" and ev.obj["metadata"]["name"] == "owner":
            s.delete(CM, "default", "child")

    s.on_write(gc)
    w = s.watch(CM, None, 2)
    s.delete(CM, "default", "owner")
    assert summary(await take(w, 2)) == [("DELETED", "owner", 3), ("DELETED", "child", 4)]


def test_drain_returns_ready_events_in_order_in_bounded_batches() -> None:
    s = Store()
    s.open()
    for i in range(5):
        s.create("/configmaps", obj(f"r{i}"))
    w = s.watch("/configmaps", None, 0)  # replays the five
    for i in range(5, 8):
        s.create("/configmaps", obj(f"r{i}"))  # three live ones
    batches = []
    while not w.done and (batch := w.drain(limit=3)):
        batches.append([ev.obj["metadata"]["name"] for ev in batch])
    assert batches == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6", "r7"]]
    assert w.drain() == []
    w.close()
    assert w.done and w.drain() == []
