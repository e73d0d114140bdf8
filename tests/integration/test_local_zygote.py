"""The local clusterset's fork server: a forked `isthmus` process is the process `python -m isthmus`
would have started (argv, environment, cwd, session, output, exit code, /proc identity), and the
zygote's own failures (a caller cancelled mid-start, the zygote killed, the caller gone) never
strand a child or a caller."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from isthmus.local.kubelite.processes import ENTRY
from isthmus.procs.child import UNKNOWN_EXIT
from isthmus.procs.zygote import Zygote, ZygoteProcess
from tests.harness.ports import free_port

pytestmark = pytest.mark.timeout(60)

forkable = ENTRY.forkable

ISTHMUS = [sys.executable, "-m", "isthmus"]


def env_of(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "LANG") if k in os.environ}
    return {**env, "HOME": str(tmp), "PYTHONUNBUFFERED": "1", **extra}


def apiserver_argv(tmp: Path) -> list[str]:
    """A long-running isthmus command that needs nothing else."""
    return [*ISTHMUS, "apiserver", "--host", "127.0.0.1", "--port", str(free_port()), "--no-tls",
            "--data-dir", str(tmp / "data")]


def proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return proc_file(pid, "stat").split(b") ")[1].startswith(b"Z")
    except (ProcessLookupError, FileNotFoundError):
        return True


async def gone(pid: int, within: float = 10.0) -> bool:
    for _ in range(int(within / 0.05)):
        if dead(pid):
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.fixture
async def zygote() -> AsyncIterator[Zygote]:
    z = Zygote(["isthmus.cli.main"], ENTRY, title=["--for", "test"], pdeathsig=True)
    try:
        yield z
    finally:
        await z.close()


def test_only_isthmus_commands_of_this_interpreter_are_forked() -> None:
    assert forkable([sys.executable, "-m", "isthmus", "dns"])
    assert not forkable(["isthmus", "dns"])
    assert not forkable(["/usr/bin/python3-other", "-m", "isthmus"])
    assert not forkable([sys.executable, "-m", "isthmus.procs.zygote"])
    assert not forkable(["sh", "-c", "true"])


async def test_a_forked_command_has_its_argv_env_cwd_output_and_exit_code(zygote: Zygote, tmp_path: Path) -> None:
    # its identity is settled before spawn returns: /proc shows the command, not the zygote's (read
    # from one that keeps running: a command that fails at once may be a zombie, cmdline empty, by then)
    argv = apiserver_argv(tmp_path)
    proc = await zygote.spawn(argv, env=env_of(tmp_path, MARK="zygote-test"), cwd=str(tmp_path), pipe_stdout=True)
    try:
        assert proc_file(proc.pid, "cmdline").split(b"\0")[:-1] == [a.encode() for a in argv]
        environ = proc_file(proc.pid, "environ").split(b"\0")
        assert b"MARK=zygote-test" in environ and f"HOME={tmp_path}".encode() in environ
        assert os.getpgid(proc.pid) == proc.pid  # its own session and process group
        assert os.readlink(f"/proc/{proc.pid}/cwd") == str(tmp_path)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) in (0, -signal.SIGTERM)
    proc = await zygote.spawn([*ISTHMUS, "agent", "--no-such-flag"], env=env_of(tmp_path), pipe_stdout=True)
    assert proc.stdout is not None
    out = (await proc.stdout.read()).decode()
    assert await proc.wait() == 2 and proc.returncode == 2
    assert "error: no such option: --no-such-flag" in out


async def test_a_command_sees_the_environment_and_directory_it_was_given(zygote: Zygote, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    kubeconfig.write_text("not: [a kubeconfig")
    # `show clusters` reads $KUBECONFIG from os.environ: the caller's environment, not the zygote's
    proc = await zygote.spawn([*ISTHMUS, "show", "clusters"], env=env_of(tmp_path, KUBECONFIG="kc.yaml"),
                              cwd=str(tmp_path), pipe_stdout=True)
    assert proc.stdout is not None
    out = (await proc.stdout.read()).decode()
    assert await proc.wait() == 2
    assert "kc.yaml" in out, out


async def test_output_to_a_file_descriptor(zygote: Zygote, tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        proc = await zygote.spawn([*ISTHMUS, "--help"], env=env_of(tmp_path), stdout=fd)
    finally:
        os.close(fd)
    assert await proc.wait() == 0
    assert "Multi-cluster service networking" in log.read_text()


async def test_a_missing_working_directory_is_an_os_error(zygote: Zygote, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await zygote.spawn([*ISTHMUS, "--help"], env=env_of(tmp_path), cwd=str(tmp_path / "nope"), pipe_stdout=True)
    proc = await zygote.spawn([*ISTHMUS, "--help"], env=env_of(tmp_path), pipe_stdout=True)  # still serving
    assert await proc.wait() == 0


async def test_a_caller_cancelled_while_the_zygote_starts_leaves_it_usable(zygote: Zygote, tmp_path: Path) -> None:
    first = asyncio.create_task(zygote.spawn([*ISTHMUS, "--help"], env=env_of(tmp_path), pipe_stdout=True))
    await asyncio.sleep(0.05)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    proc = await asyncio.wait_for(zygote.spawn([*ISTHMUS, "--help"], env=env_of(tmp_path), pipe_stdout=True), 30)
    assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_signals_reach_the_child_and_its_exit_is_reported(zygote: Zygote, tmp_path: Path) -> None:
    proc = await zygote.spawn(apiserver_argv(tmp_path), env=env_of(tmp_path), pipe_stdout=True, pdeathsig=True)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)  # it runs (and logs)
    assert line
    os.killpg(proc.pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL


async def test_children_die_with_the_zygote_only_when_asked(tmp_path: Path) -> None:
    z = Zygote(["isthmus.cli.main"], ENTRY, title=["--for", "test"])
    bound = await z.spawn(apiserver_argv(tmp_path / "a"), env=env_of(tmp_path), pipe_stdout=True, pdeathsig=True)
    free = await z.spawn(apiserver_argv(tmp_path / "b"), env=env_of(tmp_path), pipe_stdout=True)
    try:
        await z.close()  # EOF: the zygote exits
        assert await gone(bound.pid), "a pdeathsig child outlived its zygote"
        assert await asyncio.wait_for(bound.wait(), 10) == UNKNOWN_EXIT  # seen through a pidfd
        assert not await gone(free.pid, within=1.0), "a child without pdeathsig died with the zygote"
    finally:
        for pid in (bound.pid, free.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def test_a_killed_zygote_is_replaced_and_its_children_still_watched(zygote: Zygote, tmp_path: Path) -> None:
    child = await zygote.spawn(apiserver_argv(tmp_path), env=env_of(tmp_path), pipe_stdout=True)
    first = zygote.pid
    assert first is not None
    try:
        os.kill(first, signal.SIGKILL)
        await asyncio.sleep(0.5)
        assert not await gone(child.pid, within=0.5)  # no pdeathsig: it runs on, unreported
        os.kill(child.pid, signal.SIGTERM)
        assert await asyncio.wait_for(child.wait(), 15) == UNKNOWN_EXIT  # its exit status went with the zygote
        proc = await zygote.spawn([*ISTHMUS, "--help"], env=env_of(tmp_path), pipe_stdout=True)
        assert await proc.wait() == 0
        assert zygote.pid not in (None, first)
    finally:
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


FORK_NOW = """
import asyncio, json, os, sys, threading
from isthmus.local.kubelite.processes import ENTRY
from isthmus.procs.zygote import Zygote

z = Zygote(["isthmus.cli.main"], ENTRY, title=["--for", "fork-now"], pdeathsig=True, env=json.loads(sys.argv[1]))
assert z.fork_now(), "no thread runs yet: fork_now forks"
assert not z.fork_now(), "one zygote per Zygote"
unused = Zygote(["isthmus.cli.main"], ENTRY, title=["--for", "unused"])
assert unused.fork_now()


async def main():
    proc = await z.spawn([sys.executable, "-m", "isthmus", "--help"], env=json.loads(sys.argv[1]), pipe_stdout=True)
    out = (await proc.stdout.read()).decode()
    code = await proc.wait()
    zygote_pid = z.pid
    cmdline = open(f"/proc/{zygote_pid}/cmdline", "rb").read().split(b"\\0")
    print(json.dumps({"code": code, "help": "Multi-cluster service networking" in out, "zygote": zygote_pid,
                      "session": os.getsid(zygote_pid) == zygote_pid, "ppid": open(f"/proc/{zygote_pid}/stat").read().split(") ")[1].split()[1],
                      "cmdline": [a.decode() for a in cmdline[:-1]]}), flush=True)
    await z.close()
    await unused.close()
    print(json.dumps({"closed": z.pid is None}), flush=True)


asyncio.run(main())
"""


async def test_a_zygote_forked_from_its_caller_serves_like_an_exec_one(tmp_path: Path) -> None:
    """kube-lite forks its pods' zygote from itself before its loop starts (Zygote.fork_now), so
    the zygote shares what kube-lite imported: it must look and behave as the exec'ed one."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FORK_NOW, json.dumps(env_of(tmp_path, MARK="fork-now")),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    first, second = (json.loads(line) for line in out.decode().splitlines())
    assert first["code"] == 0 and first["help"] and first["session"]
    assert int(first["ppid"]) == proc.pid  # the caller's child: pdeathsig ties it to the caller
    assert first["cmdline"][:3] == [sys.executable, "-m", "isthmus.procs.zygote"]
    assert first["cmdline"][-3:] == ["--pdeathsig", "--for", "fork-now"]
    assert second == {"closed": True}
    assert await gone(first["zygote"])


FORK_NOW_MEMORY = """
import asyncio, os
import isthmus.cli.main, isthmus.apiserver.server, isthmus.discovery.agent  # what the caller holds already
from isthmus.local.kubelite.processes import ENTRY
from isthmus.procs.zygote import Zygote

def kb(pid, field):
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

# Not warmed (_warm): running code writes pages of its own, which is not what this measures.
z = Zygote(["isthmus.cli.main", "isthmus.apiserver.server", "isthmus.discovery.agent"], ENTRY, title=["--for", "t"], pdeathsig=True,
           env={**os.environ, "ISTHMUS_ZYGOTE_WARM": "0"})
assert z.fork_now()

async def main():
    await z._ensure_started()  # answers once its preload, collection and freeze are done
    print(kb(z.pid, "Private_Dirty"), kb(z.pid, "Anonymous"))
    await z.close()

asyncio.run(main())
"""


def test_a_zygote_forked_from_its_caller_keeps_sharing_the_callers_objects() -> None:
    """fork_now freezes the caller's objects first: the zygote's own collection before it freezes
    would otherwise write the header of every object it inherited, copying most of the caller's
    pages (the supervisor and its zygote held 37 MB each instead of 12)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", FORK_NOW_MEMORY], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    private_kb, anonymous_kb = map(int, out)
    assert private_kb < anonymous_kb * 0.4, (private_kb, anonymous_kb)


async def test_fork_now_declines_once_a_thread_runs() -> None:
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not Zygote(["isthmus.cli.main"], ENTRY).fork_now()  # forking a threaded process is unsafe
    finally:
        stop.set()
        t.join()


FORK_COMMAND = """
import json, os, subprocess, sys
from isthmus.local.kubelite.processes import ENTRY
from isthmus.procs.child import fork_command

env = json.loads(sys.argv[1])
out = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
quick = fork_command([sys.executable, "-m", "isthmus", "--help"], ENTRY, env=env, out_fd=out)
assert quick is not None and quick.wait(30) == 0 and quick.poll() == 0
port = sys.argv[3]
slow = fork_command([sys.executable, "-m", "isthmus", "apiserver", "--host", "127.0.0.1", "--port", port, "--no-tls",
                     "--data-dir", sys.argv[4]], ENTRY, env=env, out_fd=out)
cmdline = open(f"/proc/{slow.pid}/cmdline", "rb").read().split(b"\\0")[:-1]
try:
    slow.wait(0.3)
    timed_out = False
except subprocess.TimeoutExpired:
    timed_out = True
session = os.getsid(slow.pid) == slow.pid
slow.send_signal(15)
code = slow.wait(30)
print(json.dumps({"cmdline": [a.decode() for a in cmdline], "timed_out": timed_out, "session": session, "code": code,
                  "not_forkable": fork_command(["sh", "-c", "true"], ENTRY, env=env, out_fd=out) is None}))
"""


async def test_fork_command_runs_an_isthmus_command_as_popen_would(tmp_path: Path) -> None:
    """`isthmus up` forks its supervisor from itself (it imported everything already): the child is
    the command, in its own session, with Popen's poll/wait/send_signal semantics."""
    log = tmp_path / "out.log"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FORK_COMMAND, json.dumps(env_of(tmp_path)), str(log), str(free_port()),
        str(tmp_path / "data"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    doc = json.loads(out)
    assert doc["cmdline"][:4] == [sys.executable, "-m", "isthmus", "apiserver"]
    assert doc["timed_out"] and doc["session"] and doc["not_forkable"]
    assert doc["code"] in (0, -signal.SIGTERM)  # stopped by the signal (cleanly or by it)
    assert "Multi-cluster service networking" in log.read_text()


_FORK_MEMORY = """
import gc, os, sys
gc.disable()
from isthmus.procs import server as zygote
import isthmus.cli.main, isthmus.apiserver.server  # a zygote's preload, roughly
gc.collect()
before = sum(zygote._pymalloc_free_space()[0].values())
if sys.argv[1] == "fill":
    zygote._fill_free_blocks()
after = sum(zygote._pymalloc_free_space()[0].values())
if sys.argv[2] == "chunks":
    zygote._fill_free_chunks()
gc.freeze()

def private_kb():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    start = private_kb()
    keep = [(i, str(i), {"k": i}, [i] * (i % 7), b"x" * (i % 300)) for i in range(20000)]
    if sys.argv[2] != "-":  # objects over 512 bytes: glibc's malloc holds them
        big = [(list(range(i % 200)), b"y" * (600 + i % 4000), {str(j): j for j in range(i % 40)})
               for i in range(3000)]
    os.write(w, str(private_kb() - start).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(before, after, os.read(r, 64).decode())
"""


def test_a_child_allocates_in_pages_of_its_own_not_in_the_zygotes_free_blocks() -> None:
    """The zygote takes its free pymalloc blocks before forking: a child's new objects then fill
    fresh pages instead of copying a shared page of the zygote's for each few bytes."""
    before, after, plain_kb = _fork_memory("plain", "-")
    assert before > 1000 and after >= before - 100  # the preload leaves free blocks behind
    before, after, filled_kb = _fork_memory("fill", "-")
    assert after < before / 20
    assert filled_kb < plain_kb * 0.9, (filled_kb, plain_kb)


def test_a_child_allocates_large_objects_in_pages_of_its_own_too() -> None:
    """The same for glibc's free chunks in the middle of the zygote's heap (objects over 512 bytes)."""
    *_, blocks_kb = _fork_memory("fill", "big")
    *_, chunks_kb = _fork_memory("fill", "chunks")
    assert chunks_kb < blocks_kb - 300, (chunks_kb, blocks_kb)


def _fork_memory(blocks: str, chunks: str) -> tuple[int, int, int]:
    """(free pymalloc blocks before, after the zygote's filling; KB of new private memory of a
    child that allocates small objects, and large ones unless `chunks` is "-")."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FORK_MEMORY, blocks, chunks], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    before, after, child_kb = map(int, out)
    return before, after, child_kb


async def test_a_child_handed_a_listening_socket_serves_on_it(zygote: Zygote, tmp_path: Path) -> None:
    """Socket activation: `isthmus ui` forked with the caller's listening socket serves there
    (the local clusterset starts its web view on the first connection this way)."""
    import socket

    import aiohttp

    from tests.harness.apiserver import RunningApiServer

    run = RunningApiServer(tmp_path / "apiserver")
    await run.start()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        with pytest.raises(ValueError, match="not both"):
            await zygote.spawn([*ISTHMUS, "ui"], env=env_of(tmp_path), pipe_stdout=True, client=True,
                               listen_fd=listener.fileno())
        proc = await zygote.spawn([*ISTHMUS, "ui", "--kubeconfig", run.kubeconfig, "--listen", "127.0.0.1:1"],
                                  env=env_of(tmp_path), pipe_stdout=True, listen_fd=listener.fileno())
        listener.close()  # the child holds its own copy
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=30)) as r:
                    assert r.status == 200
                async with s.get(f"http://127.0.0.1:{port}/") as r:
                    assert r.status == 200 and "<html" in (await r.text()).lower()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) in (0, -signal.SIGTERM)
        assert proc.stdout is not None
        assert f"isthmus ui: http://127.0.0.1:{port}/" in (await proc.stdout.read()).decode()
    finally:
        listener.close()
        await run.close()


async def _aborted_output(proc: asyncio.subprocess.Process | ZygoteProcess) -> str:
    """SIGABRT a running component (what abort() in a C extension raises); what it wrote after."""
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30)  # it runs (and logs)
    await asyncio.sleep(0.5)
    os.kill(proc.pid, signal.SIGABRT)
    rest = await asyncio.wait_for(proc.stdout.read(), 30)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGABRT
    return rest.decode(errors="replace")


async def test_a_forked_component_writes_a_traceback_to_its_log_when_it_aborts(zygote: Zygote, tmp_path: Path) -> None:
    proc = await zygote.spawn(apiserver_argv(tmp_path), env=env_of(tmp_path), pipe_stdout=True, pdeathsig=True)
    out = await _aborted_output(proc)
    assert "Fatal Python error: Aborted" in out
    assert 'File "' in out  # where each thread was


async def test_an_executed_component_writes_a_traceback_to_its_log_when_it_aborts(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *apiserver_argv(tmp_path), env=env_of(tmp_path), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out = await _aborted_output(proc)
    assert "Fatal Python error: Aborted" in out
    assert "isthmus/runtime/loop.py" in out  # the event loop the abort interrupted


CLOSE_ONCE = """
import asyncio, json, sys
import uvloop
from isthmus.local.kubelite.processes import ENTRY
from isthmus.procs.zygote import Zygote

async def main():
    z = Zygote(["isthmus.cli.main"], ENTRY, title=["--for", "close-once"], pdeathsig=True, env=json.loads(sys.argv[1]))
    proc = await z.spawn([sys.executable, "-m", "isthmus", "--help"], env=json.loads(sys.argv[1]), pipe_stdout=True)
    print("FD", proc.stdout._transport.get_extra_info("pipe").fileno(), flush=True)
    await proc.stdout.read()
    await proc.wait()
    await asyncio.sleep(0.3)  # the transport closes after EOF
    await z.close()

uvloop.run(main())
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_a_childs_output_descriptor_is_closed_once_on_uvloop(tmp_path: Path) -> None:
    """uvloop closes a pipe's descriptor and then the file object over it: the second close(2) hits
    whatever another thread (libuv's workers run in kube-lite) was given that number meanwhile, and a
    descriptor the loop watches, closed under it, makes libuv abort() the process without a word."""
    trace = tmp_path / "trace"
    done = subprocess.run(["strace", "-e", "trace=close", "-o", str(trace), sys.executable, "-c", CLOSE_ONCE,
                           json.dumps(env_of(tmp_path))], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    fd = int(done.stdout.split("FD ", 1)[1].split()[0])
    closes = [ln for ln in trace.read_text().splitlines() if ln.startswith(f"close({fd})")]
    assert len(closes) >= 1 and not [ln for ln in closes if "EBADF" in ln], closes
