"""kube-lite's node image store against a real registry (Debian's docker-registry on 127.0.0.1):
pulls by reference through a mirror, imagePullPolicy, pull secrets against an htpasswd registry,
the kubelet's failure messages, and `isthmus image load` onto every node of a state dir.

The image is made here: a root filesystem with Debian's static busybox, packed with umoci.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from isthmus.local import registry
from isthmus.local.kubelite.images import (
    DockerAuth,
    ImageNeverPullError,
    ImagePullError,
    ImageStore,
    PulledImage,
    auths_from_secret,
    pulled_message,
)
from isthmus.local.state import State

BUSYBOX = Path("/bin/busybox")
TOOLS = ("skopeo", "umoci", "docker-registry")


def _require_tools() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `make install` (the Makefile's APT_PACKAGES has them)")
    if not BUSYBOX.is_file():
        pytest.fail(f"{BUSYBOX} missing: install Debian's busybox-static (`make install`)")


def _run(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True, capture_output=True)


def make_image(layout: Path, tag: str, marker: str) -> None:
    """An OCI image `tag` in `layout`: busybox as /bin/sh, /marker holding `marker`."""
    if not (layout / "index.json").exists():
        _run("umoci", "init", "--layout", layout)
    bundle = layout.parent / f"bundle-{tag}"
    shutil.rmtree(bundle, ignore_errors=True)
    _run("umoci", "new", "--image", f"{layout}:{tag}")
    _run("umoci", "unpack", "--image", f"{layout}:{tag}", bundle)
    rootfs = bundle / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    (rootfs / "bin" / "sh").symlink_to("busybox")
    (rootfs / "marker").write_text(marker)
    _run("umoci", "repack", "--image", f"{layout}:{tag}", bundle)
    _run("umoci", "config", "--image", f"{layout}:{tag}", "--config.entrypoint", "/bin/sh",
         "--config.cmd", "-c", "--config.cmd", "cat /marker", "--config.env", "PATH=/bin", "--config.workingdir", "/")
    shutil.rmtree(bundle)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_registry(state: Path, *, htpasswd: Path | None = None) -> Iterator[str]:
    addr = f"127.0.0.1:{_free_port()}"
    config = registry.write_config(state, addr, htpasswd=htpasswd)
    log = (state / "registry.log").open("w")
    proc = subprocess.Popen(registry.argv(config), stdout=log, stderr=subprocess.STDOUT)
    try:
        if htpasswd is None:
            asyncio.run(registry.wait_ready(addr))
        else:  # /v2/ answers 401 there: wait for the port
            for _ in range(100):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(addr.split(":")[1])), 1):
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"the registry did not listen on {addr}: {(state / 'registry.log').read_text()}")
        yield addr
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require_tools()
    path = tmp_path_factory.mktemp("images")
    make_image(path / "src", "v1", "one")
    make_image(path / "src", "v2", "two")
    return path


@pytest.fixture(scope="module")
def open_registry(work: Path) -> Iterator[str]:
    with running_registry(work / "open") as addr:
        asyncio.run(registry.push(work / "src", "v1", addr, "library/busybox:latest"))
        asyncio.run(registry.push(work / "src", "v1", addr, "library/busybox:1.36"))
        yield addr


def test_push_skips_what_the_registry_holds(work: Path, open_registry: str) -> None:
    assert asyncio.run(registry.push(work / "src", "v1", open_registry, "library/busybox:latest")) is False
    assert asyncio.run(registry.push(work / "src", "v1", open_registry, "library/pushed:1")) is True
    assert asyncio.run(registry.remote_digest(open_registry, "library/pushed:1")) == registry.layout_digest(
        work / "src", "v1")


def test_pull_through_mirror_and_pull_policies(work: Path, open_registry: str, tmp_path: Path) -> None:
    store = ImageStore(tmp_path, mirrors={"docker.io": f"http://{open_registry}"})
    # two containers asking at once share one pull and one rootfs
    first, second = asyncio.run(_both(store, "busybox:1.36"))
    assert first.pulled and first.ref == "docker.io/library/busybox:1.36"
    assert first.rootfs == second.rootfs
    assert (first.rootfs / "marker").read_text() == "one"
    assert (first.rootfs / "bin" / "busybox").is_file()
    assert first.config.entrypoint == ["/bin/sh"] and first.config.cmd == ["-c", "cat /marker"]
    assert first.config.env == ["PATH=/bin"]
    assert first.digest == registry.layout_digest(work / "src", "v1")
    assert first.size > 500_000  # busybox's layer, compressed
    assert pulled_message("busybox:1.36", first).startswith('Successfully pulled image "busybox:1.36" in ')

    # IfNotPresent (the default for a tag other than latest) never asks the registry again:
    # a store on the same root whose mirror refuses connections still has the image
    offline = ImageStore(tmp_path, mirrors={"docker.io": f"http://127.0.0.1:{_free_port()}"})
    again = asyncio.run(offline.ensure("busybox:1.36"))
    assert not again.pulled and again.rootfs == first.rootfs
    assert pulled_message("busybox:1.36", again) == 'Container image "busybox:1.36" already present on machine'
    assert asyncio.run(offline.ensure("busybox:1.36", "Never")).rootfs == first.rootfs
    with pytest.raises(ImagePullError) as refused:
        asyncio.run(offline.ensure("busybox:1.36", "Always"))
    assert refused.value.reason == "ErrImagePull"
    assert refused.value.message.startswith('failed to pull and unpack image "docker.io/library/busybox:1.36": ')
    assert "connection refused" in refused.value.message


def test_always_sees_a_new_push(work: Path, open_registry: str, tmp_path: Path) -> None:
    store = ImageStore(tmp_path, mirrors={"docker.io": f"http://{open_registry}"})
    asyncio.run(registry.push(work / "src", "v1", open_registry, "library/moving:latest"))
    old = asyncio.run(store.ensure("moving"))  # :latest → Always
    assert (old.rootfs / "marker").read_text() == "one"
    asyncio.run(registry.push(work / "src", "v2", open_registry, "library/moving:latest"))
    assert asyncio.run(store.ensure("moving", "IfNotPresent")).digest == old.digest
    new = asyncio.run(store.ensure("moving"))
    assert new.pulled and new.digest != old.digest
    assert (new.rootfs / "marker").read_text() == "two"
    assert (old.rootfs / "marker").read_text() == "one"  # a running container's lowerdir stays
    assert [i.ref for i in store.images()] == ["docker.io/library/moving:latest"]


def test_never_and_missing_images_have_kubelets_messages(open_registry: str, tmp_path: Path) -> None:
    store = ImageStore(tmp_path, mirrors={"docker.io": f"http://{open_registry}"})
    with pytest.raises(ImageNeverPullError) as never:
        asyncio.run(store.ensure("busybox:1.36", "Never"))
    assert never.value.reason == "ErrImageNeverPull"
    assert never.value.message == 'Container image "busybox:1.36" is not present with pull policy of Never'
    with pytest.raises(ImagePullError) as missing:
        asyncio.run(store.ensure("nosuch"))
    assert missing.value.reason == "ErrImagePull"
    assert missing.value.message.startswith('failed to pull and unpack image "docker.io/library/nosuch:latest": ')
    assert missing.value.message.endswith("manifest unknown")
    assert store.images() == []


def _htpasswd(path: Path, user: str, password: str) -> None:
    with warnings.catch_warnings():  # the registry takes bcrypt only; glibc's crypt(3) makes it
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
    assert hashed.startswith("$2"), "this libc's crypt(3) has no bcrypt"
    path.write_text(f"{user}:{hashed}\n")


def test_pull_secret_opens_a_private_registry(work: Path, tmp_path: Path) -> None:
    state = tmp_path / "private"
    state.mkdir()
    _htpasswd(state / "htpasswd", "alice", "s3cret")
    with running_registry(state, htpasswd=state / "htpasswd") as addr:
        _run("skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", "--dest-creds", "alice:s3cret",
             f"oci:{work / 'src'}:v1", f"docker://{addr}/team/app:1")
        image = f"{addr}/team/app:1"
        store = ImageStore(tmp_path / "node", insecure={addr})
        with pytest.raises(ImagePullError) as anonymous:
            asyncio.run(store.ensure(image))
        assert anonymous.value.message.startswith(f'failed to pull and unpack image "{image}": ')
        assert "authentication required" in anonymous.value.message or "unauthorized" in anonymous.value.message
        wrong = [DockerAuth(addr, "alice", "wrong")]
        with pytest.raises(ImagePullError):
            asyncio.run(store.ensure(image, auth=wrong))
        config = {"auths": {addr: {"auth": base64.b64encode(b"alice:s3cret").decode()}}}
        secret = {"type": "kubernetes.io/dockerconfigjson",
                  "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}
        other = [DockerAuth("quay.io", "bob", "nope")]  # matches another registry: never tried here
        pulled = asyncio.run(store.ensure(image, auth=other + auths_from_secret(secret)))
        assert pulled.pulled and (pulled.rootfs / "marker").read_text() == "one"
        # no credentials left behind in the store
        assert not [p for p in (tmp_path / "node").rglob(".auth-*")]


# --- isthmus image load --------------------------------------------------------------------------


def _state_dir(path: Path, clusters: int) -> Path:
    path.mkdir(parents=True)
    (path / "state.json").write_text(json.dumps(State(clusters=clusters).to_json()))
    return path


def _isthmus(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ISTHMUS_STATE_DIR"}
    return subprocess.run([sys.executable, "-m", "isthmus", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_image_load_puts_an_archive_on_every_node(work: Path, tmp_path: Path) -> None:
    archive = tmp_path / "app.tar"
    _run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{work / 'src'}:v2",
         f"oci-archive:{archive}:example.com/team/app:2")
    state = _state_dir(tmp_path / "state", clusters=1)
    done = _isthmus("image", "load", archive, "--state-dir", state)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Loaded example.com/team/app:2 onto broker, c1"
    rootfs = set()
    for node in ("broker", "c1"):
        store = ImageStore(state / "kubelet" / node)  # no registry at all: Never finds it
        image = asyncio.run(store.ensure("example.com/team/app:2", "Never"))
        assert (image.rootfs / "marker").read_text() == "two"
        rootfs.add(image.rootfs)
    assert len(rootfs) == 2  # each node its own store
    docker_archive = tmp_path / "docker.tar"  # `docker save`'s format names images by RepoTags
    _run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{work / 'src'}:v1",
         f"docker-archive:{docker_archive}:busybox:1")
    done = _isthmus("image", "load", docker_archive, "--state-dir", state)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Loaded docker.io/library/busybox:1 onto broker, c1"
    image = asyncio.run(ImageStore(state / "kubelet" / "c1").ensure("busybox:1", "Never"))
    assert (image.rootfs / "marker").read_text() == "one"
    listed = _isthmus("image", "ls", "--state-dir", state)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()[1:]] == [
        ["broker", "docker.io/library/busybox:1"], ["broker", "example.com/team/app:2"],
        ["c1", "docker.io/library/busybox:1"], ["c1", "example.com/team/app:2"]]


def test_image_load_refuses_bad_input_in_one_line(work: Path, tmp_path: Path) -> None:
    state = _state_dir(tmp_path / "state", clusters=1)
    not_tar = tmp_path / "notes.txt"
    not_tar.write_text("hello\n")
    unnamed = tmp_path / "unnamed.tar"
    _run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{work / 'src'}:v1", f"oci-archive:{unnamed}")
    cases = [
        ((tmp_path / "missing.tar", "--state-dir", state), "no such file"),
        ((not_tar, "--state-dir", state), "not an image archive"),
        ((unnamed, "--state-dir", state), "names no image"),
        ((not_tar, "--state-dir", tmp_path / "empty"), "no local clusterset in"),
    ]
    for args, text in cases:
        done = _isthmus("image", "load", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], done.stderr
    assert not (state / "kubelet").exists()


async def _both(store: ImageStore, image: str) -> tuple[PulledImage, PulledImage]:
    a, b = await asyncio.gather(store.ensure(image), store.ensure(image))
    return a, b


# --- inside a network namespace, as on a node ----------------------------------------------------


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"isthmus-t-{os.getpid()}-img"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_registry_and_pulls_inside_a_namespace(work: Path, tmp_path: Path, netns: str) -> None:
    """The registry listens on the namespace's own loopback: only a pull made inside reaches it."""
    addr = f"127.0.0.1:{_free_port()}"  # free on the host's loopback: nothing answers there
    config = registry.write_config(tmp_path / "state", addr)
    proc = subprocess.Popen(["ip", "netns", "exec", netns, *registry.argv(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        asyncio.run(registry.wait_ready(addr, netns=netns))
        assert asyncio.run(registry.push(work / "src", "v2", addr, "library/busybox:latest", netns)) is True
        mirrors = {"docker.io": f"http://{addr}"}
        inside = asyncio.run(ImageStore(tmp_path / "node", mirrors=mirrors, netns=netns).ensure("busybox"))
        assert (inside.rootfs / "marker").read_text() == "two"
        with pytest.raises(ImagePullError):  # the host's loopback is another machine's
            asyncio.run(ImageStore(tmp_path / "host", mirrors=mirrors).ensure("busybox"))
    finally:
        proc.terminate()
        proc.wait(10)
