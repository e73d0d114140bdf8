"""checkov (PyPI) on the rendered manifests: every kustomization an admin applies, rendered with
kubectl's kustomize, scanned with `--framework kubernetes`; every finding must be justified in
deploy/checkov.yaml, and every justification must still match a finding (issue 43).

checkov lives in a venv of its own (.venv-checkov, made by `make install`): its pins would
downgrade the project's packaging and python-dateutil. It runs with --skip-download and
BC_SKIP_MAPPING, so it sends nothing anywhere (it would fetch guidelines from its vendor)."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from isthmus.kube.manifests import deploy_dir

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = deploy_dir()
CONFIG = DEPLOY / "checkov.yaml"
KUSTOMIZATIONS = ("member", "broker", "broker/controllers", "broker/webhook", "crds/shared", "crds/isthmus")


def checkov() -> str:
    for candidate in (ROOT / ".venv-checkov" / "bin" / "checkov", shutil.which("checkov")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise AssertionError("checkov is not installed: `make install` puts it in .venv-checkov "
                         "(its own venv: `python3 -m venv .venv-checkov && .venv-checkov/bin/pip install 'checkov>=3.2,<4'`)")


def kustomize(path: Path) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the manifests (the Makefile's packages)"
    p = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def render_all(into: Path) -> list[str]:
    """Each kustomization rendered into its own file; member also with the lb component."""
    names = []
    for name in KUSTOMIZATIONS:
        (into / f"{name.replace('/', '-')}.yaml").write_text(kustomize(DEPLOY / name))
        names.append(name)
    overlay = into.parent / "member-lb"  # an admin's overlay opting in to load balancing (docs/lb.md)
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(DEPLOY / "member", overlay)],
        "components": [os.path.relpath(DEPLOY / c, overlay) for c in ("components/lb", "components/lb/class-less")]}))
    (into / "member-lb.yaml").write_text(kustomize(overlay))
    return [*names, "member+components/lb"]


def scan(directory: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_SKIP_DOWNLOAD": "true", "LOG_LEVEL": "WARNING"}
    p = subprocess.run([checkov(), "-d", str(directory), "--framework", "kubernetes", "--skip-download",
                        "--compact", "--quiet", "-o", "json"], capture_output=True, text=True, timeout=300, env=env)
    assert p.stdout.strip(), p.stderr[-2000:]
    doc = json.loads(p.stdout)
    reports = doc if isinstance(doc, list) else [doc]
    if not any("results" in r for r in reports):  # nothing failed: checkov prints only a summary
        return []
    for r in reports:
        assert r["summary"]["parsing_errors"] == 0, r["summary"]
        assert r["summary"]["resource_count"] > 0
    return [f for r in reports for f in r["results"]["failed_checks"]]


def justification(finding: dict[str, Any], skips: list[dict[str, Any]]) -> dict[str, Any] | None:
    for skip in skips:
        if skip["check"] == finding["check_id"] and any(
                fnmatch.fnmatchcase(finding["resource"], pattern) for pattern in skip["resources"]):
            return skip
    return None


def test_every_skip_says_why() -> None:
    skips = yaml.safe_load(CONFIG.read_text())["skips"]
    assert skips
    for skip in skips:
        assert skip["check"].startswith(("CKV_K8S_", "CKV2_K8S_")) and skip["resources"]
        assert len(skip["why"].split()) >= 12, skip


def test_checkov_finds_nothing_unjustified(tmp_path: Path) -> None:
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    scanned = render_all(rendered)
    findings = scan(rendered)
    skips = yaml.safe_load(CONFIG.read_text())["skips"]
    unjustified = sorted({f"{f['check_id']} {f['resource']} ({f['check_name']}) in {f['file_path']}"
                          for f in findings if justification(f, skips) is None})
    assert unjustified == [], f"checkov on {', '.join(scanned)}: justify in {CONFIG} or fix:\n" + "\n".join(unjustified)
    used = {id(justification(f, skips)) for f in findings}
    stale = [s["check"] + " " + ", ".join(s["resources"]) for s in skips if id(s) not in used]
    assert stale == [], f"skips in {CONFIG} that match no finding any more: {stale}"


def test_an_unjustified_finding_is_caught(tmp_path: Path) -> None:
    """The scan can fail: a privileged container is reported and nothing in checkov.yaml excuses it."""
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "isthmus-system"},
        "spec": {"containers": [{"name": "c", "image": "isthmus", "securityContext": {"privileged": True}}]}}))
    findings = scan(tmp_path)
    skips = yaml.safe_load(CONFIG.read_text())["skips"]
    assert "CKV_K8S_16" in {f["check_id"] for f in findings if justification(f, skips) is None}
