"""The store's journal: every write is in state.db-log before it returns, batches move into SQLite on a
thread of their own, and an open replays exactly the writes SQLite lacks, whatever a crash left."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.storage import datadir
from isthmus.apiserver.storage import journal as storage
from isthmus.apiserver.storage.journal import JOURNAL, JOURNAL_OLD
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import Obj

CM = "/configmaps"


def obj(name: str, **extra: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, **extra}


def _query(where: Path | Store, sql: str) -> list[Any]:
    """SQLite's own content: through the store's connection while it holds the database."""
    if isinstance(where, Store):
        assert where._db is not None
        return where._db.execute(sql).fetchall()
    db = sqlite3.connect(where)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def rows(where: Path | Store) -> dict[str, int]:
    """name -> rv, as SQLite holds them."""
    return dict(_query(where, "SELECT name, rv FROM objects"))


def counter(where: Path | Store) -> int:
    return int(_query(where, "SELECT v FROM meta WHERE k = 'rv'")[0][0])


def journal_files(tmp: Path) -> dict[str, int]:
    """name -> bytes of records (an open journal's file has zeros past them: its reserved room)."""
    return {p.name: len(p.read_bytes().rstrip(b"\0")) for p in sorted(tmp.iterdir()) if "-log" in p.name}


FRESH = {"state.db-log": 0}  # an open store's journal with nothing in it


_KILLED = """
import os, sys
from isthmus.apiserver.storage.store import Store
s = Store(sys.argv[1])
s.open()
{writes}
os.kill(os.getpid(), 9)
"""


def killed_writer(path: Path, writes: str) -> None:
    """A process that writes, then dies by SIGKILL: no close, no flush."""
    subprocess.run([sys.executable, "-c", _KILLED.format(writes=writes), str(path)], check=False)


def test_a_killed_process_leaves_its_writes_in_the_journal_and_the_next_open_moves_them_in(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    killed_writer(path, "\n".join([
        "for i in range(30): s.create('/configmaps', {'metadata': {'name': f'o{i}', 'namespace': 'default'}})",
        "s.update('/configmaps', {**s.get('/configmaps', 'default', 'o1'), 'data': {'k': 'v'}})",
        "s.delete('/configmaps', 'default', 'o2')",
    ]))
    assert list(journal_files(tmp_path)) == ["state.db-log"]
    assert rows(path) == {}, "nothing reached SQLite before the kill"
    s = Store(str(path))
    s.open()
    assert s.rv == 32 and s.count(CM) == 29
    assert s.get(CM, "default", "o1")["data"] == {"k": "v"}  # type: ignore[index]
    assert s.get(CM, "default", "o2") is None
    assert journal_files(tmp_path) == FRESH, "replayed writes are committed, then the journal starts afresh"
    assert len(rows(s)) == 29 and rows(s)["o1"] == 31 and counter(s) == 32
    assert s.create(CM, obj("next"))["metadata"]["resourceVersion"] == "33"
    s.close()


def test_batches_move_into_sqlite_while_the_store_runs(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = Store(str(path))
    s.open()
    for i in range(10):
        s.create(CM, obj(f"o{i}"))
    s.delete(CM, "default", "o3")
    s.create(CM, obj("o3", data={"again": "yes"}))  # a delete and a create of one name in one batch
    s.sync()  # what the journal's thread does after 1,000 writes or 5 s
    assert journal_files(tmp_path) == FRESH, "a fresh journal after the batch"
    assert rows(s) == {**{f"o{i}": i + 1 for i in range(10)}, "o3": 12} and counter(s) == 12
    s.delete(CM, "default", "o5")
    s.update(CM, {**s.get(CM, "default", "o6"), "data": {"n": "1"}})  # type: ignore[dict-item]
    s.sync()
    assert "o5" not in rows(s) and rows(s)["o6"] == 14 and counter(s) == 14
    s.close()
    assert journal_files(tmp_path) == {}
    again = Store(str(path))
    again.open()
    assert again.rv == 14 and again.count(CM) == 9
    assert again.get(CM, "default", "o3")["data"] == {"again": "yes"}  # type: ignore[index]
    again.close()


def test_a_write_cut_short_by_a_crash_is_dropped_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The last record incomplete: that write never returned, so it was never acknowledged."""
    path = tmp_path / "state.db"
    killed_writer(path, "for i in range(5): s.create('/configmaps', {'metadata': {'name': f'o{i}', 'namespace': 'default'}})")
    log = tmp_path / "state.db-log"
    whole = log.read_bytes().rstrip(b"\0")
    log.write_bytes(whole + whole[:40])  # the head of a sixth record and part of its payload
    s = Store(str(path))
    with caplog.at_level(logging.WARNING, "isthmus.apiserver.storage"):
        s.open()
    assert s.rv == 5 and s.count(CM) == 5
    assert journal_files(tmp_path) == FRESH and not caplog.records
    s.close()


def test_a_damaged_journal_replays_the_writes_before_the_damage_and_is_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.db"
    killed_writer(path, "for i in range(6): s.create('/configmaps', {'metadata': {'name': f'o{i}', 'namespace': 'default'}})")
    log = tmp_path / "state.db-log"
    raw = bytearray(log.read_bytes())
    third = raw.index(b"[3,")  # the payload of rv 3
    raw[third + 30] ^= 0xFF
    log.write_bytes(bytes(raw))
    s = Store(str(path))
    with caplog.at_level(logging.WARNING, "isthmus.apiserver.storage"):
        s.open()
    assert s.rv == 2 and sorted(o["metadata"]["name"] for o in s.list(CM)) == ["o0", "o1"]
    kept = [name for name in journal_files(tmp_path) if name != "state.db-log"]
    assert len(kept) == 1 and kept[0].startswith("state.db-log.damaged-")
    assert (tmp_path / kept[0]).read_bytes() == bytes(raw), "the damaged file is kept as it was"
    assert "fails its checksum" in caplog.text
    s.close()


def test_a_crash_between_a_batch_and_its_cleanup_replays_each_write_once(tmp_path: Path) -> None:
    """Killed after the batch of state.db-log.old was committed but before the file went: its
    writes are in SQLite (skipped by rv), and the newer journal's are replayed."""
    path = tmp_path / "state.db"
    killed_writer(path, "\n".join([
        "for i in range(4): s.create('/configmaps', {'metadata': {'name': f'o{i}', 'namespace': 'default'}})",
        "import shutil; shutil.copy(sys.argv[1] + '-log', sys.argv[1] + '-log.keep')",
        "s.sync()",
        "os.replace(sys.argv[1] + '-log.keep', sys.argv[1] + '-log.old')",
        "s.update('/configmaps', {**s.get('/configmaps', 'default', 'o0'), 'data': {'k': 'late'}})",
        "s.delete('/configmaps', 'default', 'o1')",
    ]))
    assert list(journal_files(tmp_path)) == ["state.db-log", "state.db-log.old"]
    assert counter(path) == 4
    s = Store(str(path))
    s.open()
    assert s.rv == 6 and sorted(o["metadata"]["name"] for o in s.list(CM)) == ["o0", "o2", "o3"]
    assert s.get(CM, "default", "o0")["data"] == {"k": "late"}  # type: ignore[index]
    assert journal_files(tmp_path) == FRESH and counter(s) == 6
    s.close()


def test_a_failed_append_changes_nothing_and_the_journal_stays_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal reserves its room on disk before it uses it: a full disk refuses the write that
    needs more room (500, nothing stored), and the writes on either side stay readable."""
    monkeypatch.setattr(storage, "_CHUNK", 4096)
    path = tmp_path / "state.db"
    s = Store(str(path))
    s.open()
    real = os.posix_fallocate
    n = 0
    while (tmp_path / "state.db-log").stat().st_size == 4096:
        s.create(CM, obj(f"a{n}", data={"pad": "x" * 200}))
        n += 1
    assert (tmp_path / "state.db-log").stat().st_size > 4096, "the journal grew"

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage.os, "posix_fallocate", full)
    with pytest.raises(ApiError) as e:
        for i in range(100):  # until the grown room is used up
            s.create(CM, obj(f"b{i}", data={"pad": "x" * 200}))
    assert e.value.code == 500 and "No space left on device" in e.value.message
    refused = f"b{i}"
    assert s.get(CM, "default", refused) is None and s.rv == n + i
    monkeypatch.setattr(storage.os, "posix_fallocate", real)
    assert s.create(CM, obj("c"))["metadata"]["resourceVersion"] == str(n + i + 1)
    journal = (tmp_path / "state.db-log").read_bytes()
    s.close()
    copy = tmp_path / "copy"  # as if killed before the close: only the journal holds the writes
    copy.mkdir()
    (copy / "state.db-log").write_bytes(journal)
    other = Store(str(copy / "state.db"))
    other.open()
    names = {o["metadata"]["name"] for o in other.list(CM)}
    assert other.rv == n + i + 1 and refused not in names
    assert names == {f"a{k}" for k in range(n)} | {f"b{k}" for k in range(i)} | {"c"}
    other.close()


def test_a_record_cut_short_in_the_journals_reserved_room_is_dropped_quietly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A process killed while it copied a record leaves its start followed by zeros: that write
    never returned. A damaged record with whole records after it is damage, as before."""
    path = tmp_path / "state.db"
    killed_writer(path, "for i in range(5): s.create('/configmaps', {'metadata': {'name': f'o{i}', 'namespace': 'default'}})")
    log = tmp_path / "state.db-log"
    raw = log.read_bytes()
    used = len(raw.rstrip(b"\0"))
    assert len(raw) > used, "a killed process leaves the reserved room behind its records"
    last = raw.rindex(b"[5,") - 8  # the last record's head
    log.write_bytes(raw[:last] + raw[last:used - 30] + b"\0" * (len(raw) - used + 30))
    s = Store(str(path))
    with caplog.at_level(logging.WARNING, "isthmus.apiserver.storage"):
        s.open()
    assert s.rv == 4 and s.count(CM) == 4 and not caplog.records
    s.close()


def test_a_failed_batch_is_kept_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.db"
    s = Store(str(path))
    s.open()
    s.create(CM, obj("a"))
    s.create(CM, obj("b"))
    journal = s._journal
    assert journal is not None
    real = journal._commit
    calls = []

    def failing(batch: Any) -> None:
        calls.append(len(batch))
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(journal, "_commit", failing)
    journal._flush()
    assert calls == [2] and list(journal_files(tmp_path)) == ["state.db-log", "state.db-log.old"]
    s.create(CM, obj("c"))  # goes on into the new journal meanwhile
    monkeypatch.setattr(journal, "_commit", real)
    journal._flush()  # the kept batch first
    assert rows(s) == {"a": 1, "b": 2} and list(journal_files(tmp_path)) == ["state.db-log"]
    journal._flush()
    assert rows(s) == {"a": 1, "b": 2, "c": 3}
    s.close()


def test_a_journal_without_its_database_is_evidence_of_use(tmp_path: Path) -> None:
    (tmp_path / (datadir.DB + JOURNAL)).write_bytes(b"x")
    assert datadir.evidence_of_use(tmp_path) == f"{tmp_path / 'state.db-log'} exists"
    (tmp_path / datadir.DB).write_bytes(b"")
    (tmp_path / (datadir.DB + JOURNAL_OLD)).write_bytes(b"y")
    kept = datadir.set_aside(tmp_path / datadir.DB)
    stem = kept[0].name
    assert [p.name for p in kept] == [stem, stem + "-log", stem + "-log.old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in kept)


def test_a_replay_sqlite_cannot_take_fails_the_open_and_keeps_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.db"
    killed_writer(path, "for i in range(3): s.create('/configmaps', {'metadata': {'name': f'o{i}', 'namespace': 'default'}})")
    before = (tmp_path / "state.db-log").read_bytes()

    def full_disk(*args: Any) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("isthmus.apiserver.storage.journal.commit", full_disk)
    with pytest.raises(OSError, match=r"cannot move the journal into the database \(database or disk is full\)"):
        Store(str(path)).open()
    assert (tmp_path / "state.db-log").read_bytes() == before
    monkeypatch.undo()
    s = Store(str(path))
    s.open()
    assert s.rv == 3 and s.count(CM) == 3
    s.close()


def test_a_batch_of_more_rows_than_one_statement_takes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = Store(str(path))
    s.open()
    for i in range(700):
        s.create(CM, obj(f"o{i:03d}"))
    s.sync()
    for i in range(0, 700, 2):
        s.update(CM, {**s.get(CM, "default", f"o{i:03d}"), "data": {"i": str(i)}})  # type: ignore[dict-item]
    for i in range(1, 700, 2):
        s.delete(CM, "default", f"o{i:03d}")
    s.sync()
    assert rows(s) == {f"o{i:03d}": 701 + i // 2 for i in range(0, 700, 2)} and counter(s) == 1400
    s.close()
    again = Store(str(path))
    again.open()
    assert again.count(CM) == 350 and again.get(CM, "default", "o698")["data"] == {"i": "698"}  # type: ignore[index]
    again.close()


def test_a_batch_sqlite_finds_corrupt_refuses_writes_from_then_on(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLITE_CORRUPT (`database disk image is malformed`) is not a passing fault like a full disk:
    retrying it kept acknowledging writes no restart could read (issue 40 item 7)."""
    s = Store(str(tmp_path / "state.db"))
    s.open()
    s.create(CM, obj("a"))
    journal = s._journal
    assert journal is not None
    calls = []

    def corrupt(batch: Any) -> None:
        calls.append(len(batch))
        e = sqlite3.DatabaseError("database disk image is malformed")
        e.sqlite_errorname = "SQLITE_CORRUPT"
        raise e

    monkeypatch.setattr(journal, "_commit", corrupt)
    journal._flush()
    assert s.failure is not None and "is damaged (database disk image is malformed)" in s.failure
    with pytest.raises(ApiError) as refused:
        s.create(CM, obj("b"))
    assert refused.value.code == 500 and "refuses writes it could not keep" in refused.value.message
    assert s.get(CM, "default", "b") is None
    journal._flush()  # nothing more is written into a damaged database
    assert calls == [1]
    s.close()
    assert journal_files(tmp_path)["state.db-log.old"] > 0  # the batch, kept for whoever restores it


def test_a_database_that_only_grew_is_not_taken_for_a_damaged_one(tmp_path: Path) -> None:
    s = Store(str(tmp_path / "state.db"))
    s.open()
    for i in range(300):
        s.create(CM, obj(f"cm-{i}", data={"k": "v" * 500}))
    s.sync()
    for i in range(300):
        s.delete(CM, "default", f"cm-{i}")
    s.sync()
    assert s.check() is None and s.failure is None
    s.create(CM, obj("after"))
    s.close()


def test_checking_the_files_keeps_the_database_held(tmp_path: Path) -> None:
    """The checks never open and close state.db: closing any descriptor of it would drop SQLite's
    POSIX locks, and a second apiserver could then open the data dir."""
    path = str(tmp_path / "state.db")
    s = Store(path)
    s.open()
    s.create(CM, obj("a"))
    s.sync()
    for _ in range(3):
        assert s.check() is None
    with pytest.raises(storage.StoreInUse):
        Store(path, lock_wait=0.2).open()
    s.close()
    other = Store(path)
    other.open()
    assert other.count(CM) == 1
    other.close()


def test_a_batch_growing_the_database_during_a_check_is_not_a_truncation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs on its own thread while batches grow state.db on the journal's: a batch that
    ends between the check's stat and its comparison once made a healthy file look truncated
    (`truncated to 12288 bytes (it had 1126400)`) and every later write was refused."""
    path = str(tmp_path / "state.db")
    s = Store(path)
    s.open()
    journal = s._journal
    assert journal is not None
    real_stat = os.stat

    def stat_then_a_batch_lands(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = real_stat(p, *args, **kwargs)
        if str(p) == path:
            journal._db_size = result.st_size + 1_114_112  # what the journal's thread records meanwhile
        return result

    before = journal._db_size
    monkeypatch.setattr(os, "stat", stat_then_a_batch_lands)
    assert journal.check() is None
    monkeypatch.undo()
    journal._db_size = before  # the file did not really grow
    s.create(CM, obj("a"))
    s.close()
