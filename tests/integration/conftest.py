"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.kubelite import Lite
from tests.harness.lb import Env


@pytest.fixture
async def lite(apiserver: Any) -> AsyncIterator[Lite]:
    """kube-lite (echo pods, no process pods) running against the test's apiserver."""
    running = Lite(apiserver.client())
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def env(apiserver: Any, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    """The LB translator and a pool manager with real HAProxy (test_lb_translator, test_lb_tenancy);
    modules with an `env` fixture of their own use theirs."""
    e = Env(apiserver, tmp_path, abs(hash(request.node.name)) % 50)
    await e.start()
    try:
        yield e
    finally:
        await e.close()
