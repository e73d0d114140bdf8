"""Container logs: what the workloads kube-lite runs print, kept in memory per Pod and container.

A kubelet keeps each container's stdout/stderr in files the container runtime writes; kube-lite's
workloads are its own servers, so their lines go to a :class:`ContainerLog` instead (bounded:
the oldest lines go first beyond ``MAX_LOG_BYTES``, as a runtime rotates its files). The kubelet
endpoint (kubelet.py) reads them for ``kubectl logs`` (tail, since, timestamps, limit) and
follows them (``-f``) until the Pod's containers stop.

A restarted process container's log starts afresh and the one before stays readable as
``previous``; process containers' lines are also appended to files in their pod dir. Nothing is
read back: after a kube-lite restart each Pod's log starts again with the workload's startup lines.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["MAX_LOG_BYTES", "ContainerLog", "LogLine", "PodLog", "PodLogs", "rfc3339nano"]

MAX_LOG_BYTES = 1 << 20
"""Per container; kube's default containerLogMaxSize is 10Mi, on disk."""


@dataclass(frozen=True, slots=True)
class LogLine:
    at: float  # time.time()
    data: bytes  # ends with a newline


def rfc3339nano(at: float) -> str:
    """Go's time.RFC3339Nano in UTC (trailing zeros of the fraction dropped), as the kubelet prefixes lines."""
    t = datetime.fromtimestamp(at, UTC)
    frac = f"{t.microsecond:06d}".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


class ContainerLog:
    """The lines of one container: appended by the workload, read and followed by the kubelet."""

    def __init__(self, max_bytes: int = MAX_LOG_BYTES, path: str | None = None) -> None:
        self.max_bytes = max_bytes
        self.path = path
        """Also appended to this file (process containers: ``<pod dir>/logs/<container>/<n>.log``)."""
        self._lines: deque[LogLine] = deque()
        self._first = 0  # absolute index of _lines[0]: followers keep their place across trimming
        self._bytes = 0
        self._wake = asyncio.Event()
        self.closed = False

    def write(self, text: str) -> None:
        if self.closed:
            return
        data = (text.rstrip("\n") + "\n").encode("utf-8", "replace")
        self.write_bytes(data)

    def write_bytes(self, data: bytes) -> None:
        """One line as printed (ending with a newline)."""
        if self.closed:
            return
        if self.path is not None:
            try:
                with open(self.path, "ab") as f:
                    f.write(data)
            except OSError:
                self.path = None  # the pod dir went away: memory only
        self._lines.append(LogLine(time.time(), data))
        self._bytes += len(data)
        while self._bytes > self.max_bytes and len(self._lines) > 1:
            self._bytes -= len(self._lines.popleft().data)
            self._first += 1
        self._notify()

    def close(self) -> None:
        """The container stopped: followers get what is left, then their streams end."""
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    @property
    def end(self) -> int:
        """Absolute index just past the newest line."""
        return self._first + len(self._lines)

    def select(self, *, since: float | None = None, tail: int | None = None) -> tuple[list[LogLine], int]:
        """The retained lines at or after ``since``, the last ``tail`` of them; and the index to follow from."""
        lines: Iterable[LogLine] = self._lines
        if since is not None:
            lines = [ln for ln in lines if ln.at >= since]
        out = list(lines)
        if tail is not None:
            out = out[len(out) - tail :] if tail < len(out) else out
        return out, self.end

    def after(self, index: int) -> tuple[list[LogLine], int]:
        """Lines from absolute ``index`` on (those trimmed meanwhile are lost), and the next index."""
        start = max(0, index - self._first)
        return list(self._lines)[start:], self.end

    async def wait(self, index: int) -> None:
        """Until a line at ``index`` exists or the log is closed."""
        while index >= self.end and not self.closed:
            await self._wake.wait()


@dataclass
class PodLog:
    uid: str | None
    containers: dict[str, ContainerLog] = field(default_factory=dict)
    previous: dict[str, ContainerLog] = field(default_factory=dict)
    """The log of each container's previous instance (``--previous``), for restarted containers."""

    def restart(self, name: str, path: str | None = None, *, keep_previous: bool = True) -> ContainerLog:
        """A new instance of container ``name`` starts: its current log becomes the previous one
        (``keep_previous``: the current one was an instance that ran)."""
        old = self.containers.get(name)
        if old is not None:
            old.close()
            if keep_previous:
                self.previous[name] = old
        log = self.containers[name] = ContainerLog(path=path)
        return log

    def container(self, name: str) -> ContainerLog:
        log = self.containers.get(name)
        if log is None:
            log = self.containers[name] = ContainerLog()
        return log

    def close(self) -> None:
        for c in self.containers.values():
            c.close()


class PodLogs:
    """Every Pod's logs, by "namespace/name"; a new incarnation (uid) of a name starts afresh."""

    def __init__(self) -> None:
        self._pods: dict[str, PodLog] = {}

    def pod(self, key: str, uid: str | None) -> PodLog:
        current = self._pods.get(key)
        if current is None or current.uid != uid:
            if current is not None:
                current.close()
            current = self._pods[key] = PodLog(uid)
        return current

    def get(self, key: str) -> PodLog | None:
        return self._pods.get(key)

    def remove(self, key: str) -> None:
        current = self._pods.pop(key, None)
        if current is not None:
            current.close()

    def close(self) -> None:
        for key in list(self._pods):
            self.remove(key)
