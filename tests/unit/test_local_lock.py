"""The one-clusterset-per-network-namespace lock of `isthmus up`, and what it tells whoever finds it taken."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from isthmus.local import up
from isthmus.local.state import Layout


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The lock file in a directory of this test's, not the machine's /tmp (a clusterset may run there)."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    yield d


def test_a_second_clusterset_of_the_same_user_is_told_how_to_stop_the_first(lock_dir: Path, tmp_path: Path) -> None:
    first = Layout.at(tmp_path / "first")
    fd = up.lock_machine(first)
    try:
        with pytest.raises(up.AddressPlanInUse) as e:
            up.lock_machine(Layout.at(tmp_path / "second"))
        assert str(e.value) == str(first.root)
        assert up.machine_holder() == str(first.root)
        message = up.plan_in_use_message(str(e.value))
        assert f"supervisor pid {os.getpid()}" in message
        assert f"isthmus down --state-dir {first.root}" in message  # the user's own: theirs to stop
    finally:
        os.close(fd)
    assert up.machine_holder() is None
    os.close(up.lock_machine(Layout.at(tmp_path / "second")))  # free again once the first is gone


def test_another_users_clusterset_is_named_and_never_offered_to_stop(
    lock_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = Layout.at(tmp_path / "someone-else")
    fd = up.lock_machine(theirs)
    try:
        monkeypatch.setattr(up.os, "getuid", lambda: os.stat("/proc/self").st_uid + 1)  # we are someone else now
        message = up.plan_in_use_message(up.machine_holder() or "")
    finally:
        os.close(fd)
    assert "isthmus down" not in message
    assert "not yours to stop" in message
    assert f"supervisor pid {os.getpid()}" in message
    assert f"state dir {theirs.root}" in message


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False).returncode == 0


def test_a_clusterset_in_another_network_namespace_takes_its_own_lock(lock_dir: Path, tmp_path: Path) -> None:
    if not _unshare_works():
        pytest.skip("unshare -rn (a user and network namespace) is not permitted here")
    fd = up.lock_machine(Layout.at(tmp_path / "here"))
    try:
        script = ("import json, os, sys\nfrom isthmus.local import up\nfrom isthmus.local.state import Layout\n"
                  "fd = up.lock_machine(Layout.at(sys.argv[1]))\n"
                  "print(json.dumps({'lock': str(up.machine_lock())}))\n")
        done = subprocess.run(
            ["unshare", "-rn", sys.executable, "-c", script, str(tmp_path / "there")],
            env={**os.environ, "TMPDIR": str(lock_dir)}, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr  # not refused: its 127.0.0.0/8 is another one
        assert json.loads(done.stdout)["lock"] != str(up.machine_lock())
    finally:
        os.close(fd)
