"""`up`, `status` and `down` on bad input or an empty state dir: one clear line, the right exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import isthmus.cli.local
from isthmus.cli.app import app
from isthmus.local.state import Layout, State, save_state

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
    r = runner.invoke(app, ["status", "--state-dir", str(tmp_path), "-o", "yaml"])
    assert r.exit_code == 2 and "table or json" in r.output
    r = runner.invoke(app, ["down", "--state-dir", str(tmp_path / "none")])
    assert r.exit_code == 0 and "Nothing is running" in r.output


def test_status_of_a_stopped_clusterset_says_down(tmp_path: Path) -> None:
    from isthmus.local import up

    state = State(clusters=1)
    up.resolve_ports(state)
    save_state(Layout.at(tmp_path), state)
    r = runner.invoke(app, ["status", "--state-dir", str(tmp_path), "-o", "json"])
    assert r.exit_code == 0, r.output
    import json

    doc = json.loads(r.output)
    assert doc["ready"] is False and doc["phase"] == "stopped"
    assert doc["clusters"][0]["parts"]["agent"] == "down" and doc["broker"]["parts"]["apiserver"] == "down"
