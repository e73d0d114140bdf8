"""The web view of a running local clusterset in a real browser (Playwright driving Debian's
chromium): `isthmus up` prints its URL and runs it as a part; the page loads, an export made with
kubectl appears within a second, a conflict shows its message, a killed cluster turns unreachable
and comes back.

The fixture starts its own clusterset (`up --detach`, always `down`). With ISTHMUS_E2E_STATE_DIR it
reuses a running one instead and leaves it alone (the kill test is then skipped).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(300)]

ISTHMUS = [sys.executable, "-m", "isthmus"]
NS = "ui-e2e"
CONFLICT = "TCP/80 in cluster c1 (oldest) but TCP/8080 in cluster c2"
SERVICE = """
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: http, port: {port}, targetPort: 8080, protocol: TCP}}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {{name: {name}, namespace: {ns}}}
"""


class Local:
    def __init__(self, root: Path, reused: bool) -> None:
        self.root = root
        self.reused = reused
        self.env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
        self.env["KUBECONFIG"] = str(root / "kubeconfig")

    def isthmus(self, *args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([*ISTHMUS, *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and p.returncode != 0:
            raise AssertionError(f"isthmus {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.isthmus("status", "--state-dir", str(self.root), "-o", "json",
                                                      check=False).stdout)
        return out

    def apply(self, context: str, manifest: str) -> None:
        subprocess.run(["kubectl", "--context", context, "apply", "-f", "-"], input=manifest, text=True,
                       capture_output=True, check=True, timeout=60, env=self.env)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    reuse = os.environ.get("ISTHMUS_E2E_STATE_DIR")
    if reuse:
        yield Local(Path(reuse), reused=True)
        return
    cs = Local(tmp_path_factory.mktemp("ui-local"), reused=False)
    try:
        out = cs.isthmus("up", "--detach", "--state-dir", str(cs.root), "--clusters", "2")
        url = cs.status()["ui"]["url"]
        assert url and url in out.stdout  # `up` prints the web view's URL
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), check=False, timeout=60)


def _chromium() -> str:
    path = shutil.which("chromium")
    assert path, "Debian's chromium is missing: `make install` (or apt-get install chromium) installs it"
    return path


@pytest.fixture
def page(local: Local) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    doc = local.status()
    url = doc["ui"]["url"]
    assert url and doc["ui"]["ready"], doc["ui"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            pg = browser.new_page()
            pg.goto(url)
            expect(pg.locator("#live")).to_have_text("live")
            yield pg
        finally:
            browser.close()


def test_the_page_shows_every_cluster_an_export_at_once_and_a_conflict(local: Local, page: Any) -> None:
    from playwright.sync_api import expect

    names = ["broker", *(c["name"] for c in local.status()["clusters"])]
    for name in names:
        expect(page.locator(f'[data-cluster="{name}"] [data-health]')).to_have_text("healthy", timeout=60000)
    page.click('#tabs button[data-tab="services"]')
    local.apply("c1", SERVICE.format(ns=NS, name="web", port=80))
    expect(page.locator(f'[data-service="{NS}/web"]')).to_be_visible(timeout=1000)  # within a second
    time.sleep(1.1)  # the oldest export wins: make c1's clearly older
    local.apply("c2", SERVICE.format(ns=NS, name="web", port=8080))
    expect(page.locator(f'[data-service="{NS}/web"] .conflicts')).to_contain_text(CONFLICT, timeout=30000)
    page.locator(f'[data-service="{NS}/web"] .link').first.click()
    expect(page.locator("#details pre.yaml")).to_contain_text("kind:")


def test_a_killed_cluster_turns_unreachable_and_comes_back(local: Local, page: Any) -> None:
    from playwright.sync_api import expect

    if local.reused:
        pytest.skip("kills an apiserver: only on a clusterset this module started")
    doc = local.status()
    supervisor = doc["supervisor"]["pid"]
    apiserver = doc["clusters"][1]["processes"]["apiserver"]["pid"]
    card = page.locator('[data-cluster="c2"]')
    expect(card.locator("[data-health]")).to_have_text("healthy", timeout=60000)
    os.kill(supervisor, signal.SIGSTOP)  # so that it does not restart the apiserver at once
    try:
        os.kill(apiserver, signal.SIGKILL)
        expect(card.locator("[data-health]")).to_have_text("unreachable", timeout=15000)
        expect(card).to_contain_text("cannot reach")
        expect(page.locator('[data-cluster="c1"] [data-health]')).to_have_text("healthy")
    finally:
        os.kill(supervisor, signal.SIGCONT)
    expect(card.locator("[data-health]")).to_have_text("healthy", timeout=90000)
