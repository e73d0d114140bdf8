"""The CLI habits against a running local clusterset: with only $ISTHMUS_STATE_DIR set (no
KUBECONFIG, no flags) `version` reads every cluster's components and `show` reaches the current
context; `status -o yaml` is `-o json`'s document.

Starts its own clusterset (`isthmus up --detach`, always `down` after); with
ISTHMUS_E2E_STATE_DIR set it reuses that running clusterset instead and only reads from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from isthmus.api.image import IMAGE_TAG

pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(240)]

ISTHMUS = [sys.executable, "-m", "isthmus"]
ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([*ISTHMUS, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    if check:
        assert p.returncode == 0, f"isthmus {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    reuse = os.environ.get("ISTHMUS_E2E_STATE_DIR")
    if reuse:
        yield Path(reuse)
        return
    root = tmp_path_factory.mktemp("cli") / "state"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "http_proxy", "HTTP_PROXY")}
    try:
        _run("up", "--detach", "--clusters", "2", "--state-dir", str(root), env=env, cwd=root.parent)
        yield root
    finally:
        _run("down", "--state-dir", str(root), env=env, cwd=root.parent, check=False)


@pytest.fixture
def bare(state: Path, tmp_path: Path) -> dict[str, str]:
    """An environment naming only the state dir: no KUBECONFIG, a HOME without ~/.kube."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "http_proxy", "HTTP_PROXY")}
    return {**env, "ISTHMUS_STATE_DIR": str(state), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}


def test_version_reads_every_cluster_from_the_state_dir(state: Path, bare: dict[str, str], tmp_path: Path) -> None:
    doc = json.loads(_run("version", "-o", "json", env=bare, cwd=tmp_path).stdout)
    status = json.loads(_run("status", "-o", "json", env=bare, cwd=tmp_path).stdout)
    contexts = ["broker", *(c["context"] for c in status["clusters"])]
    rows = {r["context"]: r for r in doc["clusters"]}
    assert sorted(rows) == sorted(contexts)
    for name, row in rows.items():
        assert row["error"] is None and row["serverVersion"], row
        versions = {c["name"]: c["version"] for c in row["components"]}
        expected = {"mcsvc-broker", "pools"} if name == "broker" else {"agent", "dns", "controller-manager", "webhook"}
        assert expected <= set(versions), (name, versions)
        assert {versions[c] for c in expected} == {IMAGE_TAG}
    table = _run("version", "--context", "broker", env=bare, cwd=tmp_path).stdout.splitlines()
    assert table[1].split() == ["CLUSTER", "COMPONENT", "VERSION", "READY"]
    assert [line.split()[1] for line in table[2:4]] == ["kubernetes", "mcsvc-broker"]


def test_show_reaches_the_current_context_without_flags(state: Path, bare: dict[str, str], tmp_path: Path) -> None:
    clusters = json.loads(_run("show", "clusters", "-o", "json", env=bare, cwd=tmp_path).stdout)
    status = json.loads(_run("status", "-o", "json", env=bare, cwd=tmp_path).stdout)
    assert clusters["kind"] == "List"
    assert sorted(r["clusterID"] for r in clusters["items"]) == sorted(c["name"] for c in status["clusters"])
    again = yaml.safe_load(_run("status", "-o", "yaml", env=bare, cwd=tmp_path).stdout)
    stable = ("name", "context", "server", "kubeconfig", "dns", "podCIDR", "clustersetIPCIDR")  # heartbeats move
    assert [{k: c[k] for k in stable} for c in again["clusters"]] == [
        {k: c[k] for k in stable} for c in status["clusters"]]
    assert again["kubeconfig"] == status["kubeconfig"]
