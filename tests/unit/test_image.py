"""The Containerfile, `make image` and `make image-containerfile` agree with isthmus.api.image; the wheel
carries deploy/. (tests/unit/test_image_inputs.py holds the Containerfile and `make image` to one recipe.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from isthmus.api.image import IMAGE

REPO = Path(__file__).resolve().parents[2]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def final_stage() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Containerfile's last stage, continuation lines joined."""
    text = (REPO / "Containerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    stages: list[list[tuple[str, str]]] = []
    for line in lines:
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        if stages:  # an ARG before the first FROM belongs to no stage
            stages[-1].append((instruction.upper(), args.strip()))
    return stages[-1]


def test_image_runs_as_non_root_isthmus() -> None:
    stage = final_stage()
    assert stage[0][0] == "FROM" and "debian:bookworm-slim" in stage[0][1]
    users = [args for ins, args in stage if ins == "USER"]
    assert users, "the image must set a USER"
    uid = users[-1].split(":")[0]
    assert uid == "65532"  # numeric, so kubelet can check runAsNonRoot without /etc/passwd
    entrypoint = [args for ins, args in stage if ins == "ENTRYPOINT"]
    assert json.loads(entrypoint[-1]) == ["isthmus"]
    runs = " ".join(args for ins, args in stage if ins == "RUN")
    assert "build/image" in runs and "packages.txt" in runs
    packages = (REPO / "build" / "image" / "packages.txt").read_text().split()
    assert "haproxy" in packages  # the pool manager's data plane


def fake_venv(tmp_path: Path) -> Path:
    """A venv for make whose python is this one and whose install stamp is fresh: `make image`
    must not reinstall anything (or touch the shared venv) in a test."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    stamp = venv / ".installed"
    stamp.touch()
    newer = (REPO / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (newer, newer))
    return venv


@needs_make
def test_make_image_builds_the_images_without_an_engine(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path)
    p = subprocess.run(["make", "-n", "-C", str(REPO), "image", f"VENV={venv}", "CONTAINER_ENGINE="],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"{venv}/bin/python -m isthmus.local.images.build" in p.stdout
    assert "pip install" not in p.stdout


@needs_make
def test_make_image_containerfile_builds_it_with_the_api_image_tag(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path)
    p = subprocess.run(["make", "-n", "-C", str(REPO), "image-containerfile", f"VENV={venv}",
                        "CONTAINER_ENGINE=podman"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"podman build -f Containerfile -t {IMAGE} ." in p.stdout
    assert "pip install" not in p.stdout


@needs_make
def test_make_image_containerfile_without_an_engine_says_so(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path)
    p = subprocess.run(["make", "-C", str(REPO), "image-containerfile", f"VENV={venv}", "CONTAINER_ENGINE="],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "neither docker nor podman is installed" in p.stderr


def test_package_data_reaches_every_manifest() -> None:
    """The wheel maps deploy/ to isthmus/_deploy through the src/isthmus/_deploy symlink and the
    package-data globs `_deploy/**/*.yaml` and `_deploy/**/*.json` (the Grafana dashboard): every file
    of deploy/ must be reached by them."""
    package = REPO / "src" / "isthmus"
    assert (package / "_deploy").resolve() == (REPO / "deploy").resolve()
    globbed = {p.relative_to(package / "_deploy") for ext in ("yaml", "json") for p in package.glob(f"_deploy/**/*.{ext}")}
    on_disk = {p.relative_to(REPO / "deploy") for p in (REPO / "deploy").rglob("*") if p.is_file()}
    assert on_disk and globbed == on_disk
