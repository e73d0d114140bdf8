"""The supervisor with stand-in parts: restart with backoff, ordered stop, SIGKILL for stragglers,
parts that refuse to start, and processes adopted from a crashed supervisor."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from isthmus.local.state import PartState
from isthmus.local.supervisor import (
    CRASH_LOOP,
    GIVE_UP_AFTER,
    PartSpec,
    Supervisor,
    cmdline,
    is_ours,
    run_command,
    tail,
)

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


async def test_a_part_refusing_to_start_is_reported_and_not_restarted_forever(tmp_path: Path) -> None:
    saved: dict[str, PartState] = {}
    sup = Supervisor(tmp_path, lambda n, s: saved.__setitem__(n, PartState(**vars(s))))
    refuse = "import sys; print('starting'); print('error: /x/state.db is empty', file=sys.stderr); sys.exit(2)"
    sup.start(_spec(tmp_path, "api", refuse))
    assert await sup.wait_ready(["api"], within=600, fail_fast=True) == ["api"]  # returns on trouble, not at 600s
    await _until(lambda: sup.states["api"].failed)
    st = saved["api"]
    assert st.failed and st.last_exit == 2 and st.pid is None
    assert st.last_error == "error: /x/state.db is empty"
    assert st.restarts == GIVE_UP_AFTER - 1
    assert sup.trouble(["api"]) == {"api": "refused to start: error: /x/state.db is empty"}
    assert any("not restarting it" in line for line in tail(tmp_path / "logs" / "api.log"))
    # Once the cause is fixed, `up` asks for a retry.
    sup.specs["api"] = _spec(tmp_path, "api", "import time; print('serving', flush=True); time.sleep(60)")
    assert sup.retry_failed() == ["api"]
    await _until(lambda: sup.states["api"].pid is not None)
    assert not sup.states["api"].failed and sup.trouble(["api"]) == {}
    await sup.stop()


async def test_a_crash_loop_keeps_restarting_and_says_what_the_part_said(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, lambda n, s: None)
    sup.start(_spec(tmp_path, "agent", "raise RuntimeError('cannot reach the apiserver')"))
    await _until(lambda: sup.states["agent"].restarts >= CRASH_LOOP)
    await sup.stop()
    st = sup.states["agent"]
    assert not st.failed and st.last_exit == 1
    assert st.last_error == "RuntimeError: cannot reach the apiserver"  # a traceback's last line
    assert sup.trouble(["agent"]) == {"agent": "keeps exiting at start: RuntimeError: cannot reach the apiserver"}


def _popen(*args: str) -> subprocess.Popen[bytes]:
    """Start a sleeper; return once it has exec'ed (before that its cmdline is still ours)."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", *args]
    p = subprocess.Popen(argv, start_new_session=True)
    for _ in range(200):
        if cmdline(p.pid) == argv:
            break
        time.sleep(0.01)
    return p


def _stand_in(root: Path) -> subprocess.Popen[bytes]:
    """A process as a crashed supervisor leaves it: our command line, its own session."""
    return _popen(str(root))


async def test_an_adopted_process_is_watched_restarted_and_stopped(tmp_path: Path) -> None:
    orphan = _stand_in(tmp_path)
    try:
        sup = Supervisor(tmp_path, lambda n, s: None)
        sup.start(_spec(tmp_path, "dns", "import time; time.sleep(60)"),
                  PartState(restarts=4, started_at=12.5), adopt=orphan.pid)
        await _until(lambda: sup.states["dns"].pid is not None)
        assert sup.states["dns"].pid == orphan.pid and sup.states["dns"].started_at == 12.5  # kept, not relaunched
        assert "adopted" in tail(tmp_path / "logs" / "dns.log")[-1]
        orphan.kill()
        orphan.wait()  # the test is its parent: reap it, as init would
        await _until(lambda: sup.states["dns"].pid not in (None, orphan.pid))
        st = sup.states["dns"]
        assert st.restarts == 5 and st.last_exit is None  # not our child: no exit code
        new = st.pid
        await sup.stop()
        assert not is_ours(new, tmp_path)

        second = _stand_in(tmp_path)
        sup = Supervisor(tmp_path, lambda n, s: None)
        sup.start(_spec(tmp_path, "dns", "import time; time.sleep(60)"), adopt=second.pid)
        await _until(lambda: sup.states["dns"].pid == second.pid)
        await sup.stop(grace=5)
        assert second.wait(5) == -15  # stopped with SIGTERM through its pidfd
    finally:
        orphan.kill()
        orphan.wait()


async def test_a_pid_that_is_not_ours_is_never_adopted(tmp_path: Path) -> None:
    stranger = _popen()
    try:
        sup = Supervisor(tmp_path, lambda n, s: None)
        sup.start(_spec(tmp_path, "proxy", "import time; time.sleep(60)"), adopt=stranger.pid)
        await _until(lambda: sup.states["proxy"].pid is not None)
        assert sup.states["proxy"].pid != stranger.pid
        await sup.stop()
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


SERVE_ONCE = """
import os, socket, sys
listener = socket.socket(fileno=int(os.environ["ISTHMUS_LISTEN_FD"]))
conn, _ = listener.accept()
conn.sendall(f"hello from {os.getpid()}".encode())
conn.close()
"""


def _ask(port: int) -> str:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.settimeout(10)
        return s.recv(100).decode()


async def test_a_part_started_on_first_use_waits_for_a_connection_and_serves_it(tmp_path: Path) -> None:
    from tests.harness.ports import free_port

    port = free_port()
    sup = Supervisor(tmp_path, lambda name, st: None)
    spec = PartSpec("web", [sys.executable, "-c", SERVE_ONCE, str(tmp_path)], tmp_path / "logs" / "web.log",
                    f"http://127.0.0.1:{port}/readyz", 0, listen=("127.0.0.1", port))
    sup.start(spec)
    try:
        await _until(lambda: sup.states["web"].standby)
        assert sup.states["web"].pid is None
        await asyncio.sleep(0.3)
        assert sup.states["web"].pid is None  # nobody asked yet: no process
        assert await sup.wait_ready(["web"], within=1.0) == []  # on standby counts as ready, unprobed
        first = await asyncio.to_thread(_ask, port)  # the connection that starts it is the one it serves
        assert first.startswith("hello from ")
        await _until(lambda: sup.states["web"].last_exit == 0 and sup.states["web"].standby)
        second = await asyncio.to_thread(_ask, port)  # it exited: the next connection starts it again
        assert second.startswith("hello from ") and second != first
    finally:
        await sup.stop()
    import socket

    with pytest.raises(ConnectionRefusedError):  # stopped: the supervisor no longer listens either
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_a_part_whose_address_is_taken_is_retried_and_says_why(tmp_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        sup = Supervisor(tmp_path, lambda name, st: None)
        sup.start(PartSpec("web", [sys.executable, "-c", SERVE_ONCE, str(tmp_path)], tmp_path / "logs" / "web.log",
                           f"http://127.0.0.1:{port}/readyz", 0, listen=("127.0.0.1", port)))
        try:
            await _until(lambda: sup.states["web"].restarts >= 1)
            st = sup.states["web"]
            assert not st.standby and st.pid is None
            assert st.last_error is not None and f"cannot listen on 127.0.0.1:{port}" in st.last_error
        finally:
            await sup.stop()
