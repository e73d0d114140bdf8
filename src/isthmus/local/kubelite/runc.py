"""kube-lite's container runtime in runc mode: each container instance is an OCI bundle run by runc.

What containerd and its shim do for a kubelet, done with Debian's ``runc`` and nothing else:

- a bundle per container instance, ``<pod dir>/containers/<name>/<restartCount>/``: ``rootfs/`` is
  an overlay mounted here on the host (lowerdir the image's shared, read-only rootfs; upper and
  work dirs in the bundle, so each instance writes to its own layer), ``config.json`` the OCI
  spec (oci.py builds it from the Pod);
- ``runc run --keep --bundle B <id>`` as a child of kube-lite is the container's shim: in the
  foreground it forwards signals, copies the container's output to kube-lite's pipe (the log) and
  exits with the container's status (128+signal when killed: 137 for SIGKILL). It gets SIGTERM
  when kube-lite dies (PR_SET_PDEATHSIG), which it forwards: no container outlives its kubelet
  ungracefully, and what is left (``--keep``) is found again in ``runc list``;
- signals go through ``runc kill <id> TERM|KILL``, never to runc itself (a SIGKILL to runc would
  orphan the container);
- after the exit: the memory cgroup says whether the kernel's OOM killer struck (cgroup v1
  ``memory.oom_control`` ``oom_kill N``, v2 ``memory.events``) — then ``OOMKilled``, as the
  kubelet reports it — and only then ``runc delete --force``, the overlay unmounted and the
  bundle removed (the logs stay in ``<pod dir>/logs``);
- ``runc exec`` runs exec probes, preStop exec hooks and ``kubectl exec`` inside the container,
  with its environment, user and capabilities (runc copies the spec's process);
- container IDs are 64 hex digits like containerd's, reported as ``runc://<id>``; cgroupsPath
  ``/isthmus/<node>/pod<uid>/<container>`` (the cgroupfs driver), removed with the Pod.

runc's state lives in ``<kube-lite root>/runc`` (``--root``), so the containers of one node are
told from any other runc user's on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from isthmus.local.kubelite.containers import ContainerConfigError, expand, get_object, service_environment
from isthmus.local.kubelite.oci import CreateContainerError
from isthmus.local.kubelite.probes import ProbeResult, exec_result

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from isthmus.local.kubelite.images import ImageStore, PulledImage
    from isthmus.local.kubelite.volumes import PodVolumes
    from isthmus.runtime import EventRecorder

__all__ = [
    "ID_SCHEME",
    "CreateContainerError",
    "RuncContainer",
    "RuncError",
    "RuncNode",
    "RuncPod",
    "RuncRuntime",
    "StartFailed",
    "cgroups_path",
    "dns_config",
    "hosts_file",
    "new_container_id",
    "seccomp_supported",
    "start_error_message",
    "unmount_all_under",
]

log = logging.getLogger(__name__)

ID_SCHEME = "runc://"
CGROUP_ROOT = Path("/sys/fs/cgroup")
COMMAND_TIMEOUT = 30.0
START_TIMEOUT = 60.0
"""How long `runc run` may take to say the container started (pid file) or failed."""


class RuncError(Exception):
    """A runc command failed; the message is runc's own (what containerd would pass on)."""


class StartFailed(Exception):
    """The container process could not be started (runc's reason, e.g. ``exec: "x": executable
    file not found in $PATH``): kube's ``StartError``."""


def new_container_id() -> str:
    """64 hex digits, random, as containerd names containers."""
    return secrets.token_hex(32)


def cgroups_path(node: str, pod_uid: str, container: str) -> str:
    """The container's cgroup under the cgroupfs driver: one parent per node and Pod."""
    return f"/isthmus/{node}/pod{pod_uid}/{container}"


def start_error_message(runc_message: str) -> str:
    """What containerd says when runc could not start the process, from runc's own error."""
    text = runc_message.strip()
    for prefix in ("runc run failed: ", "runc create failed: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return ("failed to create containerd task: failed to create shim task: OCI runtime create failed: "
            f"runc create failed: {text}: unknown")


try:  # resolved before any fork: nothing but the call itself runs between fork and exec
    _libc: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _libc = None


RUNTIME_UMASK = 0o022
"""runc's umask, whatever kube-lite's (the local clusterset's supervisor runs everything with 077): the
directories runc makes for mount targets inside the container (/var/run/secrets/...) and what a
container creates without a umask of its own would otherwise be private to root, and a non-root
container could not reach its own ServiceAccount token. containerd's shims run with 022 too."""


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.umask(RUNTIME_UMASK)
    if _libc is not None:
        _libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _exec_child() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.umask(RUNTIME_UMASK)


def _controlling_tty() -> None:  # pragma: no cover - runs in the child between fork and exec
    import fcntl
    import termios

    os.umask(RUNTIME_UMASK)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    options = f"lowerdir={lower},upperdir={upper},workdir={work}".encode()
    if _libc is None or _libc.mount(b"overlay", str(target).encode(), b"overlay", 0, options) != 0:
        err = ctypes.get_errno() if _libc is not None else 0
        raise OSError(err, f"mount overlay on {target}: {os.strerror(err)}")


def _unmount(target: Path) -> None:
    """Lazily (MNT_DETACH): a mount still busy for a moment must not keep the bundle forever."""
    if _libc is not None and os.path.ismount(target):
        if _libc.umount2(str(target).encode(), 2) != 0:
            err = ctypes.get_errno()
            log.warning("rootfs not unmounted", extra={"path": str(target), "error": os.strerror(err)})


def unmount_all_under(directory: Path) -> None:
    """Every mount below `directory` (deepest first), from /proc/self/mounts."""
    prefix = os.path.abspath(directory) + os.sep
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    targets = [f.split()[1].replace("\\040", " ") for f in lines if len(f.split()) > 1]
    for t in sorted((t for t in targets if t.startswith(prefix)), key=len, reverse=True):
        _unmount(Path(t))


def _oom_kills(path: str) -> int:
    """How many times the OOM killer struck in the cgroup (v1 memory.oom_control, v2 memory.events)."""
    rel = path.lstrip("/")
    for f, key in ((CGROUP_ROOT / "memory" / rel / "memory.oom_control", "oom_kill"),
                   (CGROUP_ROOT / rel / "memory.events", "oom_kill")):
        with contextlib.suppress(OSError):
            for line in f.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    return int(value)
    return 0


@dataclass
class Exited:
    """How an instance ended: its exit code, whether the OOM killer ended it, or why it never started."""

    code: int
    oom_killed: bool = False
    start_error: str | None = None


class RuncContainer:
    """One running instance: the `runc run` process that is its shim, and its cleanup after the exit."""

    def __init__(self, runtime: RuncRuntime, cid: str, bundle: Path, proc: asyncio.subprocess.Process,
                 cgroup: str) -> None:
        self.runtime = runtime
        self.id = cid
        self.bundle = bundle
        self.proc = proc
        self.cgroup = cgroup
        self.stdout: asyncio.StreamReader | None = proc.stdout
        self._ended: asyncio.Future[Exited] | None = None
        self.init_pid: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def container_id(self) -> str:
        return ID_SCHEME + self.id

    @property
    def oom_killed(self) -> bool:
        return self._ended is not None and self._ended.done() and self._ended.result().oom_killed

    @property
    def returncode(self) -> int | None:
        if self._ended is not None and self._ended.done():
            return self._ended.result().code
        return None

    async def started(self) -> None:
        """Until runc says the process runs (its pid file); StartFailed when runc gave up instead."""
        pid_file = self.bundle / "pid"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while True:
            if pid_file.exists():
                with contextlib.suppress(OSError, ValueError):
                    self.init_pid = int(pid_file.read_text().strip())
                    return
            if self.proc.returncode is not None or loop.time() > deadline:
                ended = await asyncio.shield(self.wait_exited())
                raise StartFailed(ended.start_error or f"runc exited with {ended.code} before the process started")
            await asyncio.sleep(0.02)

    async def wait(self) -> int:
        # Shielded: a waiter that gives up (the grace period's timeout) must not cancel the reaping.
        return (await asyncio.shield(self.wait_exited())).code

    def wait_exited(self) -> asyncio.Future[Exited]:
        """The end, once (shared by whoever waits): exit code and OOM read before `runc delete`."""
        if self._ended is None:
            self._ended = asyncio.ensure_future(self._reap())
        return self._ended

    async def _reap(self) -> Exited:
        code = await self.proc.wait()
        if code < 0:  # runc itself was signalled: the container's own status is unknown
            code = 128 - code
        oom = _oom_kills(self.cgroup) > 0
        start_error = None
        if not (self.bundle / "pid").exists():
            start_error = self.runtime.read_error(self.bundle) or f"runc exited with {code}"
        await self.runtime.remove(self.id, self.bundle)
        return Exited(code, oom, start_error)

    async def signal(self, sig: int) -> None:
        """The container's init gets `sig` (through `runc kill`); one already gone is not an error."""
        if self.returncode is not None or self.proc.returncode is not None:
            return
        name = signal.Signals(sig).name.removeprefix("SIG")
        try:
            await self.runtime.runc("kill", self.id, name)
        except RuncError as e:
            log.debug("runc kill", extra={"id": self.id, "error": str(e)})


class RuncRuntime:
    """One node's runc: its state dir, the containers it runs, their bundles."""

    def __init__(self, root: Path, *, node: str, runc: str = "runc") -> None:
        self.root = root
        self.state = root / "runc"
        self.node = node
        self.binary = runc

    def missing(self) -> str | None:
        """Why runc cannot be run (for RunContainerError), None when it can."""
        found = shutil.which(self.binary)
        if found is None:
            return f'exec: "{self.binary}": executable file not found in $PATH'
        return None

    async def runc(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> str:  # noqa: ASYNC109
        """Run one runc command against this node's state; its stdout, RuncError with its stderr."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.binary, "--root", str(self.state), *args, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise RuncError(f'exec: "{self.binary}": {e.strerror or e}') from None
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise RuncError(f"runc {args[0]} did not finish within {timeout:g}s") from None
        if proc.returncode != 0:
            raise RuncError(err.decode("utf-8", "replace").strip() or f"runc {args[0]} exited with {proc.returncode}")
        return out.decode("utf-8", "replace")

    # ---- one instance --------------------------------------------------------------------

    def bundle(self, pod_dir: Path, container: str, restart: int) -> Path:
        return pod_dir / "containers" / container / str(restart)

    def prepare(self, bundle: Path, lower: Path, spec: Mapping[str, Any]) -> None:
        """The bundle: overlay rootfs over the image's (shared, read-only) rootfs, and config.json."""
        if bundle.exists():  # an instance of a previous kube-lite that was never cleaned up
            _unmount(bundle / "rootfs")
            shutil.rmtree(bundle, ignore_errors=True)
        for d in ("rootfs", "upper", "work"):
            (bundle / d).mkdir(parents=True, exist_ok=True)
        # The merged root directory takes the upper directory's owner and mode: made under kube-lite's
        # umask (077 in the local clusterset) it would be 0700, and a non-root container could not
        # even look up its own executable. It must be the image's "/".
        top = lower.stat()
        os.chown(bundle / "upper", top.st_uid, top.st_gid)
        os.chmod(bundle / "upper", top.st_mode & 0o7777)
        _mount_overlay(lower, bundle / "upper", bundle / "work", bundle / "rootfs")
        data = dict(spec)
        data["root"] = {**(spec.get("root") or {}), "path": str(bundle / "rootfs")}
        (bundle / "config.json").write_text(json.dumps(data))

    async def run(self, cid: str, bundle: Path, cgroup: str) -> RuncContainer:
        """`runc run --keep` in the foreground: the container's shim, its output on one pipe."""
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            proc = await asyncio.create_subprocess_exec(
                self.binary, "--root", str(self.state), "--log", str(bundle / "runc.log"), "--log-format", "json",
                "run", "--keep", "--bundle", str(bundle), "--pid-file", str(bundle / "pid"), cid,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, preexec_fn=_pdeathsig, cwd=str(bundle),
            )
        except OSError as e:
            await self.remove(cid, bundle)
            raise StartFailed(f'exec: "{self.binary}": {e.strerror or e}') from None
        return RuncContainer(self, cid, bundle, proc, cgroup)

    def read_error(self, bundle: Path) -> str | None:
        """runc's last error from its JSON log (why `runc run` gave up), if it logged one."""
        last = None
        with contextlib.suppress(OSError):
            for line in (bundle / "runc.log").read_text().splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if entry.get("level") in ("error", "fatal") and entry.get("msg"):
                        last = str(entry["msg"])
        return last

    async def remove(self, cid: str, bundle: Path | None) -> None:
        """`runc delete --force`, the rootfs unmounted, the bundle gone (whatever of it exists)."""
        with contextlib.suppress(RuncError):
            await self.runc("delete", "--force", cid)
        if bundle is not None:
            _unmount(bundle / "rootfs")
            shutil.rmtree(bundle, ignore_errors=True)

    def remove_pod_cgroups(self, pod_uid: str) -> None:
        """The Pod's parent cgroup in every hierarchy (its containers' are gone with `runc delete`)."""
        rel = f"isthmus/{self.node}/pod{pod_uid}"
        candidates = [CGROUP_ROOT / rel] + ([p / rel for p in CGROUP_ROOT.iterdir()] if CGROUP_ROOT.is_dir() else [])
        for top in candidates:
            if not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    # ---- what is there -------------------------------------------------------------------

    async def containers(self) -> list[dict[str, Any]]:
        """`runc list` of this node's state: id, pid, status, bundle of every container."""
        if not self.state.is_dir():
            return []
        try:
            out = await self.runc("list", "--format", "json")
        except RuncError as e:
            log.warning("runc list failed", extra={"error": str(e)})
            return []
        data = json.loads(out or "null") or []
        return [dict(x) for x in data]

    async def leftovers(self, pods_dir: Path) -> dict[str, list[dict[str, Any]]]:
        """Containers a previous kube-lite ran, by Pod uid (from their bundles' paths)."""
        root = f"{pods_dir}{os.sep}"  # absolute: the root dir is
        found: dict[str, list[dict[str, Any]]] = {}
        for c in await self.containers():
            bundle = str(c.get("bundle") or "")
            if bundle.startswith(root):
                found.setdefault(bundle[len(root):].split(os.sep, 1)[0], []).append(c)
        return found

    async def stop_leftovers(self, containers: Sequence[Mapping[str, Any]], grace: float) -> None:
        """SIGTERM, SIGKILL after `grace`, then delete: as a kubelet stops a container it finds."""
        loop = asyncio.get_running_loop()

        async def one(c: Mapping[str, Any]) -> None:
            cid, bundle = str(c["id"]), Path(str(c.get("bundle") or ""))
            if c.get("status") in ("running", "paused", "created"):
                for sig, wait in (("TERM", grace), ("KILL", COMMAND_TIMEOUT)):
                    with contextlib.suppress(RuncError):
                        await self.runc("kill", cid, sig)
                    deadline = loop.time() + wait
                    while await self._running(cid) and loop.time() < deadline:  # noqa: ASYNC110 - runc has no wait
                        await asyncio.sleep(0.1)
                    if not await self._running(cid):
                        break
            await self.remove(cid, bundle if c.get("bundle") else None)

        await asyncio.gather(*(one(c) for c in containers))

    async def _running(self, cid: str) -> bool:
        try:
            state = json.loads(await self.runc("state", cid))
        except (RuncError, ValueError):
            return False
        return bool(state.get("status") in ("running", "paused", "created"))

    async def exec(
        self, cid: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: Any = None,
        stdout: Any = None, stderr: Any = None, tty: bool = False,
    ) -> asyncio.subprocess.Process:
        """`runc exec` in the container: its spec's process (env, user, capabilities, cwd) with `argv`
        and the extra `env`; the caller owns the process (its stdio as given). `tty`: the process
        gets a terminal of runc's, which runc feeds from its own stdio — then a pty's other side,
        made runc's controlling terminal so that resizing it reaches the container (SIGWINCH)."""
        extra: list[str] = ["--tty"] if tty else []
        for k, v in (env or {}).items():
            extra += ["--env", f"{k}={v}"]
        return await asyncio.create_subprocess_exec(
            self.binary, "--root", str(self.state), "exec", *extra, cid, *argv,
            stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=stdout if stdout is not None else asyncio.subprocess.PIPE,
            stderr=stderr if stderr is not None else asyncio.subprocess.STDOUT,
            start_new_session=tty, preexec_fn=_controlling_tty if tty else _exec_child,
        )


# ---- a Pod's containers in runc mode ------------------------------------------------------------

CLUSTER_DOMAIN = "cluster.local"
TERMINATION_LOG = "/dev/termination-log"
MAX_TERMINATION_MESSAGE = 4096
MAX_FALLBACK_LOG = 2048
FALLBACK_LOG_LINES = 80
DNS_SERVICE = ("isthmus-system", "isthmus-dns")
"""(namespace, name) of the Service whose ClusterIP is the cluster's DNS (kubelet's --cluster-dns)."""
MAX_DNS_SEARCH = 32
"""The kubelet's validation.MaxDNSSearchPaths: more search domains are dropped with an Event."""

Obj = dict[str, Any]
Lookup = Callable[[str, str, str], Awaitable[Obj | None]]


def hosts_file(pod: Mapping[str, Any], ip: str, *, host_network: bool, node_name: str) -> str:
    """The kubelet's managed /etc/hosts (pkg/kubelet/kubelet_pods.go managedHostsFileContent)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
             "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix",
             "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters"]
    if host_network:
        lines.append(f"{ip}\t{node_name}")
    else:
        hostname = str(spec.get("hostname") or meta.get("name") or "")[:63]
        sub = spec.get("subdomain")
        if sub:
            fqdn = f"{hostname}.{sub}.{meta.get('namespace') or 'default'}.svc.{CLUSTER_DOMAIN}"
            lines.append(f"{ip}\t{fqdn}\t{hostname}")
        else:
            lines.append(f"{ip}\t{hostname}")
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        for a in aliases:
            lines.append(f"{a.get('ip')}\t" + "\t".join(str(h) for h in a.get("hostnames") or []))
    return "\n".join(lines) + "\n"


def _host_resolv(path: Path = Path("/etc/resolv.conf")) -> tuple[list[str], list[str], list[str]]:
    servers: list[str] = []
    search: list[str] = []
    options: list[str] = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            f = line.split("#", 1)[0].split()
            if not f:
                continue
            if f[0] == "nameserver" and len(f) > 1:
                servers.append(f[1])
            elif f[0] in ("search", "domain"):
                search = f[1:]
            elif f[0] == "options":
                options += f[1:]
    return servers, search, options


def dns_config(pod: Mapping[str, Any], cluster_dns: str | None, *,
               host: tuple[list[str], list[str], list[str]] | None = None) -> tuple[str | None, str]:
    """(warning or None, resolv.conf) as the kubelet's dns configurer gives a Pod: ClusterFirst
    (the cluster's DNS, the namespace's search path, ndots:5), ClusterFirstWithHostNet, Default (the
    node's), None (dnsConfig only), with dnsConfig merged in. A ClusterFirst Pod of a cluster
    without DNS falls back to Default, with the kubelet's MissingClusterDNS warning."""
    spec = pod.get("spec") or {}
    ns = str((pod.get("metadata") or {}).get("namespace") or "default")
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        policy = "Default"
    warning = None
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not cluster_dns:
        warning = ("kubelet does not have ClusterDNS IP configured and cannot create Pod using "
                   f'"{policy}" policy. Falling back to "Default" policy.')
        policy = "Default"
    servers: list[str] = []
    search: list[str] = []
    options: list[str] = []
    if policy == "Default":
        servers, search, options = host if host is not None else _host_resolv()
    elif policy != "None":
        servers = [str(cluster_dns)]
        search = [f"{ns}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]
        options = ["ndots:5"]
    extra = spec.get("dnsConfig") or {}
    servers += [str(x) for x in extra.get("nameservers") or [] if str(x) not in servers]
    search += [str(x) for x in extra.get("searches") or [] if str(x) not in search]
    merged: dict[str, str] = {}
    for o in options:
        merged[o.partition(":")[0]] = o
    for o in extra.get("options") or []:
        name = str(o.get("name"))
        merged[name] = f"{name}:{o['value']}" if o.get("value") is not None else name
    lines = [f"search {' '.join(search[:MAX_DNS_SEARCH])}"] if search else []
    lines += [f"nameserver {x}" for x in servers[:3]]
    if merged:
        lines.append(f"options {' '.join(merged.values())}")
    return warning, "\n".join(lines) + "\n"


@dataclass
class RuncNode:
    """What every Pod of a runc-mode node shares: runc, the image store, the pod network."""

    runtime: RuncRuntime
    images: ImageStore
    node_netns: str
    """Path of the node's network namespace (hostNetwork pods, probes, port-forward's dials)."""
    node_address: str
    api_host: str
    api_port: int
    cluster: str
    node_name: str
    client: AsyncClient | None = None
    """The apiserver: ServiceAccount tokens, imagePullSecrets, the cluster DNS Service."""
    api_ca: bytes | None = None
    """ca.crt for namespaces without a kube-root-ca.crt ConfigMap."""
    seccomp: bool = True
    allocatable: Mapping[str, Any] = field(default_factory=dict)

    async def cluster_dns(self) -> str | None:
        """The cluster DNS Service's ClusterIP (the `isthmus-dns` Service in `isthmus-system`), or None."""
        if self.client is None:
            return None
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Service

        try:
            svc = (await self.client.get(Service, DNS_SERVICE[1], namespace=DNS_SERVICE[0])).to_dict()
        except ApiError:
            return None
        ip = (svc.get("spec") or {}).get("clusterIP")
        return str(ip) if ip and ip != "None" else None

    async def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A ServiceAccount or Secret, None when it does not exist (or there is no client)."""
        if self.client is None:
            return None
        return await get_object(self.client, kind, namespace, name)


class RuncPod:
    """The containers of one Pod in runc mode (processes.ContainerRunner): the image of each, its
    bundle and spec, the Pod's volumes and /etc files, exec in a container."""

    def __init__(self, node: RuncNode, recorder: EventRecorder, pod: Obj, pod_dir: Path, *, netns_path: str,
                 lookup: Lookup, echo: bool = False) -> None:
        self.node = node
        self.recorder = recorder
        self.pod = pod
        self.dir = pod_dir
        self.netns_path = netns_path
        self.lookup = lookup
        self.echo = echo
        meta = pod.get("metadata") or {}
        self.uid = str(meta.get("uid"))
        # hostNetwork Pods see the node's name, as they share the host's UTS namespace on a kubelet
        self.hostname = node.node_name if (pod.get("spec") or {}).get("hostNetwork") else \
            str((pod.get("spec") or {}).get("hostname") or meta.get("name") or "")[:63]
        self.images: dict[str, PulledImage] = {}
        self.prepared: dict[str, tuple[dict[str, Any], int, Path]] = {}
        self.running: dict[str, RuncContainer] = {}
        self._volumes: PodVolumes | None = None

    # ---- the Pod's files and volumes -------------------------------------------------------

    @property
    def etc(self) -> Path:
        return self.dir / "etc"

    async def _write_etc(self) -> None:
        spec = self.pod.get("spec") or {}
        ip = str((self.pod.get("status") or {}).get("podIP") or "")
        self.etc.mkdir(parents=True, exist_ok=True)
        host_network = bool(spec.get("hostNetwork"))
        (self.etc / "hosts").write_text(hosts_file(self.pod, ip, host_network=host_network,
                                                   node_name=self.node.node_name))
        (self.etc / "hostname").write_text(self.hostname + "\n")
        dns = await self.node.cluster_dns() if self.node.cluster_dns is not None else None
        warning, resolv = dns_config(self.pod, dns)
        if warning and not (self.etc / "resolv.conf").exists():
            self.recorder.warning(self.pod, "MissingClusterDNS", f"pod: {warning}")
        (self.etc / "resolv.conf").write_text(resolv)

    async def setup(self) -> float:
        """/etc files and volumes (raises VolumeError with the FailedMount text); seconds until a refresh."""
        from isthmus.local.kubelite.credentials import automount
        from isthmus.local.kubelite.volumes import Mount, PodVolumes

        await self._write_etc()
        if self._volumes is None:
            spec, ns = self.pod.get("spec") or {}, str(self.pod["metadata"].get("namespace") or "default")
            sa = None
            if spec.get("automountServiceAccountToken") is None:
                sa = await self.node.get("ServiceAccount", ns, str(spec.get("serviceAccountName") or "default"))
            etc = [Mount(f"/etc/{n}", str(self.etc / n), "bind", ["rbind", "rprivate", "rw"])
                   for n in ("hosts", "hostname", "resolv.conf")]
            self._volumes = PodVolumes(
                self.pod, self.dir, lookup=self.lookup, token=self._token, node_name=self.node.node_name,
                allocatable=self.node.allocatable, automount=automount(self.pod, sa), root_ca=self.node.api_ca,
                extra_mounts=etc,
            )
        await self._volumes.setup()
        return min(self._volumes.next_refresh(), 60.0)

    async def refresh(self) -> float:
        """The volumes' API contents and tokens brought up to date (the first error raised)."""
        if self._volumes is None:
            return await self.setup()
        errors = await self._volumes.refresh(self.pod)
        if errors:
            raise errors[0]
        return min(self._volumes.next_refresh(), 60.0)

    async def _token(self, audience: str | None, expiration: int) -> tuple[str, float]:
        """A token of the Pod's ServiceAccount bound to the Pod (TokenRequest), as the kubelet asks."""
        import time

        from lightkube.resources.core_v1 import ServiceAccount

        if self.node.client is None:
            raise RuntimeError("no apiserver to ask for a token")
        meta, spec = self.pod["metadata"], self.pod.get("spec") or {}
        ns = str(meta.get("namespace") or "default")
        sa = str(spec.get("serviceAccountName") or "default")
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": sa, "namespace": ns},
                "spec": {"audiences": [audience] if audience else [], "expirationSeconds": expiration,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
                                            "uid": meta.get("uid")}}}
        issued = time.time()
        answer = await self.node.client.create(cast(Any, ServiceAccount.Token).from_dict(body), name=sa, namespace=ns)
        status = answer.to_dict().get("status") or {}
        expires = issued + expiration
        stamp = status.get("expirationTimestamp")
        if stamp:
            from datetime import datetime

            expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
        return str(status.get("token") or ""), expires

    def _mounts(self, container: Obj, env: Mapping[str, str], restart: int) -> list[dict[str, Any]]:
        assert self._volumes is not None
        mounts = [m.to_oci() for m in self._volumes.mounts(container, env)]
        path = str(container.get("terminationMessagePath") or TERMINATION_LOG)
        if not any(os.path.normpath(m["destination"]) == os.path.normpath(path) for m in mounts):
            mounts.append({"destination": path, "type": "bind", "source": str(self._termination_file(container, restart)),
                           "options": ["rbind", "rprivate", "rw"]})
        return mounts

    def _termination_file(self, container: Obj, restart: int, *, create: bool = True) -> Path:
        """The file a container instance may write its termination message to (the kubelet's
        `<pod dir>/containers/<name>/<id>`), world-writable as the kubelet makes it."""
        f = self.dir / "termination" / str(container.get("name")) / str(restart)
        if create and not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            f.touch()
            f.chmod(0o666)
        return f

    def termination_message(self, container: Obj, restart: int, exit_code: int, log_tail: Callable[[], bytes]) -> str:
        """`state.terminated.message`: the termination file (4096 bytes at most), or, under
        FallbackToLogsOnError for a failed container that wrote none, the log's end (80 lines,
        2048 bytes at most) — as the kubelet reads them."""
        try:
            data = self._termination_file(container, restart, create=False).read_bytes()[:MAX_TERMINATION_MESSAGE]
        except OSError:
            data = b""
        if not data and exit_code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            data = log_tail()[-MAX_FALLBACK_LOG:]
        return data.decode("utf-8", "replace")

    # ---- images ----------------------------------------------------------------------------

    async def _auths(self) -> list[Any]:
        """The credentials of the Pod's imagePullSecrets, then its ServiceAccount's (the kubelet's
        keyring); a Secret that is missing is skipped, as the kubelet skips it."""
        from isthmus.local.kubelite.images import auths_from_secret

        spec, ns = self.pod.get("spec") or {}, str(self.pod["metadata"].get("namespace") or "default")
        names = [str(r.get("name")) for r in spec.get("imagePullSecrets") or [] if r.get("name")]
        sa = await self.node.get("ServiceAccount", ns, str(spec.get("serviceAccountName") or "default"))
        names += [str(r.get("name")) for r in (sa or {}).get("imagePullSecrets") or [] if r.get("name")]
        out: list[Any] = []
        for name in dict.fromkeys(names):
            secret = await self.node.get("Secret", ns, name)
            if secret is not None:
                with contextlib.suppress(ValueError):
                    out += auths_from_secret(secret)
        return out

    async def pull(self, container: Obj) -> str:
        """The container's image on the node (the kubelet's EnsureImageExists, with its Events);
        the imageID the status reports. Raises images.ImageError."""
        from isthmus.local.kubelite.images import pulled_message, pulling_message
        from isthmus.runtime.events import container_field_path

        image, name = str(container.get("image") or ""), str(container.get("name"))
        inits = {c.get("name") for c in (self.pod.get("spec") or {}).get("initContainers") or []}
        where = container_field_path(name, init=name in inits)
        pulled = await self.node.images.ensure(
            image, container.get("imagePullPolicy"), await self._auths(),
            on_pulling=lambda: self.recorder.normal(self.pod, "Pulling", pulling_message(image), field_path=where),
        )
        self.recorder.normal(self.pod, "Pulled", pulled_message(image, pulled), field_path=where)
        self.images[str(container.get("name"))] = pulled
        return pulled.image_id

    # ---- one instance ----------------------------------------------------------------------

    def base_environment(self) -> dict[str, str]:
        """What kube-lite adds to the Pod's own env: echo Pods' identity (their annotation's promise)."""
        if not self.echo:
            return {}
        meta = self.pod.get("metadata") or {}
        return {"POD_NAME": str(meta.get("name") or ""), "POD_NAMESPACE": str(meta.get("namespace") or "default"),
                "ISTHMUS_CLUSTER": self.node.cluster}

    def service_environment(self) -> dict[str, str]:
        return service_environment(self.node.api_host, self.node.api_port)

    def prepare(self, container: Obj, env: Mapping[str, str], *, restart: int) -> list[str]:
        """argv and the OCI spec of the next instance; ContainerConfigError (runAsNonRoot...) or
        CreateContainerError (no runc, no command) with kube's message."""
        from isthmus.local.kubelite import oci

        name = str(container.get("name"))
        why = self.node.runtime.missing()
        if why is not None:
            raise CreateContainerError(f"failed to create containerd task: {why}")
        pulled = self.images.get(name)
        if pulled is None:
            raise ContainerConfigError(f'image of container "{name}" not pulled')
        image = oci.ImageConfig(**asdict(pulled.config))
        argv = oci.container_argv(container, image, expand=lambda s: expand(s, env))
        proc_env = oci.container_env(image.env, env, hostname=self.hostname)
        bundle = self.node.runtime.bundle(self.dir, name, restart)
        spec = oci.runtime_spec(
            pod=self.pod, container=container, image=image, argv=argv, env=proc_env,
            mounts=self._mounts(container, env, restart),
            rootfs=bundle / "rootfs", image_rootfs=pulled.rootfs, netns_path=self.netns_path,
            cgroups_path=cgroups_path(self.node.node_name, self.uid, name), hostname=self.hostname,
            seccomp=self.node.seccomp, image_name=pulled.ref, oom_score_floor=oci.oom_floor(),
        )
        self.prepared[name] = (spec, restart, pulled.rootfs)
        return argv

    async def start(self, name: str, argv: list[str], env: dict[str, str]) -> RuncContainer:
        spec, restart, lower = self.prepared.pop(name)
        runtime = self.node.runtime
        bundle = runtime.bundle(self.dir, name, restart)
        cid = new_container_id()
        try:
            await asyncio.to_thread(runtime.prepare, bundle, lower, spec)
        except OSError as e:
            await runtime.remove(cid, bundle)
            raise StartFailed(start_error_message(str(e))) from None
        c = await runtime.run(cid, bundle, cgroups_path(self.node.node_name, self.uid, name))
        try:
            await c.started()
        except StartFailed as e:
            raise StartFailed(start_error_message(str(e))) from None
        self.running[name] = c
        return c

    # ---- in the container -------------------------------------------------------------------

    def socket_factory(self, family: int, type_: int) -> socket.socket:
        """A socket in the node's namespace: probes connect from where a kubelet would."""
        from isthmus.runtime import netns

        return netns.socket_in(self.node.node_netns, family, type_)

    def probe_options(self, handle: Any) -> dict[str, Any]:
        cid = str(getattr(handle, "id", ""))

        async def run(command: Sequence[str], seconds: float) -> ProbeResult:
            return await self.exec_probe(cid, command, seconds)

        return {"socket_factory": self.socket_factory, "exec_runner": run}

    async def exec_probe(self, cid: str, command: Sequence[str], seconds: float) -> ProbeResult:
        """An exec probe or hook: `runc exec`, bounded; its output is the failure message."""
        try:
            proc = await self.node.runtime.exec(cid, command)
        except OSError as e:
            return ProbeResult(False, f'exec: "{self.node.runtime.binary}": {e.strerror or e}')
        return await exec_result(proc, command, seconds)

    def container(self, name: str) -> RuncContainer | None:
        """The running instance of a container (kubectl exec's target), None if it is not running."""
        c = self.running.get(name)
        return c if c is not None and c.returncode is None and c.proc.returncode is None else None

    async def close(self, *, remove: bool) -> None:
        """Every instance reaped (unmounted, deleted); `remove`: the Pod's cgroups go too."""
        for c in list(self.running.values()):
            if c.proc.returncode is None:
                await c.signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(COMMAND_TIMEOUT):
                    await asyncio.shield(c.wait_exited())
        self.running.clear()
        containers = self.dir / "containers"
        if containers.is_dir():  # bundles of instances that never ran (a failed start)
            for bundle in containers.glob("*/*"):
                await asyncio.to_thread(_unmount, bundle / "rootfs")
        if remove:
            if self._volumes is not None:
                await self._volumes.teardown()
            await asyncio.to_thread(unmount_all_under, self.dir)  # the pod dir is removed next: never through a mount
            await asyncio.to_thread(self.node.runtime.remove_pod_cgroups, self.uid)


def seccomp_supported(runc: str = "runc") -> bool:
    """Whether this runc loads seccomp profiles (`runc --version` names libseccomp when built with it)."""
    import subprocess

    try:
        out = subprocess.run([runc, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "libseccomp" in out
