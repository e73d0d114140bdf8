"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.harness.kubelite import Lite


@pytest.fixture
async def lite(apiserver: Any) -> AsyncIterator[Lite]:
    """kube-lite (echo pods, no process pods) running against the test's apiserver."""
    running = Lite(apiserver.client())
    await running.start()
    try:
        yield running
    finally:
        await running.stop()
