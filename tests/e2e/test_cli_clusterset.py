"""The CLI habits against a running local clusterset: with only $ISTHMUS_STATE_DIR set (no
KUBECONFIG, no flags) `version` reads every cluster's components and `show` reaches the current
context; `status -o yaml` is `-o json`'s document; the README's ServiceImport listings show what
their comments say.

Starts its own clusterset (`isthmus up --detach`, always `down` after); with
ISTHMUS_E2E_STATE_DIR set it reuses that running clusterset instead and only reads from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
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


def _readme_import_lines() -> list[tuple[str, str]]:
    """(command, comment) of the README's hands-on lines that list ServiceImports."""
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            code, _, comment = line.partition(" # ")
            if re.match(r"(kubectl|isthmus) .*(get serviceimports\b|show imports\b)", code):
                out.append((code.strip(), comment.strip()))
    return out


def test_the_readmes_import_listings_show_what_they_say(state: Path, bare: dict[str, str], tmp_path: Path) -> None:
    """Each README line that lists the ServiceImports shows what its comment promises: the
    service, and the exporting clusters when it names them (this clusterset has two clusters:
    the README's c3 is c2 here)."""
    lines = _readme_import_lines()
    assert len(lines) >= 2, lines
    env = {**bare, "KUBECONFIG": str(state / "kubeconfig")}
    kubectl = ["kubectl", f"--cache-dir={tmp_path / 'kube-cache'}"]
    for c in ("c1", "c2"):
        for manifest in ("echo-deployment.yaml", "serviceexport-vip.yaml"):
            subprocess.run([*kubectl, "--context", c, "apply", "-f", str(ROOT / "examples" / manifest)], env=env,
                           check=True, capture_output=True, timeout=60)
    try:
        for code, comment in lines:
            argv = [w.replace("c3", "c2") for w in shlex.split(code)]
            argv = [*ISTHMUS, *argv[1:]] if argv[0] == "isthmus" else [*kubectl, *argv[1:]]
            promised = {"echo-vip", *re.findall(r"\bc\d\b", comment)}
            deadline = time.monotonic() + 60
            while True:  # the agents take a few seconds to import from both clusters
                p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
                missing = {w for w in promised if not re.search(rf"\b{re.escape(w)}\b", p.stdout)}
                if not missing or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert p.returncode == 0 and not missing, f"`{code}` promises {sorted(promised)}:\n{p.stdout}{p.stderr}"
    finally:
        for c in ("c1", "c2"):
            subprocess.run([*kubectl, "--context", c, "delete", "--wait=false", "-f",
                            str(ROOT / "examples" / "serviceexport-vip.yaml"), "-f",
                            str(ROOT / "examples" / "echo-deployment.yaml")], env=env, capture_output=True, timeout=60)


def test_show_mcs_from_the_current_member_context_reads_the_broker(state: Path, bare: dict[str, str],
                                                                   tmp_path: Path) -> None:
    """MultiClusterServices live on the broker: from c1 (the current context) `show mcs` reads there."""
    p = _run("show", "mcs", "-A", env=bare, cwd=tmp_path)
    assert p.stdout == "" and p.stderr.strip() == "no multiclusterservices in any namespace on the broker (context broker)"
