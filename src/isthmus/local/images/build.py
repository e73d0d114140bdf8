"""Build the Isthmus image and the small images as OCI image layouts, cached by their inputs.

Each image is built from Debian packages (mmdebstrap, from the Debian archive) and, for Isthmus,
wheels from PyPI pinned with hashes in requirements.lock. The steps inside the Isthmus rootfs are
build/image/recipe.sh, the same script the Containerfile RUNs, after installing the same
build/image/packages.txt; that is what keeps the image a user builds with podman and the one the
tests run one image.

    python -m isthmus.local.images.build [--cache DIR] [--only NAME ...]

Cache: `<cache>/<name>-<key>/` holds the layout `<name>/` (its ref name is the tag), `digest`, the
oci-archive `<name>.oci.tar`, `sbom.cdx.json` and `build.log`; `<key>` hashes every input of that
image (for Isthmus: the lock, the package list, the recipe, pyproject, src/ and deploy/; for
agnhost: Isthmus's key too), so unchanged inputs are never rebuilt. A build happens in a
`.tmp-*` directory renamed into place when complete, under a lock file, so concurrent
`make image` runs wait for each other instead of colliding.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from isthmus.api.image import IMAGE_REPOSITORY, IMAGE_TAG
from isthmus.local.images import sbom
from isthmus.local.images.layout import (
    ImageBuildError,
    ImageConfig,
    archive,
    clamp_mtimes,
    configure,
    manifest_digest,
    pack,
    rfc3339,
    run,
)

__all__ = ["BuiltImages", "ImageArtifact", "ImageBuildError", "build_images", "default_cache"]

REPO = Path(__file__).resolve().parents[4]
"""The source tree (src/isthmus/local/images/build.py → repo): the image is built from it, not from an
installed wheel, so it needs a checkout."""

IMAGE_DIR = REPO / "build" / "image"
PACKAGES_FILE = IMAGE_DIR / "packages.txt"
RECIPE = IMAGE_DIR / "recipe.sh"
TRIM = IMAGE_DIR / "trim.sh"
NGINX_RECIPE = IMAGE_DIR / "nginx.sh"
PAUSE_SOURCE = IMAGE_DIR / "pause" / "pause.c"
LOCK_FILE = REPO / "requirements.lock"

SUITE = "bookworm"
DEFAULT_EPOCH = 1704067200
"""2024-01-01T00:00:00Z: every file time, the config's `created` and the SBOM's timestamp, unless
SOURCE_DATE_EPOCH says otherwise. A fixed time, not the build's, is what makes two builds of the
same inputs the same image."""

KEEP_PER_IMAGE = 2
"""Cache entries kept per image (the newest): src/ changes often, and each Isthmus entry is ~200 MB."""

ISTHMUS = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
BUSYBOX = "docker.io/library/busybox:latest"
NGINX = "docker.io/library/nginx:latest"
PAUSE = "registry.k8s.io/pause:3.10"
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"
ISTHMUS_BASE = f"{IMAGE_REPOSITORY}-base:{IMAGE_TAG}"
"""The Isthmus image's first layer (Debian and the locked dependencies): a build step, not an image
build_images returns."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# dpkg skips these while installing (the Containerfile's base, bookworm-slim, has the same rules);
# trim.sh removes what is left, so both builders end with the same tree.
DPKG_EXCLUDES = [
    "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*", "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
]

Log = Callable[[str], None]


@dataclass(frozen=True)
class ImageArtifact:
    """One built image: `layout` is an OCI image layout whose index names the image `ref_name` (the
    tag), `digest` its manifest digest; `archive` the same image as an oci-archive whose ref name is
    the full `reference`."""

    layout: Path
    ref_name: str
    digest: str
    sbom: Path | None
    archive: Path | None = None
    reference: str = ""

    @property
    def oci(self) -> str:
        """The image as skopeo names it (`skopeo inspect oci:<layout>:<tag>`)."""
        return f"oci:{self.layout}:{self.ref_name}"


@dataclass
class BuiltImages:
    images: dict[str, ImageArtifact] = field(default_factory=dict)
    cache: Path | None = None


def default_cache() -> Path:
    env = os.environ.get("ISTHMUS_IMAGE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "isthmus" / "images"


def epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(value) if value.strip().isdigit() else DEFAULT_EPOCH


def read_packages(path: Path = PACKAGES_FILE) -> list[str]:
    """The package list file: one name a line, `#` comments and blank lines ignored."""
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


# --- the cache key ---------------------------------------------------------------------------------

_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


def _walk(path: Path) -> Iterator[Path]:
    """Files (and symlinks, not followed) under `path` in a stable order, without byte-code or tool caches."""
    if path.is_symlink() or path.is_file():
        yield path
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")
                             and not os.path.islink(os.path.join(dirpath, d)))
        links = [d for d in os.listdir(dirpath) if os.path.islink(os.path.join(dirpath, d))
                 and os.path.isdir(os.path.join(dirpath, d))]
        for name in sorted({*filenames, *links}):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath) / name


def input_key(name: str, paths: Iterable[Path], *, extra: Sequence[str] = ()) -> str:
    """sha256 of everything an image is made from: file names relative to the repo, their bytes (a
    symlink's target text), the builder's own code, the suite and the epoch. 16 hex digits name it."""
    h = hashlib.sha256()
    h.update(f"image={name}\nsuite={SUITE}\nepoch={epoch()}\n".encode())
    for e in extra:
        h.update(f"extra={e}\n".encode())
    builder = sorted(Path(__file__).parent.glob("*.py"))
    for root in [*builder, *paths]:
        for f in _walk(root):
            rel = str(f.relative_to(REPO)) if f.is_relative_to(REPO) else str(f)
            h.update(f"\0{rel}\0".encode())
            h.update(os.readlink(f).encode() if f.is_symlink() else f.read_bytes())
    return h.hexdigest()[:16]


# --- the cache ---------------------------------------------------------------------------------------


def _load(entry: Path, name: str) -> ImageArtifact | None:
    """The artifact of a complete cache entry (its `complete` file is written last), else None."""
    done = entry / "complete"
    if not done.is_file():
        return None
    meta = json.loads(done.read_text())
    sbom_path = entry / "sbom.cdx.json"
    tar = entry / f"{name}.oci.tar"
    return ImageArtifact(layout=entry / name, ref_name=meta["tag"], digest=meta["digest"],
                         sbom=sbom_path if sbom_path.is_file() else None,
                         archive=tar if tar.is_file() else None, reference=meta["reference"])


@contextmanager
def _locked(cache: Path, log: Log) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another image build (lock {cache / '.lock'})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            # Holding the lock, no build is under way: a .tmp-* left is a crashed build's.
            for stale in cache.glob(".tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _prune(cache: Path, name: str, keep: Path) -> None:
    entries = [p for p in cache.glob(f"{name}-*") if (p / "complete").is_file() and p != keep
               and len(p.name) == len(name) + 17]
    entries.sort(key=lambda p: (p / "complete").stat().st_mtime, reverse=True)
    for old in entries[KEEP_PER_IMAGE - 1:]:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class _Build:
    """One image's build in its temporary directory."""

    name: str
    reference: str
    tmp: Path
    log: Log

    @property
    def log_file(self) -> Path:
        return self.tmp / "build.log"

    @property
    def tag(self) -> str:
        return self.reference.rpartition(":")[2]

    def finish(self, digest: str, components: list[sbom.Component] | None, description: str, *,
               with_archive: bool = True) -> None:
        """Write digest, archive, SBOM and the `complete` marker (last: a crash before it leaves an
        entry that is never used)."""
        (self.tmp / "digest").write_text(digest + "\n")
        layout = self.tmp / self.name
        if with_archive:
            archive(layout, self.tag, self.tmp / f"{self.name}.oci.tar", self.reference, epoch=epoch(),
                    log_file=self.log_file)
        if components is not None:
            repository = self.reference.rpartition(":")[0]
            sbom.write(self.tmp / "sbom.cdx.json", sbom.cyclonedx(
                components, repository=repository, tag=self.tag, digest=digest, created=epoch(),
                description=description))
        (self.tmp / "complete").write_text(json.dumps(
            {"reference": self.reference, "tag": self.tag, "digest": digest}) + "\n")


def _mmdebstrap(b: _Build, rootfs: Path, packages: Sequence[str], *, variant: str = "minbase",
                hooks: Sequence[str] = (), skip: Sequence[str] = ()) -> None:
    argv = ["mmdebstrap", f"--variant={variant}", "--include=" + ",".join(packages)]
    argv += [f"--dpkgopt={o}" for o in DPKG_EXCLUDES]
    argv += [f"--skip={s}" for s in skip]
    if variant != "extract":
        argv += [f"--customize-hook={h}" for h in [*hooks, HOST_FILES_HOOK]]
    argv += [SUITE, str(rootfs)]
    run(argv, what=f"{b.name}: mmdebstrap", env={"SOURCE_DATE_EPOCH": str(epoch())}, log_file=b.log_file)


HOST_FILES_HOOK = (
    'printf "" > "$1/etc/resolv.conf" && printf "" > "$1/etc/hostname" && '
    'printf "127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" > "$1/etc/hosts"')
"""mmdebstrap copies the host's resolv.conf and hostname in: the image must hold neither (the runtime
mounts the pod's over these empty files; a container engine does the same for the Containerfile)."""


def _run_script_hooks(inputs: Path, script: str, *args: str) -> list[str]:
    """mmdebstrap customize hooks that copy `inputs` into the chroot, run `script` there, and
    remove the copy: the script sees the same files at the same path as in the Containerfile."""
    inside = "/tmp/isthmus-build"
    call = " ".join(shlex.quote(a) for a in (f"{inside}/{script}", *args))
    return [
        f'mkdir -p "$1{inside}" && cp -a {shlex.quote(str(inputs))}/. "$1{inside}/"',
        f'chroot "$1" env SOURCE_DATE_EPOCH={epoch()} sh {call}',
        f'rm -rf "$1{inside}"',
    ]


# --- the images --------------------------------------------------------------------------------------

MANYLINUX = [f"manylinux_2_{n}_x86_64" for n in range(36, 16, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
"""Wheels Debian 12's glibc 2.36 can load on x86_64, newest first (pip download's --platform)."""


def fetch_wheels(dest: Path, b: _Build) -> None:
    """Every wheel of requirements.lock for CPython 3.11 on linux x86_64 (Debian 12's python3), each
    checked against its hash by pip download (and again by the recipe's pip install)."""
    dest.mkdir(parents=True)
    platforms = [a for p in MANYLINUX for a in ("--platform", p)]
    run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--require-hashes",
         "--no-deps", "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
         "--abi", "cp311", *platforms, "-r", str(LOCK_FILE), "-d", str(dest)],
        what="pip download (requirements.lock)", log_file=b.log_file)


def build_wheel(dest: Path, b: _Build) -> None:
    """The isthmus wheel, built from a copy of the source tree (the shared work tree stays untouched:
    setuptools writes build/ and *.egg-info beside the sources)."""
    dest.mkdir(parents=True, exist_ok=True)
    src = b.tmp / "source"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".mypy_cache")
    for part in ("src", "deploy"):
        shutil.copytree(REPO / part, src / part, symlinks=True, ignore=ignore)
    for part in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / part).exists():
            shutil.copy2(REPO / part, src / part)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
         "-w", str(dest), str(src)], what="pip wheel (isthmus)", env={"SOURCE_DATE_EPOCH": str(epoch())},
        log_file=b.log_file)
    shutil.rmtree(src)


def isthmus_config() -> ImageConfig:
    return ImageConfig(
        entrypoint=["isthmus"], cmd=["--help"],
        env=[f"PATH=/opt/isthmus/bin:{DEFAULT_PATH}", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"],
        user="65532:65532", working_dir="/",
        labels={
            "org.opencontainers.image.title": "isthmus",
            "org.opencontainers.image.description": "Multi-cluster service networking for Kubernetes: "
                                                    "every Isthmus component, with HAProxy and nftables",
            "org.opencontainers.image.version": IMAGE_TAG,
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.created": rfc3339(epoch()),
            "org.opencontainers.image.ref.name": ISTHMUS,
        })


def build_isthmus_base(b: _Build) -> None:
    """Layer 1: Debian (packages.txt) and the venv of requirements.lock (`recipe.sh deps`). Cached on
    its own: a change to Isthmus's code does not rebuild it."""
    inputs = b.tmp / "inputs"
    fetch_wheels(inputs / "wheels", b)
    for f in (LOCK_FILE, RECIPE, TRIM):
        shutil.copy2(f, inputs / f.name)
    rootfs = b.tmp / "rootfs"
    _mmdebstrap(b, rootfs, read_packages(),
                hooks=_run_script_hooks(inputs, "recipe.sh", "deps", "/tmp/isthmus-build"))
    shutil.rmtree(inputs)
    clamp_mtimes(rootfs, epoch())
    digest = pack(rootfs, b.tmp / b.name, b.tag, isthmus_config(), epoch=epoch(),
                  created_by="mmdebstrap --variant=minbase --include=<build/image/packages.txt>; "
                             "build/image/recipe.sh deps", log_file=b.log_file)
    b.finish(digest, None, "", with_archive=False)


def build_isthmus(b: _Build, base: ImageArtifact) -> None:
    """Layer 2 on the base: the isthmus wheel (`recipe.sh app`, in a chroot of the unpacked base)."""
    layout = b.tmp / b.name
    shutil.copytree(base.layout, layout)
    bundle = b.tmp / "bundle"
    run(["umoci", "unpack", "--image", f"{layout}:{base.ref_name}", str(bundle)], what="umoci unpack",
        log_file=b.log_file)
    rootfs = bundle / "rootfs"
    inputs = rootfs / "tmp" / "isthmus-build"
    build_wheel(inputs / "wheels", b)
    for f in (RECIPE, TRIM):
        shutil.copy2(f, inputs / f.name)
    run(["chroot", str(rootfs), "env", f"SOURCE_DATE_EPOCH={epoch()}", "sh", "/tmp/isthmus-build/recipe.sh",
         "app", "/tmp/isthmus-build"], what="recipe.sh app (chroot)", log_file=b.log_file)
    shutil.rmtree(inputs)
    clamp_mtimes(rootfs, epoch())
    components = sbom.components_of(rootfs)
    _repack(b, layout, bundle, base.ref_name, "build/image/recipe.sh app (the isthmus wheel)")
    configure(layout, b.tag, isthmus_config(), epoch=epoch(), log_file=b.log_file)
    b.finish(manifest_digest(layout, b.tag), components, "The Isthmus image")


def _repack(b: _Build, layout: Path, bundle: Path, old_tag: str, created_by: str) -> None:
    """The bundle's changes as a new layer, tagged with the image's tag; the base's tag goes."""
    run(["umoci", "repack", "--history.created", rfc3339(epoch()), "--history.author", "isthmus",
         "--history.created_by", created_by, "--image", f"{layout}:{b.tag}", str(bundle)],
        what="umoci repack", log_file=b.log_file)
    shutil.rmtree(bundle)
    if old_tag != b.tag:
        run(["umoci", "rm", "--image", f"{layout}:{old_tag}"], what="umoci rm", log_file=b.log_file)


AGNHOST_SCRIPT = '#!/bin/sh\n# agnhost, as the e2e test image names it: Isthmus implements the subcommands tests use.\nexec isthmus agnhost "$@"\n'


def build_agnhost(b: _Build, base: ImageArtifact) -> None:
    """The Isthmus image plus /agnhost: one more layer, so the blobs of the base are shared in a registry."""
    layout = b.tmp / b.name
    shutil.copytree(base.layout, layout)
    bundle = b.tmp / "bundle"
    run(["umoci", "unpack", "--image", f"{layout}:{base.ref_name}", str(bundle)], what="umoci unpack",
        log_file=b.log_file)
    rootfs = bundle / "rootfs"
    script = rootfs / "agnhost"
    script.write_text(AGNHOST_SCRIPT)
    script.chmod(0o755)
    os.utime(script, (epoch(), epoch()))
    os.utime(rootfs, (epoch(), epoch()))
    components = sbom.components_of(rootfs)
    created = rfc3339(epoch())
    _repack(b, layout, bundle, base.ref_name, "/agnhost")
    base_config = isthmus_config()
    # The e2e image runs as root with /agnhost as its entrypoint and `pause` as its default command.
    config = ImageConfig(entrypoint=["/agnhost"], cmd=["pause"], env=base_config.env, user="",
                         working_dir="/", labels={
                             "org.opencontainers.image.title": "agnhost (isthmus)",
                             "org.opencontainers.image.version": "2.53",
                             "org.opencontainers.image.licenses": "Apache-2.0",
                             "org.opencontainers.image.created": created,
                             "org.opencontainers.image.base.name": ISTHMUS,
                         })
    configure(layout, b.tag, config, epoch=epoch(), log_file=b.log_file)
    b.finish(manifest_digest(layout, b.tag), components, "agnhost on the Isthmus image")


NGINX_PACKAGES = ["nginx-light"]


def build_nginx(b: _Build) -> None:
    inputs = b.tmp / "inputs"
    inputs.mkdir()
    for f in (NGINX_RECIPE, TRIM):
        shutil.copy2(f, inputs / f.name)
    rootfs = b.tmp / "rootfs"
    _mmdebstrap(b, rootfs, NGINX_PACKAGES, hooks=_run_script_hooks(inputs, "nginx.sh"))
    shutil.rmtree(inputs)
    clamp_mtimes(rootfs, epoch())
    components = sbom.components_of(rootfs)
    config = ImageConfig(cmd=["nginx", "-g", "daemon off;"], exposed_ports=["80/tcp"], stop_signal="SIGQUIT",
                         labels={"org.opencontainers.image.title": "nginx (Debian nginx-light)",
                                 "org.opencontainers.image.created": rfc3339(epoch())})
    digest = pack(rootfs, b.tmp / b.name, b.tag, config, epoch=epoch(),
                  created_by="mmdebstrap --variant=minbase --include=nginx-light + build/image/nginx.sh",
                  log_file=b.log_file)
    b.finish(digest, components, "nginx from Debian's nginx-light")


def _debs(b: _Build, packages: Sequence[str]) -> list[Path]:
    """The .deb files of `packages` from the Debian archive (mmdebstrap's extract variant resolves
    and downloads them with its own apt lists; nothing of the host's apt is used)."""
    debs = b.tmp / "debs"
    debs.mkdir()
    extract = b.tmp / "extract"
    _mmdebstrap(b, extract, packages, variant="extract", skip=["cleanup/apt/cache"])
    for deb in (extract / "var/cache/apt/archives").glob("*.deb"):
        deb.rename(debs / deb.name)
    shutil.rmtree(extract)
    return sorted(debs.glob("*.deb"))


def _deb_fields(deb: Path) -> dict[str, str]:
    out = run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture"], what="dpkg-deb -f")
    fields = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def build_busybox(b: _Build) -> None:
    """busybox-static and its applet links on an otherwise empty tree, as the official image."""
    rootfs = b.tmp / "rootfs"
    rootfs.mkdir()
    fields = []
    for deb in _debs(b, ["busybox-static"]):
        run(["dpkg-deb", "-x", str(deb), str(rootfs)], what="dpkg-deb -x")
        fields.append(_deb_fields(deb))
    for doc in (rootfs / "usr/share/doc").glob("*/*"):
        if doc.name != "copyright":
            doc.unlink() if not doc.is_dir() else shutil.rmtree(doc)
    shutil.rmtree(rootfs / "usr/share/man", ignore_errors=True)
    busybox = rootfs / "bin" / "busybox"
    applets = run([str(busybox), "--list-full"], what="busybox --list-full").split()
    for rel in applets:
        link = rootfs / rel
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("/bin/busybox")
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")
    (rootfs / "etc/group").write_text("root:x:0:\nnobody:x:65534:\n")
    for d, mode in (("tmp", 0o1777), ("root", 0o700), ("home", 0o755), ("var", 0o755), ("proc", 0o755),
                    ("sys", 0o755), ("dev", 0o755)):
        (rootfs / d).mkdir(exist_ok=True)
        (rootfs / d).chmod(mode)
    clamp_mtimes(rootfs, epoch())
    config = ImageConfig(cmd=["sh"], labels={"org.opencontainers.image.title": "busybox (Debian busybox-static)",
                                             "org.opencontainers.image.created": rfc3339(epoch())})
    digest = pack(rootfs, b.tmp / b.name, b.tag, config, epoch=epoch(),
                  created_by="Debian busybox-static + its applet links", log_file=b.log_file)
    b.finish(digest, sbom.deb_files(fields), "busybox from Debian's busybox-static")


def build_pause(b: _Build) -> None:
    """/pause alone: build/image/pause/pause.c compiled static with the host's gcc."""
    rootfs = b.tmp / "rootfs"
    rootfs.mkdir()
    run(["gcc", "-static", "-Os", "-s", "-Wall", "-Wextra", "-o", str(rootfs / "pause"), str(PAUSE_SOURCE)],
        what="gcc pause.c (needs gcc and libc6-dev)", log_file=b.log_file)
    (rootfs / "pause").chmod(0o755)
    clamp_mtimes(rootfs, epoch())
    config = ImageConfig(entrypoint=["/pause"], user="65535:65535",
                         labels={"org.opencontainers.image.title": "pause (isthmus)",
                                 "org.opencontainers.image.created": rfc3339(epoch())})
    digest = pack(rootfs, b.tmp / b.name, b.tag, config, epoch=epoch(),
                  created_by="gcc -static -Os build/image/pause/pause.c", log_file=b.log_file)
    b.finish(digest, None, "")


@dataclass(frozen=True)
class _Spec:
    name: str
    reference: str
    inputs: tuple[Path, ...]


def specs() -> list[_Spec]:
    base_inputs = (LOCK_FILE, PACKAGES_FILE, RECIPE, TRIM)
    isthmus_inputs = (*base_inputs, REPO / "pyproject.toml", REPO / "README.md", REPO / "src", REPO / "deploy")
    return [
        _Spec("isthmus-base", ISTHMUS_BASE, base_inputs),
        _Spec("isthmus", ISTHMUS, isthmus_inputs),
        _Spec("agnhost", AGNHOST, isthmus_inputs),
        _Spec("busybox", BUSYBOX, ()),
        _Spec("nginx", NGINX, (NGINX_RECIPE, TRIM)),
        _Spec("pause", PAUSE, (PAUSE_SOURCE,)),
    ]


NAMES = [s.name for s in specs() if s.name != "isthmus-base"]


def build_images(cache: Path | None = None, *, log: Log = print, only: Iterable[str] | None = None) -> BuiltImages:
    """Every image (or those named in `only`; agnhost brings Isthmus along), from the cache when its
    inputs are unchanged. Raises ImageBuildError naming the step that failed."""
    if not RECIPE.is_file():
        raise ImageBuildError(f"{RECIPE} not found: images are built from an Isthmus source checkout")
    if os.geteuid() != 0:
        raise ImageBuildError("building images needs root (mmdebstrap's root mode and umoci keep file owners)")
    cache = (cache or default_cache()).resolve()
    wanted = set(only or NAMES)
    unknown = wanted - set(NAMES)
    if unknown:
        raise ImageBuildError(f"unknown image(s) {sorted(unknown)}; known: {NAMES}")
    if "agnhost" in wanted:
        wanted.add("isthmus")
    if "isthmus" in wanted:
        wanted.add("isthmus-base")
    keys = {s.name: input_key(s.name, s.inputs, extra=[s.reference]) for s in specs()}
    result = BuiltImages(cache=cache)
    bases: dict[str, ImageArtifact] = {}
    with _locked(cache, log):
        for spec in specs():
            if spec.name not in wanted:
                continue
            entry = cache / f"{spec.name}-{keys[spec.name]}"
            artifact = _load(entry, spec.name)
            if artifact is None:
                tmp = cache / f".tmp-{entry.name}-{os.getpid()}"
                b = _Build(spec.name, spec.reference, tmp, log)
                tmp.mkdir()
                started = time.monotonic()
                log(f"{spec.reference}: building (log {entry / 'build.log'})")
                # The caller's umask would reach every file the build creates (a 077 one leaves the
                # venv unreadable to uid 65532) and so the digest: images are built with 022.
                umask = os.umask(0o022)
                try:
                    if spec.name == "isthmus-base":
                        build_isthmus_base(b)
                    elif spec.name == "isthmus":
                        build_isthmus(b, bases[ISTHMUS_BASE])
                    elif spec.name == "agnhost":
                        build_agnhost(b, result.images[ISTHMUS])
                    elif spec.name == "nginx":
                        build_nginx(b)
                    elif spec.name == "busybox":
                        build_busybox(b)
                    else:
                        build_pause(b)
                except BaseException as e:
                    keep = cache / f".failed-{spec.name}.log"
                    if b.log_file.exists():
                        shutil.copy2(b.log_file, keep)
                    shutil.rmtree(tmp, ignore_errors=True)
                    if isinstance(e, ImageBuildError):
                        raise ImageBuildError(f"{spec.reference}: {e}\n(the whole log: {keep})") from None
                    raise
                finally:
                    os.umask(umask)
                os.rename(tmp, entry)
                _prune(cache, spec.name, entry)
                artifact = _load(entry, spec.name)
                assert artifact is not None
                log(f"{spec.reference}: built in {time.monotonic() - started:.0f} s")
            else:
                log(f"{spec.reference}: cached")
            if spec.name == "isthmus-base":
                bases[spec.reference] = artifact
            else:
                result.images[spec.reference] = artifact
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m isthmus.local.images.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None, help="cache directory (default $ISTHMUS_IMAGE_CACHE "
                                                                 "or ~/.cache/isthmus/images)")
    parser.add_argument("--only", action="append", choices=NAMES, help="build only this image (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the artifacts as JSON")
    args = parser.parse_args(argv)
    try:
        built = build_images(args.cache, only=args.only, log=lambda m: print(m, file=sys.stderr, flush=True))
    except ImageBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({ref: {"layout": str(a.layout), "ref_name": a.ref_name, "digest": a.digest,
                                "archive": str(a.archive) if a.archive else None,
                                "sbom": str(a.sbom) if a.sbom else None} for ref, a in built.images.items()},
                         indent=2))
        return 0
    for ref, a in built.images.items():
        print(f"{ref}\n  digest   {a.digest}\n  layout   {a.oci}\n  archive  {a.archive}\n  sbom     {a.sbom}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
