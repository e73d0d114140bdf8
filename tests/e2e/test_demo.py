"""`isthmus demo` is the main job: it must run to the end and exit 0."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]


def test_demo_exits_zero() -> None:
    p = subprocess.run([sys.executable, "-m", "isthmus", "demo"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all steps passed" in p.stdout
