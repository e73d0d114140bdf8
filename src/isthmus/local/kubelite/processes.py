"""Process pods: Pods of the Isthmus image run as supervised processes, as a kubelet runs containers.

Each container of such a Pod is a child process of kube-lite (``containers.py`` builds its argv
and environment) in the Pod's directory ``<root-dir>/pods/<uid>/`` (its HOME; ``tmp/``,
``serviceaccount/`` and ``logs/<container>/<restart>.log`` inside). What it prints (stdout and
stderr) is its log, served for ``kubectl logs`` (``--previous``: the instance before). The kubelet's
lifecycle is followed:

- before any container starts, the Pod's ServiceAccount token is written (credentials.py) unless
  automounting is off; a failure is kube's ``FailedMount`` and the containers wait in
  ``ContainerCreating``;
- a container that cannot be configured (missing ConfigMap/Secret) waits in
  ``CreateContainerConfigError``, retried;
- restartPolicy Always/OnFailure/Never, with the kubelet's back-off (the first restart at once,
  then 10 s doubling to 300 s, reset after 10 min running) shown as ``CrashLoopBackOff``;
- startup, liveness and readiness probes (probes.py); a failed liveness or startup probe kills the
  container (SIGTERM to its process group, SIGKILL after the grace period) to be restarted;
- Events ``Pulled``, ``Created``, ``Started``, ``Killing``, ``Unhealthy``, ``BackOff``, ``Failed``;
- stopping (Pod deleted, kube-lite stopping) sends SIGTERM, then SIGKILL after
  ``terminationGracePeriodSeconds``.

Children get SIGTERM if kube-lite dies without stopping them (PR_SET_PDEATHSIG): no orphans. Only
processes kube-lite started are ever signalled.

A Pod is started in pods.py (`PodRuntime.reconcile`), which makes its `ProcessPod` here; an
``isthmus`` container is forked from the node's zygote (isthmus.procs, handed `POD_PRELOAD` and
`ENTRY` below), any other command exec'ed.

In runc mode the same lifecycle drives runc containers: `ProcessPod` is given a `runc.RuncPod`,
its `ContainerRunner` (the seam: `start(name, argv, env)` → a `ContainerHandle` with its output,
`wait()`, `signal()`; `ProcessRunner` is the process side). Then each start first ensures the
image (ErrImagePull/ImagePullBackOff), the Pod's volumes replace the ServiceAccount files, the
argv and environment come from the image and the Pod (oci.py), and probes, preStop hooks and
OOMKilled go through runc (docs/runc.md, "kube-lite over runc").
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lightkube import ApiError, AsyncClient

from isthmus.api.image import IMAGE_REPOSITORY, IMAGE_TAG
from isthmus.local.kubelite.containers import (
    SERVICEACCOUNT_DIR_ENV,
    ContainerConfigError,
    base_environment,
    build_command,
    container_environment,
    container_id,
    expand,
    get_object,
    is_isthmus_image,
    service_environment,
)
from isthmus.local.kubelite.credentials import Credentials, automount
from isthmus.local.kubelite.images import (
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACKOFF,
    INVALID_IMAGE_NAME,
    ImageError,
    backoff_message,
    error_message,
    failed_message,
)
from isthmus.local.kubelite.logs import PodLogs
from isthmus.local.kubelite.probes import Prober, probe_once
from isthmus.local.kubelite.runc import CreateContainerError, StartFailed
from isthmus.local.kubelite.termination import MIN_KILL_GRACE, pre_stop
from isthmus.procs.entry import Entry
from isthmus.procs.zygote import Zygote, ZygoteProcess
from isthmus.runtime import EventRecorder
from isthmus.runtime.events import container_field_path

if TYPE_CHECKING:
    from isthmus.local.kubelite.runc import RuncPod

__all__ = [
    "ENTRY",
    "POD_PRELOAD",
    "ContainerHandle",
    "ContainerRunner",
    "Leftover",
    "ProcessOptions",
    "ProcessPod",
    "ProcessRunner",
    "find_leftovers",
    "is_process_pod",
    "pod_phase",
    "stop_leftovers",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

CONFIG_RETRY_SECONDS = 2.0
POD_PRELOAD = (
    "isthmus.cli.main", "isthmus.runtime.loop", "uvloop", "isthmus.kube.client", "isthmus.clusterset.membership",
    "isthmus.discovery.agent", "isthmus.dns.service", "isthmus.dns.server", "isthmus.dns.workers", "isthmus.lb.controller",
    "isthmus.haproxy.manager", "isthmus.exposure.member", "isthmus.exposure.broker", "isthmus.exposure.haproxy",
    "isthmus.runtime.webhook", "isthmus.lb.admission", "isthmus.exposure.admission", "isthmus.egress.admission",
    "isthmus.egress.operator", "isthmus.egress.gateway", "isthmus.egress.forwarder",
)
"""What the Isthmus image's components import: a pod's zygote loads it once for all of them."""
ENTRY = Entry(module="isthmus", program="isthmus.cli.forked:PROGRAM")
"""What the local clusterset's zygotes fork: ``python -m isthmus ...`` commands, run by the CLI's
forked-child program (named, not imported: isthmus.procs imports nothing above it)."""
IMAGE_ID = f"{IMAGE_REPOSITORY}@sha256:{hashlib.sha256(f'{sys.executable} {IMAGE_TAG}'.encode()).hexdigest()}"
"""This interpreter and version are the image: its ID changes when either does."""


def is_process_pod(pod: Mapping[str, Any]) -> bool:
    """A Pod with an Isthmus container: kube-lite runs its containers as processes."""
    return any(is_isthmus_image(c.get("image")) for c in (pod.get("spec") or {}).get("containers") or [])


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ProcessOptions:
    root_dir: Path
    """kube-lite's --root-dir: pod dirs go in ``pods/<uid>/``."""
    api_host: str = "127.0.0.1"
    api_port: int = 443
    """Where kube-lite reaches the apiserver: the ``kubernetes`` Service variables of every container."""
    api_ca: bytes | None = None
    """ca.crt when the namespace has no kube-root-ca.crt ConfigMap."""
    backoff_base: float = 10.0
    backoff_max: float = 300.0
    backoff_reset: float = 600.0
    stop_grace_cap: float = 10.0
    """When kube-lite itself stops, no Pod's grace period holds it up longer than this."""
    allocatable: dict[str, Decimal] = field(default_factory=lambda: machine_allocatable())
    """What ``resourceFieldRef`` limits left unset resolve to (the Node's allocatable)."""
    zygote: Zygote | None = None
    """The node's fork server when it was made before the event loop (`node_zygote`, forked early);
    None: the pod runtime makes its own."""


def machine_allocatable() -> dict[str, Decimal]:
    memory = Decimal(0)
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = Decimal(int(line.split()[1]) * 1024)
    return {"cpu": Decimal(os.cpu_count() or 1), "memory": memory, "ephemeral-storage": Decimal(0)}


try:  # resolved here, not in the child: nothing but the call itself runs between fork and exec
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    if _prctl is not None:
        _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def go_duration(seconds: float) -> str:
    """Go's time.Duration String() for what the kubelet prints: 500ms, 10s, 1m20s, 5m0s."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def pod_phase(spec: Mapping[str, Any], statuses: list[Obj]) -> str:
    """kubelet's getPhase for regular containers."""
    pending = running = stopped = succeeded = 0
    for s in statuses:
        state, last = s.get("state") or {}, s.get("lastState") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif "terminated" in last:
            stopped += 1
        else:
            pending += 1
    policy = spec.get("restartPolicy") or "Always"
    if pending > 0 or not statuses:
        return "Pending"
    if running > 0:
        return "Running"
    if policy == "Always":
        return "Running"
    if succeeded == stopped:
        return "Succeeded"
    if policy == "Never":
        return "Failed"
    return "Running"


@dataclass(frozen=True)
class Leftover:
    """A process a previous kube-lite ran for a Pod (or one that Pod's process started), found by
    its working directory; ``start`` (its start time in /proc) tells it from a later holder of its pid."""

    pid: int
    start: str

    @property
    def running(self) -> bool:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        fields = stat[stat.rindex(")") + 2:].split()
        return fields[19] == self.start and fields[0] != "Z"  # field 22 (starttime); a zombie is gone


def find_leftovers(pods_dir: Path) -> dict[str, list[Leftover]]:
    """Processes of this user working in a Pod's directory (``<pods_dir>/<uid>``), by Pod uid: the
    containers a previous kube-lite ran, and what they started (HAProxy). Only those are ever ours."""
    root = str(pods_dir.resolve()) + os.sep
    me, uid = os.getpid(), os.getuid()
    found: dict[str, list[Leftover]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            cwd = os.readlink(entry / "cwd")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if not cwd.startswith(root):
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue
        pod_uid = cwd[len(root):].split(os.sep, 1)[0]
        found.setdefault(pod_uid, []).append(Leftover(int(entry.name), fields[19]))
    return found


async def stop_leftovers(procs: list[Leftover], grace: float) -> None:
    """Until every one of `procs` is gone: they were sent SIGTERM when their kube-lite died (again
    now, should one have missed it), SIGKILL after `grace` seconds, as a kubelet stops a container."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    sent = False
    while True:
        alive = [p for p in procs if p.running]
        if not alive:
            return
        sig = signal.SIGKILL if loop.time() >= deadline else signal.SIGTERM
        if sig == signal.SIGKILL or not sent:
            for p in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, sig)
            sent = True
        await asyncio.sleep(0.05)


class ContainerHandle(Protocol):
    """A running container instance as ProcessPod follows it: its output, its end, its signals."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def container_id(self) -> str: ...
    @property
    def oom_killed(self) -> bool:
        """After `wait`: the kernel's OOM killer ended it (the kubelet's OOMKilled)."""
        ...

    async def wait(self) -> int:
        """Its exit code (128+N when killed by signal N), once it and what it leaves behind are gone."""
        ...

    async def signal(self, sig: int) -> None: ...


class ContainerRunner(Protocol):
    """How a container instance is started: a process here (ProcessRunner), or a runc container
    (runc.RuncPod). Raises StartFailed with the runtime's reason when it cannot start."""

    async def start(self, name: str, argv: list[str], env: dict[str, str]) -> ContainerHandle: ...


class _ProcessHandle:
    """A container that is a process of this machine: signalled as its process group."""

    def __init__(self, proc: asyncio.subprocess.Process | ZygoteProcess, node: str) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.stdout: asyncio.StreamReader | None = proc.stdout
        self.container_id = container_id(node, proc.pid)
        self.oom_killed = False

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        code = await self.proc.wait()
        return code if code >= 0 else 128 - code

    async def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # its own process group (start_new_session)
            if sig == signal.SIGTERM:
                # A stopped process (SIGSTOP, a debugger) would hold SIGTERM pending for the whole grace
                # period: continued, as systemd does after SIGTERM, it handles it and exits cleanly now.
                os.killpg(self.proc.pid, signal.SIGCONT)


class ProcessRunner:
    """Today's process pods: `isthmus` forked from the node's zygote, anything else exec'ed, in the pod dir."""

    def __init__(self, zygote: Zygote | None, cwd: Path, node: str) -> None:
        self.zygote = zygote
        self.cwd = cwd
        self.node = node

    async def start(self, name: str, argv: list[str], env: dict[str, str]) -> ContainerHandle:
        proc: asyncio.subprocess.Process | ZygoteProcess
        try:
            if self.zygote is not None and self.zygote.forkable(argv):
                proc = await self.zygote.spawn(argv, env=env, cwd=str(self.cwd), pipe_stdout=True, pdeathsig=True)
            else:
                proc = await asyncio.create_subprocess_exec(
                    *argv, env=env, cwd=str(self.cwd), stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_pdeathsig if _prctl is not None else None,
                )
        except OSError as e:
            reason = "executable file not found in $PATH" if isinstance(e, FileNotFoundError) else (e.strerror or str(e))
            raise StartFailed(f"failed to create containerd task: failed to create shim task: OCI runtime create "
                              f'failed: exec: "{argv[0]}": {reason}') from None
        return _ProcessHandle(proc, self.node)


class _Container:
    """One container of a process Pod: its current process and what the kubelet reports for it."""

    def __init__(self, spec: Obj, previous: Mapping[str, Any] | None) -> None:
        self.spec = spec
        self.name = str(spec.get("name"))
        self.field_path = container_field_path(self.name)
        """Its Events' involvedObject.fieldPath (an init container's is set by the Pod)."""
        self.image = str(spec.get("image") or "")
        self.restart_count = 0
        self.last_state: Obj = {}
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.ready = False
        self.started = False
        self.container_id: str | None = None
        self.proc: ContainerHandle | None = None
        self.image_id: str | None = None
        """runc mode: the pulled image's `<repo>@<digest>` (process mode: the interpreter's IMAGE_ID)."""
        self.ran = False
        self.killing: str | None = None
        self.lost: Obj | None = None
        """How the instance a previous kube-lite ran ended (it went with that kube-lite), if any."""
        if previous:
            old = previous.get("state") or {}
            self.restart_count = int(previous.get("restartCount") or 0)
            self.last_state = dict(previous.get("lastState") or {})
            self.ran = bool(previous.get("containerID") or self.last_state)
            if "terminated" in old:
                self.lost = {"terminated": old["terminated"]}
            elif "terminated" in self.last_state:  # waiting to be restarted (back-off): it will be now
                self.lost = self.last_state
            elif "running" in old:
                self.lost = {"terminated": {
                    "exitCode": 137, "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the pod was terminated",
                    "startedAt": old["running"].get("startedAt"), "finishedAt": _now(),
                    **({"containerID": previous["containerID"]} if previous.get("containerID") else {}),
                }}

    @property
    def completed(self) -> bool:
        return (self.state.get("terminated") or {}).get("exitCode") == 0

    def status(self) -> Obj:
        s: Obj = {
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id if self.image_id is not None else IMAGE_ID if self.ran else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            s["containerID"] = self.container_id
        return s


class ProcessPod:
    """The processes of one Pod (by uid). ``changed()`` is called whenever its status changes."""

    def __init__(
        self,
        client: AsyncClient,
        recorder: EventRecorder,
        logs: PodLogs,
        options: ProcessOptions,
        *,
        key: str,
        pod: Obj,
        node: str,
        changed: Callable[[], None],
        zygote: Zygote | None = None,
        predecessors: list[Leftover] | None = None,
        runc: RuncPod | None = None,
    ) -> None:
        """zygote: forks the containers that run `isthmus` (see procs/zygote.py); None: exec them.
        predecessors: what a previous kube-lite ran for this Pod and is still stopping: no container
        starts before they are gone (they hold the Pod's address and ports), SIGKILL after the
        Pod's grace period (capped as kube-lite's own stop is).
        runc: run the containers as runc containers of this Pod's sandbox (runc mode) instead."""
        self.client = client
        self.zygote = zygote
        self.runc = runc
        self.runner: ContainerRunner = ProcessRunner(zygote, options.root_dir / "pods" / str(pod["metadata"].get("uid")),
                                                     node)
        if runc is not None:
            self.runner = runc
        self.predecessors = list(predecessors or [])
        self.recorder = recorder
        self.logs = logs
        self.options = options
        self.key = key
        self.pod = pod
        self.node = node
        self.changed = changed
        meta = pod["metadata"]
        self.uid = str(meta.get("uid"))
        self.dir = options.root_dir / "pods" / self.uid
        self.credentials = Credentials(client, self.dir / "serviceaccount", fallback_ca=options.api_ca)
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        old = {s.get("name"): s for s in status.get("containerStatuses") or []}
        old_init = {s.get("name"): s for s in status.get("initContainerStatuses") or []}
        self.init_containers = [_Container(c, old_init.get(c.get("name"))) for c in spec.get("initContainers") or []]
        for init in self.init_containers:
            init.field_path = container_field_path(init.name, init=True)
        self.containers = [_Container(c, old.get(c.get("name"))) for c in spec.get("containers") or []]
        if self.init_containers:
            for c in self.containers:
                if c.lost is None and not c.ran:
                    c.state = {"waiting": {"reason": "PodInitializing"}}
            for c in self.init_containers[1:]:
                if c.lost is None and not c.ran:
                    c.state = {"waiting": {"reason": "PodInitializing"}}
        self._mounted = asyncio.Event()
        self._predecessors: asyncio.Future[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        for d in (self.dir, self.dir / "tmp"):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        setup = self._credentials() if self.runc is None else self._volumes()
        self._tasks.append(asyncio.create_task(setup, name=f"kube-lite sa {self.key}"))
        if self.init_containers:
            self._tasks.append(asyncio.create_task(self._initialize(), name=f"kube-lite {self.key} init"))
        else:
            self._start_containers()

    def _start_containers(self) -> None:
        for c in self.containers:
            self._tasks.append(asyncio.create_task(self._container(c), name=f"kube-lite {self.key}/{c.name}"))

    @property
    def initialized(self) -> bool:
        """Every init container ran to completion (exit 0)."""
        return all(c.completed for c in self.init_containers)

    async def _initialize(self) -> None:
        """Init containers one after the other, each to a successful exit, then the others."""
        for c in self.init_containers:
            await self._container(c, init=True)
            if not c.completed:  # failed under restartPolicy Never: the Pod fails
                return
        self._start_containers()

    def update(self, pod: Obj) -> None:
        """The latest Pod object (the downward API reads it when a container starts again)."""
        self.pod = pod

    async def stop(self, grace: float | None = None, *, remove: bool = False, reason: str = "") -> None:
        """Stop every container (SIGTERM, SIGKILL after ``grace``, default the Pod's
        terminationGracePeriodSeconds); ``remove``: the Pod is gone, delete its directory."""
        self._stopping = True
        if grace is None:
            grace = float(self._grace())
        for c in [*self.init_containers, *self.containers]:
            if c.proc is not None and c.proc.returncode is None and reason:
                self.recorder.normal(self.pod, "Killing", f"Stopping container {c.name}", field_path=c.field_path)
        await asyncio.gather(*(self._kill(c, grace) for c in [*self.init_containers, *self.containers]))
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        if self.runc is not None:
            await self.runc.close(remove=remove)  # every bundle unmounted before the directory goes
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    async def _predecessors_gone(self) -> None:
        """Once for all containers: a kubelet never starts a successor on a port its predecessor holds."""
        if self._predecessors is None:
            gone = stop_leftovers(self.predecessors, min(float(self._grace()), self.options.stop_grace_cap))
            self._predecessors = asyncio.ensure_future(gone)
            log.info("waiting for the previous instance to stop",
                     extra={"pod": self.key, "pids": [p.pid for p in self.predecessors]})
        await asyncio.shield(self._predecessors)

    async def terminate(self, deadline: float) -> None:
        """A deleted Pod (termination.py): every container's preStop hook, then SIGTERM and SIGKILL
        at ``deadline`` (loop time; at least MIN_KILL_GRACE after the hooks); its directory goes."""
        loop = asyncio.get_running_loop()
        ip = str((self.pod.get("status") or {}).get("podIP") or "127.0.0.1")

        async def hook(c: _Container) -> None:
            handler = (c.spec.get("lifecycle") or {}).get("preStop")
            if not handler or c.proc is None or c.proc.returncode is not None:
                return
            if self.runc is not None:  # in the container (runc exec), connecting from the node
                env: dict[str, str] = {}
                options = self.runc.probe_options(c.proc)
            else:
                options = {}
                try:
                    _, env = await self._configure(c)
                except ContainerConfigError:
                    env = base_environment(str(self.dir))
            result = await pre_stop(handler, host=ip, container=c.spec, env=env, cwd=str(self.dir),
                                    seconds=deadline - loop.time(), **options)
            if not result.ok:
                self.recorder.warning(self.pod, "FailedPreStopHook", f"PreStopHook failed: {result.message}",
                                      field_path=c.field_path)

        await asyncio.gather(*(hook(c) for c in self.containers))
        await self.stop(max(deadline - loop.time(), MIN_KILL_GRACE), remove=True, reason="deleted")

    def _grace(self) -> int:
        spec = self.pod.get("spec") or {}
        meta = self.pod.get("metadata") or {}
        g = meta.get("deletionGracePeriodSeconds")
        if g is None:
            g = spec.get("terminationGracePeriodSeconds")
        return 30 if g is None else int(g)

    async def _kill(self, c: _Container, grace: float) -> None:
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        await proc.signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(max(grace, 0.0)):
                await proc.wait()
        except TimeoutError:
            await proc.signal(signal.SIGKILL)
            await proc.wait()

    # ---- status ---------------------------------------------------------------------------

    def status(self) -> Obj:
        """containerStatuses, phase and the Ready/ContainersReady conditions' inputs."""
        statuses = [c.status() for c in self.containers]
        spec = self.pod.get("spec") or {}
        out: Obj = {"containerStatuses": statuses, "phase": pod_phase(spec, statuses)}
        if self.init_containers:
            out["initContainerStatuses"] = [c.status() for c in self.init_containers]
            failed = any(
                (c.state.get("terminated") or {}).get("exitCode", 0) != 0 for c in self.init_containers
            ) and (spec.get("restartPolicy") or "Always") == "Never"
            if failed:
                out["phase"] = "Failed"
            elif not self.initialized:
                out["phase"] = "Pending"
        return out

    # ---- credentials ----------------------------------------------------------------------

    async def _credentials(self) -> None:
        meta, spec = self.pod["metadata"], self.pod.get("spec") or {}
        ns = str(meta.get("namespace") or "default")
        sa_name = str(spec.get("serviceAccountName") or "default")
        delay = 1.0
        while True:
            try:
                if spec.get("automountServiceAccountToken") is None:
                    sa = await self.credentials.service_account(ns, sa_name)
                    mount = automount(self.pod, sa)
                else:
                    mount = automount(self.pod, None)
                if not mount:
                    self._mounted.set()
                    return
                await self.credentials.ensure(self.pod)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                message = e.status.message if isinstance(e, ApiError) else str(e)
                # The volume ServiceAccount admission added (kube-api-access-<random>) is what kubelet names.
                volume = next((str(v.get("name")) for v in spec.get("volumes") or [] if isinstance(v, dict)
                               and str(v.get("name", "")).startswith("kube-api-access-")), "kube-api-access")
                self.recorder.warning(
                    self.pod, "FailedMount",
                    f'MountVolume.SetUp failed for volume "{volume}" : failed to fetch token: {message}',
                )
                log.warning("service account token not written", extra={"pod": self.key, "error": message})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 120.0)
                continue
            delay = 1.0
            self._mounted.set()
            await asyncio.sleep(max(1.0, min(self.credentials.next_refresh, 60.0)))

    # ---- one container --------------------------------------------------------------------

    async def _lookup(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return await get_object(self.client, kind, namespace, name)
        except ApiError as e:
            raise ContainerConfigError(e.status.message or str(e)) from None

    def _set(self, c: _Container, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(c, k, v)
        self.changed()

    async def _container(self, c: _Container, *, init: bool = False) -> None:
        """One container's life under the restart policy (an init container's: until it succeeds)."""
        name, ns, uid = self.pod["metadata"]["name"], self.pod["metadata"].get("namespace"), self.uid
        if self.runc is None and not is_isthmus_image(c.image):  # as a kubelet whose registry refuses: pull error, then back-off
            why = f"kube-lite runs only the Isthmus image ({IMAGE_REPOSITORY}), as processes"
            self.recorder.normal(self.pod, "Pulling", f'Pulling image "{c.image}"', field_path=c.field_path)
            self.recorder.warning(self.pod, "Failed", f'Failed to pull image "{c.image}": {why}',
                                  field_path=c.field_path)
            self.recorder.warning(self.pod, "Failed", "Error: ErrImagePull", field_path=c.field_path)
            self._set(c, state={"waiting": {"reason": "ErrImagePull",
                                            "message": f'failed to pull image "{c.image}": {why}'}})
            await asyncio.sleep(self.options.backoff_base)
            self.recorder.normal(self.pod, "BackOff", f'Back-off pulling image "{c.image}"', field_path=c.field_path)
            self.recorder.warning(self.pod, "Failed", "Error: ImagePullBackOff", field_path=c.field_path)
            self._set(c, state={"waiting": {"reason": "ImagePullBackOff",
                                            "message": f'Back-off pulling image "{c.image}": {why}'}})
            return
        policy = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
        if init and policy == "Always":
            policy = "OnFailure"  # an init container is restarted until it succeeds, never after
        if c.lost is not None:  # kube-lite restarted: the instance it ran is gone; the next one may start
            exit_code = c.lost["terminated"].get("exitCode")
            if policy == "Never" or (policy == "OnFailure" and exit_code == 0):
                self._set(c, state=c.lost)
                return
            c.restart_count += 1
            c.last_state = c.lost
        await self._mounted.wait()
        if self.predecessors:
            await self._predecessors_gone()
        backoff = 0.0
        while not self._stopping:
            if self.runc is not None and not await self._pull(c):
                return
            try:
                argv, env = await self._configure(c)
            except (ContainerConfigError, CreateContainerError) as e:
                if (c.state.get("waiting") or {}).get("message") != str(e):
                    self.recorder.warning(self.pod, "Failed", f"Error: {e}", field_path=c.field_path)
                why = "CreateContainerError" if isinstance(e, CreateContainerError) else "CreateContainerConfigError"
                self._set(c, state={"waiting": {"reason": why, "message": str(e)}})
                await asyncio.sleep(CONFIG_RETRY_SECONDS)
                continue
            started = time.monotonic()
            finished_state = await self._run(c, argv, env)
            if self._stopping:
                return
            exit_code = finished_state["terminated"]["exitCode"]
            if policy == "Never" or (policy == "OnFailure" and exit_code == 0):
                return
            if time.monotonic() - started >= self.options.backoff_reset:
                backoff = 0.0
            if backoff > 0:
                self.recorder.warning(
                    self.pod, "BackOff", f"Back-off restarting failed container {c.name} in pod {name}_{ns}({uid})",
                    field_path=c.field_path,
                )
                self._set(c, state={"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {go_duration(backoff)} restarting failed container={c.name} pod={name}_{ns}({uid})",
                }}, last_state=finished_state, ready=False, started=False)
                await asyncio.sleep(backoff)
            backoff = self.options.backoff_base if backoff == 0 else min(backoff * 2, self.options.backoff_max)
            c.restart_count += 1
            c.last_state = finished_state

    async def _pull(self, c: _Container) -> bool:
        """runc mode: the image, as the kubelet's image manager ensures it before each start
        (ErrImagePull, then ImagePullBackOff with the kubelet's back-off); False once stopping."""
        assert self.runc is not None
        delay = self.options.backoff_base
        while not self._stopping:
            try:
                pulled = await self.runc.pull(c.spec)
            except ImageError as e:
                reason, message = e.reason, e.message
                if reason == ERR_IMAGE_PULL:
                    self.recorder.warning(self.pod, "Failed", failed_message(c.image, e), field_path=c.field_path)
                elif reason == INVALID_IMAGE_NAME:
                    self.recorder.warning(self.pod, "InspectFailed", message, field_path=c.field_path)
                else:  # ErrImageNeverPull
                    self.recorder.warning(self.pod, reason, message, field_path=c.field_path)
                self.recorder.warning(self.pod, "Failed", error_message(reason), field_path=c.field_path)
                self._set(c, state={"waiting": {"reason": reason, "message": message}})
                if reason != ERR_IMAGE_PULL:  # nothing a retry would change soon: the kubelet's next sync
                    await asyncio.sleep(delay)
                    continue
                await asyncio.sleep(min(1.0, delay))
                self.recorder.normal(self.pod, "BackOff", backoff_message(c.image), field_path=c.field_path)
                self.recorder.warning(self.pod, "Failed", error_message(IMAGE_PULL_BACKOFF), field_path=c.field_path)
                self._set(c, state={"waiting": {"reason": IMAGE_PULL_BACKOFF,
                                                "message": f"{backoff_message(c.image)}: ErrImagePull: {message}"}})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.options.backoff_max)
                continue
            c.image_id = pulled
            return True
        return False

    async def _volumes(self) -> None:
        """runc mode: the Pod's volumes (its ServiceAccount token among them) before any container
        starts, refreshed as the kubelet does; FailedMount and ContainerCreating until they work."""
        assert self.runc is not None
        delay = 1.0
        while True:
            try:
                wait = await (self.runc.refresh() if self._mounted.is_set() else self.runc.setup())
            except asyncio.CancelledError:
                raise
            except Exception as e:
                message = str(e.status.message if isinstance(e, ApiError) else e)
                self.recorder.warning(self.pod, "FailedMount", message)
                log.warning("volumes not set up", extra={"pod": self.key, "error": message})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 120.0)
                continue
            delay = 1.0
            self._mounted.set()
            await asyncio.sleep(max(1.0, min(wait, 60.0)))

    async def _configure(self, c: _Container) -> tuple[list[str], dict[str, str]]:
        if self.runc is not None:  # the image's PATH etc. come from the image, not kube-lite's own
            env = await container_environment(
                self.pod, c.spec, base=self.runc.base_environment(),
                service=self.runc.service_environment(), lookup=self._lookup,
                allocatable=self.options.allocatable,
            )
            return self.runc.prepare(c.spec, env, restart=c.restart_count), env
        base = base_environment(str(self.dir))
        if self._mounted.is_set() and (self.dir / "serviceaccount" / "token").exists():
            base[SERVICEACCOUNT_DIR_ENV] = str(self.dir / "serviceaccount")
        env = await container_environment(
            self.pod, c.spec, base=base,
            service=service_environment(self.options.api_host, self.options.api_port),
            lookup=self._lookup, allocatable=self.options.allocatable,
        )
        return build_command(c.spec, env), env

    async def _run(self, c: _Container, argv: list[str], env: dict[str, str]) -> Obj:
        """Start one instance and wait for its end; the terminated state it ended in."""
        pod_log = self.logs.pod(self.key, self.uid)
        log_dir = self.dir / "logs" / c.name
        log_dir.mkdir(parents=True, exist_ok=True)
        clog = pod_log.restart(c.name, str(log_dir / f"{c.restart_count}.log"), keep_previous=c.ran)
        if self.runc is None:
            self.recorder.normal(self.pod, "Pulled", f'Container image "{c.image}" already present on machine',
                                 field_path=c.field_path)
        started_at = _now()
        try:
            proc = await self.runner.start(c.name, argv, env)
        except StartFailed as e:
            message = str(e)
            self.recorder.warning(self.pod, "Failed", f"Error: {message}", field_path=c.field_path)
            state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": message,
                                    "startedAt": started_at, "finishedAt": _now()}}
            c.ran = True
            self._set(c, state=state, ready=False, started=False)
            return state
        c.proc, c.ran, c.killing = proc, True, None
        cid = proc.container_id
        self.recorder.normal(self.pod, "Created", f"Created container: {c.name}", field_path=c.field_path)
        self.recorder.normal(self.pod, "Started", f"Started container {c.name}", field_path=c.field_path)
        spec = c.spec
        startup, liveness, readiness = spec.get("startupProbe"), spec.get("livenessProbe"), spec.get("readinessProbe")
        self._set(c, state={"running": {"startedAt": started_at}}, container_id=cid,
                  started=startup is None, ready=startup is None and readiness is None)
        log.info("container started", extra={"pod": self.key, "container": c.name, "pid": proc.pid})

        async def pump() -> None:
            assert proc.stdout is not None
            while True:
                try:
                    line = await proc.stdout.readline()
                except ValueError:  # a line beyond the stream limit: take what there is
                    line = await proc.stdout.read(64 * 1024)
                if not line:
                    return
                clog.write_bytes(line if line.endswith(b"\n") else line + b"\n")

        probes: list[asyncio.Task[None]] = []
        probe_env = dict(env)

        probe_options = self.runc.probe_options(proc) if self.runc is not None else {}

        def runner(probe: Mapping[str, Any]) -> Callable[[], Any]:
            def once() -> Any:
                ip = str((self.pod.get("status") or {}).get("podIP") or "127.0.0.1")
                return probe_once(probe, host=ip, container=spec, env=probe_env, cwd=str(self.dir),
                                  expand=lambda s: expand(s, probe_env), **probe_options)
            return once

        def unhealthy(kind: str) -> Callable[[str], None]:
            return lambda message: self.recorder.warning(self.pod, "Unhealthy", f"{kind} probe failed: {message}",
                                                         field_path=c.field_path)

        def fatal(kind: str, probe: Mapping[str, Any]) -> Callable[[bool, str], None]:
            def on_change(ok: bool, message: str) -> None:
                if kind == "Startup" and ok:
                    self._set(c, started=True, ready=readiness is None)
                    start_others()
                    return
                if ok or c.killing:
                    return
                c.killing = kind
                self.recorder.normal(self.pod, "Killing",
                                     f"Container {c.name} failed {kind.lower()} probe, will be restarted",
                                     field_path=c.field_path)
                grace = probe.get("terminationGracePeriodSeconds")
                probes.append(asyncio.create_task(self._kill(c, float(self._grace() if grace is None else grace))))
            return on_change

        def readiness_changed(ok: bool, message: str) -> None:
            self._set(c, ready=ok)

        def start_others() -> None:
            if liveness:
                p = Prober("liveness", liveness, runner(liveness), fatal("Liveness", liveness), unhealthy("Liveness"))
                probes.append(asyncio.create_task(p.run()))
            if readiness:
                p = Prober("readiness", readiness, runner(readiness), readiness_changed, unhealthy("Readiness"))
                probes.append(asyncio.create_task(p.run()))

        pumping = asyncio.create_task(pump())
        if startup:
            first = Prober("startup", startup, runner(startup), fatal("Startup", startup), unhealthy("Startup"))
            probes.append(asyncio.create_task(first.run()))
        else:
            start_others()
        try:
            exit_code = await proc.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):  # a grandchild may hold the pipe open
                    await pumping
        finally:
            pumping.cancel()
            for t in probes:
                t.cancel()
            for t in probes:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        clog.close()
        reason = "OOMKilled" if proc.oom_killed else "Completed" if exit_code == 0 else "Error"
        state = {"terminated": {
            "exitCode": exit_code, "reason": reason,
            "startedAt": started_at, "finishedAt": _now(), "containerID": cid,
        }}
        if self.runc is not None:
            from isthmus.local.kubelite.runc import FALLBACK_LOG_LINES

            message = self.runc.termination_message(
                c.spec, c.restart_count, exit_code,
                lambda: b"".join(ln.data for ln in clog.select(tail=FALLBACK_LOG_LINES)[0]))
            if message:
                state["terminated"]["message"] = message
        log.info("container exited", extra={"pod": self.key, "container": c.name, "exit_code": exit_code})
        self._set(c, state=state, ready=False, started=False, proc=None)
        return state
