"""`up`, `status` and `down` on bad input or an empty state dir: one clear line, the right exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import isthmus.cli.local
from isthmus.cli.app import app
from isthmus.local.state import Layout, PartState, State, save_state

assert isthmus.cli.local  # registers the commands
runner = CliRunner()


@pytest.mark.parametrize("n", ["0", "31"])
def test_up_rejects_a_cluster_count_out_of_range(tmp_path: Path, n: str) -> None:
    r = runner.invoke(app, ["up", "--clusters", n, "--state-dir", str(tmp_path / "s")])
    assert r.exit_code == 2 and "between 1 and 30" in r.output
    assert not (tmp_path / "s").exists()


def test_up_refuses_to_resize_an_existing_clusterset(tmp_path: Path) -> None:
    save_state(Layout.at(tmp_path), State(clusters=3))
    r = runner.invoke(app, ["up", "--clusters", "2", "--state-dir", str(tmp_path)])
    assert r.exit_code == 2 and "holds a clusterset of 3" in r.output


def test_status_and_down_without_a_clusterset(tmp_path: Path) -> None:
    r = runner.invoke(app, ["status", "--state-dir", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no local clusterset" in r.output
    r = runner.invoke(app, ["status", "--state-dir", str(tmp_path), "-o", "xml"])
    assert r.exit_code == 2 and "table, wide, json or yaml" in r.output
    r = runner.invoke(app, ["down", "--state-dir", str(tmp_path / "none")])
    assert r.exit_code == 0 and "Nothing is running" in r.output


def test_status_of_a_stopped_clusterset_says_down_and_exits_nonzero(tmp_path: Path) -> None:
    from isthmus.local import up

    state = State(clusters=1)
    up.resolve_ports(state)
    save_state(Layout.at(tmp_path), state)
    r = runner.invoke(app, ["status", "--state-dir", str(tmp_path), "-o", "json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["ready"] is False and doc["phase"] == "stopped"
    assert doc["clusters"][0]["parts"]["agent"] == "down" and doc["broker"]["parts"]["apiserver"] == "down"
    assert doc["clusters"][0]["joined"] is None  # the broker is not running: unknown, not guessed
    assert r.stderr.startswith("error: not ready (stopped)") and r.stderr.count("\n") == 1
    r = runner.invoke(app, ["status", "--state-dir", str(tmp_path), "--wait", "--timeout", "0.3"])
    assert r.exit_code == 1 and "error: not ready after 0.3s" in r.stderr
    assert "NAME" in r.stdout  # the table is printed anyway


def _broken(tmp_path: Path, edit: Callable[[dict[str, Any]], None], pid: int | None = None) -> Path:
    from isthmus.local import up

    state = State(clusters=1)
    up.resolve_ports(state)
    if pid is not None:
        state.parts["c1-agent"] = PartState(pid=pid)
    layout = Layout.at(tmp_path / "st")
    save_state(layout, state)
    doc = json.loads(layout.state_file.read_text())
    edit(doc)
    layout.state_file.write_text(json.dumps(doc))
    return layout.root


BAD_STATE = {
    "string pid": (lambda d: d["parts"].__setitem__("c1-proxy", {"pid": "abc"}), 'parts.c1-proxy.pid is "abc"'),
    "port 70000": (lambda d: d["ports"].__setitem__("c1-apiserver", 70000), "ports.c1-apiserver is 70000"),
    "no clusters": (lambda d: d.pop("clusters"), "clusters is missing"),
    "clusters a string": (lambda d: d.__setitem__("clusters", "3"), 'clusters is "3"'),
    "parts a list": (lambda d: d.__setitem__("parts", []), "parts is []"),
    "phase unknown": (lambda d: d.__setitem__("phase", 7), "phase is 7"),
}


def _one_error_line(r: Any, needle: str) -> None:
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert needle in r.stderr and "state.json" in r.stderr
    assert not any(w in r.stderr.lower() for w in ("remove", "delete", "rm -")), r.stderr


@pytest.mark.parametrize("case", sorted(BAD_STATE))
def test_bad_values_in_state_json_are_one_error_line(tmp_path: Path, case: str) -> None:
    edit, needle = BAD_STATE[case]
    root = _broken(tmp_path, edit)
    for command in (["status"], ["status", "-o", "json"], ["up", "--detach"], ["down"]):
        r = runner.invoke(app, [*command, "--state-dir", str(root)])
        _one_error_line(r, needle)
    assert not (root / "logs").exists()  # `up` started nothing


def test_status_names_a_missing_port(tmp_path: Path) -> None:
    root = _broken(tmp_path, lambda d: d["ports"].pop("c1-kube-lite-metrics"))
    _one_error_line(runner.invoke(app, ["status", "--state-dir", str(root)]), "ports.c1-kube-lite-metrics is missing")


def test_down_with_a_damaged_state_json_still_stops_what_it_can_verify(tmp_path: Path) -> None:
    root = tmp_path / "st"
    code = "import time; time.sleep(60)"
    ours = subprocess.Popen([sys.executable, "-c", code, "--data-dir", str(root / "c1")], start_new_session=True)
    stranger = subprocess.Popen([sys.executable, "-c", code, "--data-dir", str(tmp_path / "other")])
    try:
        def edit(d: dict[str, Any]) -> None:
            d["parts"]["c1-dns"] = {"pid": stranger.pid}  # recorded, but not naming the state dir
            d["parts"]["c1-proxy"] = {"pid": "12x"}
            d["ports"]["c1-apiserver"] = 70000

        _broken(tmp_path, edit, pid=ours.pid)
        r = runner.invoke(app, ["down", "--state-dir", str(root)])
        _one_error_line(r, 'parts.c1-proxy.pid is "12x"')
        assert "Stopped" in r.stdout
        assert ours.wait(10) is not None
        assert stranger.poll() is None  # never signalled
    finally:
        for p in (ours, stranger):
            p.kill()
            p.wait()
