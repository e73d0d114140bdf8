"""Object storage: every object in memory, persisted to SQLite (WAL) when a path is given.

One global resourceVersion counter; every write bumps it and is persisted with it, so a
restarted store continues the sequence. Watches are fed synchronously from writes.

All methods are synchronous and must not await: the server runs them on the event loop, so a
read-check-write sequence inside one handler is atomic without locks.

Durability: each write is appended to a journal of our own (state.db-log) before it returns and
before any watcher or callback sees it; a thread moves the journal into SQLite in batches (see
_Journal). The append is not fsynced, so a write survives a crash of this process but may be
lost on power failure, like a commit with SQLite's synchronous=NORMAL (the same trade k3s makes
with SQLite). Acknowledged means stored; opening a store replays what the journal holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import mmap
import os
import sqlite3
import struct
import threading
import time
import zlib
from bisect import bisect_left, insort
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from isthmus.apiserver import errors
from isthmus.apiserver.filewatch import FileWatch

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)

log = logging.getLogger(__name__)

WATCH_QUEUE_SIZE = 10_000
# Above this many objects in one resource, a create/delete drops the sorted-key index instead
# of inserting into it (an insort is an O(n) memmove); the next list() re-sorts once.
_INSORT_LIMIT = 20_000

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
_SCHEMA = _OBJECTS.format(name="objects") + """
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


def _check_header(path: str) -> None:
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


def _convert_layout(db: sqlite3.Connection) -> None:
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


def _create(path: str) -> None:
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
        db.executescript(_SCHEMA)
    finally:
        db.close()  # the last connection checkpoints the WAL into the file and removes it
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@dataclass(slots=True)
class WatchEvent:
    type: str  # "ADDED" | "MODIFIED" | "DELETED"
    key: str  # resource key, '<group>/<plural>'
    obj: Obj  # the object after the change (for DELETED: the last state, with the deletion's new rv)
    prev: Obj | None  # the object before (None for ADDED); lets watchers turn selector exits into DELETED
    rv: int


def _ns_name(obj: Obj) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _not_found(key: str, name: str) -> errors.ApiError:
    group, _, plural = key.partition("/")
    return errors.not_found(group, plural, name)


class Watch:
    """A live watch. Iterate it for events; `close()` ends it. Ends by itself if the consumer is too slow.

    Events are filtered (namespace, selector) when they are produced, so only relevant events
    count toward the bound. History replayed at creation is kept apart from the bound: a
    resume may legitimately replay more than a queue's worth of events.
    """

    __slots__ = (
        "_buf",
        "_closed",
        "_ended",
        "_key",
        "_match",
        "_maxsize",
        "_namespace",
        "_overflowed",
        "_replay",
        "_store",
        "_waiter",
    )

    def __init__(
        self,
        store: Store | None,
        key: str,
        namespace: str | None,
        match: Callable[[Obj], bool] | None,
        replay: list[WatchEvent],
        maxsize: int = WATCH_QUEUE_SIZE,
    ) -> None:
        self._store = store
        self._key = key
        self._namespace = namespace
        self._match = match
        self._replay: deque[WatchEvent] = deque(replay)
        self._buf: deque[WatchEvent] = deque()
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False  # no more events will be queued (buffered ones still drain)
        self._closed = False  # hard close: iteration stops now
        self._overflowed = False

    @property
    def closed(self) -> bool:
        """True once no further live events will be delivered."""
        return self._ended

    @property
    def overflowed(self) -> bool:
        """True if the watch was ended because its consumer fell behind."""
        return self._overflowed

    def _filter(self, ev: WatchEvent) -> WatchEvent | None:
        """Namespace filter plus kube's selector transitions (enter → ADDED, leave → DELETED)."""
        if self._namespace is not None and (ev.obj["metadata"].get("namespace") or "") != self._namespace:
            return None
        match = self._match
        if match is None:
            return ev
        if ev.type == "ADDED":
            return ev if match(ev.obj) else None
        if ev.type == "DELETED":
            return ev if match(ev.prev if ev.prev is not None else ev.obj) else None
        now = match(ev.obj)
        before = ev.prev is not None and match(ev.prev)
        if now and before:
            return ev
        if now:
            return WatchEvent("ADDED", ev.key, ev.obj, ev.prev, ev.rv)
        if before:
            return WatchEvent("DELETED", ev.key, ev.obj, ev.prev, ev.rv)
        return None

    def _push(self, ev: WatchEvent) -> None:
        """Called by the store on each write of this watch's resource (synchronously)."""
        if self._ended:
            return
        out = self._filter(ev)
        if out is None:
            return
        if len(self._buf) >= self._maxsize:
            # The consumer is too slow: end the stream (buffered events still drain, so the
            # client sees a gap-free prefix and re-watches from its last resourceVersion).
            self._overflowed = True
            self._end()
            return
        self._buf.append(out)
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _end(self) -> None:
        self._ended = True
        if self._store is not None:
            self._store._unregister(self)
            self._store = None
        self._wake()

    def wake(self) -> None:
        """Make a pending `wait()` return now (a consumer's own timer: timeouts, bookmarks)."""
        self._wake()

    def drain(self, limit: int = 1000) -> list[WatchEvent]:
        """The events ready now, in order, at most `limit` ([] if none): replayed history first, then
        live ones.

        A consumer that writes a whole batch at once pays one socket write per wake-up instead
        of one per event; the limit keeps a long replay from becoming one huge write."""
        out: list[WatchEvent] = []
        if self._closed:
            return out
        replay = self._replay
        while replay and len(out) < limit:
            ev = self._filter(replay.popleft())
            if ev is not None:
                out.append(ev)
        buf = self._buf
        if replay or not buf:
            return out
        if len(out) + len(buf) <= limit:
            out.extend(buf)
            buf.clear()
        else:
            while buf and len(out) < limit:
                out.append(buf.popleft())
        return out

    @property
    def ready(self) -> bool:
        """Events wait to be drained."""
        return not self._closed and bool(self._replay or self._buf)

    @property
    def done(self) -> bool:
        """Nothing more will come: closed, or ended with nothing left to drain."""
        return self._closed or (self._ended and not self._replay and not self._buf)

    async def wait(self) -> None:
        """Until an event is ready, the watch ends, or `wake()` is called (returns at once if one is ready)."""
        if self._closed or self._ended or self._replay or self._buf:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._closed:
                raise StopAsyncIteration
            while self._replay:
                ev = self._filter(self._replay.popleft())
                if ev is not None:
                    return ev
            if self._buf:
                return self._buf.popleft()
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """End the watch now; pending events are dropped."""
        self._closed = True
        self._replay.clear()
        self._buf.clear()
        self._end()


JOURNAL = "-log"  # state.db-log: the writes SQLite has not taken in yet
JOURNAL_OLD = "-log.old"  # the batch being taken in
_RECORD = struct.Struct("<II")  # a record's head: its payload's length and CRC-32
Record = tuple[str, Key, int, bytes | None]  # resource, (namespace, name), rv, the object's JSON (None: deleted)


def _encode_record(key: str, k: Key, rv: int, data: bytes | None) -> bytes:
    # The payload: [rv, resource, namespace, name] as JSON, a newline (JSON never holds a raw one),
    # then the object's JSON, nothing for a deletion.
    payload = orjson.dumps([rv, key, k[0], k[1]]) + b"\n" + (data or b"")
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def _read_journal(path: str) -> tuple[list[Record], str | None]:
    """A journal file's records, in order, up to the first incomplete or damaged one; and why it
    stopped there: None (read to the end), "torn" (the last record is incomplete: a write cut short
    by a crash, never acknowledged) or what was damaged.

    The file's room past its records is zeros (_Journal reserves it ahead). No record ends with a
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


def _commit(db: sqlite3.Connection, rowids: dict[str, dict[Key, int]], last_id: int, batch: list[Record]) -> int:
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


def _remove_journal(path: str) -> None:
    """Both journal files of the database at path, once SQLite holds what they held."""
    for suffix in (JOURNAL_OLD, JOURNAL):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


class _Journal:
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
        self._last_id = _commit(self._db, self._rowids, self._last_id, batch)

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
        _remove_journal(self._path)


HISTORY_SECONDS = 300.0
"""How long events stay resumable: etcd's history lasts until kube-apiserver compacts it, every five
minutes by default (--etcd-compaction-interval), and a watch from a compacted resourceVersion gets
410 Gone. Without an age bound an idle clusterset's leases and heartbeats (about four writes a
second per apiserver) filled the history for hours: +21 MB per apiserver in 30 minutes."""


class Store:
    def __init__(
        self, path: str | None = None, *, history: int = 200_000, watch_queue: int = WATCH_QUEUE_SIZE,
        history_seconds: float = HISTORY_SECONDS, lock_wait: float = 5.0,
    ) -> None:
        """path: SQLite file (created if absent) or None for memory only. history: events retained for
        watch resume, for at most history_seconds (0: no age bound).

        watch_queue: live events a watcher may have pending before it is closed as too slow. lock_wait:
        seconds open() waits for another process to let go of the database (an apiserver stopping).
        """
        self._path = path
        self._lock_wait = lock_wait
        self._history_cap = history
        self._history_seconds = history_seconds
        # (monotonic time, newest rv then), one a second at most while writes come: events up to a
        # mark's rv are at least as old as the mark.
        self._history_marks: deque[tuple[float, int]] = deque()
        self._watch_queue = watch_queue
        self._db: sqlite3.Connection | None = None
        self._journal: _Journal | None = None
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._sorted: dict[str, list[Key] | None] = {}  # per resource: keys sorted, None = rebuild
        self._list_cache: dict[str, list[Obj]] = {}  # per resource: full sorted list, dropped on write
        # History: one deque per resource (resume scans only its own resource) plus a global
        # deque in rv order, so the global cap trims the oldest event whatever its resource.
        self._history: dict[str, deque[WatchEvent]] = {}
        self._history_all: deque[WatchEvent] = deque()
        self._floor = 0  # from compaction / restart: no event <= this is retained anywhere
        self._trimmed_all = 0  # rv of the newest event dropped by the cap (any resource)
        self._trimmed: dict[str, int] = {}  # same, per resource
        self._watchers: dict[str, dict[int, Watch]] = {}
        self._callbacks: list[tuple[Callable[[WatchEvent], None], frozenset[str] | None]] = []
        self._callbacks_for: dict[str, tuple[Callable[[WatchEvent], None], ...]] = {}  # by resource, built on use

    # ----- lifecycle -------------------------------------------------------------------

    def open(self) -> None:
        """Create the database if absent, or load every persisted object into memory.

        An existing file must be an isthmus store: an empty, foreign or damaged one raises
        UnusableStore rather than being silently replaced by fresh tables.
        """
        if self._path is None or self._db is not None:
            return
        path = self._path
        if not os.path.exists(path):
            _create(path)
        _check_header(path)
        for suffix in ("", "-wal", "-shm"):
            # SQLite creates the WAL and SHM with the database file's mode: keep all three 0600.
            if os.path.isfile(path + suffix):
                os.chmod(path + suffix, 0o600)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=self._lock_wait)
        try:
            # Before the first read: the connection then holds the database exclusively from it on
            # (a second apiserver on this data dir is refused, not left to diverge: names are kept
            # unique in memory), and SQLite keeps the WAL index in this process's memory instead of
            # a shared -shm file, so a commit takes no lock calls (six fcntl calls each before).
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            rowids, last_id = self._load(db)
            last_id = self._replay(db, rowids, last_id)
        except sqlite3.OperationalError as e:
            db.close()
            if "locked" in str(e):
                raise StoreInUse(path) from None
            raise UnusableStore(path, f"is unreadable ({e})") from None
        except sqlite3.DatabaseError as e:
            db.close()
            raise UnusableStore(path, f"is unreadable ({e})") from None
        except orjson.JSONDecodeError as e:
            db.close()
            raise UnusableStore(path, f"holds an object that is not valid JSON ({e})") from None
        except BaseException:
            db.close()
            raise
        self._db = db
        self._journal = _Journal(path, db, rowids, last_id)

    def _load(self, db: sqlite3.Connection) -> tuple[dict[str, dict[Key, int]], int]:
        """The database into memory; returns each object's row and the highest row id."""
        # Checked before anything writes: a foreign file is refused untouched, and CREATE TABLE
        # IF NOT EXISTS would otherwise "repair" a store that lost its tables into an empty one.
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"objects", "meta"} <= tables:
            raise UnusableStore(self._path or "", "has no isthmus tables (objects, meta)")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a batch is fsynced before its journal file goes
        db.execute("PRAGMA wal_autocheckpoint=0")  # _Journal checkpoints after each batch, on its thread
        _convert_layout(db)
        db.executescript(_SCHEMA)
        # The counter row moves with each batch; rows of older versions moved it on deletes only.
        row = db.execute("SELECT MAX((SELECT v FROM meta WHERE k = 'rv'), COALESCE((SELECT MAX(rv) FROM objects), 0))"
                         ).fetchone()
        rv = int(row[0])
        objects: dict[str, dict[Key, Obj]] = {}
        rowids: dict[str, dict[Key, int]] = {}
        loads = orjson.loads
        current: str | None = None
        bucket: dict[Key, Obj] = {}
        ids: dict[Key, int] = {}
        last_id = 0
        rows = db.execute("SELECT id, key, namespace, name, data FROM objects")
        # Millions of fresh dicts would trigger the cyclic GC over and over (it roughly
        # doubles load time); none of them can form cycles, so pause it while loading.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for rowid, key, ns, name, data in rows:
                if key != current:
                    current = key
                    bucket = objects.setdefault(key, {})
                    ids = rowids.setdefault(key, {})
                k = (ns, name)
                bucket[k] = loads(data)
                ids[k] = rowid
                if rowid > last_id:
                    last_id = rowid
        finally:
            if gc_was_enabled:
                gc.enable()
        self._rv = rv
        self._objects = objects
        self._sorted = dict.fromkeys(objects)  # sorted on first list (rows come in rowid order)
        self._list_cache = {}
        # History does not survive a restart: resuming from exactly the restored rv is fine.
        self._history = {}
        self._history_all.clear()
        self._trimmed = {}
        self._trimmed_all = 0
        self._floor = self._rv
        return rowids, last_id

    def _replay(self, db: sqlite3.Connection, rowids: dict[str, dict[Key, int]], last_id: int) -> int:
        """The journal's writes that SQLite does not hold yet (the process was killed) into memory and
        the database; then the journal files go. Called with the database held exclusively.
        Returns the highest row id."""
        path = self._path or ""
        records: list[Record] = []
        problem = None
        for suffix in (JOURNAL_OLD, JOURNAL):
            found, stopped = _read_journal(path + suffix)
            records.extend(found)
            if stopped is not None and stopped != "torn":
                problem = f"{path}{suffix}: {stopped}"
                break
        rv = self._rv
        replayed: list[Record] = []
        for i, (key, k, r, data) in enumerate(records):
            if r <= rv:
                continue  # the database holds it
            if r != rv + 1:
                problem = f"resourceVersion {rv + 1} is missing ({len(records) - i} later writes are not replayed)"
                break
            objs = self._objects.setdefault(key, {})
            if data is None:
                objs.pop(k, None)
            else:
                objs[k] = orjson.loads(data)
            self._sorted[key] = None
            replayed.append((key, k, r, data))
            rv = r
        if replayed:
            try:
                last_id = _commit(db, rowids, last_id, replayed)
            except sqlite3.Error as e:  # a full disk, say: the journal stays for the next start
                raise OSError(f"cannot move the journal into the database ({e})") from None
            self._rv = self._floor = rv
            log.info("storage: replayed %d writes from the journal, up to resourceVersion %d", len(replayed), rv)
        if problem is None:
            _remove_journal(path)
            return last_id
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for suffix in (JOURNAL_OLD, JOURNAL):
            if os.path.exists(path + suffix):
                os.replace(path + suffix, f"{path}{suffix}.damaged-{stamp}")
        log.warning("storage: the journal is damaged (%s; a power failure?): the writes before are replayed, "
                    "its files are kept as %s*.damaged-%s", problem, path + JOURNAL, stamp)
        return last_id

    def sync(self) -> None:
        """Move what the journal holds into SQLite now, as its thread does after 1,000 writes or 5 s
        (tests and benchmarks; a write is durable once its call returns either way)."""
        if self._journal is not None:
            self._journal._flush()

    @property
    def failure(self) -> str | None:
        """Why the store refuses writes (its files were changed under it), None while it keeps them."""
        journal = self._journal
        return None if journal is None else journal.failure

    def check(self) -> str | None:
        """The journal thread's check of the files, now (tests, readiness after a long idle)."""
        journal = self._journal
        return None if journal is None else journal.check()

    def close(self) -> None:
        self.close_watches()
        broken = self.failure is not None
        db_fd = None
        if self._journal is not None:
            self._journal.close()
            db_fd = self._journal.db_fd
            self._journal = None
        if self._db is not None and broken:
            self._db.close()  # no checkpoint: the file under it is not the database any more
            self._db = None
        if self._db is not None:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error:
                log.exception("final WAL checkpoint failed")
            self._db.close()
            self._db = None
        if db_fd is not None:
            os.close(db_fd)  # after SQLite's connection: closing it earlier would drop its locks

    # ----- reads -----------------------------------------------------------------------

    @property
    def rv(self) -> int:
        """Current (latest) resourceVersion."""
        return self._rv

    @property
    def oldest_rv(self) -> int:
        """Watches may resume from any rv >= this; older → the caller answers 410 Expired.

        Conservative across resources; watch() itself checks the (possibly older) floor of the
        one resource watched.
        """
        return max(self._floor, self._trimmed_all)

    def oldest_rv_for(self, key: str) -> int:
        """The oldest rv a watch of `key` may resume from."""
        return max(self._floor, self._trimmed.get(key, 0))

    def get(self, key: str, namespace: str, name: str) -> Obj | None:
        """The stored object (namespace '' for cluster-scoped). Callers must not mutate it."""
        objs = self._objects.get(key)
        return None if objs is None else objs.get((namespace, name))

    def list_at(self, key: str, namespace: str | None, rv: int) -> list[Obj]:
        """The objects of one resource as they were at resourceVersion `rv` (sorted like list()).

        Built from the current objects by undoing the resource's retained history after rv (an
        ADDED event removes its object, a MODIFIED or DELETED one brings back the object as it was
        before), so reads of the present pay nothing for it. rv older than the retained history
        raises errors.gone (the caller words it); rv at or past the present is the present.
        """
        if rv >= self._rv:
            return self.list(key, namespace)
        if rv < self.oldest_rv_for(key):
            raise errors.gone(f"too old resource version: {rv} ({self.oldest_rv_for(key)})")
        before: dict[Key, Obj | None] = {}
        for ev in reversed(self._history.get(key) or ()):
            if ev.rv <= rv:
                break
            # Older events come later and overwrite: what is left is the state before the first change after rv.
            before[_ns_name(ev.obj)] = None if ev.type == "ADDED" else ev.prev
        items = self.list(key, namespace)
        if not before:
            return items
        kept = [o for o in items if _ns_name(o) not in before]
        kept.extend(o for k, o in before.items() if o is not None and (namespace is None or k[0] == namespace))
        kept.sort(key=_ns_name)
        return kept

    def _sorted_keys(self, key: str) -> list[Key]:
        keys = self._sorted.get(key)
        if keys is None:
            keys = sorted(self._objects.get(key, ()))
            self._sorted[key] = keys
        return keys

    def list(self, key: str, namespace: str | None = None) -> list[Obj]:
        """Objects of one resource, sorted by (namespace, name); namespace None = all. Callers must not mutate."""
        objs = self._objects.get(key)
        if not objs:
            return []
        if namespace is None:
            cached = self._list_cache.get(key)
            if cached is None:
                cached = [objs[k] for k in self._sorted_keys(key)]
                self._list_cache[key] = cached
            return list(cached)
        keys = self._sorted_keys(key)
        # (ns,) sorts before every (ns, name); (ns + "\0",) after them and before any other namespace.
        lo = bisect_left(keys, (namespace,))
        hi = bisect_left(keys, (namespace + "\0",), lo)
        return [objs[k] for k in keys[lo:hi]]

    def count(self, key: str) -> int:
        return len(self._objects.get(key, ()))

    # ----- writes ----------------------------------------------------------------------

    def _persist(self, key: str, k: Key, rv: int, stored: Obj | None) -> None:
        """Journal one write (an object, or None for a deletion) before it is applied in memory."""
        journal = self._journal
        if journal is None:
            return
        try:
            journal.append(key, k, rv, None if stored is None else orjson.dumps(stored))
        except (OSError, TypeError) as e:
            # TypeError: orjson could not serialize; nothing was changed in memory.
            raise errors.internal(f"storage write failed: {e}") from e

    def _with_rv(self, obj: Obj, rv: int) -> Obj:
        # Shallow copies: the caller hands over the nested values with the object.
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}

    def create(self, key: str, obj: Obj) -> Obj:
        """Store a new object (caller checked it does not exist). Sets metadata.resourceVersion. Emits ADDED."""
        meta = obj["metadata"]
        k = (meta.get("namespace") or "", meta["name"])  # _ns_name and _with_rv, without their calls
        objs = self._objects.get(key)
        if objs is None:
            objs = self._objects[key] = {}
        if k in objs:
            group, _, plural = key.partition("/")
            raise errors.already_exists(group, plural, k[1])
        rv = self._rv + 1
        stored = {**obj, "metadata": {**meta, "resourceVersion": str(rv)}}
        self._persist(key, k, rv, stored)
        self._rv = rv
        objs[k] = stored
        keys = self._sorted.get(key)
        if keys is not None:
            if not keys or keys[-1] < k:
                keys.append(k)
            elif len(keys) < _INSORT_LIMIT:
                insort(keys, k)
            else:
                self._sorted[key] = None
        else:
            self._sorted[key] = None
        self._list_cache.pop(key, None)
        self._emit(WatchEvent("ADDED", key, stored, None, rv))
        return stored

    def update(self, key: str, obj: Obj) -> Obj:
        """Replace an existing object (caller checked preconditions). Sets metadata.resourceVersion. Emits MODIFIED."""
        k = _ns_name(obj)
        objs = self._objects.get(key)
        prev = None if objs is None else objs.get(k)
        if objs is None or prev is None:
            raise _not_found(key, k[1])
        rv = self._rv + 1
        stored = self._with_rv(obj, rv)
        self._persist(key, k, rv, stored)
        self._rv = rv
        objs[k] = stored
        self._list_cache.pop(key, None)
        self._emit(WatchEvent("MODIFIED", key, stored, prev, rv))
        return stored

    def delete(self, key: str, namespace: str, name: str) -> Obj:
        """Remove an object; returns it with the deletion's resourceVersion. Emits DELETED."""
        k = (namespace, name)
        objs = self._objects.get(key)
        prev = None if objs is None else objs.get(k)
        if objs is None or prev is None:
            raise _not_found(key, name)
        rv = self._rv + 1
        self._persist(key, k, rv, None)
        self._rv = rv
        del objs[k]
        keys = self._sorted.get(key)
        if keys is not None:
            if len(keys) < _INSORT_LIMIT:
                i = bisect_left(keys, k)
                del keys[i]
            else:
                self._sorted[key] = None
        self._list_cache.pop(key, None)
        gone = self._with_rv(prev, rv)
        self._emit(WatchEvent("DELETED", key, gone, prev, rv))
        return gone

    def _emit(self, ev: WatchEvent) -> None:
        """History, then watchers, then callbacks: a callback's own writes come later in rv order."""
        if self._history_cap > 0:
            h = self._history.get(ev.key)
            if h is None:
                h = self._history[ev.key] = deque()
            h.append(ev)
            self._history_all.append(ev)
            if len(self._history_all) > self._history_cap:
                self._drop_oldest()
            if self._history_seconds and (not self._history_marks
                                          or time.monotonic() - self._history_marks[-1][0] >= 1.0):
                self._age_history(ev.rv)
        else:
            self._trimmed[ev.key] = ev.rv
            self._trimmed_all = ev.rv
        ws = self._watchers.get(ev.key)
        if ws:
            for w in tuple(ws.values()):
                w._push(ev)
        cbs = self._callbacks_for.get(ev.key)
        if cbs is None:
            cbs = self._callbacks_for[ev.key] = tuple(
                cb for cb, keys in self._callbacks if keys is None or ev.key in keys)
        for cb in cbs:
            try:
                cb(ev)
            except Exception:
                log.exception("on_write callback %r failed for %s %s rv=%d", cb, ev.type, ev.key, ev.rv)

    def _drop_oldest(self) -> None:
        old = self._history_all.popleft()
        self._history[old.key].popleft()
        self._trimmed[old.key] = old.rv
        self._trimmed_all = old.rv

    def _age_history(self, rv: int) -> None:
        """Drop the events older than history_seconds (checked once a second, to the second)."""
        now = time.monotonic()
        marks = self._history_marks
        if marks and now - marks[-1][0] < 1.0:
            return
        marks.append((now, rv))
        cutoff = now - self._history_seconds
        upto = 0
        while marks and marks[0][0] < cutoff:
            upto = marks.popleft()[1]
        hall = self._history_all
        while hall and hall[0].rv <= upto:
            self._drop_oldest()

    # ----- watches ---------------------------------------------------------------------

    def watch(
        self,
        key: str,
        namespace: str | None,
        since_rv: int | None,
        match: Callable[[Obj], bool] | None = None,
    ) -> Watch:
        """Events of `key` (in `namespace` if given) with rv > since_rv, replayed from history first.

        since_rv None = only future events. since_rv < oldest_rv → raises errors.gone(...).
        match filters on the object; an object that stops matching is delivered as DELETED and one
        that starts matching as ADDED (kube's selector semantics).

        kube's resourceVersion "0" ("any state, then changes") is the caller's to translate:
        list, then watch from the list's rv.
        """
        replay: list[WatchEvent] = []
        if since_rv is not None:
            floor = self.oldest_rv_for(key)
            if since_rv < floor:
                raise errors.gone(f"too old resource version: {since_rv} ({floor})")
            h = self._history.get(key)
            if h:
                for ev in reversed(h):
                    if ev.rv <= since_rv:
                        break
                    replay.append(ev)
                replay.reverse()
        w = Watch(self, key, namespace, match, replay, self._watch_queue)
        self._watchers.setdefault(key, {})[id(w)] = w
        return w

    def _unregister(self, w: Watch) -> None:
        ws = self._watchers.get(w._key)
        if ws is not None:
            ws.pop(id(w), None)

    def watcher_count(self, key: str | None = None) -> int:
        """Live watches (of one resource, or all): for metrics and tests."""
        if key is not None:
            return len(self._watchers.get(key, ()))
        return sum(len(ws) for ws in self._watchers.values())

    def compact(self, rv: int | None = None) -> None:
        """Forget history up to rv (default: all of it), so older watches get 410 (tests, and the history cap)."""
        upto = self._rv if rv is None else min(rv, self._rv)
        self._floor = max(self._floor, upto)
        hall = self._history_all
        while hall and hall[0].rv <= upto:
            old = hall.popleft()
            self._history[old.key].popleft()

    def close_watches(self) -> None:
        """End every live watch (clients see the stream close and re-watch)."""
        for ws in list(self._watchers.values()):
            for w in list(ws.values()):
                w.close()
        self._watchers.clear()

    def on_write(self, callback: Callable[[WatchEvent], None], keys: Iterable[str] | None = None) -> None:
        """Register a synchronous callback run after every write (the server uses it for CRDs and GC);
        keys: the resources whose writes it is told of (None: all). Most subscribers care for one or
        two resources, and a write should not pay a call to each of the others.

        Callbacks run in registration order after watchers were fed; one that raises is logged
        and the write (already committed) stands.
        """
        self._callbacks.append((callback, None if keys is None else frozenset(keys)))
        self._callbacks_for.clear()
