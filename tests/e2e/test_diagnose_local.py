"""`isthmus diagnose` and `isthmus gather` on a fresh local clusterset, as a user runs them: every
check passes (exit 0) with an exported service behind a ClusterSet IP, and gather writes an
archive with every context's objects and the agent's logs.

With ISTHMUS_E2E_STATE_DIR set, the running clusterset of that state dir is used instead (never
started or stopped here); the test's objects go to namespace `diag-dev` and are deleted after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(300)]

ISTHMUS = [sys.executable, "-m", "isthmus"]
NS = "diag-dev"
ECHO = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: echo, namespace: {NS}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: echo}}}}
  template:
    metadata:
      labels: {{app: echo}}
      annotations: {{isthmus.io/workload: echo}}
    spec:
      containers:
      - name: echo
        image: echo
        ports: [{{containerPort: 8080, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: {NS}}}
spec:
  selector: {{app: echo}}
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata:
  name: echo
  namespace: {NS}
  annotations: {{lighthouse.submariner.io/use-clusterset-ip: "true"}}
"""


class Local:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**os.environ, "KUBECONFIG": str(root / "kubeconfig")}
        for proxy in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
            self.env.pop(proxy, None)

    def run(self, *args: str, timeout: float = 180, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=timeout, env=self.env)

    def isthmus(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return self.run(*ISTHMUS, *args, timeout=timeout)

    def kubectl(self, context: str, *args: str, stdin: str | None = None) -> str:
        p = self.run("kubectl", "--context", context, *args, stdin=stdin, timeout=60)
        assert p.returncode == 0, f"kubectl --context {context} {' '.join(args)}: {p.stderr}"
        return p.stdout

    def processes(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if str(self.root).encode() in (entry / "cmdline").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    reuse = os.environ.get("ISTHMUS_E2E_STATE_DIR")
    if reuse:
        yield Local(Path(reuse))
        return
    cs = Local(tmp_path_factory.mktemp("diag") / "state")
    try:
        p = cs.isthmus("up", "--detach", "--clusters", "2", "--state-dir", str(cs.root))
        assert p.returncode == 0, p.stdout + p.stderr
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), timeout=60)
        left = cs.processes()
        for pid in left:  # never leave a clusterset behind, even when `down` is broken
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes survived `isthmus down`: {left}"


@pytest.fixture(scope="module")
def exported(local: Local) -> Iterator[None]:
    local.kubectl("c1", "apply", "-f", "-", stdin=ECHO)
    local.kubectl("c2", "create", "namespace", NS)
    try:
        yield
    finally:
        for context in ("c1", "c2"):
            local.run("kubectl", "--context", context, "delete", "namespace", NS, "--wait=false", timeout=60)


def test_diagnose_passes_on_a_fresh_clusterset(local: Local, exported: None) -> None:
    # --wait: the export, its VIP and the echo pod take a few seconds to appear everywhere.
    p = local.isthmus("diagnose", "--wait", "--timeout", "90", "-o", "json", timeout=150)
    doc = json.loads(p.stdout)
    failing = [(t["name"], c["name"], c["message"], c["details"]) for t in doc["targets"] for c in t["checks"]
               if c["status"] == "fail"]
    assert p.returncode == 0 and doc["ok"], failing
    by_name = {t["name"]: {c["name"]: c for c in t["checks"]} for t in doc["targets"]}
    assert {"broker", "c1", "c2", "clusterset"} <= set(by_name)
    for cluster in ("c1", "c2"):
        checks = by_name[cluster]
        for name in ("api", "crds", "join", "heartbeat", "agent", "dns", "vips", "exports", "components"):
            assert checks[name]["status"] == "pass", (cluster, checks[name])
    assert f"echo.{NS}.svc.clusterset.local A -> " in by_name["c2"]["dns"]["message"]
    assert by_name["c2"]["vips"]["message"].startswith("1 VIP port answers")
    table = local.isthmus("diagnose")
    assert table.returncode == 0 and "✘" not in table.stdout, table.stdout


def test_gather_writes_one_archive(local: Local, exported: None, tmp_path: Path) -> None:
    archive = tmp_path / "bug.tar.gz"
    started = time.monotonic()
    p = local.isthmus("gather", "--archive", str(archive))
    assert p.returncode == 0, p.stderr
    print(f"isthmus gather: {time.monotonic() - started:.1f}s, {archive.stat().st_size} bytes")
    with tarfile.open(archive) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers()}
    assert {"README.md", "manifest.json", "diagnose.json"} <= names
    for context in ("broker", "c1", "c2"):
        assert f"{context}/version.json" in names and f"{context}/isthmus-system/pods.yaml" in names
    assert "c1/objects/serviceexports.multicluster.x-k8s.io.yaml" in names
    assert f"c1/services/{NS}/echo.yaml" in names
    assert any(n.startswith("c1/logs/isthmus-agent-") and n.endswith("/agent.log") for n in names), sorted(names)
