"""`isthmus ui`'s user errors: one `error:` line, exit 2, nothing left running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "c1",
    # Nothing listens on port 1: the clusters are unreachable, which is not an error for the view.
    "clusters": [{"name": n, "cluster": {"server": "https://127.0.0.1:1"}} for n in ("broker", "c1")],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in ("broker", "c1")],
}


def ui(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump(KUBECONFIG))
    env = {**os.environ, "KUBECONFIG": str(kc)}
    return subprocess.run([sys.executable, "-m", "isthmus", "ui", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_a_malformed_listen_address_is_a_usage_error(tmp_path: Path) -> None:
    p = ui(tmp_path, "--listen", "nowhere")
    assert p.returncode == 2 and p.stderr.strip() == "error: --listen must be HOST:PORT, not 'nowhere'"


def test_an_unknown_context_is_named(tmp_path: Path) -> None:
    p = ui(tmp_path, "--context", "c9", "--broker-context", "broker")
    assert p.returncode == 2
    assert p.stderr.startswith("error: context 'c9' not found in kubeconfig") and "broker, c1" in p.stderr


def test_a_taken_port_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = ui(tmp_path, "--broker-context", "broker", "--listen", f"127.0.0.1:{port}")
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: cannot serve on 127.0.0.1:{port}: ")
    assert "Traceback" not in p.stderr
