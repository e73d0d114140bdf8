"""`isthmus up` when a part cannot start: an apiserver refusing its damaged database is reported
by name with what it said, in `up` and in `status`, and is not restarted forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(240)]
ISTHMUS = [sys.executable, "-m", "isthmus"]


def isthmus(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    return subprocess.run([*ISTHMUS, *args], capture_output=True, text=True, timeout=180, env=env)


def our_processes(root: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(root).encode() in args:
                found.append(int(entry.name))
    return found


def last_said(log: Path) -> str:
    """What the part printed last before `up` noted its exit (banners start with ===)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines()]
    said = [ln for ln in lines if ln and not ln.startswith("===")]
    errors = [ln for ln in said if ln.startswith("error:")]
    return (errors or said)[-1]


def test_an_apiserver_refusing_its_database_is_reported_per_part(tmp_path: Path) -> None:
    root = tmp_path / "st"
    try:
        first = isthmus("up", "--detach", "--clusters", "1", "--state-dir", str(root))
        assert first.returncode == 0, first.stdout + first.stderr
        assert isthmus("down", "--state-dir", str(root)).returncode == 0
        db = root / "c1" / "state.db"
        db.write_bytes(b"this is not an SQLite database, it is garbage " * 100)
        for companion in ("state.db-wal", "state.db-shm"):
            (root / "c1" / companion).unlink(missing_ok=True)

        p = isthmus("up", "--detach", "--state-dir", str(root))
        out = p.stdout + p.stderr
        said = last_said(root / "logs" / "c1-apiserver.log")
        assert p.returncode == 1, out
        assert "c1-apiserver" in out and said in out, out  # the part, and what it said
        assert not any(w in out.lower() for w in ("remove", "delete", "rm -")), out
        assert our_processes(root) == []  # nothing left half-running
        assert db.exists()  # the data is never thrown away

        s = isthmus("status", "--state-dir", str(root), "-o", "json")
        doc = json.loads(s.stdout)
        assert s.returncode == 1 and doc["ready"] is False and doc["phase"] == "failed"
        assert "c1-apiserver" in doc["error"] and said in doc["error"]
        assert doc["clusters"][0]["processes"]["apiserver"]["lastError"] == said
        assert said in s.stderr  # the one `error:` line says why too
        log = (root / "logs" / "c1-apiserver.log").read_text()
        assert log.count("isthmus up: starting c1-apiserver") <= 2 + 3  # first `up`, then a few tries, no loop
    finally:
        isthmus("down", "--state-dir", str(root))
        for pid in our_processes(root):
            os.kill(pid, signal.SIGKILL)
