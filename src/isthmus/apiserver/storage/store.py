"""The object store: every object in memory, persisted through the journal when a path is given.

One global resourceVersion counter; every write bumps it and is persisted with it, so a
restarted store continues the sequence. Watches (`watch.py`) are fed synchronously from writes,
and the history they resume from is kept here.

All methods are synchronous and must not await: the server runs them on the event loop, so a
read-check-write sequence inside one handler is atomic without locks.

Durability: each write is appended to a journal of our own (state.db-log, `journal.py`) before it
returns and before any watcher or callback sees it; a thread moves the journal into SQLite in
batches (see journal.Journal). The append is not fsynced, so a write survives a crash of this
process but may be lost on power failure, like a commit with SQLite's synchronous=NORMAL (the same
trade k3s makes with SQLite). Acknowledged means stored; opening a store replays what the journal holds.
"""

from __future__ import annotations

import gc
import logging
import os
import sqlite3
import time
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterable

import orjson

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.storage import journal
from isthmus.apiserver.storage.journal import Key
from isthmus.apiserver.storage.watch import WATCH_QUEUE_SIZE, Obj, Watch, WatchEvent

log = logging.getLogger(__name__)

# Above this many objects in one resource, a create/delete drops the sorted-key index instead
# of inserting into it (an insort is an O(n) memmove); the next list() re-sorts once.
_INSORT_LIMIT = 20_000


def ns_name(obj: Obj) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _not_found(key: str, name: str) -> errors.ApiError:
    group, _, plural = key.partition("/")
    return errors.not_found(group, plural, name)


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
        self._journal: journal.Journal | None = None
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
            journal.create_database(path)
        journal.check_header(path)
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
                raise journal.StoreInUse(path) from None
            raise journal.UnusableStore(path, f"is unreadable ({e})") from None
        except sqlite3.DatabaseError as e:
            db.close()
            raise journal.UnusableStore(path, f"is unreadable ({e})") from None
        except orjson.JSONDecodeError as e:
            db.close()
            raise journal.UnusableStore(path, f"holds an object that is not valid JSON ({e})") from None
        except BaseException:
            db.close()
            raise
        self._db = db
        self._journal = journal.Journal(path, db, rowids, last_id)

    def _load(self, db: sqlite3.Connection) -> tuple[dict[str, dict[Key, int]], int]:
        """The database into memory; returns each object's row and the highest row id."""
        # Checked before anything writes: a foreign file is refused untouched, and CREATE TABLE
        # IF NOT EXISTS would otherwise "repair" a store that lost its tables into an empty one.
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"objects", "meta"} <= tables:
            raise journal.UnusableStore(self._path or "", "has no isthmus tables (objects, meta)")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a batch is fsynced before its journal file goes
        db.execute("PRAGMA wal_autocheckpoint=0")  # Journal checkpoints after each batch, on its thread
        journal.convert_layout(db)
        db.executescript(journal.SCHEMA)
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
        records: list[journal.Record] = []
        problem = None
        for suffix in (journal.JOURNAL_OLD, journal.JOURNAL):
            found, stopped = journal.read_journal(path + suffix)
            records.extend(found)
            if stopped is not None and stopped != "torn":
                problem = f"{path}{suffix}: {stopped}"
                break
        rv = self._rv
        replayed: list[journal.Record] = []
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
                last_id = journal.commit(db, rowids, last_id, replayed)
            except sqlite3.Error as e:  # a full disk, say: the journal stays for the next start
                raise OSError(f"cannot move the journal into the database ({e})") from None
            self._rv = self._floor = rv
            log.info("storage: replayed %d writes from the journal, up to resourceVersion %d", len(replayed), rv)
        if problem is None:
            journal.remove_journal(path)
            return last_id
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for suffix in (journal.JOURNAL_OLD, journal.JOURNAL):
            if os.path.exists(path + suffix):
                os.replace(path + suffix, f"{path}{suffix}.damaged-{stamp}")
        log.warning("storage: the journal is damaged (%s; a power failure?): the writes before are replayed, "
                    "its files are kept as %s*.damaged-%s", problem, path + journal.JOURNAL, stamp)
        return last_id

    def sync(self) -> None:
        """Move what the journal holds into SQLite now, as its thread does after 1,000 writes or 5 s
        (tests and benchmarks; a write is durable once its call returns either way)."""
        if self._journal is not None:
            self._journal._flush()

    @property
    def failure(self) -> str | None:
        """Why the store refuses writes (its files were changed under it), None while it keeps them."""
        j = self._journal
        return None if j is None else j.failure

    def check(self) -> str | None:
        """The journal thread's check of the files, now (tests, readiness after a long idle)."""
        j = self._journal
        return None if j is None else j.check()

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
            before[ns_name(ev.obj)] = None if ev.type == "ADDED" else ev.prev
        items = self.list(key, namespace)
        if not before:
            return items
        kept = [o for o in items if ns_name(o) not in before]
        kept.extend(o for k, o in before.items() if o is not None and (namespace is None or k[0] == namespace))
        kept.sort(key=ns_name)
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
        j = self._journal
        if j is None:
            return
        try:
            j.append(key, k, rv, None if stored is None else orjson.dumps(stored))
        except (OSError, TypeError) as e:
            # TypeError: orjson could not serialize; nothing was changed in memory.
            raise errors.internal(f"storage write failed: {e}") from e

    def _with_rv(self, obj: Obj, rv: int) -> Obj:
        # Shallow copies: the caller hands over the nested values with the object.
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}

    def create(self, key: str, obj: Obj) -> Obj:
        """Store a new object (caller checked it does not exist). Sets metadata.resourceVersion. Emits ADDED."""
        meta = obj["metadata"]
        k = (meta.get("namespace") or "", meta["name"])  # ns_name and _with_rv, without their calls
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
        k = ns_name(obj)
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
