"""`make image` for real: the Isthmus image and the small images built from Debian packages and PyPI
(mmdebstrap, umoci, skopeo), then run under runc, as a kubelet would run them.

Uses the image cache ($ISTHMUS_IMAGE_CACHE or ~/.cache/isthmus/images): the first build on a fresh
machine takes a few minutes, later ones only check the inputs' hash. Needs root and the Makefile's
APT_PACKAGES (mmdebstrap, umoci, skopeo, runc, gcc, libc6-dev); it fails, never skips, without them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from isthmus.api.image import IMAGE, IMAGE_TAG
from isthmus.local.images import build
from isthmus.local.images.build import AGNHOST, BUSYBOX, NGINX, PAUSE, BuiltImages, ImageArtifact

pytestmark = pytest.mark.timeout(1200)

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("mmdebstrap", "umoci", "skopeo", "runc", "gcc", "dpkg-deb")
# The capabilities containerd gives a container by default (a kubelet's pods run with these).
CRI_DEFAULT_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
                    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
                    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]


def _require_tools() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"image builds need {missing} (Debian packages in the Makefile's APT_PACKAGES: make install)")
    if os.geteuid() != 0:
        pytest.fail("image builds need root (mmdebstrap and umoci keep file owners; runc runs the images)")


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(scope="module")
def built() -> BuiltImages:
    _require_tools()
    # A private umask, as `isthmus up` has (its state dir is 077): what gets built must not care.
    with umask(0o077):
        return build.build_images(log=lambda m: print(m, flush=True))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("images")


def sh(*argv: str, timeout: float = 120) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert p.returncode == 0, f"{' '.join(argv)}: exit {p.returncode}: {p.stderr}"
    return p.stdout


def inspect(ref: str, *, config: bool = False) -> dict[str, Any]:
    return json.loads(sh("skopeo", "inspect", *(["--config"] if config else []), ref))  # type: ignore[no-any-return]


def unpack(artifact: ImageArtifact, dest: Path) -> Path:
    """The image's rootfs, as a runtime sees it (umoci unpack: every layer applied, owners kept)."""
    if not (dest / "rootfs").is_dir():
        sh("umoci", "unpack", "--image", f"{artifact.layout}:{artifact.ref_name}", str(dest), timeout=300)
    return dest / "rootfs"


@pytest.fixture
def bundle(tmp_path: Path) -> Iterator[Any]:
    """make(rootfs, args, user, env, caps) → a runc bundle from `runc spec` over that rootfs (read only,
    its own network namespace with only lo); the containers started are deleted at the end."""
    started: list[str] = []

    def make(rootfs: Path, args: list[str], *, uid: int, gid: int, env: list[str],
             caps: list[str] | None = None) -> tuple[Path, str]:
        b = tmp_path / f"bundle-{len(started)}"
        b.mkdir()
        sh("runc", "spec", "--bundle", str(b))
        spec = json.loads((b / "config.json").read_text())
        spec["root"] = {"path": str(rootfs), "readonly": True}
        spec["process"].update(terminal=False, args=args, env=env, cwd="/", user={"uid": uid, "gid": gid})
        if caps is not None:
            spec["process"]["capabilities"] = {k: caps for k in ("bounding", "effective", "permitted")}
        (b / "config.json").write_text(json.dumps(spec))
        cid = f"isthmus-t-{os.getpid()}-{len(started)}"
        started.append(cid)
        return b, cid

    yield make
    for cid in started:
        subprocess.run(["runc", "delete", "--force", cid], capture_output=True, timeout=30, check=False)


def image_env(artifact: ImageArtifact) -> list[str]:
    return list(inspect(artifact.oci, config=True)["config"].get("Env", []))


# --- what make image built ------------------------------------------------------------------------------


def test_every_image_is_built_under_its_usual_name(built: BuiltImages) -> None:
    assert set(built.images) == {IMAGE, BUSYBOX, NGINX, PAUSE, AGNHOST}
    for ref, a in built.images.items():
        assert a.reference == ref and a.ref_name == ref.rpartition(":")[2]
        assert a.digest == (a.layout.parent / "digest").read_text().strip()


def test_skopeo_reads_every_layout_and_archive_with_the_recorded_digest(built: BuiltImages) -> None:
    for ref, a in built.images.items():
        assert inspect(a.oci)["Digest"] == a.digest, ref
        assert a.archive is not None
        assert inspect(f"oci-archive:{a.archive}")["Digest"] == a.digest, ref
        index = json.loads(sh("tar", "-xOf", str(a.archive), "index.json"))
        assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == ref


def test_the_isthmus_image_config(built: BuiltImages) -> None:
    a = built.images[IMAGE]
    assert a.ref_name == IMAGE_TAG
    config = inspect(a.oci, config=True)["config"]
    assert config["Entrypoint"] == ["isthmus"] and config["Cmd"] == ["--help"]
    assert config["User"] == "65532:65532"
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    assert any(e.startswith("PATH=/opt/isthmus/bin:") for e in config["Env"])
    assert config["Labels"]["org.opencontainers.image.version"] == IMAGE_TAG


def test_the_isthmus_rootfs_holds_the_components_tools(built: BuiltImages, work: Path) -> None:
    rootfs = unpack(built.images[IMAGE], work / "isthmus")
    for path in ("opt/isthmus/bin/isthmus", "usr/sbin/haproxy", "usr/sbin/nft", "usr/bin/ip", "usr/sbin/conntrack"):
        assert (rootfs / path).exists(), f"/{path} missing from the image"
    assert not list((rootfs / "opt/isthmus/bin").glob("pip*")), "the image must hold no installer"
    assert not list((rootfs / "var/lib/apt/lists").glob("*_Packages")), "apt lists left in the image"
    assert "nonroot:x:65532:65532" in (rootfs / "etc/passwd").read_text()
    assert (rootfs / "etc/resolv.conf").read_text() == "", "the build host's resolv.conf leaked into the image"


def test_runc_runs_isthmus_in_the_image_as_65532(built: BuiltImages, work: Path, bundle: Any) -> None:
    a = built.images[IMAGE]
    rootfs = unpack(a, work / "isthmus")
    b, cid = bundle(rootfs, ["sh", "-c", "id -u; id -g; isthmus version --client; haproxy -v; nft --version"],
                    uid=65532, gid=65532, env=image_env(a))
    out = sh("runc", "run", "--bundle", str(b), cid, timeout=120)
    lines = out.splitlines()
    assert lines[:2] == ["65532", "65532"]
    assert f"Client Version: {IMAGE_TAG} (Python 3.11" in out
    assert "HAProxy version 2.6" in out and "nftables v1" in out


HAPROXY_ON_80 = (
    "printf 'global\\n  maxconn 16\\ndefaults\\n  mode http\\n  timeout connect 1s\\n  timeout client 1s\\n"
    "  timeout server 1s\\nfrontend f\\n  bind :80\\n  http-request return status 200\\n' > /dev/shm/h.cfg"
    " && haproxy -D -f /dev/shm/h.cfg -p /dev/shm/h.pid && echo bound :80")
"""HAProxy's daemon mode binds before its parent exits: exit 0 and `bound :80` only once it holds the port."""


def test_haproxy_binds_port_80_as_65532_by_its_file_capability(built: BuiltImages, work: Path, bundle: Any) -> None:
    """Issue 43, defect 2: the pool manager's container (uid 65532, capabilities drop ALL add
    NET_BIND_SERVICE, allowPrivilegeEscalation true) runs HAProxy on port 80 through the file
    capability the recipe gives the binary; with no_new_privs (allowPrivilegeEscalation false) exec
    grants nothing and the bind is refused, which is why the pool manager escalates."""
    a = built.images[IMAGE]
    rootfs = unpack(a, work / "isthmus")
    xattr = os.getxattr(rootfs / "usr/sbin/haproxy", "security.capability")
    assert xattr[:4] == (0x02000001).to_bytes(4, "little")  # revision 2, effective
    assert int.from_bytes(xattr[4:8], "little") == 1 << 10  # permitted: CAP_NET_BIND_SERVICE only
    for escalation in (True, False):
        b, cid = bundle(rootfs, ["sh", "-c", HAPROXY_ON_80], uid=65532, gid=65532, env=image_env(a),
                        caps=["CAP_NET_BIND_SERVICE"])
        spec = json.loads((b / "config.json").read_text())
        spec["process"]["noNewPrivileges"] = not escalation
        (b / "config.json").write_text(json.dumps(spec))
        p = subprocess.run(["runc", "run", "--bundle", str(b), cid], capture_output=True, text=True, timeout=120,
                           check=False)
        out = p.stdout + p.stderr
        assert (p.returncode == 0) is escalation, out
        if escalation:
            assert "bound :80" in out
        else:
            assert "Permission denied" in out and "bound :80" not in out


def test_the_sbom_lists_debian_and_python_packages(built: BuiltImages) -> None:
    a = built.images[IMAGE]
    assert a.sbom is not None
    doc = json.loads(a.sbom.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.5"
    assert a.digest.removeprefix("sha256:") in doc["metadata"]["component"]["purl"]
    purls = [c["purl"] for c in doc["components"]]
    assert any(p.startswith("pkg:deb/debian/haproxy@2.6") for p in purls)
    assert any(p.startswith("pkg:deb/debian/python3.11@3.11") for p in purls)
    locked = (REPO / "requirements.lock").read_text()
    lightkube = next(c for c in doc["components"] if c["name"] == "lightkube")
    assert lightkube["purl"] == f"pkg:pypi/lightkube@{lightkube['version']}"
    assert f"lightkube=={lightkube['version']}" in locked
    assert any(p.startswith("pkg:pypi/isthmus@") for p in purls)
    assert not any(p.startswith("pkg:pypi/pip@") for p in purls)


def test_the_same_inputs_give_the_same_digest_and_a_second_build_is_the_cache(
        built: BuiltImages, tmp_path: Path) -> None:
    """A build from scratch in another cache gives byte-identical manifests (busybox and pause here:
    their inputs never move while this test runs, and the Isthmus image is held to the same rules),
    and asking again only reads the cache."""
    cache = tmp_path / "cache"
    with umask(0o002):  # another umask than the first build's: it must not reach the image
        rebuilt = build.build_images(cache, only=["busybox", "pause"], log=lambda _: None)
    for ref in (BUSYBOX, PAUSE):
        assert rebuilt.images[ref].digest == built.images[ref].digest, ref
        first, second = built.images[ref].archive, rebuilt.images[ref].archive
        assert first is not None and second is not None
        assert first.read_bytes() == second.read_bytes(), f"{ref}: the oci-archive differs"
    said: list[str] = []
    again = build.build_images(cache, only=["busybox", "pause"], log=said.append)
    assert said == [f"{BUSYBOX}: cached", f"{PAUSE}: cached"]
    assert again.images == rebuilt.images


# --- the small images ---------------------------------------------------------------------------------


def test_busybox_runs_echo(built: BuiltImages, work: Path, bundle: Any) -> None:
    a = built.images[BUSYBOX]
    assert inspect(a.oci, config=True)["config"]["Cmd"] == ["sh"]
    rootfs = unpack(a, work / "busybox")
    b, cid = bundle(rootfs, ["sh", "-c", "echo ok; readlink /usr/bin/wget"], uid=0, gid=0, env=image_env(a))
    assert sh("runc", "run", "--bundle", str(b), cid).split() == ["ok", "/bin/busybox"]  # an applet link


def test_pause_waits_for_sigterm_as_65535(built: BuiltImages, work: Path, bundle: Any) -> None:
    a = built.images[PAUSE]
    config = inspect(a.oci, config=True)["config"]
    assert config["Entrypoint"] == ["/pause"] and config["User"] == "65535:65535"
    rootfs = unpack(a, work / "pause")
    assert sorted(p.name for p in rootfs.iterdir()) == ["pause"]
    b, cid = bundle(rootfs, ["/pause"], uid=65535, gid=65535, env=[])
    proc = subprocess.Popen(["runc", "run", "--bundle", str(b), cid], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and '"running"' not in subprocess.run(
                ["runc", "state", cid], capture_output=True, text=True, check=False).stdout:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        time.sleep(0.3)
        assert proc.poll() is None, "pause exited by itself"
        sh("runc", "kill", cid, "TERM")
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    assert "shutting down" in err


def test_nginx_serves_the_default_page_on_80(built: BuiltImages, work: Path, bundle: Any) -> None:
    a = built.images[NGINX]
    config = inspect(a.oci, config=True)["config"]
    assert config["Cmd"] == ["nginx", "-g", "daemon off;"] and "80/tcp" in config["ExposedPorts"]
    rootfs = unpack(a, work / "nginx")
    b, cid = bundle(rootfs, list(config["Cmd"]), uid=0, gid=0, env=image_env(a), caps=CRI_DEFAULT_CAPS)
    spec = json.loads((b / "config.json").read_text())
    spec["root"]["readonly"] = False  # nginx writes its pid file, as in the official image
    (b / "config.json").write_text(json.dumps(spec))
    proc = subprocess.Popen(["runc", "run", "--bundle", str(b), cid], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        page, deadline = "", time.monotonic() + 30
        while "Welcome to nginx!" not in page and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            state = subprocess.run(["runc", "state", cid], capture_output=True, text=True, check=False)
            if '"running"' in state.stdout:
                pid = str(json.loads(state.stdout)["pid"])
                # curl from the host's binary, inside the container's own network namespace (only lo).
                page = subprocess.run(["nsenter", "-t", pid, "-n", "curl", "-s", "-m", "5", "http://127.0.0.1:80/"],
                                      capture_output=True, text=True, check=False, timeout=30).stdout
            time.sleep(0.2)
        assert "Welcome to nginx!" in page
        sh("runc", "kill", cid, "QUIT")
        out, _ = proc.communicate(timeout=30)
        assert '"GET / HTTP/1.1" 200' in out, "the access log goes to the container's stdout"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def test_agnhost_is_the_isthmus_image_plus_one_layer(built: BuiltImages, work: Path) -> None:
    a, base = built.images[AGNHOST], built.images[IMAGE]
    layers, base_layers = inspect(a.oci)["Layers"], inspect(base.oci)["Layers"]
    assert layers[:-1] == base_layers and len(layers) == len(base_layers) + 1
    config = inspect(a.oci, config=True)["config"]
    assert config["Entrypoint"] == ["/agnhost"]
    script = unpack(a, work / "agnhost") / "agnhost"
    assert os.access(script, os.X_OK)
    assert 'exec isthmus agnhost "$@"' in script.read_text()
