"""What the demo and `isthmus down` say about the state they leave matches what they do: the demo's
temporary state dir is removed (no "state kept"), and a kept state dir names the `isthmus up`
that resumes it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
    pytest.mark.clusterset,  # one local clusterset at a time
    pytest.mark.timeout(300),
]


def test_the_demo_says_its_temporary_state_is_removed_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from isthmus.local.demo import Step, run_demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo's temporary state dir goes
    console = Console(record=True, width=200)

    def up_only(steps: list[Step]) -> list[Step]:
        return steps[:1]

    code = run_demo(console, clusters=2, edit_steps=up_only)
    out = console.export_text()
    assert code == 0, out
    assert "state kept" not in out, out
    assert "temporary state dir is removed now" in out, out
    assert not list(tmp_path.glob("isthmus-demo-*")), out


def test_down_names_the_up_that_resumes_a_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    isthmus = [sys.executable, "-m", "isthmus"]
    up = subprocess.run([*isthmus, "up", "--detach", "--clusters", "2", "--state-dir", str(state)],
                        capture_output=True, text=True, timeout=200, cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
    finally:
        down = subprocess.run([*isthmus, "down", "--state-dir", str(state)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"state kept: `isthmus up --state-dir {state}` resumes it" in " ".join(down.stdout.split())
