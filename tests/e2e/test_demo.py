"""`isthmus demo` is the main job: it must run to the end and exit 0, and a broken step must
end it non-zero, named, with the clusterset stopped anyway."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
    pytest.mark.clusterset,  # one local clusterset at a time: `make test` runs these serially
]


def test_demo_exits_zero() -> None:
    p = subprocess.run([sys.executable, "-m", "isthmus", "demo"], capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all steps passed" in p.stdout


def test_failing_step_exits_nonzero_naming_it_and_still_stops_everything(tmp_path: Path) -> None:
    from isthmus.local.demo import Step, StepFailed, run_demo

    def broken() -> None:
        raise StepFailed("broken on purpose")

    def inject(steps: list[Step]) -> list[Step]:  # after `up`, so there is something to stop
        return [steps[0], Step("a deliberately broken step", broken), *steps[1:]]

    console = Console(record=True, width=200)
    state = tmp_path / "state"
    code = run_demo(console, state_dir=state, clusters=2, edit_steps=inject)
    out = console.export_text()
    assert code == 1, out
    assert "step 2 failed: a deliberately broken step" in out
    assert "broken on purpose" in out
    assert "run echo workloads" not in out  # nothing after the failure ran
    assert "all steps passed" not in out
    assert "isthmus down --state-dir" in out
    # `down` ran: nothing of that clusterset is up any more
    p = subprocess.run([sys.executable, "-m", "isthmus", "status", "--state-dir", str(state), "-o", "json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 or not json.loads(p.stdout).get("ready"), p.stdout
