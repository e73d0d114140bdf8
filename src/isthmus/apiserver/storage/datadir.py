"""The apiserver's data dir: private modes, and knowing it was initialised before.

Everything in the data dir is secret or sensitive: state.db, its WAL and journal hold Secrets, the
kubeconfig and `token` hold the bearer token, `tls/` holds the CA key. The dir is 0700 and
every file 0600, fixed at each start for files an older version (or a umask) left readable.

`initialized.json` is written (0600) once the database exists and is readable. From then on a
missing, empty or unreadable state.db is an error instead of a silent fresh start: an empty
apiserver looks healthy while every client that relied on its objects breaks.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import uuid
from pathlib import Path

from isthmus.apiserver.storage.journal import JOURNAL, JOURNAL_OLD

DB = "state.db"
MARKER = "initialized.json"
# The companions of state.db: SQLite's (the WAL holds committed writes not yet checkpointed) and
# the store's journal (writes not yet moved into SQLite).
DB_COMPANIONS = ("-wal", "-shm", "-journal", JOURNAL, JOURNAL_OLD)
# Files the apiserver (or `isthmus up` on its behalf) writes here; only these get chmod'ed, so a
# --data-dir pointed at a directory with other content never has unrelated files changed.
PRIVATE_FILES = (DB, *(DB + s for s in DB_COMPANIONS), MARKER, "kubeconfig", "token")
TLS_DIR = "tls"
TLS_FILES = ("ca.crt", "ca.key", "server.crt", "server.key", "client-ca.crt", "client-ca.key", "admin.crt", "admin.key")
REINITIALIZE_FLAG = "--reinitialize"
ADVICE = f"restore it from a backup, or start once with {REINITIALIZE_FLAG} to begin with an empty database"


class DataDirError(Exception):
    """The data dir cannot be used as it is; the message is one line for the user."""


def make_private_dir(path: Path) -> None:
    """Create `path` (and missing parents) 0700, or tighten an existing one to 0700."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)


def make_private_file(path: Path) -> None:
    """chmod 0600 if `path` is a regular file we own with other bits (symlinks are not followed)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o600:
        os.chmod(path, 0o600)


def write_private(path: Path, data: str | bytes) -> None:
    """Atomic write of a 0600 file: the content is never readable by others, not even briefly."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a leftover tmp file
        os.write(fd, raw)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def secure(data_dir: Path) -> None:
    """Create the data dir 0700, or fix an existing one and the files the apiserver keeps there."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DataDirError(f"data dir {data_dir} is not a directory")
    try:
        make_private_dir(data_dir)
        for name in PRIVATE_FILES:
            make_private_file(data_dir / name)
        tls = data_dir / TLS_DIR
        if tls.is_dir() and not tls.is_symlink():
            make_private_dir(tls)
            for name in TLS_FILES:
                make_private_file(tls / name)
    except OSError as e:
        raise DataDirError(f"cannot make data dir {data_dir} private: {e.filename}: {e.strerror}") from None


def evidence_of_use(data_dir: Path) -> str | None:
    """Why we know this dir held a database before (the marker, or a WAL or journal left behind), if we do."""
    if (data_dir / MARKER).exists():
        return f"{data_dir / MARKER} exists"
    for suffix in ("-wal", JOURNAL, JOURNAL_OLD):
        if (data_dir / (DB + suffix)).exists():
            return f"{data_dir / (DB + suffix)} exists"
    return None


def write_marker(data_dir: Path) -> None:
    """Record that the data dir holds an initialised database (kept if already there)."""
    marker = data_dir / MARKER
    if marker.exists():
        return
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {"kind": "IsthmusApiServerData", "version": 1, "uid": str(uuid.uuid4()), "createdAt": now}
    write_private(marker, json.dumps(doc, indent=2) + "\n")


def set_aside(db: Path) -> list[Path]:
    """Rename an unusable state.db and its companions (keeping their naming, so the set still opens
    together) to state.db.unusable-<UTC time>; never delete. Returns the new names."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = db.with_name(f"{db.name}.unusable-{stamp}")
    n = 1
    while any(kept.with_name(kept.name + s).exists() for s in ("", *DB_COMPANIONS)):
        n += 1
        kept = db.with_name(f"{db.name}.unusable-{stamp}-{n}")
    moved: list[Path] = []
    for suffix in ("", *DB_COMPANIONS):
        src = db.with_name(db.name + suffix)
        if src.exists():
            os.replace(src, kept.with_name(kept.name + suffix))
            moved.append(kept.with_name(kept.name + suffix))
    return moved
