"""`isthmus agent --identity`: the holder identity of the agent's Lease, stable across restarts."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isthmus.cli.main import app
from isthmus.discovery.agent import Agent, AgentConfigError


@pytest.fixture(autouse=True)
def _keep_logging() -> Iterator[None]:
    """The command configures the root logger for its process; give the test process its own back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Stop the agent where it is built, keeping what it was built with."""
    captured: dict[str, Any] = {}

    async def from_cluster(cls: type[Agent], client: Any, cluster_id: str, **kwargs: Any) -> Agent:
        captured.update(kwargs, cluster_id=cluster_id)
        await client.close()
        raise AgentConfigError("stopped by the test")

    monkeypatch.setattr(Agent, "from_cluster", classmethod(from_cluster))
    return captured


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "clusters: [{name: a, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: a, context: {cluster: a}}]\ncurrent-context: a\n"
    )
    return str(path)


def _run(kubeconfig: str, *extra: str) -> None:
    result = CliRunner().invoke(app, ["agent", "--cluster-id", "c1", "--kubeconfig", kubeconfig, *extra])
    assert result.exit_code == 2 and result.stderr == "error: stopped by the test\n", result.output


@pytest.mark.parametrize(
    ("flag", "pod_name", "expected"),
    [
        (["--identity", "agent-a"], "pod-0", "agent-a"),
        ([], "pod-0", "pod-0"),
        ([], None, socket.gethostname()),
    ],
)
def test_identity(
    seen: dict[str, Any], kubeconfig: str, monkeypatch: pytest.MonkeyPatch,
    flag: list[str], pod_name: str | None, expected: str,
) -> None:
    if pod_name is None:
        monkeypatch.delenv("POD_NAME", raising=False)
    else:
        monkeypatch.setenv("POD_NAME", pod_name)
    _run(kubeconfig, *flag)
    assert seen["identity"] == expected and seen["cluster_id"] == "c1"
