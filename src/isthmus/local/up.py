"""Bring-up of the local clusterset. The read side (`status`), which both `up` and users rely on,
is the `local/status/` package, one reader per part.

`isthmus up` always runs the clusterset through a supervisor process
(`python -m isthmus up --state-dir DIR --supervise`), in the foreground or detached: one code
path, and a process whose command line names the state dir, so `down` can prove it is ours. The
supervisor brings parts up in dependency order — the broker's and every cluster's apiserver,
then `deploy-broker` and `join` (the real commands, only when not done yet for this broker
URL), then kube-lite, agent, dns and proxy per cluster — and keeps them running.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import logging
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from isthmus.apiserver.authentication.tls import ensure_certs
from isthmus.apiserver.kubeconfig import kubeconfig_dict, write_kubeconfig
from isthmus.local import components, plan, runcmode
from isthmus.local.endpoints import metrics_addr, ready_url, server_url
from isthmus.local.kubelite.processes import ENTRY
from isthmus.local.plan import AGENT, APISERVER, BROKER, HOST, KUBE_LITE, PartId
from isthmus.local.state import (
    PHASE_FAILED,
    PHASE_IMAGES,
    PHASE_RUNNING,
    PHASE_SETUP,
    PHASE_STARTING,
    PHASE_STOPPED,
    PHASE_STOPPING,
    Layout,
    PartState,
    State,
    load_state,
    open_private,
    private_dir,
    save_state,
    secure_state_dir,
    write_atomic,
)
from isthmus.local.supervisor import (
    SUPERVISE_FLAG,
    PartSpec,
    Supervisor,
    cmdline,
    is_ours,
    open_log,
    part_zygote,
    probe,
    terminate,
)
from isthmus.procs.child import ForkedCommand, fork_command
from isthmus.procs.entry import enabled as zygote_enabled
from isthmus.procs.zygote import Zygote

log = logging.getLogger("isthmus.local")

RETRY_SIGNAL = signal.SIGUSR1
"""Sent by `up` to a running supervisor: start again the parts it gave up on."""
PRIVATE_UMASK = 0o077
"""The supervisor's umask, inherited by every part: what they create is private to the user."""
APISERVER_READY_TIMEOUT = 60.0
PARTS_READY_TIMEOUT = 60.0
IMAGE_BUILD_TIMEOUT = 1200.0
"""runc mode: building every image on a fresh machine (cached afterwards: seconds)."""
SETUP_COMMAND_TIMEOUT = 90.0
SETUP_ATTEMPTS = 3
RESERVED_PORTS = range(plan.NODE_PORT_BASE, plan.NODE_PORT_BASE + plan.MAX_CLUSTERS * plan.NODE_PORTS_PER_CLUSTER)
"""Never pick an API/DNS/metrics port where a proxy may listen for NodePorts on 127.0.0.1."""


def isthmus_argv() -> list[str]:
    """How parts are launched: this interpreter, so the venv of `up` is the venv of every part."""
    return [sys.executable, "-m", "isthmus"]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # logs reach the log files as they happen
    return env


# --- ports and kubeconfigs -----------------------------------------------------------------------


def port_free(port: int, udp: bool = False, host: str = HOST) -> bool:
    """Can a server bind host:port now (TCP with SO_REUSEADDR, like our servers; UDP too)?"""
    kinds = [socket.SOCK_STREAM] + ([socket.SOCK_DGRAM] if udp else [])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for kind in kinds:
        with socket.socket(family, kind) as s:
            if kind == socket.SOCK_STREAM:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


PORT_POOL = range(10000, plan.NODE_PORT_BASE)
"""Where API, DNS and metrics ports are picked: below the NodePorts and, on Linux's default
ip_local_port_range (32768-60999), outside the ephemeral ports, which any outgoing connection
(a part's watch on its apiserver) may hold as its local port and so keep a server from binding."""


def ephemeral_ports() -> range:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def pick_port(taken: set[int], udp: bool = False) -> int:
    """A free port outside the ephemeral and NodePort ranges, not already planned."""
    ephemeral = ephemeral_ports()
    pool = [p for p in PORT_POOL if p not in ephemeral and p not in RESERVED_PORTS and p not in taken]
    rng = random.Random()
    for port in rng.sample(pool, min(len(pool), 200)):
        if port_free(port, udp):
            return port
    raise OSError(errno.EADDRINUSE, "no free port on 127.0.0.1 outside the ephemeral and NodePort ranges")


def resolve_ports(state: State, free: Callable[[int, bool], bool] = port_free,
                  pick: Callable[[set[int], bool], int] = pick_port) -> list[str]:
    """Keep every saved port that is still free; pick the missing or taken ones. Returns the
    names of ports that changed (their kubeconfigs or broker-info must be rewritten)."""
    changed: list[str] = []
    names = plan.port_names(state.clusters, state.runtime, state.nodes)
    taken: set[int] = set()
    for name in names:
        port = state.ports.get(name)
        udp = plan.udp_too(name)
        if port is None or port in taken or not free(port, udp):
            port = pick(taken | {p for n, p in state.ports.items() if n in names}, udp)
            state.ports[name] = port
            changed.append(name)
        taken.add(port)
    state.ports = {n: state.ports[n] for n in names}
    return changed


def ensure_token(layout: Layout, name: str) -> str:
    """The bearer token of one apiserver (0600 file in its data dir, created once)."""
    path = layout.token_file(name)
    if path.exists() and path.read_text().strip():
        return path.read_text().strip().splitlines()[0].strip()
    token = secrets.token_urlsafe(32)
    write_atomic(path, token + "\n", mode=0o600)
    return token


def ensure_ca(layout: Layout, name: str, runtime: str = plan.PROCESS) -> bytes:
    """The apiserver's CA, made before its first start (it finds and serves the same files), so
    kubeconfigs exist before the server does. TLS because kubectl sends tokens only over TLS. Under
    runc its certificate also names the fabric's address, where pods reach it through the relay."""
    private_dir(layout.data_dir(name) / "tls")
    hosts = [HOST, "localhost", *([plan.RUNC_FABRIC_ADDRESS] if runtime == plan.RUNC else [])]
    ca, _, _ = ensure_certs(layout.data_dir(name) / "tls", hosts)
    return ca.read_bytes()


def write_kubeconfigs(layout: Layout, state: State) -> None:
    """One kubeconfig per apiserver (context = its name) and the merged one (current: c1)."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [],
                              "current-context": plan.cluster_name(1), "preferences": {}}
    for name in [BROKER] + [c.name for c in plan.address_plan(state.clusters, state.runtime)]:
        one = kubeconfig_dict(name, server_url(state, name), ca_pem=ensure_ca(layout, name, state.runtime),
                              token=ensure_token(layout, name))
        write_kubeconfig(layout.kubeconfig_of(name), one)
        for key in ("clusters", "users", "contexts"):
            merged[key] += one[key]
    write_kubeconfig(layout.kubeconfig, merged)


# --- parts ---------------------------------------------------------------------------------------


def part_argv(layout: Layout, state: State, part: PartId) -> list[str]:
    """The command line of one part; every one names a path inside the state dir (see is_ours)."""
    base = isthmus_argv()
    if part.kind == APISERVER:
        return [*base, "apiserver", "--host", HOST, "--port", str(state.ports[part.name]),
                "--data-dir", str(layout.data_dir(part.cluster)), "--tls",
                "--token-file", str(layout.token_file(part.cluster)),
                # As kubeadm keeps it: anonymous requests authenticate, and RBAC gives them only the
                # public health and version paths, which the supervisor probes.
                "--anonymous-auth",
                # The local clusterset has no other load balancer: class-less Services are ours (as
                # the overlay's deploy/components/lb/class-less tells the webhook and translator).
                "--lb-class-less-services",
                # runc mode: the cluster's addresses (webhooks' ClusterIPs) are reached from its node's
                # namespace; from the host they would follow its default route off this machine.
                *(["--cluster-netns", runcmode.fabric_of(layout.root, state.clusters).node(part.cluster).netns_path]
                  if state.runtime == plan.RUNC else [])]
    kc = ["--kubeconfig", str(layout.kubeconfig_of(part.cluster))]
    metrics = ["--metrics-addr", metrics_addr(state, part)]
    if part.kind == KUBE_LITE:
        return [*base, "kube-lite", *kc, *kube_lite_args(layout, state, part), *metrics]
    if part.kind == plan.RELAY:
        fp = runcmode.fabric_of(layout.root, state.clusters)
        return [*base, "netrelay", *runcmode.relay_args(fp, layout.root, state.ports[PartId(BROKER, plan.REGISTRY).name],
                                                        [state.ports[p.name] for p in plan.parts(state.clusters, state.runtime, state.nodes)
                                                         if p.kind == APISERVER]), *metrics]
    if part.kind == plan.REGISTRY:
        return runcmode.registry_argv(runcmode.fabric_of(layout.root, state.clusters), layout.root)
    if part.kind == plan.UI:  # every context of the merged kubeconfig; the broker named, not probed
        return [*base, "ui", "--kubeconfig", str(layout.kubeconfig), "--broker-context", BROKER,
                "--listen", f"{HOST}:{state.ports[part.name]}"]
    raise ValueError(f"unknown part kind {part.kind!r}")


def kube_lite_args(layout: Layout, state: State, part: PartId) -> list[str]:
    """A node's kube-lite: node 1 (the one node before `--nodes`: unchanged arguments) runs the
    cluster's controllers; in process mode the nodes share this machine's network, so node 1's
    proxy serves them all (a second one could not bind the same ClusterIPs and NodePorts); in
    runc mode each node is a namespace of its own with its own proxy, as kube-proxy on every node."""
    cp = plan.plan_of(part.cluster, state.clusters, state.runtime)
    nodes = 1 if part.cluster == BROKER else state.nodes
    # A member's node proxies its ClusterIPs, NodePorts and VIPs (nothing on the broker is reached so).
    proxy = ["--proxy"] if part.cluster != BROKER and (part.node == 1 or state.runtime == plan.RUNC) else []
    if state.runtime == plan.RUNC:
        runc = runcmode.kube_lite_args(runcmode.fabric_of(layout.root, state.clusters, state.nodes), part.cluster,
                                       state.ports[PartId(part.cluster, APISERVER).name], node=part.node)
    else:
        runc = ["--node-address", cp.node_address] if proxy else []
    node = [] if nodes == 1 else [
        "--node-name", plan.node_name(cp.name, part.node),
        "--node-pod-cidr", plan.node_pod_cidr(cp.pod_cidr, part.node, nodes),
        *([] if part.node == 1 else ["--no-controllers"])]
    root = cp.name if part.node == 1 else plan.node_name(cp.name, part.node)
    return ["--cluster-name", cp.name, "--pod-cidr", cp.pod_cidr,
            "--service-cidr", cp.service_cidr, "--node-port-range", cp.node_port_range,
            "--kubelet-port", str(state.ports[plan.kubelet_port_name(cp.name, part.node)]),
            "--root-dir", str(layout.root / "kubelet" / root), *node, *proxy, *runc]


def part_spec(layout: Layout, state: State, part: PartId) -> PartSpec:
    tier = 0 if part.cluster == BROKER and part.kind == APISERVER else 1 if part.kind == APISERVER else 2
    return PartSpec(part.name, part_argv(layout, state, part), layout.log(part.name), ready_url(state, part), tier,
                    zygote_client=part.kind == KUBE_LITE,
                    # The web view starts on first use: it watches every cluster, and most of the time
                    # nobody looks (about 25 MB saved while idle).
                    listen=(HOST, state.ports[part.name]) if part.kind == plan.UI else None)


def deploy_broker_argv(layout: Layout, state: State) -> list[str]:
    vip = ["--enable-clusterset-ip"] if state.enable_clusterset_ip else []
    # runc mode: members' agents reach the broker from their pods, through the relay on the fabric.
    url = (["--server-url", f"https://{plan.RUNC_FABRIC_ADDRESS}:{state.ports[PartId(BROKER, APISERVER).name]}"]
           if state.runtime == plan.RUNC else [])
    return [*isthmus_argv(), "deploy-broker", "--kubeconfig", str(layout.kubeconfig_of(BROKER)), *vip,
            "--clusterset-ip-cidr-range", plan.clusterset_ip_range(state.runtime), *url,
            "--broker-info", str(layout.broker_info)]


def join_argv(layout: Layout, state: State, cluster: plan.ClusterPlan) -> list[str]:
    return [*isthmus_argv(), "join", str(layout.broker_info), "--kubeconfig", str(layout.kubeconfig_of(cluster.name)),
            "--broker-kubeconfig", str(layout.kubeconfig_of(BROKER)),
            "--cluster-id", cluster.name, "--clusterset-ip-cidr", cluster.clusterset_ip_cidr]


def needs_deploy(layout: Layout, state: State) -> bool:
    """deploy-broker (and every join) again when the broker moved or the VIP default changed."""
    return (not layout.broker_info.exists() or state.broker_server != server_url(state, BROKER)
            or state.setup_vip != state.enable_clusterset_ip)


# --- the supervisor process ----------------------------------------------------------------------


class SetupFailed(Exception):
    pass


class AlreadyRunning(Exception):
    pass


def lock_supervisor(layout: Layout) -> int:
    """Hold an exclusive lock on supervisor.pid for the supervisor's life; write our PID in it."""
    private_dir(layout.root)
    fd = open_private(layout.supervisor_pid, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(str(layout.root)) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _network_namespace() -> str:
    """This process's network namespace, as the inode of /proc/self/ns/net ("" where there is none)."""
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return ""


def machine_lock() -> Path:
    """Held by the running supervisor: local clustersets share one fixed address plan on 127.0.0.0/8
    (pod IPs, ClusterIPs, NodePorts, VIPs bound with SO_REUSEPORT), so two at once in one network
    namespace would take each other's addresses and even each other's VIP traffic. 127.0.0.0/8 is
    per network namespace, so the lock is too: one clusterset per namespace, whoever runs it."""
    ns = _network_namespace()
    return Path(tempfile.gettempdir()) / f"isthmus-local-clusterset{'-netns-' + ns if ns else ''}.lock"


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who runs the local clusterset of this network namespace: what the lock file and /proc say."""

    state_dir: str
    pid: int | None = None
    uid: int | None = None

    @property
    def user(self) -> str:
        if self.uid is None:
            return "an unknown user"
        try:
            import pwd

            return pwd.getpwuid(self.uid).pw_name
        except (KeyError, ImportError):
            return f"uid {self.uid}"


class AddressPlanInUse(Exception):
    """Another local clusterset (its state dir is the message) runs in this network namespace."""


def _locker(path: Path) -> int | None:
    """PID of the process holding the flock on `path` (/proc/locks), None if unknown."""
    try:
        ino = os.stat(path).st_ino
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(ino):
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def _read_holder(fd: int, path: Path) -> Holder:
    """The holder recorded in the lock file (``<pid> <uid> <state dir>``), checked against /proc: a
    record its locker did not write says only what /proc knows."""
    text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    pid = _locker(path)
    uid: int | None = None
    if pid is not None:
        with contextlib.suppress(OSError):
            uid = os.stat(f"/proc/{pid}").st_uid
    fields = text.split(" ", 2)
    if len(fields) == 3 and fields[0].isdigit() and fields[1].isdigit():
        if pid is None or int(fields[0]) == pid:
            return Holder(fields[2], int(fields[0]), int(fields[1]) if uid is None else uid)
        return Holder("an unknown state dir", pid, uid)
    return Holder(text or "an unknown state dir", pid, uid)  # an older supervisor's record: its state dir


def lock_machine(layout: Layout) -> int:
    """Take the network namespace's lock for the supervisor's life, recording who we are in it."""
    path = machine_lock()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o644)  # readable by every user: they are told who holds it
        writable = True
    except PermissionError:  # another user's file: a read-only descriptor locks it as well
        fd = os.open(path, os.O_RDONLY)
        writable = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd, path)
        os.close(fd)
        raise AddressPlanInUse(holder.state_dir) from None
    if writable:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {os.getuid()} {layout.root}\n".encode())
    return fd


def lock_holder() -> Holder | None:
    """Who runs the local clusterset of this network namespace, if anyone (checked, not taken)."""
    path = machine_lock()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd, path)
    finally:
        os.close(fd)  # closing drops a lock we may have taken
    return None


def machine_holder() -> str | None:
    """State dir of the local clusterset running in this network namespace, if any."""
    holder = lock_holder()
    return None if holder is None else holder.state_dir


def plan_in_use_message(state_dir: str) -> str:
    """Why `up` cannot start here, and who holds the namespace: only the user's own clusterset is
    theirs to stop."""
    holder = lock_holder() or Holder(state_dir)
    pid = f"supervisor pid {holder.pid}" if holder.pid is not None else "supervisor pid unknown"
    why = ("local clustersets share one address plan on 127.0.0.0/8, so only one runs at a time in a "
           "network namespace")
    if holder.uid is not None and holder.uid == os.getuid():
        return (f"another local clusterset is running from {holder.state_dir} ({pid}): {why}; "
                f"stop it first (isthmus down --state-dir {holder.state_dir})")
    return (f"another local clusterset is running in this network namespace, of {holder.user} "
            f"({pid}, state dir {holder.state_dir}): {why}. It is not yours to stop: wait until it "
            f"ends, or run yours in a network namespace of its own")


class Bringup:
    """The supervisor's work: bring everything up, keep it up, take it down on a signal."""

    def __init__(self, layout: Layout, state: State, adopt: dict[str, int] | None = None,
                 zygote: Zygote | None = None) -> None:
        self.layout = layout
        self.state = state
        self.adopt = adopt or {}
        """Parts a crashed supervisor left running and healthy (name → PID), kept instead of restarted."""
        self.sup = Supervisor(layout.root, self._on_change, env=child_env(), zygote=zygote)
        self.stop = asyncio.Event()
        self.started = asyncio.Event()
        """Every part has been handed to the supervisor (the image push waits for the registry's)."""
        self.speakers: list[asyncio.Task[None]] = []
        """runc mode, several nodes: the edge speakers (local/network/speaker.py), one per member."""
        self.images: asyncio.Task[str | None] | None = None
        """runc mode: the images built (or found in the cache) and pushed to the registry; the Isthmus
        image's digest, which the overlays pin."""

    def _speakers(self) -> None:
        """runc mode with several nodes: each member's edge addresses follow the pods that bind them."""
        if self.state.nodes == 1 or self.speakers:
            return
        from isthmus.local.network.speaker import EdgeSpeaker

        fp = runcmode.fabric_of(self.layout.root, self.state.clusters, self.state.nodes)
        for cp in plan.address_plan(self.state.clusters, self.state.runtime):
            speaker = EdgeSpeaker(fp, cp.name, self.layout.kubeconfig_of(cp.name))
            self.speakers.append(asyncio.create_task(speaker.run(), name=f"edge speaker {cp.name}"))

    def _on_change(self, name: str, part: PartState) -> None:
        self.state.parts[name] = dataclasses.replace(part)
        save_state(self.layout, self.state)

    def _retry_failed(self) -> None:
        names = self.sup.retry_failed()
        if names:
            log.info("retrying %s", ", ".join(names))

    def _start(self, part: PartId, previous: dict[str, PartState]) -> None:
        self.sup.start(part_spec(self.layout, self.state, part), previous.get(part.name), self.adopt.get(part.name))

    def _phase(self, phase: str, error: str | None = None) -> None:
        self.state.phase, self.state.error = phase, error
        save_state(self.layout, self.state)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        with contextlib.suppress(ValueError):
            loop.add_signal_handler(signal.SIGHUP, lambda: None)  # a closed terminal is no reason to stop
        loop.add_signal_handler(RETRY_SIGNAL, self._retry_failed)
        bring = asyncio.create_task(self._bring_up())
        await self.stop.wait()
        code = 0
        if not bring.done():
            bring.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await bring
            except SetupFailed as e:
                log.error("bring-up failed: %s", e)
                code = 1
        failed = self.state.phase == PHASE_FAILED
        self._phase(PHASE_STOPPING, self.state.error)
        log.info("stopping every part")
        if self.images is not None:
            self.images.cancel()
        for task in self.speakers:
            task.cancel()
        await asyncio.gather(*self.speakers, return_exceptions=True)
        await self.sup.stop()
        if self.state.runtime == plan.RUNC:  # kube-lites stopped their pods: the namespaces go too
            containers, gone = await asyncio.to_thread(runcmode.cleanup, self.layout.root)
            log.info("removed %d leftover container(s) and %d network namespace(s)", containers, len(gone))
        self.state.supervisor_pid = None
        for p in self.state.parts.values():
            p.pid = None
        self._phase(PHASE_FAILED if failed else PHASE_STOPPED, self.state.error)
        log.info("stopped")
        return code

    async def _bring_up(self) -> None:
        self.sup.prestart()
        try:
            if self.state.runtime == plan.RUNC:
                await asyncio.to_thread(runcmode.ensure_network, self.layout.root, self.state.clusters,
                                        self.state.nodes)
                self._speakers()
                runcmode.write_registry_config(self.layout.root,
                                               runcmode.fabric_of(self.layout.root, self.state.clusters))
                self.images = asyncio.create_task(self._build_and_push())
            all_parts = plan.parts(self.state.clusters, self.state.runtime, self.state.nodes)
            previous = dict(self.state.parts)
            apiservers = [p for p in all_parts if p.kind == APISERVER]
            for p in apiservers:
                self._start(p, previous)
            late = await self.sup.wait_ready([p.name for p in apiservers], APISERVER_READY_TIMEOUT, fail_fast=True)
            trouble = self.sup.trouble(late)
            if trouble:  # nothing works without every apiserver: say which and why, at once
                raise SetupFailed("; ".join(f"{n} {why}" for n, why in trouble.items()))
            if late:
                raise SetupFailed(f"apiserver(s) not ready within {APISERVER_READY_TIMEOUT:.0f}s: {', '.join(late)}")
            self._phase(PHASE_SETUP)
            for p in all_parts:  # they need only their apiserver: they start while the setup runs
                if p.kind != APISERVER:
                    self._start(p, previous)
            self.started.set()
            await self._setup()
            self._phase(PHASE_RUNNING)
            late = await self.sup.wait_ready([p.name for p in all_parts], PARTS_READY_TIMEOUT)
            late += await self._wait_components()
            late += await self._source_ip_classes()
            if late:
                log.warning("not ready after %.0fs (still trying): %s", PARTS_READY_TIMEOUT, ", ".join(late))
            else:
                log.info("every part is ready")
        except Exception as e:  # nothing can come up: record why, take down what did
            self._phase(PHASE_FAILED, str(e) if isinstance(e, SetupFailed) else f"{type(e).__name__}: {e}")
            self.stop.set()
            raise SetupFailed(self.state.error) from e

    async def _one_shot(self, what: str, argv: list[str], log_name: str) -> None:
        for attempt in range(1, SETUP_ATTEMPTS + 1):
            rc = await self.sup.run_command(argv, self.layout.log(log_name), SETUP_COMMAND_TIMEOUT)
            if rc == 0:
                return
            log.warning("%s failed (exit %d, attempt %d/%d)", what, rc, attempt, SETUP_ATTEMPTS)
            await asyncio.sleep(attempt)
        raise SetupFailed(f"{what} failed {SETUP_ATTEMPTS} times; see {self.layout.log(log_name)}")

    async def _setup(self) -> None:
        st, layout = self.state, self.layout
        if self.images is not None and not self.images.done():  # runc mode: nothing installs before them
            self._phase(PHASE_IMAGES)
            await asyncio.wait([self.images])
            self._phase(PHASE_SETUP)
        if needs_deploy(layout, st):
            await self._one_shot("deploy-broker", deploy_broker_argv(layout, st), "deploy-broker")
            st.broker_server, st.setup_vip, st.joined = server_url(st, BROKER), st.enable_clusterset_ip, {}
            save_state(layout, st)
        limit = asyncio.Semaphore(4)

        async def join_and_install(cluster: plan.ClusterPlan) -> None:
            """A pipeline per cluster: its install waits for its own join only, not every cluster's."""
            joined = cluster.name in st.joined
            if not joined:
                async with limit:
                    await self._one_shot(f"join {cluster.name}", join_argv(layout, st, cluster), f"{cluster.name}-join")
                st.joined[cluster.name] = await read_clusterset_cidr(layout, cluster)
                save_state(layout, st)
            await self._install(cluster, restart_agent=not joined)

        await asyncio.gather(self._install_broker(),
                             *(join_and_install(c) for c in plan.address_plan(st.clusters, st.runtime)))

    async def _build_and_push(self) -> str | None:
        """runc mode: build the images (cached by their inputs), then push them into the clusterset's
        registry through the relay's door on the host; the Isthmus image's digest."""
        # A process of its own (killed with the bring-up if it is stopped), under umask 022: an image's
        # files are for every user of the image, unlike the state dir's (077). What it built: its JSON.
        built = self.layout.root / "images.json"
        rc = await self.sup.run_command(
            ["sh", "-c", 'umask 022 && exec "$@" --json > "$0"', str(built), sys.executable, "-m",
             "isthmus.local.images.build"], self.layout.log("images"), IMAGE_BUILD_TIMEOUT)
        if rc != 0:
            raise SetupFailed(f"building the images failed (exit {rc}); see {self.layout.log('images')}")
        registry = PartId(BROKER, plan.REGISTRY).name
        await self.started.wait()  # a cached build is done before the apiservers are, and the registry starts after them
        late = await self.sup.wait_ready([registry, PartId(BROKER, plan.RELAY).name], PARTS_READY_TIMEOUT)
        if late:
            raise SetupFailed(f"the registry is not ready within {PARTS_READY_TIMEOUT:.0f}s: {', '.join(late)}")
        return await runcmode.push_images(runcmode.read_built(built), f"{HOST}:{self.state.ports[registry]}")

    async def _digest(self) -> str | None:
        """The digest the overlays pin (runc mode), once the images are in the registry."""
        return await asyncio.shield(self.images) if self.images is not None else None

    async def _install_broker(self) -> None:
        """The broker's workloads from deploy/broker/controllers, as an admin installs them on a real
        broker (deploy-broker applied deploy/broker itself)."""
        from isthmus.kube.manifests import deploy_dir

        directory = components.broker_overlay(deploy_dir(), self.layout.root / "manifests" / BROKER,
                                              self.layout.root / "pools" / BROKER, self.state.runtime,
                                              await self._digest())
        await self._apply(BROKER, directory)

    async def _install(self, cluster: plan.ClusterPlan, restart_agent: bool) -> None:
        """Install Isthmus's components into one cluster from deploy/member, as a cluster admin would
        (`kubectl apply -k`, idempotent: every `up` applies the manifests of this version). After a
        new join an agent that ran before restarts, to read the broker credentials join just stored
        (a first install's agent starts with them: no second rollout)."""
        from isthmus.kube.manifests import deploy_dir

        directory = components.overlay(cluster, deploy_dir(), self.layout.root / "manifests" / cluster.name,
                                       self.layout.root / "pools" / cluster.name, await self._digest(),
                                       self.state.nodes)
        kubeconfig = self.layout.kubeconfig_of(cluster.name)
        restart = restart_agent and await components.deployment_exists(kubeconfig, plan.DEPLOYMENTS[AGENT])
        await self._apply(cluster.name, directory)
        gone = await components.remove_superseded(kubeconfig)
        if gone:
            log.info("%s: removed %s (now in %s)", cluster.name, ", ".join(gone), plan.DEPLOYMENTS[plan.CONTROLLER_MANAGER])
        if restart:
            await components.restart(kubeconfig, plan.DEPLOYMENTS[AGENT])

    async def _apply(self, name: str, directory: Path) -> None:
        kubeconfig = self.layout.kubeconfig_of(name)
        await self._install_crds(name)
        argv = components.apply_argv(kubeconfig, directory)
        if argv is not None:
            await self._one_shot(f"install {name} (kubectl apply --server-side -k {directory})", argv, f"{name}-install")
        else:
            log.warning("kubectl not found: applying %s's manifests server-side from Python", name)
            await components.apply_rendered(kubeconfig, directory)

    async def _install_crds(self, name: str) -> None:
        """This version's CRDs, on every `up` (deploy/member and deploy/broker carry none, and join and
        deploy-broker run only when not done yet): ours upgraded, the shared ones only where absent or
        Isthmus's, as join and deploy-broker install them on real clusters."""
        from isthmus.clusterset.control import CRD_TIMEOUT
        from isthmus.clusterset.crds import ensure_crds
        from isthmus.kube.client import make_client

        client = make_client(self.layout.kubeconfig_of(name), timeout=10.0)
        try:
            async with asyncio.timeout(CRD_TIMEOUT):
                await ensure_crds(client, "isthmus-up")
        finally:
            await client.close()

    async def _source_ip_classes(self) -> list[str]:
        """Each cluster's local SourceIPClass, applied once its components run (the egress webhook
        checks it); returns the clusters where that failed."""

        async def one(cluster: plan.ClusterPlan) -> str | None:
            try:
                await components.ensure_source_ip_class(self.layout.kubeconfig_of(cluster.name), cluster)
            except Exception as e:
                log.warning("%s: the local SourceIPClass is not applied: %s", cluster.name, e)
                return f"{cluster.name} SourceIPClass {plan.LOCAL_SOURCE_IP_CLASS}"
            return None

        found = await asyncio.gather(*(one(c) for c in plan.address_plan(self.state.clusters, self.state.runtime)))
        return [f for f in found if f is not None]

    async def _wait_components(self) -> list[str]:
        """Wait until every cluster's components have a ready pod; returns the late ones."""
        deadline = asyncio.get_running_loop().time() + PARTS_READY_TIMEOUT
        late: list[str] = []
        while True:
            late = []
            for name in (BROKER, *(cp.name for cp in plan.address_plan(self.state.clusters, self.state.runtime))):
                deployments = plan.BROKER_DEPLOYMENTS if name == BROKER else plan.DEPLOYMENTS
                try:
                    found = await components.read_components(self.layout.kubeconfig_of(name), deployments)
                except Exception:
                    late += [p.name for p in components.pod_part_ids(name)]
                    continue
                late += [PartId(name, kind).name for kind, part in found.items() if part.health != "ready"]
            if not late or asyncio.get_running_loop().time() > deadline:
                return late
            await asyncio.sleep(0.5)


async def read_clusterset_cidr(layout: Layout, cluster: plan.ClusterPlan) -> str:
    """The VIP block join recorded in the cluster's ServiceDiscovery (the plan's, if unreadable)."""
    from isthmus.api.mcs import AGENT_NAMESPACE, SERVICE_DISCOVERY_NAME, ServiceDiscovery
    from isthmus.kube.client import make_client
    from isthmus.kube.helpers import get_or_none

    try:
        client = make_client(layout.kubeconfig_of(cluster.name), timeout=10.0)
        try:
            sd = await get_or_none(client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
        finally:
            await client.close()
    except Exception as e:  # informational only: the plan says the same unless someone re-joined by hand
        log.warning("cannot read %s's ServiceDiscovery: %s", cluster.name, e)
        return cluster.clusterset_ip_cidr
    cidrs = list(sd.spec.clusterset_ip_cidr) if sd is not None else []
    return ", ".join(cidrs) or cluster.clusterset_ip_cidr


def adoptable(layout: Layout, state: State) -> dict[str, int]:
    """Parts a crashed supervisor left running that can be kept as they are (name → PID): the
    recorded PID is alive, its command line is exactly what would be launched now, and it is ready."""
    candidates: dict[str, tuple[int, str]] = {}
    for part in plan.parts(state.clusters, state.runtime, state.nodes):
        pid = state.parts.get(part.name, PartState()).pid
        if not pid or not is_ours(pid, layout.root):
            continue
        try:
            argv = part_argv(layout, state, part)
        except (KeyError, ValueError):  # a port is not recorded: it cannot be the same command
            continue
        if cmdline(pid) == argv:
            candidates[part.name] = (pid, ready_url(state, part))
    if not candidates:
        return {}

    async def probe_all() -> list[bool]:
        async with aiohttp.ClientSession(trust_env=False) as session:
            return await asyncio.gather(*(probe(session, url, limit=2.0) for _, url in candidates.values()))

    healthy = asyncio.run(probe_all())
    return {n: pid for (n, (pid, _)), ok in zip(candidates.items(), healthy, strict=True) if ok}


def _part_ports(part: PartId) -> set[str]:
    """Names of the ports a part listens on (see plan.port_names)."""
    extra = {plan.kubelet_port_name(part.cluster, part.node)} if part.kind == KUBE_LITE else set()
    return {part.name, plan.metrics_port_name(part)} | extra


def prepare(layout: Layout, requested: int | None, enable_clusterset_ip: bool,
            runtime: str | None = None, nodes: int | None = None) -> tuple[State, dict[str, int]]:
    """Load or create the state, settle ports and kubeconfigs (called with the lock held).

    Returns the state and the parts to adopt: after a supervisor crash, the healthy parts keep
    running (their clients see no outage); only the dead or changed ones are restarted.
    """
    state = load_state(layout)
    if state is None:
        state = State(clusters=requested or plan.DEFAULT_CLUSTERS, runtime=runtime or plan.PROCESS,
                      nodes=nodes or plan.DEFAULT_NODES)
    elif requested is not None and requested != state.clusters:
        raise plan.PlanError(
            f"{layout.root} holds a clusterset of {state.clusters} cluster(s), not {requested}: "
            "drop --clusters, or `isthmus down` and use another --state-dir"
        )
    elif runtime is not None and runtime != state.runtime:
        raise plan.PlanError(f"{layout.root} holds a clusterset of the {state.runtime} runtime, not {runtime}")
    elif nodes is not None and nodes != state.nodes:
        raise plan.PlanError(nodes_mismatch(layout, state.nodes, nodes))
    plan.validate_count(state.clusters)
    plan.validate_nodes(state.nodes)
    secure_state_dir(layout, [BROKER] + [c.name for c in plan.address_plan(state.clusters, state.runtime)])
    state.enable_clusterset_ip = state.enable_clusterset_ip or enable_clusterset_ip
    by_name = {p.name: p for p in plan.parts(state.clusters, state.runtime, state.nodes)}
    adopt = adoptable(layout, state)
    # Every other part a crashed supervisor left behind holds our ports: stop it (verified PIDs only).
    leftovers = {n: p.pid for n, p in state.parts.items() if p.pid and n not in adopt}
    _stop_leftovers(layout, leftovers)
    held = {state.ports[pn] for n in adopt for pn in _part_ports(by_name[n]) if pn in state.ports}
    changed = resolve_ports(state, free=lambda port, udp: port in held or port_free(port, udp))
    if changed and state.ports:
        log.info("ports picked: %s", ", ".join(f"{n}={state.ports[n]}" for n in changed))
    # An adopted part must still be the right command, talking to the right apiserver and broker.
    moved = {n.removesuffix("-apiserver") for n in changed if n.endswith("-apiserver")}
    stale = {n: pid for n, pid in adopt.items()
             if cmdline(pid) != part_argv(layout, state, by_name[n])
             or (by_name[n].kind != APISERVER and by_name[n].cluster in moved)}
    _stop_leftovers(layout, stale)
    adopt = {n: pid for n, pid in adopt.items() if n not in stale}
    for name, p in state.parts.items():
        if name not in adopt:
            p.pid = None
    if adopt:
        log.info("adopting %d running part(s): %s", len(adopt), ", ".join(sorted(adopt)))
    private_dir(layout.logs)
    write_kubeconfigs(layout, state)
    state.supervisor_pid, state.phase, state.error = os.getpid(), PHASE_STARTING, None
    save_state(layout, state)
    return state, adopt


def nodes_mismatch(layout: Layout, have: int, requested: int) -> str:
    """Nodes are fixed with the state dir: their pod CIDR slices (and runc's namespaces) follow from the count."""
    return (f"{layout.root} holds a clusterset of {have} node(s) per cluster, not {requested}: "
            "drop --nodes, or `isthmus down` and use another --state-dir")


def _stop_leftovers(layout: Layout, pids: dict[str, int]) -> None:
    if pids:
        left = terminate(pids, layout.root)
        if left:
            raise OSError(f"processes of a previous run do not stop: {left}")


def supervise(layout: Layout, requested: int | None, enable_clusterset_ip: bool, runtime: str | None = None,
              nodes: int | None = None) -> int:
    """Body of `up --supervise`: exit code 0 after a clean stop, 1 when setup failed."""
    from isthmus.runtime import setup_logging
    from isthmus.runtime.loop import enable_fault_tracebacks

    setup_logging("text", "info")
    enable_fault_tracebacks()
    os.umask(PRIVATE_UMASK)
    try:
        lock = lock_supervisor(layout)
    except AlreadyRunning:
        log.info("a supervisor already runs for %s", layout.root)
        return 0
    existing = load_state(layout)
    runc = (runtime or (existing.runtime if existing is not None else plan.PROCESS)) == plan.RUNC
    try:
        # The process plan is the network namespace's 127.0.0.0/8; runc mode has namespaces of its own.
        machine = None if runc else lock_machine(layout)
    except AddressPlanInUse as e:
        log.error("%s", plan_in_use_message(str(e)))
        with contextlib.suppress(OSError):
            layout.supervisor_pid.unlink()
        os.close(lock)
        return 2
    zygote = None
    if zygote_enabled():  # forked before the loop, sharing this process's imports; its own run beside prepare()
        zygote = part_zygote(layout.root, child_env())
        zygote.fork_now()
    try:
        state, adopt = prepare(layout, requested, enable_clusterset_ip, runtime, nodes)
        return asyncio.run(Bringup(layout, state, adopt, zygote).run())
    finally:
        with contextlib.suppress(OSError):
            layout.supervisor_pid.unlink()
        if machine is not None:
            os.close(machine)
        os.close(lock)


# --- the `up` side: start a supervisor and watch it -----------------------------------------------


def _die_with_parent() -> None:
    """Foreground `up`: if the terminal's `isthmus up` is killed, its supervisor stops too."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn_supervisor(layout: Layout, clusters: int | None, enable_clusterset_ip: bool,
                     foreground: bool, runtime: str | None = None,
                     nodes: int | None = None) -> subprocess.Popen[bytes] | ForkedCommand:
    """Start `up --supervise` in its own session, output to logs/supervisor.log: forked from this
    process, which imported all it needs (see procs/child.py, fork_command), else exec'ed."""
    private_dir(layout.logs)
    argv = [*isthmus_argv(), "up", "--state-dir", str(layout.root), SUPERVISE_FLAG]
    if clusters is not None:
        argv += ["--clusters", str(clusters)]
    if enable_clusterset_ip:
        argv.append("--enable-clusterset-ip")
    if runtime is not None:
        argv += ["--runtime", runtime]
    if nodes is not None:
        argv += ["--nodes", str(nodes)]
    with open_log(layout.log("supervisor")) as out:
        forked = fork_command(argv, ENTRY, env=child_env(), out_fd=out.fileno(), pdeathsig=foreground)
        if forked is not None:
            return forked
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env=child_env(), preexec_fn=_die_with_parent if foreground else None,
        )
