"""`status` while a new supervisor takes over from a crashed one: the PID file is the new one's a
moment before state.json is, and the phase recorded there (the crashed one's `running`) must not
make the clusterset look ready: `up` would return before the new supervisor's setup ran."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from isthmus.local import plan
from isthmus.local.state import PHASE_RUNNING, PHASE_STARTING, Layout, State, private_dir, save_state
from isthmus.local.status import collect
from tests.harness.ports import free_port


def _status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded_pid: int | None, live_pid: int | None,
            phase: str) -> dict[str, object]:
    layout = Layout.at(tmp_path / "state")
    private_dir(layout.root)
    state = State(clusters=1, ports={name: free_port() for name in plan.port_names(1)},
                  supervisor_pid=recorded_pid, phase=phase)
    save_state(layout, state)
    monkeypatch.setattr(collect, "running_supervisor", lambda _layout: live_pid)
    return asyncio.run(collect.collect_status(layout))


def test_a_new_supervisor_is_starting_until_it_claims_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _status(tmp_path, monkeypatch, recorded_pid=4001, live_pid=4002, phase=PHASE_RUNNING)
    assert doc["phase"] == PHASE_STARTING and doc["ready"] is False
    assert "phase is starting, not running" in doc["problems"]  # type: ignore[operator]


def test_the_recorded_supervisor_s_phase_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _status(tmp_path, monkeypatch, recorded_pid=4002, live_pid=4002, phase=PHASE_RUNNING)
    assert doc["phase"] == PHASE_RUNNING
    assert not any(str(p).startswith("phase is") for p in doc["problems"])  # type: ignore[attr-defined]
