"""A Pod's volumes on disk: each type's files, modes and owners, the atomic update, and the errors."""

from __future__ import annotations

import base64
import os
import re
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from isthmus.local.kubelite import volumes as volmod
from isthmus.local.kubelite.containers import ContainerConfigError
from isthmus.local.kubelite.volumes import SERVICEACCOUNT_MOUNT, Mount, PodVolumes, VolumeError


class Api:
    """What the caller's lookup and token functions would be, backed by dicts."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.tokens: list[tuple[str | None, int]] = []
        self.lifetime = 3600.0
        self.now = 1_000_000.0
        self.fail: str | None = None

    async def lookup(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, ns, name))

    async def token(self, audience: str | None, expiration: int) -> tuple[str, float]:
        if self.fail:
            raise RuntimeError(self.fail)
        self.tokens.append((audience, expiration))
        return f"token-{len(self.tokens)}", self.now + self.lifetime

    def configmap(self, name: str, data: dict[str, str], binary: dict[str, bytes] | None = None, ns: str = "shop") -> None:
        obj: dict[str, Any] = {"data": data}
        if binary:
            obj["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
        self.objects["ConfigMap", ns, name] = obj

    def secret(self, name: str, data: dict[str, bytes], ns: str = "shop") -> None:
        self.objects["Secret", ns, name] = {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Api:
    a = Api()
    monkeypatch.setattr(volmod.time, "time", lambda: a.now)
    return a


def make_pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "labels": {"app": "web"},
                         "annotations": {"note": "hi"}},
            "spec": {"containers": [{"name": "app", "volumeMounts": mounts or [],
                                     "resources": {"limits": {"memory": "64Mi"}}}],
                     "volumes": volumes, **spec}}


def pv(api: Api, tmp_path: Path, pod: dict[str, Any], **kw: Any) -> PodVolumes:
    return PodVolumes(pod, tmp_path / "pod", lookup=api.lookup, token=api.token, **kw)


def vdir(tmp_path: Path, plugin: str, name: str) -> Path:
    return tmp_path / "pod" / "volumes" / f"kubernetes.io~{plugin}" / name


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def mount_table() -> dict[str, list[str]]:
    return {line.split()[1]: line.split() for line in Path("/proc/mounts").read_text().splitlines()}


def is_mount(p: Path) -> bool:
    return os.path.ismount(p)


def lexists(p: Path) -> bool:
    return os.path.lexists(p)


# --- emptyDir ----------------------------------------------------------------------------------


async def test_empty_dir_is_world_writable_and_fs_group_owned(api: Api, tmp_path: Path) -> None:
    pod = make_pod([{"name": "scratch", "emptyDir": {}}], [{"name": "scratch", "mountPath": "/scratch"}],
                   securityContext={"fsGroup": 2000})
    v = pv(api, tmp_path, pod)
    await v.setup()
    d = vdir(tmp_path, "empty-dir", "scratch")
    assert d.is_dir() and mode(d) == 0o2777 and d.stat().st_gid == 2000
    assert v.mounts(pod["spec"]["containers"][0]) == [Mount("/scratch", str(d), "bind", ["rbind", "rprivate"])]


async def test_memory_empty_dir_is_a_tmpfs_of_its_size_limit(api: Api, tmp_path: Path) -> None:
    pod = make_pod([{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
                    {"name": "mem2", "emptyDir": {"medium": "Memory"}}])
    v = pv(api, tmp_path, pod)
    await v.setup()
    try:
        mounts = mount_table()
        d = str(vdir(tmp_path, "empty-dir", "mem"))
        assert mounts[d][2] == "tmpfs" and "size=8192k" in mounts[d][3]
        # No sizeLimit: the Pod's memory limit.
        assert "size=65536k" in mounts[str(vdir(tmp_path, "empty-dir", "mem2"))][3]
    finally:
        await v.teardown()
    assert not is_mount(vdir(tmp_path, "empty-dir", "mem"))


# --- configMap and secret ----------------------------------------------------------------------


async def test_config_map_keys_as_symlinks_through_data(api: Api, tmp_path: Path) -> None:
    api.configmap("cfg", {"a.conf": "A", "b.conf": "B"}, binary={"blob": b"\x00\x01"})
    pod = make_pod([{"name": "cfg", "configMap": {"name": "cfg"}}], [{"name": "cfg", "mountPath": "/etc/cfg"}])
    v = pv(api, tmp_path, pod)
    await v.setup()
    d = vdir(tmp_path, "configmap", "cfg")
    assert (d / "a.conf").read_text() == "A" and (d / "blob").read_bytes() == b"\x00\x01"
    assert os.readlink(d / "a.conf") == "..data/a.conf"
    assert os.readlink(d / "..data").startswith("..20")
    assert mode(d / "a.conf") == 0o644 and mode(d) == 0o777
    assert v.mounts(pod["spec"]["containers"][0])[0].options == ["rbind", "rprivate", "ro"]


async def test_items_paths_and_modes(api: Api, tmp_path: Path) -> None:
    api.configmap("cfg", {"a": "A", "b": "B"})
    api.secret("s", {"tls.key": b"KEY", "other": b"x"})
    pod = make_pod([
        {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o600,
                                      "items": [{"key": "a", "path": "sub/dir/a.txt", "mode": 0o755}, {"key": "b", "path": "b"}]}},
        {"name": "s", "secret": {"secretName": "s", "items": [{"key": "tls.key", "path": "key.pem", "mode": 0o400}]}},
    ])
    await pv(api, tmp_path, pod).setup()
    d = vdir(tmp_path, "configmap", "cfg")
    assert (d / "sub" / "dir" / "a.txt").read_text() == "A" and mode(d / "sub" / "dir" / "a.txt") == 0o755
    assert mode(d / "b") == 0o600
    assert os.readlink(d / "sub") == "..data/sub"
    s = vdir(tmp_path, "secret", "s")
    assert sorted(x for x in os.listdir(s) if not x.startswith("..")) == ["key.pem"]
    assert (s / "key.pem").read_bytes() == b"KEY" and mode(s / "key.pem") == 0o400


async def test_fs_group_makes_files_group_readable(api: Api, tmp_path: Path) -> None:
    api.secret("s", {"k": b"v"})
    pod = make_pod([{"name": "s", "secret": {"secretName": "s", "defaultMode": 0o600}}], securityContext={"fsGroup": 3000})
    await pv(api, tmp_path, pod).setup()
    f = vdir(tmp_path, "secret", "s") / "k"
    assert mode(f) == 0o640 and f.stat().st_gid == 3000


@pytest.mark.parametrize(("volume", "message"), [
    ({"name": "cfg", "configMap": {"name": "nope"}}, 'MountVolume.SetUp failed for volume "cfg" : configmap "nope" not found'),
    ({"name": "s", "secret": {"secretName": "nope"}}, 'MountVolume.SetUp failed for volume "s" : secret "nope" not found'),
    ({"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "zz", "path": "z"}]}},
     'MountVolume.SetUp failed for volume "cfg" : configmap references non-existent config key: zz'),
    ({"name": "p", "projected": {"sources": [{"secret": {"name": "nope"}}]}},
     'MountVolume.SetUp failed for volume "p" : secret "nope" not found'),
])
async def test_missing_objects_and_keys_fail_the_mount(api: Api, tmp_path: Path, volume: dict[str, Any], message: str) -> None:
    api.configmap("cfg", {"a": "A"})
    with pytest.raises(VolumeError) as e:
        await pv(api, tmp_path, make_pod([volume])).setup()
    assert e.value.message == message and e.value.reason == "FailedMount"


async def test_optional_missing_is_an_empty_volume(api: Api, tmp_path: Path) -> None:
    api.configmap("cfg", {"a": "A"})
    pod = make_pod([{"name": "x", "configMap": {"name": "nope", "optional": True}},
                    {"name": "y", "configMap": {"name": "cfg", "optional": True, "items": [{"key": "zz", "path": "z"},
                                                                                         {"key": "a", "path": "a"}]}}])
    await pv(api, tmp_path, pod).setup()
    assert [x for x in os.listdir(vdir(tmp_path, "configmap", "x")) if not x.startswith("..")] == []
    assert sorted(x for x in os.listdir(vdir(tmp_path, "configmap", "y")) if not x.startswith("..")) == ["a"]


async def test_update_is_atomic_old_content_until_the_swap(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api.configmap("cfg", {"a": "old-a", "gone": "g"})
    pod = make_pod([{"name": "cfg", "configMap": {"name": "cfg"}}])
    v = pv(api, tmp_path, pod)
    await v.setup()
    d = vdir(tmp_path, "configmap", "cfg")
    before = os.readlink(d / "..data")
    assert await v.refresh() == []
    assert os.readlink(d / "..data") == before  # unchanged content: nothing rewritten

    api.configmap("cfg", {"a": "new-a", "b": "new-b"})
    seen: list[str] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if str(dst).endswith("..data"):
            seen.append((d / "a").read_text())  # what a reader sees just before the swap
            new_dir = d / os.readlink(src)
            seen.append((new_dir / "a").read_text())
        real_replace(src, dst)

    monkeypatch.setattr(volmod.os, "replace", replace)
    assert await v.refresh() == []
    assert seen == ["old-a", "new-a"]
    assert (d / "a").read_text() == "new-a" and (d / "b").read_text() == "new-b"
    assert not lexists(d / "gone")
    assert not (d / before).exists()  # the old timestamped dir is removed


async def test_refresh_keeps_files_when_the_object_disappears(api: Api, tmp_path: Path) -> None:
    api.configmap("cfg", {"a": "A"})
    v = pv(api, tmp_path, make_pod([{"name": "cfg", "configMap": {"name": "cfg"}}]))
    await v.setup()
    del api.objects["ConfigMap", "shop", "cfg"]
    errors = await v.refresh()
    assert [e.message for e in errors] == ['MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found']
    assert (vdir(tmp_path, "configmap", "cfg") / "a").read_text() == "A"


# --- projected, the ServiceAccount token -------------------------------------------------------


async def test_projected_sources_in_one_volume(api: Api, tmp_path: Path) -> None:
    api.configmap("cfg", {"a": "A"})
    api.secret("s", {"k": b"K"})
    pod = make_pod([{"name": "all", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "vault", "path": "vault-token"}},
        {"configMap": {"name": "cfg"}},
        {"secret": {"name": "s", "items": [{"key": "k", "path": "secret/k"}]}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    ]}}])
    await pv(api, tmp_path, pod).setup()
    d = vdir(tmp_path, "projected", "all")
    assert (d / "vault-token").read_text() == "token-1" and mode(d / "vault-token") == 0o644
    assert api.tokens == [("vault", 3600)]
    assert (d / "a").read_text() == "A" and (d / "secret" / "k").read_text() == "K"
    assert (d / "labels").read_text() == 'app="web"'


async def test_token_narrowed_for_fs_user_and_fs_group(api: Api, tmp_path: Path) -> None:
    vol = [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
    await pv(api, tmp_path, make_pod(vol, securityContext={"runAsUser": 4242})).setup()
    f = vdir(tmp_path, "projected", "t") / "token"
    assert mode(f) == 0o600 and f.stat().st_uid == 4242
    other = tmp_path / "other"
    await PodVolumes(make_pod(vol, securityContext={"fsGroup": 5000}), other, lookup=api.lookup, token=api.token).setup()
    g = other / "volumes" / "kubernetes.io~projected" / "t" / "token"
    assert mode(g) == 0o640 and g.stat().st_gid == 5000


async def test_kube_api_access_volume_when_the_pod_automounts(api: Api, tmp_path: Path) -> None:
    api.configmap("kube-root-ca.crt", {"ca.crt": "CA PEM"})
    pod = make_pod([])
    v = pv(api, tmp_path, pod, automount=True)
    await v.setup()
    (sa,) = [m for m in v.mounts(pod["spec"]["containers"][0]) if m.destination == SERVICEACCOUNT_MOUNT]
    d = Path(sa.source)
    assert d.parent.name == "kubernetes.io~projected" and d.name.startswith("kube-api-access-")
    assert "ro" in sa.options
    assert (d / "token").read_text() == "token-1" and (d / "ca.crt").read_text() == "CA PEM"
    assert (d / "namespace").read_text() == "shop"
    assert api.tokens == [(None, 3607)]
    # A container that mounts something there keeps its own; no automount, no volume.
    own = {"name": "app", "volumeMounts": [{"name": "mine", "mountPath": SERVICEACCOUNT_MOUNT}]}
    pod2 = make_pod([{"name": "mine", "emptyDir": {}}])
    pod2["spec"]["containers"] = [own]
    v2 = pv(api, tmp_path, pod2, automount=True)
    await v2.setup()
    assert [m.source.endswith("/mine") for m in v2.mounts(own)] == [True]
    assert pv(api, tmp_path, pod).mounts(pod["spec"]["containers"][0]) == []


async def test_kube_api_access_without_root_ca(api: Api, tmp_path: Path) -> None:
    with pytest.raises(VolumeError, match=re.escape('configmap "kube-root-ca.crt" not found')):
        await pv(api, tmp_path, make_pod([]), automount=True).setup()
    v = pv(api, tmp_path, make_pod([]), automount=True, root_ca=b"FALLBACK")
    await v.setup()
    (m,) = v.mounts(make_pod([])["spec"]["containers"][0])
    assert (Path(m.source) / "ca.crt").read_text() == "FALLBACK"


async def test_token_refreshed_at_80_percent_of_its_life(api: Api, tmp_path: Path) -> None:
    api.lifetime = 1000
    vol = [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 1000}}]}}]
    v = pv(api, tmp_path, make_pod(vol))
    await v.setup()
    f = vdir(tmp_path, "projected", "t") / "token"
    assert v.next_refresh() == 800
    api.now += 799
    await v.refresh()
    assert f.read_text() == "token-1" and len(api.tokens) == 1
    api.now += 2
    await v.refresh()
    assert f.read_text() == "token-2" and len(api.tokens) == 2


async def test_token_failure_is_failed_mount(api: Api, tmp_path: Path) -> None:
    api.fail = 'serviceaccounts "default" not found'
    vol = [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
    with pytest.raises(VolumeError) as e:
        await pv(api, tmp_path, make_pod(vol)).setup()
    assert e.value.message == ('MountVolume.SetUp failed for volume "t" : failed to fetch token: '
                               'serviceaccounts "default" not found')


# --- downwardAPI -------------------------------------------------------------------------------


async def test_downward_api_fields_and_resources_follow_the_pod(api: Api, tmp_path: Path) -> None:
    pod = make_pod([{"name": "info", "downwardAPI": {"items": [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}},
    ]}}])
    v = pv(api, tmp_path, pod)
    await v.setup()
    d = vdir(tmp_path, "downward-api", "info")
    assert [(d / n).read_text() for n in ("name", "uid", "annotations", "mem")] == ["web", "u-1", 'note="hi"', "64"]
    pod["metadata"]["annotations"] = {"note": "changed", "a": "b"}
    await v.refresh(pod)
    assert (d / "annotations").read_text() == 'a="b"\nnote="changed"'


# --- hostPath, unsupported ---------------------------------------------------------------------


async def test_host_path_types(api: Api, tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "file").write_text("x")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(host / "sock"))
    try:
        ok = [("Directory", host), ("File", host / "file"), ("Socket", host / "sock"), ("", host / "missing"),
              ("CharDevice", Path("/dev/null")), ("DirectoryOrCreate", host / "new" / "dir"),
              ("FileOrCreate", host / "new-file")]
        vols = [{"name": f"v{i}", "hostPath": {"path": str(p), "type": t}} for i, (t, p) in enumerate(ok)]
        pod = make_pod(vols, [{"name": "v0", "mountPath": "/host"}])
        v = pv(api, tmp_path, pod)
        await v.setup()
        assert (host / "new" / "dir").is_dir() and (host / "new-file").is_file()
        assert v.mounts(pod["spec"]["containers"][0])[0].source == str(host)
        bad = [("Directory", host / "file", "is not a directory"), ("Directory", host / "missing", "is not a directory"),
               ("File", host, "is not a file"), ("Socket", host / "file", "is not a socket file"),
               ("CharDevice", host / "file", "is not a character device"),
               ("BlockDevice", Path("/dev/null"), "is not a block device"),
               ("DirectoryOrCreate", host / "file", "is not a directory")]
        for kind, path, what in bad:
            with pytest.raises(VolumeError) as e:
                await pv(api, tmp_path, make_pod([{"name": "h", "hostPath": {"path": str(path), "type": kind}}])).setup()
            assert e.value.message == f'MountVolume.SetUp failed for volume "h" : hostPath type check failed: {path} {what}'
    finally:
        sock.close()


async def test_unsupported_volume_types_fail_the_mount(api: Api, tmp_path: Path) -> None:
    with pytest.raises(VolumeError) as e:
        await pv(api, tmp_path, make_pod([{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}])).setup()
    assert e.value.message == ('MountVolume.SetUp failed for volume "data" : persistentVolumeClaim volumes are not '
                               "supported by kube-lite (no volume plugin matched)")


# --- mounts ------------------------------------------------------------------------------------


async def test_mount_options_sub_paths_and_extras(api: Api, tmp_path: Path) -> None:
    pod = make_pod([{"name": "data", "emptyDir": {}}])
    c = {"name": "app", "volumeMounts": [
        {"name": "data", "mountPath": "/ro", "readOnly": True},
        {"name": "data", "mountPath": "/logs", "subPath": "logs/app"},
        {"name": "data", "mountPath": "/per-pod", "subPathExpr": "$(POD_NAME)"},
    ]}
    pod["spec"]["containers"] = [c]
    hosts = Mount("/etc/hosts", "/pods/hosts")
    shm = Mount("/dev/shm", "/pods/shm")
    v = pv(api, tmp_path, pod, extra_mounts=[hosts, shm])
    await v.setup()
    d = vdir(tmp_path, "empty-dir", "data")
    ms = v.mounts(c, {"POD_NAME": "web"})
    assert [(m.destination, m.source, m.options) for m in ms[:3]] == [
        ("/ro", str(d), ["rbind", "rprivate", "ro"]),
        ("/logs", str(d / "logs" / "app"), ["rbind", "rprivate"]),
        ("/per-pod", str(d / "web"), ["rbind", "rprivate"]),
    ]
    assert (d / "logs" / "app").is_dir() and (d / "web").is_dir()
    assert ms[3:] == [hosts, shm]
    c["volumeMounts"].append({"name": "data", "mountPath": "/etc/hosts", "subPath": "hosts"})
    assert [m.destination for m in v.mounts(c, {"POD_NAME": "web"})].count("/etc/hosts") == 1
    (d / "escape").symlink_to("/etc")
    with pytest.raises(ContainerConfigError, match='failed to prepare subPath for volumeMount "data" of container "app"'):
        v.mounts({"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "escape"}]})
    with pytest.raises(ContainerConfigError, match='cannot find volume "nope"'):
        v.mounts({"name": "app", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]})
