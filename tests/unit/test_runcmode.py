"""`up --runtime runc` refuses up front, naming everything this machine lacks, and reads what the
image build made; nothing here starts anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isthmus.local import runcmode
from isthmus.local.plan import PlanError


def test_missing_prerequisites_are_named_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runcmode.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(runcmode.shutil, "which", lambda name: None if name in ("runc", "skopeo") else f"/usr/bin/{name}")
    monkeypatch.setattr(runcmode, "CNI_BIN", Path("/nonexistent"))
    with pytest.raises(PlanError) as err:
        runcmode.check_prerequisites()
    message = str(err.value)
    assert message.startswith("--runtime runc needs root")
    assert "`runc`" in message and "`skopeo`" in message and "`umoci`" not in message
    assert "the CNI plugin /nonexistent/bridge" in message and "`make install`" in message


def test_the_build_json_is_read_or_refused_clearly(tmp_path: Path) -> None:
    doc = {"ghcr.io/isthmus-net/isthmus:0.1.0": {"layout": "/x/isthmus", "ref_name": "0.1.0", "digest": "sha256:ab"}}
    (tmp_path / "images.json").write_text(json.dumps(doc))
    built = runcmode.read_built(tmp_path / "images.json")
    assert built["ghcr.io/isthmus-net/isthmus:0.1.0"] == runcmode.Built(Path("/x/isthmus"), "0.1.0", "sha256:ab")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PlanError, match="the image build left no usable"):
        runcmode.read_built(tmp_path / "bad.json")


def test_kube_lite_is_told_its_node_the_mirrors_and_the_relay() -> None:
    from isthmus.local.network.plan import fabric_plan

    args = runcmode.kube_lite_args(fabric_plan("/tmp/x", 2, cs="isthmus-test"), "c2", 24661)
    assert args[:6] == ["--runtime", "runc", "--netns", "isthmus-test-c2", "--node-address", "10.255.0.12"]
    assert "docker.io=http://10.255.0.2:5000" in args and args[-2:] == ["--api-address-in-pods", "10.255.0.1:24661"]
