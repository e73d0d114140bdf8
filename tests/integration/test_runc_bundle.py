"""A container's root filesystem is the image's: its "/" keeps the image's owner and mode, whatever
umask kube-lite runs under (the local clusterset's supervisor runs with 077, and an overlay's root
takes the upper directory's attributes: a 0700 "/" hid every executable from non-root containers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isthmus.local.kubelite.runc import RuncRuntime, _unmount

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="overlay mounts need root (CI runs as root)")


def test_bundle_root_keeps_the_image_roots_mode_under_a_private_umask(tmp_path: Path) -> None:
    lower = tmp_path / "image"
    (lower / "opt").mkdir(parents=True)
    lower.chmod(0o755)
    (lower / "opt" / "tool").write_text("#!/bin/sh\n")
    bundle = tmp_path / "pod" / "containers" / "c" / "0"
    old = os.umask(0o077)
    try:
        RuncRuntime(tmp_path / "node", node="n").prepare(bundle, lower, {"root": {}})
    finally:
        os.umask(old)
    try:
        root = bundle / "rootfs"
        assert os.path.ismount(root)
        assert (root.stat().st_mode & 0o7777) == 0o755
        assert (root / "opt" / "tool").read_text() == "#!/bin/sh\n"
    finally:
        _unmount(bundle / "rootfs")
