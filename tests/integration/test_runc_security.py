"""The container spec kube-lite writes, enforced by a real runc: what a cluster would refuse, refused.

Each test turns a Pod's securityContext into config.json with ``runtime_spec`` and runs busybox
(Debian's busybox-static, copied into a throw-away rootfs) with ``runc run`` inside a network
namespace this module creates and deletes. Needs root, runc and busybox-static (the Makefile's
APT_PACKAGES); a missing tool fails with a message instead of skipping.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from isthmus.local.kubelite.oci import ImageConfig, container_env, runtime_spec
from isthmus.local.kubelite.volumes import SERVICEACCOUNT_MOUNT, Mount, PodVolumes

BUSYBOX = Path("/bin/busybox")
APPLETS = ["sh", "id", "nc", "grep", "cut", "cat", "kill", "sleep", "touch", "chown", "unshare",
           "tail", "echo", "true", "printf", "sysctl", "mount", "mkdir"]
PREFIX = f"isthmus-t-{os.getpid()}"


def _require() -> None:
    if os.geteuid() != 0:
        pytest.fail("runc security tests need root (CI runs as root)")
    if shutil.which("runc") is None:
        pytest.fail("runc is not installed: `make apt` installs it (Debian package runc)")
    if not BUSYBOX.exists():
        pytest.fail("/bin/busybox is missing: `make apt` installs Debian's busybox-static")
    if shutil.which("ip") is None:
        pytest.fail("ip (iproute2) is not installed: `make apt` installs it")


@dataclass
class Env:
    root: Path
    rootfs: Path
    state: Path
    netns: str

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _require()
    root = tmp_path_factory.mktemp("runc")
    rootfs = root / "rootfs"
    for d in ("bin", "etc", "proc", "sys", "dev", "tmp", "data"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532::/home:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\nnonroot:x:65532:\n")
    (rootfs / "owned").write_text("root's\n")
    netns = f"{PREFIX}-sec"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        yield Env(root, rootfs, root / "state", netns)
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False)


def _pod(container: dict[str, Any], pod_sc: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"containers": [container], "securityContext": pod_sc or {}}}


@dataclass
class Result:
    code: int
    out: str
    err: str
    oom_kills: int | None = None


def run(env: Env, script: str, sc: dict[str, Any] | None = None, *, pod_sc: dict[str, Any] | None = None,
        resources: dict[str, Any] | None = None, mounts: list[Mount] | None = None) -> Result:
    """Run ``sh -c script`` in a fresh container whose spec comes from this securityContext."""
    container = {"name": "c", "image": "busybox", "command": ["/bin/sh", "-c", script],
                 "securityContext": sc or {}, "resources": resources or {}}
    pod = _pod(container, pod_sc)
    cid = f"{PREFIX}-{uuid.uuid4().hex[:8]}"
    image = ImageConfig()
    spec = runtime_spec(pod=pod, container=container, image=image, argv=container["command"],
                        env=container_env(image.env, {}, hostname="p"), mounts=mounts or [],
                        rootfs=env.rootfs, netns_path=env.netns_path, cgroups_path=f"/{cid}", hostname="p")
    bundle = env.root / "bundles" / cid
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(spec))
    runc = ["runc", "--root", str(env.state)]
    try:
        proc = subprocess.run([*runc, "run", "--keep", "--bundle", str(bundle), cid],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        oom = None
        control = Path("/sys/fs/cgroup/memory") / cid / "memory.oom_control"
        if control.exists():
            fields = dict(line.split() for line in control.read_text().splitlines())
            oom = int(fields.get("oom_kill", 0))
        return Result(proc.returncode, proc.stdout, proc.stderr, oom)
    finally:
        subprocess.run([*runc, "delete", "--force", cid], capture_output=True, check=False)


def _bind(port: int) -> str:
    """Listen on ``port`` with nc; print BOUND once the socket shows in /proc/net/tcp*, NOT-BOUND if nc
    died (its complaint on stderr)."""
    hexport = f"{port:04X}"
    return (
        f"nc -l -p {port} & p=$!; i=0; "
        f"while [ $i -lt 100 ]; do "
        f"  if grep -q ':{hexport} [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then echo BOUND; kill $p; exit 0; fi; "
        f"  if [ \"$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)\" != S ] && [ \"$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)\" != R ]; then "
        f"    echo NOT-BOUND; exit 3; fi; "
        f"  sleep 0.05; i=$((i+1)); "
        f"done; echo TIMEOUT; exit 4"
    )


NONROOT_NBS = {"runAsUser": 65532, "runAsGroup": 65532, "allowPrivilegeEscalation": False,
               "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
"""What deploy/ asked for: NET_BIND_SERVICE for a non-root user without privilege escalation."""


def test_defect_class_nonroot_with_net_bind_service_cannot_bind_80(env: Env) -> None:
    low = run(env, _bind(80), NONROOT_NBS)
    assert "NOT-BOUND" in low.out, (low.out, low.err)
    assert "Permission denied" in low.err
    high = run(env, _bind(8080), NONROOT_NBS)
    assert "BOUND" in high.out and "NOT-BOUND" not in high.out, (high.out, high.err)


def test_nonroot_process_holds_no_capabilities_after_exec(env: Env) -> None:
    r = run(env, "grep Cap /proc/self/status", NONROOT_NBS)
    caps = dict(line.split(":\t") for line in r.out.strip().splitlines())
    assert caps["CapEff"] == "0000000000000000"
    assert caps["CapPrm"] == "0000000000000000"
    assert caps["CapAmb"] == "0000000000000000"
    assert int(caps["CapBnd"], 16) == 1 << 10  # CAP_NET_BIND_SERVICE stays in the bounding set only


def test_root_with_default_capabilities_binds_80(env: Env) -> None:
    r = run(env, _bind(80))
    assert "BOUND" in r.out and "NOT-BOUND" not in r.out, (r.out, r.err)


def test_unprivileged_port_start_sysctl_lets_nonroot_bind_80(env: Env) -> None:
    pod_sc = {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]}
    r = run(env, _bind(80), NONROOT_NBS, pod_sc=pod_sc)
    assert "BOUND" in r.out and "NOT-BOUND" not in r.out, (r.out, r.err)


def test_read_only_root_filesystem_but_writable_volume(env: Env, tmp_path: Path) -> None:
    volume = tmp_path / "empty"
    volume.mkdir()
    mounts = [Mount("/data", str(volume))]
    r = run(env, "touch /x; echo rc=$?; echo hi > /data/y && echo wrote", {"readOnlyRootFilesystem": True},
            mounts=mounts)
    assert "Read-only file system" in r.err
    assert "rc=1" in r.out and "wrote" in r.out
    assert (volume / "y").read_text() == "hi\n"


def test_run_as_user_and_groups(env: Env) -> None:
    r = run(env, "id -u; id -g; id -G", {"runAsUser": 1234}, pod_sc={"runAsGroup": 4321, "fsGroup": 2000,
                                                                     "supplementalGroups": [3000]})
    assert r.out.split("\n")[:2] == ["1234", "4321"]
    assert set(r.out.split("\n")[2].split()) == {"4321", "2000", "3000"}


def test_drop_all_capabilities_root_cannot_chown(env: Env) -> None:
    r = run(env, "chown 1:1 /owned", {"capabilities": {"drop": ["ALL"]}})
    assert r.code != 0
    assert "Operation not permitted" in r.err
    ok = run(env, "chown 1:1 /owned && echo done")
    assert "done" in ok.out, ok.err


def test_runtime_default_seccomp_blocks_user_namespaces(env: Env) -> None:
    # Creating a user namespace needs no capability, so only the profile decides.
    free = run(env, "unshare -U true && echo made-userns")
    assert "made-userns" in free.out, free.err
    blocked = run(env, "unshare -U true && echo made-userns", {"seccompProfile": {"type": "RuntimeDefault"}})
    assert blocked.code != 0 and "made-userns" not in blocked.out
    assert "Operation not permitted" in blocked.err


def test_runtime_default_widens_with_sys_admin(env: Env) -> None:
    r = run(env, "unshare -U true && echo made-userns",
            {"capabilities": {"add": ["SYS_ADMIN"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    assert "made-userns" in r.out, r.err


def test_privileged_mounts_what_the_default_set_cannot(env: Env) -> None:
    script = "mkdir -p /mnt && mount -t tmpfs none /mnt && echo mounted"
    confined = run(env, script)
    assert confined.code != 0 and "mounted" not in confined.out and "permission denied" in confined.err
    privileged = run(env, script, {"privileged": True})
    assert "mounted" in privileged.out, privileged.err


def test_no_new_privileges_follows_allow_privilege_escalation(env: Env) -> None:
    unset = run(env, "grep NoNewPrivs /proc/self/status")
    assert unset.out.split() == ["NoNewPrivs:", "0"]
    off = run(env, "grep NoNewPrivs /proc/self/status", {"allowPrivilegeEscalation": False})
    assert off.out.split() == ["NoNewPrivs:", "1"]


def test_memory_limit_oom_kills(env: Env) -> None:
    r = run(env, "tail /dev/zero", resources={"limits": {"memory": "32Mi"}})
    assert r.code == 137, (r.code, r.err)
    assert r.oom_kills is not None and r.oom_kills >= 1


async def test_volumes_readable_by_the_container_user_and_read_only(env: Env, tmp_path: Path) -> None:
    """A configMap and the ServiceAccount token, set up by PodVolumes, as uid 65532 sees them."""

    async def lookup(kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return {"data": {"app.conf": "listen 8080\n", "ca.crt": "CA"}} if kind == "ConfigMap" else None

    async def token(audience: str | None, expiration: int) -> tuple[str, float]:
        return "a.b.c", 2e9

    sc = {"runAsUser": 65532, "allowPrivilegeEscalation": False}
    pod = _pod({"name": "c", "securityContext": sc,
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]})
    pod["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "app"}}]
    volumes = PodVolumes(pod, tmp_path / "pod", lookup=lookup, token=token, automount=True)
    await volumes.setup()
    mounts = volumes.mounts(pod["spec"]["containers"][0])
    r = await asyncio.to_thread(
        run, env, f"cat /etc/app/app.conf {SERVICEACCOUNT_MOUNT}/token {SERVICEACCOUNT_MOUNT}/namespace; echo; "
        "echo x > /etc/app/new; echo rc=$?", sc, mounts=mounts)
    assert r.out.splitlines() == ["listen 8080", "a.b.cdefault", "rc=1"], (r.out, r.err)
    assert "Read-only file system" in r.err
