"""A local clusterset brought up by `isthmus up` for the end-to-end tests (`Clusterset`), and
`wait_for`, the blocking wait those tests use (moved from tests/e2e/test_local_up.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import dns.message
import dns.query
import dns.rdatatype

T = TypeVar("T")
ISTHMUS = [sys.executable, "-m", "isthmus"]


class Clusterset:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**os.environ, "KUBECONFIG": str(root / "kubeconfig")}
        self.env.pop("HTTP_PROXY", None)
        self.env.pop("http_proxy", None)

    def isthmus(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([*ISTHMUS, *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and p.returncode != 0:
            raise AssertionError(f"isthmus {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def up(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.isthmus("up", "--detach", "--state-dir", str(self.root), *extra)

    def status(self) -> dict[str, Any]:
        """`status -o json`, whose exit code says whether the clusterset is ready."""
        p = self.isthmus("status", "--state-dir", str(self.root), "-o", "json", check=False)
        out: dict[str, Any] = json.loads(p.stdout)
        assert p.returncode == (0 if out["ready"] else 1), p.stderr
        return out

    def kubectl(self, context: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
        p = subprocess.run(["kubectl", "--context", context, f"--cache-dir={self.root / 'kubectl-cache'}", *args],
                           input=stdin, capture_output=True, text=True, timeout=60, env=self.env)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl --context {context} {' '.join(args)}: {p.stderr or p.stdout}")
        return p.stdout

    def our_processes(self) -> list[str]:
        """Every process whose command line names the state dir (the supervisor and its parts)."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    args = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(str(self.root).encode() in a for a in args):
                    found.append(f"{entry.name}: {b' '.join(args).decode(errors='replace')}")
        return found


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, every: float = 0.3) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (AssertionError, OSError, ValueError, KeyError, dns.exception.DNSException) as e:
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last}" if last else ""))
