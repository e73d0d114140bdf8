"""The store's durability: its SQLite file, and the journal in front of it that every write is appended to.

`Store` (store.py) keeps every object in memory; each write is appended here (state.db-log) before it
returns, and `Journal`'s thread moves the journal into SQLite in batches. Opening a store reads the
file's layout (`create_database`, `check_header`, `convert_layout`) and replays what the journal holds
(`read_journal`, `commit`). `filewatch.py` wakes the journal's thread when its files are changed.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import sqlite3
import struct
import threading
import zlib
from typing import Any

import orjson

from isthmus.apiserver.storage.filewatch import FileWatch

Key = tuple[str, str]  # (namespace, name)

log = logging.getLogger(__name__)

# One B-tree: rows keyed by SQLite's rowid, which the journal keeps in memory for each object
# (_commit's rowids), and no index on (key, namespace, name): memory already answers every lookup and keeps
# names unique (one writer per data dir). A commit then dirties one page where a unique index made
# it two, and takes no index search (measured: 36 -> 24 µs of CPU per create). Rows are large
# (whole objects, ~1 KB and more), far above the twentieth of a page where SQLite advises WITHOUT
# ROWID; an update rewrites its row in place. Older data dirs are converted when opened (_load).
_OBJECTS = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    rv INTEGER NOT NULL,
    data BLOB NOT NULL
);
"""
SCHEMA = _OBJECTS.format(name="objects") + """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (k, v) VALUES ('rv', 0);
"""


class StoreInUse(Exception):
    """The database is held by another process: another apiserver runs on this data dir."""

    def __init__(self, path: str) -> None:
        super().__init__(f"database {path} is in use by another process (is another apiserver running on this "
                         "data dir?)")
        self.path = path


class UnusableStore(Exception):
    """An existing database file that cannot be opened as a store (empty, not SQLite, damaged)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"database {path} {problem}")
        self.path = path
        self.problem = problem


_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_header(path: str) -> None:
    """Reject files SQLite would happily treat as an empty database (0 bytes) or choke on later."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise UnusableStore(path, f"cannot be read ({e.strerror})") from None
    if not head:
        raise UnusableStore(path, "is empty (0 bytes)")
    if head != _SQLITE_MAGIC:
        raise UnusableStore(path, "is not an SQLite database")


def convert_layout(db: sqlite3.Connection) -> None:
    """A data dir of an older layout (WITHOUT ROWID, or a rowid table with a unique index on the
    names) gets today's (see _OBJECTS), in one transaction."""
    columns = [r[1] for r in db.execute("PRAGMA table_info(objects)")]
    if not columns or columns[0] == "id":
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DROP TABLE IF EXISTS objects_new")
        db.execute(_OBJECTS.format(name="objects_new"))
        db.execute("INSERT INTO objects_new (key, namespace, name, rv, data) "
                   "SELECT key, namespace, name, rv, data FROM objects ORDER BY key, namespace, name")
        db.execute("DROP TABLE objects")
        db.execute("ALTER TABLE objects_new RENAME TO objects")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    log.info("storage: converted the objects table to the rowid-only layout")


def create_database(path: str) -> None:
    """Make a new database with the schema, atomically: an existing state.db was always complete once.

    Built under a temporary name (0600 before SQLite touches it, so its WAL/SHM are 0600 too)
    and renamed into place; a crash midway leaves only the temporary file, rebuilt next time.
    """
    tmp = path + ".new"
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp + suffix)  # a previous attempt's leftovers; they never held objects
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
    finally:
        db.close()  # the last connection checkpoints the WAL into the file and removes it
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


JOURNAL = "-log"  # state.db-log: the writes SQLite has not taken in yet
JOURNAL_OLD = "-log.old"  # the batch being taken in
_RECORD = struct.Struct("<II")  # a record's head: its payload's length and CRC-32
Record = tuple[str, Key, int, bytes | None]  # resource, (namespace, name), rv, the object's JSON (None: deleted)


def _encode_record(key: str, k: Key, rv: int, data: bytes | None) -> bytes:
    # The payload: [rv, resource, namespace, name] as JSON, a newline (JSON never holds a raw one),
    # then the object's JSON, nothing for a deletion.
    payload = orjson.dumps([rv, key, k[0], k[1]]) + b"\n" + (data or b"")
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def read_journal(path: str) -> tuple[list[Record], str | None]:
    """A journal file's records, in order, up to the first incomplete or damaged one; and why it
    stopped there: None (read to the end), "torn" (the last record is incomplete: a write cut short
    by a crash, never acknowledged) or what was damaged.

    The file's room past its records is zeros (Journal reserves it ahead). No record ends with a
    zero byte (its payload is JSON), so the records end where the zeros do; a last record that fails
    its checksum reaches into them, or to the end of the file, and was being copied when the
    process died."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return [], None
    out: list[Record] = []
    pos, size, used = 0, len(raw), len(raw.rstrip(b"\0"))
    while pos < used:
        if pos + _RECORD.size > used:
            return out, "torn"
        length, crc = _RECORD.unpack_from(raw, pos)
        end = pos + _RECORD.size + length
        if end > size:
            return out, "torn"
        payload = raw[pos + _RECORD.size:end]
        if zlib.crc32(payload) != crc:
            return out, "torn" if end >= used else f"a record at byte {pos} fails its checksum"
        nl = payload.find(b"\n")
        try:
            rv, key, ns, name = orjson.loads(payload[:nl])
        except (orjson.JSONDecodeError, ValueError, TypeError):
            return out, f"a record at byte {pos} is unreadable"
        data = payload[nl + 1:]
        out.append((key, (ns, name), rv, data or None))
        pos = end
    return out, None


_ROWS = 256  # rows per statement of a batch: SQLite binds at most 32,766 values in one
_CHUNK = 1 << 20  # the journal's room is reserved this much at a time (at least)
CHECK_SECONDS = 1.0  # how often the journal's thread makes sure its files are still the server's
# SQLite's answers that say the file under the connection is not the database it wrote: retrying
# cannot help, and writing on would build a file no restart can read.
_BROKEN_ERRORS = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR")


class StorageFailed(OSError):
    """The database or the journal was changed under the running server: it keeps no more writes."""


def _reserve(fd: int, size: int) -> mmap.mmap:
    """The journal file made `size` bytes long with its blocks allocated, and mapped."""
    os.posix_fallocate(fd, 0, size)
    return mmap.mmap(fd, size)


def _put_sql(rows: int) -> str:
    return ("INSERT INTO objects (id, key, namespace, name, rv, data) VALUES "
            + ",".join(("(?,?,?,?,?,?)",) * rows) + " ON CONFLICT (id) DO UPDATE SET rv = excluded.rv, data = excluded.data")


def _delete_sql(rows: int) -> str:
    return "DELETE FROM objects WHERE id IN (" + ",".join("?" * rows) + ")"


def commit(db: sqlite3.Connection, rowids: dict[str, dict[Key, int]], last_id: int, batch: list[Record]) -> int:
    """A batch of writes (the last of each object's) in one transaction, fsynced, then checkpointed.
    rowids (each object's row) follows the committed rows; returns the highest row id.

    Many rows per statement: each statement releases the GIL once, where a statement per row made
    the event loop's thread and this one hand it over a thousand times a batch."""
    latest: dict[tuple[str, Key], tuple[int, bytes | None]] = {}
    for key, k, rv, data in batch:
        latest[(key, k)] = (rv, data)
    puts: list[Any] = []  # flat: id, key, namespace, name, rv, data; an id already there is updated
    deletes: list[int] = []
    born: list[tuple[str, Key, int]] = []
    gone: list[tuple[str, Key]] = []
    for (key, k), (rv, data) in latest.items():
        ids = rowids.get(key)
        rowid = None if ids is None else ids.get(k)
        if data is None:
            if rowid is not None:
                deletes.append(rowid)
                gone.append((key, k))
            continue
        if rowid is None:
            last_id += 1
            rowid = last_id
            born.append((key, k, rowid))
        puts.extend((rowid, key, k[0], k[1], rv, data))
    db.execute("BEGIN")
    try:
        for at in range(0, len(deletes), _ROWS):
            part = deletes[at:at + _ROWS]
            db.execute(_delete_sql(len(part)), part)
        width = 6 * _ROWS
        for at in range(0, len(puts), width):
            part = puts[at:at + width]
            db.execute(_put_sql(len(part) // 6), part)
        # Puts carry their rv in the row, but the last write may be a deletion: the counter row
        # says where the sequence stands.
        db.execute("UPDATE meta SET v = ? WHERE k = 'rv'", (batch[-1][2],))
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    for key, k, rowid in born:
        rowids.setdefault(key, {})[k] = rowid
    for key, k in gone:
        rowids[key].pop(k, None)
    try:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.Error:
        log.exception("storage: WAL checkpoint failed")
    return last_id


def remove_journal(path: str) -> None:
    """Both journal files of the database at path, once SQLite holds what they held."""
    for suffix in (JOURNAL_OLD, JOURNAL):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


class Journal:
    """Each write appended to state.db-log before it returns; a thread of its own moves them into
    SQLite in batches.

    The file is mapped into memory and an append is a copy into the page cache, as a write(2) is,
    without the system call (and ext4's inode update each one made): 3 % of a create's server CPU.
    A process that dies leaves what it copied in the file, as with write(2). Room is reserved on
    disk (fallocate) before it is mapped, _CHUNK at a time, so a full disk refuses a write when the
    journal grows (OSError, nothing written) rather than failing later in the kernel's writeback.

    Why: a write committed to SQLite on its own is a whole transaction (the B-tree, a 4 KB WAL frame,
    two or three pwrites): about 30 µs of a create's CPU in the server, where one append costs a few.
    A batch of a thousand rows costs SQLite a few µs a row, on this thread, which needs the GIL
    only between statements (256 rows each, _commit). Nothing on the event loop ever waits for
    SQLite or its fsyncs.

    Records carry consecutive resourceVersions and a CRC, so a replay (Store.open) takes exactly a
    prefix of the writes: it stops at a torn or damaged record or a gap, and skips what SQLite
    already holds.

    Rotation: a batch is the whole of state.db-log, renamed to state.db-log.old under the lock that
    appends take; appends go on into a fresh state.db-log. The old file is removed once its batch is
    committed with synchronous=FULL (fsynced) and checkpointed; a failed commit keeps the file and
    the batch, and is retried.

    Files changed under the server: a second thread checks the moment inotify reports a change to
    state.db or its directory, and every CHECK_SECONDS in any case (the first checks before each
    batch), that state.db is still the file the server opened (same device and inode), no shorter than it
    left it, and still starts as an SQLite database, and that state.db-log is still the file the
    appends go to; a batch SQLite refuses as corrupt or not a database says the same. Any of these
    sets `failure`: from then on every append raises StorageFailed (the write is refused, nothing
    changes in memory), nothing more is written into SQLite, and the journal files are left for
    whoever restores the database. Its cost to a write is one attribute read under the lock the
    append takes anyway; the stat calls are on this thread.
    """

    def __init__(self, path: str, db: sqlite3.Connection, rowids: dict[str, dict[Key, int]], last_id: int,
                 every_writes: int = 1000, every_seconds: float = 5.0) -> None:
        self._path = path  # state.db; the journal files are named after it
        self._db = db
        self._rowids = rowids  # this thread's from now on: each object's row
        self._last_id = last_id
        self._every_writes = every_writes
        self._every_seconds = every_seconds
        self._lock = threading.Lock()  # appends, rotation and close
        self._flushing = threading.Lock()  # one batch at a time (the thread's, or a caller's)
        self._fd, self._map = self._open_new()
        self._size = 0  # bytes of records in the file; the rest of the map is zeros
        self._pending: list[Record] = []  # in state.db-log, not yet in SQLite
        self._batch: list[Record] | None = None  # in state.db-log.old: being committed, or failed to
        self._closed = False
        self.failure: str | None = None  # why writes are refused: the files changed under the server
        # Read through a descriptor of its own, opened once and closed only after SQLite's connection
        # (Store.close): closing any descriptor of the file would drop SQLite's POSIX locks on it.
        self.db_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        st = os.fstat(self.db_fd)
        self._db_id, self._db_size = (st.st_dev, st.st_ino), st.st_size
        self._failing = threading.Lock()  # one failure recorded and logged
        self._wake = threading.Event()
        self._stop = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="isthmus-store-journal", daemon=True)
        self._thread.start()
        self._files = FileWatch.open(path)
        self._watcher = threading.Thread(target=self._watch_files, name="isthmus-store-files", daemon=True)
        self._watcher.start()

    def _open_new(self) -> tuple[int, mmap.mmap]:
        # 0600 from the start: the journal holds Secrets.
        fd = os.open(self._path + JOURNAL, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            return fd, _reserve(fd, _CHUNK)
        except BaseException:
            os.close(fd)
            raise

    def append(self, key: str, k: Key, rv: int, data: bytes | None) -> None:
        """Write one record (on the event loop); raises OSError and leaves the journal as it was."""
        record = _encode_record(key, k, rv, data)
        with self._lock:
            if self._closed or self.failure is not None:
                if self.failure is not None:
                    raise StorageFailed(self.failure)
                raise OSError("the store is closed")
            end = self._size + len(record)
            if end > len(self._map):
                grown = _reserve(self._fd, max(2 * len(self._map), end + _CHUNK))  # OSError: nothing written
                self._map.close()
                self._map = grown
            self._map[self._size:end] = record
            self._size = end
            self._pending.append((key, k, rv, data))
            if len(self._pending) == self._every_writes:
                self._wake.set()

    def _retire(self) -> None:
        """The current file done with: unmapped (what was copied stays in it) and cut to its records."""
        self._map.close()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)  # only tidier: a reader stops at the zeros anyway
        os.close(self._fd)

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._every_seconds)
            self._wake.clear()
            if not self._stop:
                try:
                    self._flush()
                except Exception:  # the thread must live on: the next batch may take
                    log.exception("storage: moving the journal into the database failed")

    def _watch_files(self) -> None:
        """The second thread: check() at once when inotify reports state.db or its directory changed,
        and every CHECK_SECONDS in any case."""
        watch = self._files
        while not self._stop and self.failure is None:
            if watch is not None:
                watch.wait(CHECK_SECONDS)
            else:
                self._stopping.wait(CHECK_SECONDS)
            if self._stop:
                return
            try:
                self.check()
            except Exception:
                log.exception("storage: cannot check the database files")

    def check(self) -> str | None:
        """Whether the database and the journal are still the files this server writes: None, or
        (also kept in `failure`, and logged once) what changed. Any thread may ask."""
        if self.failure is not None:
            return self.failure
        path = self._path
        # The size the file had before this stat: a batch on the journal's thread may grow the file
        # and raise _db_size between the stat and the comparison, which then took a file that had
        # only grown for a truncated one. Read first, the size the stat sees can only be larger.
        known = self._db_size
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return self._fail(f"database {path} was removed")
        except OSError as e:
            return self._fail(f"database {path} cannot be examined ({e.strerror})")
        if (st.st_dev, st.st_ino) != self._db_id:
            return self._fail(f"database {path} was replaced by another file")
        if st.st_size < known:
            return self._fail(f"database {path} was truncated to {st.st_size} bytes (it had {known})")
        try:
            head = os.pread(self.db_fd, len(_SQLITE_MAGIC), 0)  # never open(path): see __init__
        except OSError as e:
            return self._fail(f"database {path} cannot be read ({e.strerror})")
        if head != _SQLITE_MAGIC:
            return self._fail(f"database {path} was overwritten: it no longer starts as an SQLite database")
        with self._lock:
            if self._closed:
                return None
            try:
                js, mine = os.stat(path + JOURNAL), os.fstat(self._fd)
            except OSError:
                return self._fail(f"journal {path + JOURNAL} was removed")
            if (js.st_dev, js.st_ino) != (mine.st_dev, mine.st_ino):
                return self._fail(f"journal {path + JOURNAL} was replaced by another file")
            if js.st_size < len(self._map):
                return self._fail(f"journal {path + JOURNAL} was truncated")
        return None

    def _fail(self, problem: str) -> str:
        with self._failing:
            if self.failure is None:
                self.failure = problem + " while the apiserver was running: it refuses writes it could not keep"
                log.error("storage: %s; restore the database from a backup and restart the apiserver", self.failure)
            return self.failure

    def _flush(self) -> None:
        with self._flushing:
            if self.check() is not None:
                return  # never write on into a file that is not the database any more
            if self._batch is None:
                with self._lock:
                    if not self._pending or self._closed:
                        return
                    try:
                        os.replace(self._path + JOURNAL, self._path + JOURNAL_OLD)
                        fd, mapped = self._open_new()
                    except OSError:
                        log.exception("storage: cannot rotate the journal")
                        with contextlib.suppress(OSError):
                            os.replace(self._path + JOURNAL_OLD, self._path + JOURNAL)
                        return
                    self._retire()
                    self._fd, self._map, self._size = fd, mapped, 0
                    self._batch, self._pending = self._pending, []
            try:
                self._commit(self._batch)
            except sqlite3.Error as e:
                if str(getattr(e, "sqlite_errorname", "")).startswith(_BROKEN_ERRORS):
                    self._fail(f"database {self._path} is damaged ({e})")
                    return
                log.exception("storage: cannot move the journal into the database; retrying")
                return
            with contextlib.suppress(OSError):
                self._db_size = max(self._db_size, os.stat(self._path).st_size)  # a checkpoint grows it
            self._batch = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path + JOURNAL_OLD)

    def _commit(self, batch: list[Record]) -> None:
        self._last_id = commit(self._db, self._rowids, self._last_id, batch)

    def close(self) -> None:
        """Take in everything written, then remove the journal files (kept if SQLite fails: the next
        open replays them)."""
        self._stop = True
        self._wake.set()
        self._stopping.set()
        if self._files is not None:
            self._files.close()
        self._thread.join()
        self._watcher.join()
        if self._files is not None:
            self._files.release()
        with self._lock:
            self._closed = True
            batch = (self._batch or []) + self._pending
            self._batch, self._pending = None, []
            self._retire()
        if self.failure is not None:
            log.error("storage: the journal is kept as it is (%s)", self.failure)
            return
        try:
            if batch:
                self._commit(batch)
        except sqlite3.Error:
            log.exception("storage: cannot move the journal into the database; it is kept for the next start")
            return
        remove_journal(self._path)

