"""Shared fixtures: a real embedded apiserver on a random 127.0.0.1 port, restartable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.harness.apiserver import RunningApiServer


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[RunningApiServer]:
    srv = RunningApiServer(tmp_path / "apiserver", bookmark_interval=1.0)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()

