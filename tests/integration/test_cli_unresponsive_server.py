"""Control-plane commands against a server that accepts connections and never answers: a bounded
wait, then one `error:` line that names the server and says what happened (never an empty reason)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isthmus.cli.main import app
from isthmus.clusterset.brokerinfo import BrokerInfo

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """http://127.0.0.1:PORT of a socket that accepts and never reads or writes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def _one_error_line(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.removeprefix("error: ").strip()


def test_a_silent_cluster_api(silent_server: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"clusters: [{{name: a, cluster: {{server: '{silent_server}'}}}}]\n"
        "users: [{name: a, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: a, user: a}}]\ncurrent-context: a\n"
    )
    assert _one_error_line(["show", "exports", "--kubeconfig", str(kubeconfig)]) == (
        f"the API server at {silent_server} did not answer in time (ReadTimeout)"
    )


def test_a_silent_broker(silent_server: str, tmp_path: Path) -> None:
    info = tmp_path / "broker-info.subm"
    info.write_text(BrokerInfo(server=silent_server, token="t", namespace="isthmus-broker").encode())
    assert _one_error_line(["show", "clusters", "--broker-info", str(info)]) == (
        f"the API server at {silent_server} did not answer in time (ReadTimeout)"
    )
