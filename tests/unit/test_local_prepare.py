"""What `up`'s supervisor does to a state dir before starting anything: private modes, and which
parts a crashed supervisor left running it adopts instead of restarting."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from isthmus.local import plan, up
from isthmus.local.state import Layout, PartState, State, load_state, save_state
from isthmus.local.supervisor import is_ours, open_log
from tests.harness.ports import free_port

pytestmark = pytest.mark.timeout(60)


def _mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def test_prepare_makes_an_existing_state_dir_private(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "st")
    state = State(clusters=1)
    up.resolve_ports(state)
    save_state(layout, state)
    up.write_kubeconfigs(layout, state)
    layout.logs.mkdir()
    (layout.log("c1-kube-lite")).write_text("old log\n")
    layout.broker_info.write_text("x")
    mine = layout.root / "notes.txt"  # not written by `up`: left alone
    mine.write_text("mine")
    old = [layout.root, layout.logs, layout.kubeconfigs, layout.data_dir("c1"), layout.data_dir("broker")]
    for d in old:
        d.chmod(0o755)
    for f in [layout.state_file, layout.kubeconfig, layout.broker_info, layout.log("c1-kube-lite"),
              layout.kubeconfig_of("c1"), layout.token_file("c1"), mine]:
        f.chmod(0o644)

    up.prepare(layout, None, False)

    for d in old:
        assert _mode(d) == "0o700", d
    for f in [layout.state_file, layout.kubeconfig, layout.broker_info, layout.log("c1-kube-lite"),
              layout.kubeconfig_of("c1"), layout.kubeconfig_of("broker"), layout.token_file("c1")]:
        assert _mode(f) == "0o600", f
    assert _mode(mine) == "0o644"


def test_files_up_writes_are_private_whatever_the_umask(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "st")
    old = os.umask(0o022)
    try:
        save_state(layout, State(clusters=1))
        fd = up.lock_supervisor(layout)
        os.close(fd)
        with open_log(layout.log("c1-dns")) as out:
            out.write(b"x\n")
    finally:
        os.umask(old)
    assert _mode(layout.root) == "0o700" and _mode(layout.logs) == "0o700"
    for f in (layout.state_file, layout.supervisor_pid, layout.log("c1-dns")):
        assert _mode(f) == "0o600", f


# --- adoption ------------------------------------------------------------------------------------

SERVER = """
import http.server, sys
answer = int(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(answer); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""


class StandIns:
    """Processes standing in for the parts a crashed supervisor left: our command line (naming
    the state dir), their own session, and a /readyz answering 200 or 500."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.answers: dict[str, int] = {}

    def argv(self, name: str, answer: int) -> list[str]:
        return [sys.executable, "-c", SERVER, str(self.layout.root / "c1"), str(self.ports[name]), str(answer)]

    def run(self, name: str, answer: int = 200) -> int:
        self.ports[name] = free_port()
        self.answers[name] = answer
        self.procs[name] = subprocess.Popen(self.argv(name, answer), start_new_session=True)
        return self.procs[name].pid

    def close(self) -> None:
        for p in self.procs.values():
            p.kill()
            p.wait()


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIns]:
    s = StandIns(Layout.at(tmp_path / "st"))

    def part_argv(layout: Layout, state: State, part: plan.PartId) -> list[str]:
        if part.name not in s.ports:
            return [sys.executable, "-c", "pass", part.name]
        expected = dict(s.answers, **{"c1-proxy": -1})  # c1-proxy is no part any more (kube-lite proxies)
        return s.argv(part.name, expected[part.name])

    monkeypatch.setattr(up, "part_argv", part_argv)
    monkeypatch.setattr(up, "ready_url", lambda state, part: f"http://127.0.0.1:{s.ports.get(part.name, 9)}/readyz")
    try:
        yield s
    finally:
        s.close()


def test_up_adopts_healthy_parts_whose_command_line_matches_and_stops_the_rest(stand_ins: StandIns) -> None:
    layout = stand_ins.layout
    state = State(clusters=1)
    up.resolve_ports(state)
    pids = {"c1-kube-lite": stand_ins.run("c1-kube-lite"), "c1-dns": stand_ins.run("c1-dns", answer=500),
            "c1-proxy": stand_ins.run("c1-proxy"), "c1-agent": stand_ins.run("c1-agent")}
    state.parts = {n: PartState(pid=p, restarts=1) for n, p in pids.items()}
    state.parts["c1-apiserver"] = PartState(pid=None, restarts=2, last_exit=-9)
    save_state(layout, state)
    for name in pids:  # wait until each listens
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and up.port_free(stand_ins.ports[name]):
            time.sleep(0.05)

    _, adopt = up.prepare(layout, None, False)

    assert adopt == {"c1-kube-lite": pids["c1-kube-lite"]}
    assert is_ours(pids["c1-kube-lite"], layout.root)
    assert stand_ins.procs["c1-dns"].wait(10) is not None  # not ready: stopped, to be restarted
    assert stand_ins.procs["c1-proxy"].wait(10) is not None  # an older version's part, no longer one: stopped
    # No broker-info: deploy-broker and join run again, and the agent must start with their result.
    assert stand_ins.procs["c1-agent"].wait(10) is not None
    saved = load_state(layout)
    assert saved is not None
    assert {n: p.pid for n, p in saved.parts.items()} == {
        "c1-kube-lite": pids["c1-kube-lite"], "c1-dns": None, "c1-proxy": None, "c1-agent": None,
        "c1-apiserver": None}
