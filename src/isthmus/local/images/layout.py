"""An OCI image layout from a root filesystem, with Debian's umoci and skopeo.

Every image here is one layer (the whole rootfs) plus the image config, written so that the same
root filesystem gives the same manifest digest: every mtime is clamped to the build's epoch, the
config's `created` and the history entries carry that epoch too, and umoci writes its layer tar in
walk order with no access or change times.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path


class ImageBuildError(RuntimeError):
    """A step of an image build failed; the message names the step and carries its output's tail."""


@dataclass(frozen=True)
class ImageConfig:
    """The parts of the OCI image config these images set (umoci's --config.* options)."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    user: str = ""
    working_dir: str = "/"
    labels: Mapping[str, str] = field(default_factory=dict)
    exposed_ports: Sequence[str] = ()
    stop_signal: str = ""


def run(argv: Sequence[str], *, what: str, env: Mapping[str, str] | None = None,
        log_file: Path | None = None, cwd: Path | None = None) -> str:
    """Run a build tool; its output goes to `log_file` when given (mmdebstrap is chatty), and a
    failure raises ImageBuildError with the last lines, so the user sees why without digging."""
    tool = argv[0]
    if shutil.which(tool) is None:
        raise ImageBuildError(f"{what}: {tool} is not installed (make install adds it: it is in the Makefile's APT_PACKAGES)")
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    if log_file is not None:
        with log_file.open("ab") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            out.flush()
            started = time.monotonic()
            p = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                               check=False)
            out.write(f"# exit {p.returncode} after {time.monotonic() - started:.1f} s\n".encode())
        if p.returncode != 0:
            tail = log_file.read_text(errors="replace").splitlines()[-25:]
            raise ImageBuildError(f"{what} failed (exit {p.returncode}; log {log_file}):\n" + "\n".join(tail))
        return ""
    q = subprocess.run(list(argv), capture_output=True, text=True, env=full_env, cwd=cwd, check=False)
    if q.returncode != 0:
        raise ImageBuildError(f"{what} failed (exit {q.returncode}): {(q.stderr or q.stdout).strip()[-2000:]}")
    return q.stdout


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clamp_mtimes(root: Path, epoch: int) -> None:
    """No file newer than the epoch (SOURCE_DATE_EPOCH's rule): what the build created now looks as
    old as the inputs, so two builds of the same inputs write the same layer. Symlinks themselves
    are touched, never their targets (which may point at the host)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            path = os.path.join(dirpath, name)
            if os.lstat(path).st_mtime > epoch:
                os.utime(path, (epoch, epoch), follow_symlinks=False)
    if root.stat().st_mtime > epoch:
        os.utime(root, (epoch, epoch))


def pack(rootfs: Path, layout: Path, tag: str, config: ImageConfig, *, epoch: int, created_by: str,
         log_file: Path) -> str:
    """Make `layout` an OCI image layout holding one image, tagged `tag`, whose single layer is
    `rootfs` (moved into umoci's bundle; it must be on the same filesystem). Returns the manifest
    digest."""
    created = rfc3339(epoch)
    bundle = layout.parent / f".bundle-{layout.name}"
    image = f"{layout}:{tag}"
    run(["umoci", "init", "--layout", str(layout)], what="umoci init", log_file=log_file)
    run(["umoci", "new", "--image", image], what="umoci new", log_file=log_file)
    run(["umoci", "unpack", "--image", image, str(bundle)], what="umoci unpack", log_file=log_file)
    (bundle / "rootfs").rmdir()
    rootfs.rename(bundle / "rootfs")
    history = ["--history.created", created, "--history.author", "isthmus"]
    run(["umoci", "repack", *history, "--history.created_by", created_by, "--image", image, str(bundle)],
        what="umoci repack", log_file=log_file)
    shutil.rmtree(bundle)
    configure(layout, tag, config, epoch=epoch, log_file=log_file)
    return manifest_digest(layout, tag)


def configure(layout: Path, tag: str, config: ImageConfig, *, epoch: int, log_file: Path) -> None:
    """Replace the image's runtime config (entrypoint, cmd, env, user...) and labels, then drop the
    blobs the replaced manifests left behind."""
    created = rfc3339(epoch)
    argv = ["umoci", "config", "--image", f"{layout}:{tag}", "--created", created,
            "--history.created", created, "--history.author", "isthmus",
            "--history.created_by", "isthmus.local.images: image config",
            "--clear=config.env", "--clear=config.entrypoint", "--clear=config.cmd",
            "--clear=config.labels", "--clear=config.exposedports"]
    argv += [f"--config.env={e}" for e in config.env]
    argv += [f"--config.entrypoint={a}" for a in config.entrypoint]
    argv += [f"--config.cmd={a}" for a in config.cmd]
    argv += [f"--config.label={k}={v}" for k, v in sorted(config.labels.items())]
    argv += [f"--config.exposedports={p}" for p in config.exposed_ports]
    argv += [f"--config.user={config.user}", f"--config.workingdir={config.working_dir}"]
    if config.stop_signal:
        argv.append(f"--config.stopsignal={config.stop_signal}")
    run(argv, what="umoci config", log_file=log_file)
    run(["umoci", "gc", "--layout", str(layout)], what="umoci gc", log_file=log_file)


def manifest_digest(layout: Path, tag: str) -> str:
    """The digest of the manifest the layout's index names `tag` (what a registry reports after a
    push, and what `skopeo inspect` shows as Digest)."""
    index = json.loads((layout / "index.json").read_text())
    for m in index.get("manifests", []):
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return str(m["digest"])
    raise ImageBuildError(f"{layout}: no manifest tagged {tag!r} in index.json")


def archive(layout: Path, tag: str, dest: Path, reference: str, *, epoch: int, log_file: Path) -> None:
    """An oci-archive (one tar of a layout) whose ref name is the full reference, so that
    `podman load` and `isthmus image load` name the image as a pull would. skopeo writes the layout,
    GNU tar the archive with sorted names, fixed times and owners: the same image, the same bytes."""
    staging = dest.parent / f".{dest.name}.layout"
    run(["skopeo", "copy", "--quiet", f"oci:{layout}:{tag}", f"oci:{staging}:{reference}"],
        what="skopeo copy (the archive's layout)", log_file=log_file)
    clamp_mtimes(staging, epoch)
    for f in staging.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    run(["tar", "--sort=name", f"--mtime=@{epoch}", "--owner=0", "--group=0", "--numeric-owner",
         "--format=posix", "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
         "-cf", str(dest), "-C", str(staging), "oci-layout", "index.json", "blobs"],
        what="tar (oci-archive)", log_file=log_file)
    shutil.rmtree(staging)
