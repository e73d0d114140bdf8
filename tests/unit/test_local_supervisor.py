"""The supervisor with stand-in parts: restart with backoff, ordered stop, SIGKILL for stragglers."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from isthmus.local.state import PartState
from isthmus.local.supervisor import PartSpec, Supervisor, is_ours, run_command, tail

pytestmark = pytest.mark.timeout(30)


async def _until(cond: Callable[[], bool], within: float = 10.0) -> None:
    for _ in range(int(within / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def _spec(root: Path, name: str, code: str, tier: int = 0) -> PartSpec:
    return PartSpec(name, [sys.executable, "-c", code, str(root)], root / "logs" / f"{name}.log",
                    "http://127.0.0.1:9/readyz", tier)


async def test_a_part_that_exits_is_restarted_with_growing_backoff(tmp_path: Path) -> None:
    changes: list[tuple[str, int | None]] = []

    def on_change(name: str, st: PartState) -> None:
        changes.append((name, st.pid))

    sup = Supervisor(tmp_path, on_change)
    sup.start(_spec(tmp_path, "flaky", "print('hello'); raise SystemExit(3)"))
    await _until(lambda: sup.states["flaky"].restarts >= 3)
    await sup.stop()
    st = sup.states["flaky"]
    assert st.last_exit == 3 and st.pid is None
    pids = [pid for _, pid in changes if pid]
    assert len(pids) >= 3 and len(set(pids)) == len(pids)
    log = tail(tmp_path / "logs" / "flaky.log", 50)
    assert "hello" in log
    assert any("exited with code 3; restarting in 1.0s" in line for line in log)


async def test_stop_terminates_in_tiers_and_kills_stragglers(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, lambda n, s: None)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    sup.start(_spec(tmp_path, "server", "import time; time.sleep(60)", tier=0))
    sup.start(_spec(tmp_path, "client", stubborn, tier=1))
    await _until(lambda: all(s.pid for s in sup.states.values()) and "up" in tail(tmp_path / "logs" / "client.log"))
    pids = {n: s.pid for n, s in sup.states.items()}
    assert all(is_ours(p, tmp_path) for p in pids.values())
    loop = asyncio.get_running_loop()
    started = loop.time()
    await sup.stop(grace=1.0)
    assert 0.9 < loop.time() - started < 8
    assert not any(is_ours(p, tmp_path) for p in pids.values())
    assert sup.states["server"].last_exit == -15 and sup.states["client"].last_exit == -9


async def test_one_shot_commands_log_and_time_out(tmp_path: Path) -> None:
    log = tmp_path / "once.log"
    assert await run_command([sys.executable, "-c", "print('done')"], log, 10) == 0
    assert await run_command([sys.executable, "-c", "import time; time.sleep(30)"], log, 0.5) == -1
    assert "done" in tail(log)
