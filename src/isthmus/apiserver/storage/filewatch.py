"""Wake a thread the moment a file is changed, replaced or removed (Linux inotify, through libc).

The store's journal (storage/journal.py, Journal) checks that state.db is still the database it writes; a
check once a second alone left a second in which writes were acknowledged into a database that
was already gone. inotify tells at once, without a system call on the write path. Where inotify
cannot be had (another OS, a sandbox without it, no watches left) `FileWatch.open` returns None
and the periodic check alone remains.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
from typing import Final

log = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_MODIFY: Final = 0x002
_IN_ATTRIB: Final = 0x004
_IN_MOVED_FROM: Final = 0x040
_IN_MOVED_TO: Final = 0x080
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
_FILE_EVENTS: Final = _IN_MODIFY | _IN_ATTRIB | _IN_DELETE_SELF | _IN_MOVE_SELF  # truncate is a modify
# Renamed over, removed, or (a sibling such as the journal) truncated: the journal's own appends go
# through a memory map, which inotify does not report, so this wakes for SQLite's writes only.
_DIR_EVENTS: Final = _IN_MODIFY | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE


class FileWatch:
    """An inotify descriptor watching one file and the names in its directory, plus a pipe that
    ends `wait` early (close)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @classmethod
    def open(cls, path: str) -> FileWatch | None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.debug("inotify unavailable (%s): files are checked once a second", os.strerror(ctypes.get_errno()))
            return None
        for target, mask in ((path, _FILE_EVENTS), (os.path.dirname(path) or ".", _DIR_EVENTS)):
            if add(fd, os.fsencode(target), mask) < 0:
                log.debug("cannot watch %s (%s): files are checked once a second", target,
                          os.strerror(ctypes.get_errno()))
                os.close(fd)
                return None
        return cls(fd)

    def wait(self, timeout: float) -> bool:
        """Block until something changed (True), the timeout passed or close was called (False)."""
        try:
            ready, _, _ = select.select([self._fd, self._stop_r], [], [], timeout)
        except (OSError, ValueError):  # closed meanwhile
            return False
        if self._fd not in ready:
            return False
        with contextlib.suppress(OSError):
            while os.read(self._fd, 65536):  # drained: one check answers them all
                pass
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")

    def release(self) -> None:
        """The descriptors, once the waiting thread has ended."""
        for fd in (self._fd, self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)
