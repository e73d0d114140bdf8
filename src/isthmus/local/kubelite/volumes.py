"""A Pod's volumes, materialised on the node as the kubelet's volume plugins do, and their mounts.

Every volume lives under ``<pod dir>/volumes/<plugin>/<volume name>/`` with the kubelet's plugin
directory names (``kubernetes.io~empty-dir``, ``~configmap``, ``~secret``, ``~projected``,
``~downward-api``). Contents that come from the API (configMap, secret, projected, downwardAPI)
are written the way the kubelet's AtomicWriter writes them: the files go into a fresh
``..<timestamp>`` directory, the ``..data`` symlink is swapped to it in one rename, and each
user-visible name is a symlink through ``..data`` — so a reader sees the old set of files or the
new one, never a mix, and an update is a single atomic step.

Errors are the kubelet's FailedMount texts (``MountVolume.SetUp failed for volume "x" : ...``),
raised as :class:`VolumeError` for the caller's Event and the container's waiting state.
docs/runc.md has the details and every departure from the kubelet.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any

from isthmus.local.kubelite.containers import (
    ContainerConfigError,
    expand,
    field_value,
    quantity,
    resource_value,
)

__all__ = [
    "SERVICEACCOUNT_MOUNT",
    "Lookup",
    "Mount",
    "PodVolumes",
    "TokenSource",
    "VolumeError",
    "kube_api_access_volume",
]

Obj = dict[str, Any]
Lookup = Callable[[str, str, str], Awaitable[Obj | None]]
"""(kind "ConfigMap"/"Secret", namespace, name) → the object, or None when it does not exist."""
TokenSource = Callable[[str | None, int], Awaitable[tuple[str, float]]]
"""(audience or None for the apiserver's, expirationSeconds) → (token, expires at, epoch seconds)."""

SERVICEACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DEFAULT_MODE = 0o644
KUBE_API_ACCESS_EXPIRATION = 3607
TOKEN_EXPIRATION = 3600
MAX_TOKEN_AGE = 24 * 3600
DATA_DIR = "..data"

PLUGINS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "projected": "kubernetes.io~projected",
    "downwardAPI": "kubernetes.io~downward-api",
}
READ_ONLY_KINDS = ("configMap", "secret", "projected", "downwardAPI")
"""The kubelet always mounts these read-only (their mounter's attributes say so)."""
UNSUPPORTED = ("persistentVolumeClaim", "ephemeral", "nfs", "iscsi", "csi", "rbd", "cephfs", "fc",
               "flexVolume", "glusterfs", "awsElasticBlockStore", "gcePersistentDisk", "azureDisk",
               "azureFile", "cinder", "vsphereVolume", "portworxVolume", "quobyte", "scaleIO",
               "storageos", "flocker", "photonPersistentDisk", "gitRepo", "image")


class VolumeError(Exception):
    """A volume could not be set up: the kubelet's FailedMount event message."""

    reason = "FailedMount"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Mount:
    """One OCI mount of a container (runc's ``mounts`` entry)."""

    destination: str
    source: str
    type: str = "bind"
    options: list[str] = field(default_factory=lambda: ["rbind", "rprivate"])

    def to_oci(self) -> dict[str, Any]:
        return {"destination": self.destination, "type": self.type, "source": self.source,
                "options": list(self.options)}


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int
    uid: int | None = None


def _failed(volume: str, why: str) -> VolumeError:
    return VolumeError(f'MountVolume.SetUp failed for volume "{volume}" : {why}')


def kube_api_access_volume(pod: Mapping[str, Any]) -> Obj:
    """The projected volume the ServiceAccount admission plugin adds on a real cluster; its name's
    suffix is derived from the Pod's uid, so it is the same every time kube-lite computes it."""
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(uid.encode()).digest()
    suffix = "".join(alphabet[b % len(alphabet)] for b in digest[:5])
    return {
        "name": f"kube-api-access-{suffix}",
        "projected": {
            "defaultMode": DEFAULT_MODE,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": KUBE_API_ACCESS_EXPIRATION, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def _kind(volume: Mapping[str, Any]) -> str:
    for key in volume:
        if key != "name":
            return str(key)
    return "emptyDir"  # kube's defaulting: a volume with no source is an emptyDir


def _check_rel_path(volume: str, path: str) -> PurePosixPath:
    """An item path stays inside its volume (kube validation already says so; a second check is
    cheap and keeps a bad object from writing outside the pod dir)."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or path.startswith(".."):
        raise _failed(volume, f"invalid path {path!r}: must be relative and may not contain '..'")
    return p


class _Atomic:
    """The kubelet's AtomicWriter over one volume directory."""

    def __init__(self, directory: Path, volume: str) -> None:
        self.dir = directory
        self.volume = volume

    def current(self) -> dict[str, FileProjection] | None:
        data = self.dir / DATA_DIR
        if not data.is_symlink():
            return None
        out: dict[str, FileProjection] = {}
        base = self.dir / os.readlink(data)
        for root, _dirs, files in os.walk(base):
            for f in files:
                p = Path(root) / f
                st = p.lstat()
                out[str(p.relative_to(base))] = FileProjection(p.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid)
        return out

    def write(self, payload: Mapping[str, FileProjection], *, fs_group: int | None) -> bool:
        """Replace the volume's files with ``payload``; False when nothing changed."""
        for path in payload:
            _check_rel_path(self.volume, path)
        old = self.current()
        if old is not None and {k: (v.data, v.mode) for k, v in old.items()} == {
                k: (v.data, self._mode(v.mode, fs_group)) for k, v in payload.items()}:
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("..%Y_%m_%d_%H_%M_%S.") + str(secrets.randbelow(10**9))
        ts = self.dir / stamp
        ts.mkdir(mode=0o755)
        os.chmod(ts, 0o755)
        for rel, f in payload.items():
            target = ts / rel
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            target.write_bytes(f.data)
            os.chmod(target, self._mode(f.mode, fs_group))
            if f.uid is not None or fs_group is not None:
                os.lchown(target, -1 if f.uid is None else f.uid, -1 if fs_group is None else fs_group)
        if fs_group is not None:
            for root, dirs, _files in os.walk(ts):
                for d in [root, *(os.path.join(root, x) for x in dirs)]:
                    os.lchown(d, -1, fs_group)
                    os.chmod(d, stat.S_IMODE(os.lstat(d).st_mode) | 0o2550)
        tmp = self.dir / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(stamp)
        previous = os.readlink(self.dir / DATA_DIR) if (self.dir / DATA_DIR).is_symlink() else None
        os.replace(tmp, self.dir / DATA_DIR)
        tops = {PurePosixPath(rel).parts[0] for rel in payload}
        for top in sorted(tops):
            link = self.dir / top
            if not link.is_symlink():
                link.symlink_to(f"{DATA_DIR}/{top}")
        for entry in os.listdir(self.dir):
            if entry.startswith("..") or entry in tops:
                continue
            stale = self.dir / entry
            if stale.is_symlink():
                stale.unlink()
        if previous and previous != stamp:
            shutil.rmtree(self.dir / previous, ignore_errors=True)
        return True

    @staticmethod
    def _mode(mode: int, fs_group: int | None) -> int:
        """SetVolumeOwnership for a read-only volume: with an fsGroup, files get at least g+r."""
        return mode | 0o440 if fs_group is not None else mode


def _config_bytes(kind: str, obj: Mapping[str, Any]) -> dict[str, bytes]:
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out = {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
    out.update({k: str(v).encode() for k, v in (obj.get("data") or {}).items()})
    return out


_HOSTPATH_CHECKS: dict[str, tuple[Callable[[os.stat_result], bool], str]] = {
    "Directory": (lambda st: stat.S_ISDIR(st.st_mode), "is not a directory"),
    "DirectoryOrCreate": (lambda st: stat.S_ISDIR(st.st_mode), "is not a directory"),
    "File": (lambda st: stat.S_ISREG(st.st_mode), "is not a file"),
    "FileOrCreate": (lambda st: stat.S_ISREG(st.st_mode), "is not a file"),
    "Socket": (lambda st: stat.S_ISSOCK(st.st_mode), "is not a socket file"),
    "CharDevice": (lambda st: stat.S_ISCHR(st.st_mode), "is not a character device"),
    "BlockDevice": (lambda st: stat.S_ISBLK(st.st_mode), "is not a block device"),
}


@dataclass
class _Token:
    issued: float
    expires: float

    def due(self, now: float) -> bool:
        """The kubelet token manager's rule: past 80% of its life, or older than 24 h."""
        return now > min(self.expires - 0.2 * (self.expires - self.issued), self.issued + MAX_TOKEN_AGE)


class PodVolumes:
    """The volumes of one Pod on this node: :meth:`setup`, :meth:`refresh`, :meth:`mounts`,
    :meth:`teardown`."""

    def __init__(
        self,
        pod: Mapping[str, Any],
        pod_dir: Path,
        *,
        lookup: Lookup,
        token: TokenSource,
        node_name: str = "",
        allocatable: Mapping[str, Decimal] | None = None,
        automount: bool = False,
        root_ca: bytes | None = None,
        extra_mounts: Sequence[Mount] = (),
    ) -> None:
        self.pod: Mapping[str, Any] = pod
        self.pod_dir = Path(pod_dir)
        self.lookup = lookup
        self.token = token
        self.node_name = node_name
        self.allocatable: Mapping[str, Decimal] = allocatable or {}
        self.automount = automount
        self.root_ca = root_ca
        self.extra_mounts = list(extra_mounts)
        self._tokens: dict[tuple[str, str], _Token] = {}
        self._tmpfs: list[Path] = []
        self._ready = False

    # -- the Pod's view ------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return str((self.pod.get("metadata") or {}).get("namespace") or "default")

    def volumes(self) -> list[Obj]:
        """The Pod's volumes, plus the kube-api-access volume when it automounts its token."""
        spec = self.pod.get("spec") or {}
        vols = [dict(v) for v in spec.get("volumes") or []]
        if self.automount and not any(str(v.get("name", "")).startswith("kube-api-access-") for v in vols):
            vols.append(kube_api_access_volume(self.pod))
        return vols

    def _containers(self) -> list[Mapping[str, Any]]:
        spec = self.pod.get("spec") or {}
        return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]

    def _fs_group(self) -> int | None:
        g = ((self.pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
        return None if g is None else int(g)

    def _fs_user(self) -> int | None:
        """kubelet's FsUserFrom: the runAsUser every container shares, if they all set the same one."""
        psc = (self.pod.get("spec") or {}).get("securityContext") or {}
        users: set[int | None] = set()
        for c in self._containers():
            u = (c.get("securityContext") or {}).get("runAsUser", psc.get("runAsUser"))
            users.add(None if u is None else int(u))
        if len(users) == 1:
            (only,) = users
            return only
        return None

    def directory(self, volume: Mapping[str, Any]) -> Path:
        return self.pod_dir / "volumes" / PLUGINS[_kind(volume)] / str(volume["name"])

    # -- set-up --------------------------------------------------------------------------------

    async def setup(self) -> None:
        """Materialise every volume, or raise VolumeError (the first that fails)."""
        for volume in self.volumes():
            await self._setup_one(volume, initial=True)
        self._ready = True

    async def refresh(self, pod: Mapping[str, Any] | None = None) -> list[VolumeError]:
        """Rewrite what changed (API contents, the Pod's labels and annotations, tokens due); an
        object gone missing keeps the old files, as the kubelet keeps them. Returns the errors."""
        if pod is not None:
            self.pod = pod
        errors: list[VolumeError] = []
        for volume in self.volumes():
            if _kind(volume) in ("configMap", "secret", "projected", "downwardAPI"):
                try:
                    await self._setup_one(volume, initial=False)
                except VolumeError as e:
                    errors.append(e)
        return errors

    def next_refresh(self, now: float | None = None) -> float:
        """Seconds until a token is due (the caller also refreshes periodically for API contents)."""
        now = time.time() if now is None else now
        dues = [min(t.expires - 0.2 * (t.expires - t.issued), t.issued + MAX_TOKEN_AGE) for t in self._tokens.values()]
        return max(0.0, min(dues) - now) if dues else float("inf")

    async def teardown(self) -> None:
        """Unmount the memory-backed emptyDirs; the caller removes the pod dir."""
        for path in reversed(self._tmpfs):
            proc = await asyncio.create_subprocess_exec("umount", str(path), stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.DEVNULL)
            await proc.wait()
        self._tmpfs.clear()

    async def _setup_one(self, volume: Mapping[str, Any], *, initial: bool) -> None:
        name = str(volume.get("name"))
        kind = _kind(volume)
        source = volume.get(kind) or {}
        if kind == "emptyDir":
            if initial:
                self._empty_dir(volume, source)
        elif kind == "hostPath":
            if initial:
                self._host_path(name, source)
        elif kind in ("configMap", "secret"):
            payload = await self._config_payload(name, "ConfigMap" if kind == "configMap" else "Secret", source,
                                                 DEFAULT_MODE if source.get("defaultMode") is None
                                                 else int(source["defaultMode"]))
            # An optional object that is missing (or was deleted) leaves the volume empty.
            _Atomic(self.directory(volume), name).write(payload or {}, fs_group=self._fs_group())
        elif kind == "downwardAPI":
            payload = self._downward_payload(name, source.get("items") or [],
                                             DEFAULT_MODE if source.get("defaultMode") is None
                                             else int(source["defaultMode"]))
            _Atomic(self.directory(volume), name).write(payload, fs_group=self._fs_group())
        elif kind == "projected":
            payload = await self._projected_payload(name, source)
            _Atomic(self.directory(volume), name).write(payload, fs_group=self._fs_group())
        elif kind in UNSUPPORTED:
            raise _failed(name, f"{kind} volumes are not supported by kube-lite (no volume plugin matched)")
        else:
            raise _failed(name, f"volume type {kind!r} not supported by kube-lite (no volume plugin matched)")
        if initial:
            # The volume root is world-traversable, as the kubelet leaves it, so any runAsUser can reach
            # files whose own modes allow it.
            d = self.directory(volume) if kind in PLUGINS else None
            if d is not None and kind != "emptyDir" and d.exists():
                os.chmod(d, 0o777)
                if self._fs_group() is not None:
                    os.lchown(d, -1, self._fs_group() or 0)
                    os.chmod(d, 0o2777)

    def _empty_dir(self, volume: Mapping[str, Any], source: Mapping[str, Any]) -> None:
        d = self.directory(volume)
        d.mkdir(parents=True, exist_ok=True)
        if source.get("medium") == "Memory" and not os.path.ismount(d):
            size = self._tmpfs_size(source)
            opts = "nosuid,nodev" + (f",size={size}" if size else "")
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)], capture_output=True, text=True)
            if r.returncode != 0:
                raise _failed(str(volume.get("name")), f"mount failed: {r.stderr.strip() or r.returncode}")
            self._tmpfs.append(d)
        elif source.get("medium") not in (None, "", "Memory"):
            raise _failed(str(volume.get("name")), f"unknown storage medium {source.get('medium')!r}")
        os.chmod(d, 0o777)
        group = self._fs_group()
        if group is not None:
            os.lchown(d, -1, group)
            os.chmod(d, 0o2777)

    def _tmpfs_size(self, source: Mapping[str, Any]) -> int | None:
        """sizeLimit, else the Pod's memory limit when every container has one, else the node's
        allocatable memory (the kubelet's SizeMemoryBackedVolumes rule)."""
        if source.get("sizeLimit") is not None:
            return int(quantity(source["sizeLimit"]))
        limits = [((c.get("resources") or {}).get("limits") or {}).get("memory")
                  for c in (self.pod.get("spec") or {}).get("containers") or []]
        if limits and all(limit is not None for limit in limits):
            return int(sum(quantity(limit) for limit in limits))
        allocatable = self.allocatable.get("memory")
        return int(allocatable) if allocatable else None

    def _host_path(self, name: str, source: Mapping[str, Any]) -> None:
        path = str(source.get("path") or "")
        kind = str(source.get("type") or "")
        if kind == "":
            return
        if kind not in _HOSTPATH_CHECKS:
            raise _failed(name, f"{kind} is an invalid volume type")
        if not os.path.lexists(path):
            if kind == "DirectoryOrCreate":
                os.makedirs(path, mode=0o755, exist_ok=True)
                return
            if kind == "FileOrCreate":
                try:
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
                except OSError as e:
                    raise _failed(name, f"open {path}: {e.strerror.lower() if e.strerror else e}") from None
                return
        check, what = _HOSTPATH_CHECKS[kind]
        try:
            ok = check(os.stat(path))
        except OSError:
            ok = False
        if not ok:
            raise _failed(name, f"hostPath type check failed: {path} {what}")

    # -- payloads ------------------------------------------------------------------------------

    async def _config_payload(self, volume: str, kind: str, source: Mapping[str, Any], default_mode: int,
                              *, for_projection: bool = False) -> dict[str, FileProjection] | None:
        """The files of a configMap/secret volume (or projection); None when an optional object is missing."""
        ref = str(source.get("name") if kind == "ConfigMap" else source.get("secretName", source.get("name")) or "")
        optional = bool(source.get("optional"))
        obj = await self.lookup(kind, self.namespace, ref)
        if obj is None:
            if optional:
                return None
            if kind == "ConfigMap" and ref == ROOT_CA_CONFIGMAP and self.root_ca is not None:
                obj = {"data": {"ca.crt": self.root_ca.decode()}}
            else:
                raise _failed(volume, f'{kind.lower()} "{ref}" not found')
        data = _config_bytes(kind, obj)
        items = source.get("items") or []
        out: dict[str, FileProjection] = {}
        if not items:
            for key, value in data.items():
                out[key] = FileProjection(value, default_mode)
            return out
        for item in items:
            key = str(item.get("key"))
            if key not in data:
                if optional:
                    continue
                what = "configmap references non-existent config key" if kind == "ConfigMap" \
                    else "references non-existent secret key"
                raise _failed(volume, f"{what}: {key}")
            mode = default_mode if item.get("mode") is None else int(item["mode"])
            out[str(item.get("path") or key)] = FileProjection(data[key], mode)
        return out

    def _downward_payload(self, volume: str, items: Sequence[Mapping[str, Any]],
                          default_mode: int) -> dict[str, FileProjection]:
        out: dict[str, FileProjection] = {}
        for item in items:
            mode = default_mode if item.get("mode") is None else int(item["mode"])
            try:
                if item.get("fieldRef"):
                    value = field_value(self.pod, str(item["fieldRef"].get("fieldPath")))
                elif item.get("resourceFieldRef"):
                    ref = item["resourceFieldRef"]
                    target = next((c for c in self._containers() if c.get("name") == ref.get("containerName")), None)
                    if target is None:
                        raise ContainerConfigError(f"container {ref.get('containerName')} not found")
                    value = resource_value(self.pod, target, ref, self.allocatable)
                else:
                    continue
            except ContainerConfigError as e:
                raise _failed(volume, str(e)) from None
            out[str(item.get("path"))] = FileProjection(value.encode(), mode)
        return out

    async def _projected_payload(self, volume: str, source: Mapping[str, Any]) -> dict[str, FileProjection]:
        default_mode = DEFAULT_MODE if source.get("defaultMode") is None else int(source["defaultMode"])
        out: dict[str, FileProjection] = {}
        fs_user, fs_group = self._fs_user(), self._fs_group()
        for s in source.get("sources") or []:
            if s.get("configMap") is not None:
                part = await self._config_payload(volume, "ConfigMap", s["configMap"], default_mode)
                out.update(part or {})
            elif s.get("secret") is not None:
                part = await self._config_payload(volume, "Secret", s["secret"], default_mode)
                out.update(part or {})
            elif s.get("downwardAPI") is not None:
                out.update(self._downward_payload(volume, s["downwardAPI"].get("items") or [], default_mode))
            elif s.get("serviceAccountToken") is not None:
                t = s["serviceAccountToken"]
                path = str(t.get("path") or "token")
                # The kubelet narrows a token to 0600 (owned by the shared runAsUser) when the Pod has
                # an fsUser or fsGroup; otherwise the projection's mode.
                mode = 0o600 if fs_user is not None or fs_group is not None else default_mode
                data = await self._token(volume, path, t)
                out[path] = FileProjection(data, mode, fs_user)
            elif s.get("clusterTrustBundle") is not None or s.get("podCertificate") is not None:
                raise _failed(volume, "clusterTrustBundle and podCertificate projections are not supported by kube-lite")
        return out

    async def _token(self, volume: str, path: str, source: Mapping[str, Any]) -> bytes:
        key = (volume, path)
        now = time.time()
        state = self._tokens.get(key)
        current = self.directory({"name": volume, "projected": {}}) / DATA_DIR / path
        if state is not None and not state.due(now) and current.exists():
            return current.read_bytes()
        audience = source.get("audience") or None
        expiration = int(source.get("expirationSeconds") or TOKEN_EXPIRATION)
        try:
            token, expires = await self.token(audience, expiration)
        except Exception as e:  # any failure is the kubelet's "failed to fetch token"
            if state is not None and current.exists() and now < state.expires:
                return current.read_bytes()  # keep serving the still-valid token
            raise _failed(volume, f"failed to fetch token: {e}") from None
        self._tokens[key] = _Token(now, expires)
        return token.encode()

    # -- mounts --------------------------------------------------------------------------------

    def mounts(self, container: Mapping[str, Any], env: Mapping[str, str] | None = None) -> list[Mount]:
        """The container's volumeMounts as OCI bind mounts (after :meth:`setup`), the ServiceAccount
        mount when the Pod automounts, then the caller's extra mounts not already covered.
        ``env`` is the container's environment, for ``subPathExpr``."""
        by_name = {str(v.get("name")): v for v in self.volumes()}
        out: list[Mount] = []
        for vm in container.get("volumeMounts") or []:
            name = str(vm.get("name"))
            volume = by_name.get(name)
            if volume is None:
                raise ContainerConfigError(f'cannot find volume "{name}" to mount into container "{container.get("name")}"')
            kind = _kind(volume)
            source = Path(str((volume.get("hostPath") or {}).get("path"))) if kind == "hostPath" else self.directory(volume)
            sub = str(vm.get("subPath") or "")
            if vm.get("subPathExpr"):
                sub = expand(str(vm["subPathExpr"]), env or {})
            if sub:
                source = self._sub_path(source, sub, name, container)
            options = ["rbind", "rprivate"]
            if vm.get("readOnly") or kind in READ_ONLY_KINDS:
                options.append("ro")
            # mountPropagation is not honoured: every mount is rprivate (docs/runc.md).
            out.append(Mount(str(vm.get("mountPath")), str(source), "bind", options))
        taken = {os.path.normpath(m.destination) for m in out}
        if self.automount and SERVICEACCOUNT_MOUNT not in taken:
            sa = next((v for v in self.volumes() if str(v.get("name", "")).startswith("kube-api-access-")), None)
            if sa is not None:
                out.append(Mount(SERVICEACCOUNT_MOUNT, str(self.directory(sa)), "bind", ["rbind", "rprivate", "ro"]))
                taken.add(SERVICEACCOUNT_MOUNT)
        for m in self.extra_mounts:
            if os.path.normpath(m.destination) not in taken:
                out.append(m)
        return out

    def _sub_path(self, volume_dir: Path, sub: str, name: str, container: Mapping[str, Any]) -> Path:
        """kubelet's subPath preparation: created when missing, never outside the volume."""
        p = PurePosixPath(sub)
        if p.is_absolute() or ".." in p.parts:
            raise ContainerConfigError(
                f'failed to prepare subPath for volumeMount "{name}" of container "{container.get("name")}"')
        target = volume_dir / sub
        if not os.path.lexists(target):
            target.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(target, stat.S_IMODE(os.stat(volume_dir).st_mode))
        real, root = os.path.realpath(target), os.path.realpath(volume_dir)
        if real != root and not real.startswith(root + os.sep):
            raise ContainerConfigError(
                f'failed to prepare subPath for volumeMount "{name}" of container "{container.get("name")}"')
        return Path(real)

