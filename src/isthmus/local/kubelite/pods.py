"""The pod runtime: what a kubelet does for the Pods bound to its node, on loopback addresses.

A Pod the scheduler bound to this node (``spec.nodeName``; Pods of other nodes are another
kube-lite's) gets an IP from the node's pod CIDR (its ``spec.podCIDR``) and a Running/Ready status, so the
EndpointSlice controller (and everything downstream) sees it like a real Pod. A Pod annotated
``isthmus.io/workload: echo`` also gets real echo servers bound to that IP (see echo.py), and
is Ready only once they listen; what they print is the Pod's log (logs.py), served by the
kubelet endpoint (kubelet.py). Servers stop, the log is dropped and the address is released when
the Pod goes. Any other Pod is a kubelet's: its Isthmus-image containers run as processes and its
status is what they report (processes.py); containers of other images are never pulled.

After a restart the addresses are re-reserved from the Pods' status before anything is
allocated, and the echo servers of existing Pods are started again on the same addresses.

Where a pod is started: here. `PodRuntime.reconcile` gives the Pod its address, then starts its
echo servers (`_ensure_echo`) or its containers (`_sync_process_pod`, which makes the Pod's
`ProcessPod` in processes.py, the runtime that runs each container as a process forked from the
node's zygote, isthmus.procs).

In runc mode (`runc`, `network` given) every Pod, echo Pods too, goes to `_reconcile_runc`: its
network namespace attached by CNI gives its IP (no address pool here), then its containers run
under runc (runc.py); the namespace is detached and deleted when the Pod is gone, and what a
previous kube-lite left in runc's state is stopped before any Pod starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import shutil
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.local.kubelite import ECHO_WORKLOAD, FIELD_MANAGER, WORKLOAD_ANNOTATION
from isthmus.local.kubelite.containers import base_environment, get_object
from isthmus.local.kubelite.echo import EchoIdentity, EchoServer
from isthmus.local.kubelite.ipam import IPPool, PoolFull
from isthmus.local.kubelite.logs import PodLogs
from isthmus.local.kubelite.processes import (
    ENTRY,
    POD_PRELOAD,
    Leftover,
    ProcessOptions,
    ProcessPod,
    find_leftovers,
    stop_leftovers,
)
from isthmus.local.kubelite.runc import RuncNode, RuncPod
from isthmus.local.kubelite.termination import (
    MIN_KILL_GRACE,
    endpoints_withdrawn,
    grace_seconds,
    pre_stop,
)
from isthmus.procs.entry import enabled as zygote_enabled
from isthmus.procs.zygote import Zygote
from isthmus.runtime import Controller, EventRecorder, Informer, Result, split_key
from isthmus.runtime.events import container_field_path

if TYPE_CHECKING:
    from isthmus.local.network.cni import PodNetwork

__all__ = [
    "HOST_IP",
    "PodRuntime",
    "container_ports",
    "desired_pod_status",
    "format_time",
    "is_echo",
    "node_name",
    "status_up_to_date",
]

log = logging.getLogger(__name__)

HOST_IP = "127.0.0.1"
RETRY_SECONDS = 5.0
_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
"""In the kubelet's order; PodReadyToStartContainers (on by default since 1.29): the sandbox and its
address are there, which they are whenever kube-lite posts a status."""
_ALWAYS_TRUE = ("PodReadyToStartContainers", "PodScheduled", "Initialized")

Obj = dict[str, Any]


def format_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_name(cluster: str) -> str:
    """A kube-lite's node when not told another (--node-name): a one-node cluster's, or node 1 of
    several (local/plan.py's node_name names the others)."""
    return f"{cluster}-node"


def is_echo(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(WORKLOAD_ANNOTATION) == ECHO_WORKLOAD)


def container_ports(pod: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(containerPort, protocol) of every container port of the Pod, without duplicates."""
    seen: set[tuple[int, str]] = set()
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("containerPort"):
                seen.add((int(p["containerPort"]), str(p.get("protocol") or "TCP")))
    return sorted(seen)


def desired_pod_status(
    pod: Mapping[str, Any],
    ip: str,
    *,
    now: str,
    ready: bool = True,
    message: str | None = None,
    containers: list[Obj] | None = None,
    phase: str = "Running",
    host_ip: str | None = None,
    init_containers: list[Obj] | None = None,
) -> Obj:
    """The status a kubelet would report for the running Pod; timestamps already stored are kept
    so that re-running this gives the same answer (no write loops)."""
    current = pod.get("status") or {}
    old_conds = {c.get("type"): c for c in current.get("conditions") or []}

    def cond(ctype: str, ok: bool) -> Obj:
        status = "True" if ok else "False"
        old = old_conds.get(ctype) or {}
        c: Obj = {
            "type": ctype,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": old.get("lastTransitionTime") if old.get("status") == status else now,
        }
        c["lastTransitionTime"] = c["lastTransitionTime"] or now
        if not ok:
            if phase in ("Succeeded", "Failed"):
                c["reason"] = "PodCompleted"
            elif ctype == "Initialized":
                c["reason"] = "ContainersNotInitialized"
                c["message"] = f"containers with incomplete status: [{' '.join(incomplete)}]"
            else:
                c["reason"] = "ContainersNotReady"
                c["message"] = message or "containers are not ready"
        return c

    incomplete = [
        str(c.get("name")) for c in init_containers or []
        if ((c.get("state") or {}).get("terminated") or {}).get("exitCode") != 0
    ]
    old_cs = {c.get("name"): c for c in current.get("containerStatuses") or []}
    statuses: list[Obj] = list(containers) if containers is not None else []
    for c in (pod.get("spec") or {}).get("containers") or [] if containers is None else []:
        old = old_cs.get(c.get("name")) or {}
        started = ((old.get("state") or {}).get("running") or {}).get("startedAt") or now
        statuses.append(
            {
                "name": c.get("name"),
                "ready": ready,
                "started": True,
                "state": {"running": {"startedAt": started}},
                "image": c.get("image") or "",
                "imageID": "",
                "restartCount": 0,
            }
        )
    return {
        "phase": phase,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": host_ip or HOST_IP,
        "hostIPs": [{"ip": host_ip or HOST_IP}],
        "startTime": current.get("startTime") or now,
        "conditions": [
            cond(t, not incomplete if t == "Initialized" else ready or t in _ALWAYS_TRUE) for t in _CONDITIONS
        ],
        "containerStatuses": statuses,
        **({"initContainerStatuses": init_containers} if init_containers is not None else {}),
    }


def status_up_to_date(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether every field of ``desired`` is already stored (server-side extras are ignored)."""

    def norm(v: Any) -> Any:
        if isinstance(v, Mapping):  # absent, null and {} are one to the server
            return {k: norm(x) for k, x in v.items() if x is not None and x != {}}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return all(norm(current.get(k)) == norm(v) for k, v in desired.items())


def _remove_orphaned_dirs(pods_dir: Path, known: set[str]) -> None:
    """The dirs of Pods that no longer exist, as the kubelet's cleanupOrphanedPodDirs (a rootfs
    still mounted in one is unmounted first: nothing is removed through a mount)."""
    from isthmus.local.kubelite.runc import unmount_all_under

    for d in pods_dir.iterdir() if pods_dir.is_dir() else ():
        if d.is_dir() and d.name not in known:
            unmount_all_under(d)
            shutil.rmtree(d, ignore_errors=True)
            log.info("orphaned pod dir removed", extra={"dir": str(d)})


def sandbox_id(netns_name: str) -> str:
    """A Pod sandbox's id as containerd names one (64 hex), fixed by its namespace's name, so a
    restarted kube-lite finds the CNI state it left."""
    return hashlib.sha256(netns_name.encode()).hexdigest()


def node_zygote(cluster: str, options: ProcessOptions) -> Zygote:
    """The fork server of a node's process pods: it dies with kube-lite, and the pods with it."""
    root = options.root_dir
    return Zygote(POD_PRELOAD, ENTRY, title=["--for", f"kube-lite {cluster}", str(root)], pdeathsig=True,
                  env=base_environment(str(root)))


class PodRuntime:
    """Keyed by Pod. The address pool and the running echo servers live here."""

    def __init__(
        self,
        client: AsyncClient,
        pods: Informer[Pod],
        recorder: EventRecorder,
        *,
        cluster: str,
        pod_cidr: str,
        workers: int = 4,
        logs: PodLogs | None = None,
        processes: ProcessOptions | None = None,
        slices: Informer[EndpointSlice] | None = None,
        runc: RuncNode | None = None,
        network: PodNetwork | None = None,
        node: str | None = None,
        bind: bool = True,
    ) -> None:
        """node: the Node this kubelet is (default ``<cluster>-node``); only Pods bound to it run
        here. bind: also bind unscheduled Pods to this node, as a one-node cluster with no
        scheduler did (False once a scheduler binds them).
        processes: how Pods of the Isthmus image run (default: pod dirs in a new temporary dir);
        slices: the EndpointSlices a deleted Pod's endpoints must be withdrawn from before its
        containers are signalled (termination.py); None: signalled at once.
        runc, network: runc mode — every Pod (echo Pods too) runs as runc containers in a network
        namespace of its own, attached by CNI (`network`), which gives its IP (no ipam here)."""
        self.runc = runc
        self.network = network
        self._sandboxes: dict[str, tuple[str, str]] = {}
        """runc mode: Pod uid → its network namespace's name and IP (attached)."""
        self.client = client
        self.pods = pods
        self.slices = slices
        self.cluster = cluster
        self.node = node or node_name(cluster)
        # kube's kubelet reports as "kubelet" from its node (source.host), not the machine's name
        self.recorder = recorder.child("kubelet", host=self.node, instance=self.node)
        self.bind = bind
        self.logs = logs if logs is not None else PodLogs()
        self.ips = IPPool(ipaddress.IPv4Network(pod_cidr))  # validated by the caller (run.validate_config)
        self.servers: dict[str, EchoServer] = {}
        self._uids: dict[str, str | None] = {}
        self._process_options = processes
        self.workers: dict[str, ProcessPod] = {}
        """Process pods by key."""
        self._zygote: Zygote | None = None
        self._scratch: Path | None = None
        """The temporary pod root this node made for itself (removed when it closes)."""
        self._retiring: set[asyncio.Task[None]] = set()
        self._terminating: dict[str, str] = {}
        """Pods (key → uid) whose deletion is under way: their containers are being stopped."""
        self._draining: dict[str, EchoServer] = {}
        """Echo servers of deleted Pods, still draining."""
        self._leftovers: dict[str, list[Leftover]] = {}
        """Processes a previous kube-lite left running, by Pod uid (see `find_leftovers`)."""
        self.controller = Controller("kubelite-pods", self.reconcile, workers=workers)
        self.controller.watch(pods)

    def rebuild(self) -> None:
        """Reserve the address of every stored Pod, oldest first; call before :meth:`run`."""
        items = sorted(
            (p.to_dict() for p in self.pods.cache.list() if self._ours(p.to_dict())),
            key=lambda p: str(p["metadata"].get("creationTimestamp") or ""),
        )
        for p in items:
            ip = (p.get("status") or {}).get("podIP")
            if ip:
                self.ips.reserve(str(ip), f"{p['metadata'].get('namespace')}/{p['metadata']['name']}")
        log.info("pod addresses rebuilt", extra={"pod_ips": len(self.ips)})
        if self._process_options is not None:  # as the kubelet's cleanupOrphanedPodDirs
            known = {str(p["metadata"].get("uid")) for p in items}
            pods_dir = self._process_options.root_dir / "pods"
            # What the previous kube-lite ran is still stopping (SIGTERM when it died): each Pod's
            # successors wait for its predecessors to be gone (they hold its address and ports);
            # those of Pods deleted meanwhile are stopped here.
            self._leftovers = find_leftovers(pods_dir) if self.runc is None else {}
            for uid in [u for u in self._leftovers if u not in known]:
                gone = self._leftovers.pop(uid)
                self._background(f"orphan/{uid}", None, stop_leftovers(gone, self.process_options.stop_grace_cap))
            if self._leftovers:
                log.info("processes of the previous kube-lite still running",
                         extra={"pods": len(self._leftovers), "pids": [x.pid for v in self._leftovers.values() for x in v]})
            if self.runc is None:  # runc mode: once their containers are gone (_runc_leftovers)
                _remove_orphaned_dirs(pods_dir, known)

    async def run(self) -> None:
        if self.runc is not None:
            await self._runc_leftovers()
        elif self._process_options is not None and self.zygote is not None:  # a node that runs process pods:
            self.zygote.prestart()  # the zygote's imports take seconds, not on the first Pod's path
        await self.controller.run()

    async def _runc_leftovers(self) -> None:
        """runc mode, before any Pod starts: the containers and pod namespaces a previous kube-lite
        left. Those of Pods that still exist are stopped before their successors start (they
        restart, restartCount + 1, as after a node reboot); the others are stopped and removed."""
        assert self.runc is not None
        known = {str(p.to_dict()["metadata"].get("uid")) for p in self.pods.cache.list()}
        pods_dir = self.process_options.root_dir / "pods"
        found = await self.runc.runtime.leftovers(pods_dir)
        cap = self.process_options.stop_grace_cap
        for uid, containers in found.items():
            log.info("containers of the previous kube-lite found", extra={"pod_uid": uid, "containers": len(containers)})
            await self.runc.runtime.stop_leftovers(containers, cap if uid in known else 0.0)
            if uid not in known:
                self.runc.runtime.remove_pod_cgroups(uid)
        await asyncio.to_thread(_remove_orphaned_dirs, pods_dir, known)
        if self.network is not None:
            from isthmus.runtime import netns

            prefix = f"{self._node_netns_name}-"
            shorts = {self._pod_netns(u): u for u in known}
            for name in netns.names():
                rest = name[len(prefix):]
                if name.startswith(prefix) and len(rest) == 12 and all(ch in "0123456789abcdef" for ch in rest) \
                        and name not in shorts:
                    with contextlib.suppress(Exception):
                        await self.network.detach(name, sandbox_id(name))
                    log.info("pod network namespace of a deleted Pod removed", extra={"netns": name})

    @property
    def _node_netns_name(self) -> str:
        assert self.runc is not None
        return self.runc.node_netns.rsplit("/", 1)[-1]

    def _pod_netns(self, uid: str) -> str:
        """`<node netns>-<first 12 hex of the uid>`: network/plan.py's pod_netns_name."""
        return f"{self._node_netns_name}-{uid.replace('-', '')[:12]}"

    async def _sandbox(self, pod: Obj) -> str:
        """runc mode: the Pod's network namespace attached to the node's bridge; its IP (kept from
        the status when kube-lite restarts and the namespace is still there). CNIError on failure."""
        assert self.runc is not None and self.network is not None
        from isthmus.runtime import netns

        uid = str(pod["metadata"].get("uid"))
        name = self._pod_netns(uid)
        ip = (pod.get("status") or {}).get("podIP")
        if uid in self._sandboxes:  # the cache may not show the IP posted a moment ago yet
            return self._sandboxes[uid][1]
        if ip and await asyncio.to_thread(netns.exists, name):
            self._sandboxes[uid] = (name, str(ip))
            return str(ip)
        _, new_ip = await self.network.attach(name, sandbox_id(name))
        self._sandboxes[uid] = (name, new_ip)
        log.info("pod network attached", extra={"netns": name, "ip": new_ip})
        return new_ip

    async def _drop_sandbox(self, uid: str) -> None:
        """CNI DEL and the namespace gone (the Pod is gone and nothing of it runs)."""
        if self.network is None:
            return
        name = self._sandboxes.pop(uid, (self._pod_netns(uid), ""))[0]
        try:
            await self.network.detach(name, sandbox_id(name))
        except Exception as e:
            log.warning("pod network not removed", extra={"netns": name, "error": str(e)})

    async def close(self) -> None:
        """Stop every echo server and process (kube-lite is shutting down; the Pods stay as they are,
        and their processes start again, restartCount + 1, when kube-lite does)."""
        for key in list(self.servers):
            await self._stop(key)
        workers, self.workers = list(self.workers.values()), {}
        cap = self.process_options.stop_grace_cap
        await asyncio.gather(*(w.stop(min(float(w._grace()), cap)) for w in workers), return_exceptions=True)
        if self._retiring:
            await asyncio.wait(list(self._retiring), timeout=cap + 1)
        for task in list(self._retiring):  # a long grace period does not hold kube-lite's stop
            task.cancel()
        for server in list(self._draining.values()):
            await server.stop()
        self._draining.clear()
        if self._zygote is not None:
            await self._zygote.close()
        self.logs.close()
        if self._scratch is not None:  # its pod dirs would never be found again
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @property
    def process_options(self) -> ProcessOptions:
        if self._process_options is None:
            root = self._scratch = Path(tempfile.mkdtemp(prefix=f"isthmus-kube-lite-{self.cluster}-"))
            url = self.client._client._client.base_url  # where our client reaches the apiserver
            port = url.port or (443 if url.scheme == "https" else 80)
            self._process_options = ProcessOptions(root_dir=root, api_host=url.host or "127.0.0.1", api_port=port)
        return self._process_options

    @property
    def zygote(self) -> Zygote | None:
        """The fork server of this node's process pods (started with the first one), or None when
        ISTHMUS_ZYGOTE=0. It dies with kube-lite, and the pods with it, as they would by exec."""
        if self._zygote is None and zygote_enabled():
            self._zygote = self.process_options.zygote or node_zygote(self.cluster, self.process_options)
        return self._zygote

    def _retire(self, key: str, worker: ProcessPod, *, delete_uid: str | None = None) -> None:
        """Stop a Pod's processes in the background (its grace period may be long); then release
        its address (unless a new incarnation holds it) and, for a graceful deletion, remove the
        object as the kubelet does (grace 0, once the containers are gone). A graceful deletion
        stops them in the kubelet's order (termination.py); a Pod already gone, at once."""

        async def retire() -> None:
            if delete_uid is not None:
                deadline = asyncio.get_running_loop().time() + grace_seconds(worker.pod)
                await self._until_withdrawn(key, delete_uid, deadline)
                await worker.terminate(deadline)
                await self._finish_deletion(key, delete_uid, always=True)
            else:
                await worker.stop(remove=True, reason="deleted")
            if self.runc is not None:
                await self._drop_sandbox(worker.uid)
            self._release_if_gone(key)

        self._background(key, delete_uid, retire())

    def _terminate_echo(self, key: str, server: EchoServer, pod: Obj) -> None:
        """A deleted echo Pod: its endpoints withdrawn, its preStop hooks run, then its servers
        drain and stop (their SIGTERM), within the grace period; then the object goes."""
        meta = pod["metadata"]
        uid = str(meta.get("uid"))
        for c in (pod.get("spec") or {}).get("containers") or []:
            self.recorder.normal(pod, "Killing", f"Stopping container {c.get('name')}",
                                 field_path=container_field_path(str(c.get("name"))))

        async def terminate() -> None:
            deadline = asyncio.get_running_loop().time() + grace_seconds(pod)
            self._draining[key] = server
            try:
                await self._until_withdrawn(key, uid, deadline)
                await self._pre_stop_hooks(pod, server.ip, deadline)
                await server.terminate(max(deadline - asyncio.get_running_loop().time(), MIN_KILL_GRACE))
            finally:
                if self._draining.get(key) is server:
                    del self._draining[key]
            log.info("echo servers stopped", extra={"pod": key, "ip": server.ip})
            self._close_logs(key)
            await self._finish_deletion(key, uid, always=bool(meta.get("deletionGracePeriodSeconds"))
                                        and not meta.get("finalizers"))
            self._release_if_gone(key)

        self._background(key, uid, terminate())

    def _background(self, key: str, uid: str | None, work: Any) -> None:
        if uid is not None:
            self._terminating[key] = uid
        task = asyncio.create_task(work, name=f"kube-lite stop {key}")
        self._retiring.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._retiring.discard(t)
            if uid is not None and self._terminating.get(key) == uid:
                del self._terminating[key]
            if not t.cancelled() and t.exception() is not None:
                log.warning("pod not stopped cleanly", extra={"pod": key, "error": str(t.exception())})

        task.add_done_callback(done)

    async def _until_withdrawn(self, key: str, uid: str, deadline: float) -> None:
        """Until no slice calls the Pod ready (or the grace period is over)."""
        if self.slices is None:
            return
        slices, ns = self.slices, split_key(key)[0] or ""
        changed = asyncio.Event()
        handlers = slices.add_handler(on_update=lambda old, new: changed.set(), on_delete=lambda s: changed.set())
        try:
            loop = asyncio.get_running_loop()
            while not endpoints_withdrawn(slices.cache.list_namespace(ns), uid):
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(deadline - loop.time(), 0.0)):
                        await changed.wait()
                if loop.time() >= deadline:
                    return
        finally:
            slices.remove_handler(handlers)

    async def _pre_stop_hooks(self, pod: Obj, ip: str, deadline: float) -> None:
        """Every container's preStop hook, at once (an echo Pod's: run here, as its probes are)."""
        loop = asyncio.get_running_loop()

        async def one(c: Obj) -> None:
            hook = (c.get("lifecycle") or {}).get("preStop")
            if not hook:
                return
            result = await pre_stop(hook, host=ip, container=c, env={}, cwd=None, seconds=deadline - loop.time())
            if not result.ok:
                self.recorder.warning(pod, "FailedPreStopHook", f"PreStopHook failed: {result.message}")

        await asyncio.gather(*(one(c) for c in (pod.get("spec") or {}).get("containers") or []))

    async def _finish_deletion(self, key: str, uid: str, *, always: bool) -> None:
        """The containers are gone: remove this incarnation of the Pod (grace 0), as the kubelet does."""
        current = self.pods.cache.get(key)
        if always and current is not None and current.to_dict()["metadata"].get("uid") == uid:
            ns, name = split_key(key)
            with contextlib.suppress(ApiError):
                await self.client.delete(Pod, name, namespace=ns, grace_period=0)

    def _release_if_gone(self, key: str) -> None:
        if key not in self.workers and key not in self.servers and key not in self._draining \
                and self.pods.cache.get(key) is None:
            self.logs.remove(key)
            self.ips.release_owner(key)

    async def _stop(self, key: str) -> None:
        server = self.servers.pop(key, None)
        self._uids.pop(key, None)
        if server is not None:
            await server.stop()
            log.info("echo servers stopped", extra={"pod": key, "ip": server.ip})

    def _ours(self, pod: Obj) -> bool:
        """Bound to this node, or (binding here) not bound yet: the kubelet's pod source is
        ``spec.nodeName=<its node>``."""
        bound = (pod.get("spec") or {}).get("nodeName")
        return bool(bound == self.node or (not bound and self.bind))

    async def reconcile(self, key: str) -> Result | None:
        ns, name = split_key(key)
        cached = self.pods.cache.get(key)
        # another node's (or not scheduled yet): as if gone, so anything of it here goes
        pod = cached if cached is not None and self._ours(cached.to_dict()) else None
        if pod is None:
            await self._stop(key)
            worker = self.workers.pop(key, None)
            if worker is not None:
                self._retire(key, worker)  # releases the address once the processes are gone
                return None
            self.logs.remove(key)
            self.ips.release_owner(key)
            return None
        data = pod.to_dict()
        meta, spec, status = data["metadata"], data.get("spec") or {}, data.get("status") or {}
        worker = self.workers.get(key)
        if worker is not None and worker.uid != meta.get("uid"):  # a new Pod of the same name
            self._retire(key, self.workers.pop(key))
            worker = None
        if meta.get("deletionTimestamp") is not None:
            if self._terminating.get(key) == meta.get("uid"):
                return None  # its containers are being stopped; the object goes once they are
            server = self.servers.pop(key, None)
            self._uids.pop(key, None)
            if server is not None:
                self._terminate_echo(key, server, data)
                return None
            if worker is not None:
                worker.update(data)
                self._retire(key, self.workers.pop(key), delete_uid=meta.get("uid"))
                return None
            self._close_logs(key)
            if meta.get("deletionGracePeriodSeconds") and not meta.get("finalizers"):
                # A graceful deletion of a Pod with nothing left running here: finish it, as a kubelet
                # does once the containers are gone (grace 0, for this incarnation only).
                with contextlib.suppress(ApiError):
                    await self.client.delete(Pod, name, namespace=ns, grace_period=0)
            return None
        if status.get("phase") in ("Succeeded", "Failed"):
            await self._stop(key)
            self._close_logs(key)
            return None

        if not spec.get("nodeName"):  # no scheduler in this cluster: bind to our one node
            # through pods/binding, as a scheduler does: an update may not change spec.nodeName
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns,
                                                                          "uid": meta.get("uid")},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}
            resp = await self.client._client._client.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding",
                                                          json=binding)
            # bound: the watch brings the bound Pod back here; refused (bound meanwhile, gone): look again
            return None if resp.status_code < 300 else Result(requeue_after=RETRY_SECONDS)

        ip = status.get("podIP")
        if self.runc is not None:
            return await self._reconcile_runc(key, pod, data)
        if spec.get("hostNetwork"):
            ip = ip or HOST_IP
        elif ip:
            self.ips.reserve(str(ip), key)  # refused only for a foreign address: keep it, not ours
        else:
            try:
                ip = self.ips.allocate(key)
            except PoolFull:
                self.recorder.warning(
                    pod, "FailedScheduling", f"the pod CIDR {self.ips.network} has no free address left"
                )
                return Result(requeue_after=30.0)
        for other in self.ips.held(key):
            if other != ip:
                self.ips.release(other, key)

        ready, message = True, None
        pod_log = self.logs.pod(key, meta.get("uid"))
        for c in spec.get("containers") or []:
            pod_log.container(str(c.get("name")))
        if not is_echo(data):  # Isthmus containers run as processes; other images are not pulled
            await self._stop(key)
            await self._sync_process_pod(key, data, str(ip))
            return None
        if is_echo(data):
            ready, message = await self._ensure_echo(key, data, str(ip))
            if message:
                self.recorder.warning(pod, "EchoServerFailed", message)
        else:
            await self._stop(key)

        desired = desired_pod_status(
            data, str(ip), now=format_time(datetime.now(UTC)), ready=ready, message=message
        )
        if not status_up_to_date(data.get("status") or {}, desired):
            await self.client.patch(
                Pod.Status,
                name,
                {"status": desired},
                namespace=ns,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )
        return None if ready else Result(requeue_after=RETRY_SECONDS)

    async def _reconcile_runc(self, key: str, pod: Pod, data: Obj) -> Result | None:
        """runc mode: the sandbox (network namespace, CNI) then the containers, echo Pods too."""
        assert self.runc is not None
        spec = data.get("spec") or {}
        from isthmus.local.kubelite.oci import SysctlForbiddenError, check_sysctls

        try:  # the kubelet's admission: a Pod it cannot honour is rejected whole, never started without it
            check_sysctls(data)
        except SysctlForbiddenError as e:
            self.recorder.warning(pod, e.reason, str(e))
            ns, name = split_key(key)
            await self.client.patch(Pod.Status, name, {"status": {
                "phase": "Failed", "reason": e.reason, "message": f"Pod was rejected: {e}"}},
                namespace=ns, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER)
            return None
        if spec.get("hostNetwork"):
            ip = self.runc.node_address
        else:
            try:
                ip = await self._sandbox(data)
            except Exception as e:
                from isthmus.local.network.cni import CNIError

                why = e.sandbox_message(sandbox_id(self._pod_netns(str(data["metadata"].get("uid"))))) \
                    if isinstance(e, CNIError) else str(e)
                self.recorder.warning(pod, "FailedCreatePodSandBox",
                                      f"Failed to create pod sandbox: rpc error: code = Unknown desc = {why}")
                return Result(requeue_after=RETRY_SECONDS)
        pod_log = self.logs.pod(key, data["metadata"].get("uid"))
        for c in spec.get("containers") or []:
            pod_log.container(str(c.get("name")))
        await self._sync_process_pod(key, data, ip)
        return None

    async def _sync_process_pod(self, key: str, data: Obj, ip: str) -> None:
        """Start the Pod's processes (first time) and post the status they report."""
        ns, name = split_key(key)
        stored = data.get("status") or {}
        data = {**data, "status": dict(stored)}  # as the containers will see it (downward API)
        status = data["status"]
        host_ip = self.runc.node_address if self.runc is not None else HOST_IP
        status.setdefault("podIP", ip)
        status.setdefault("podIPs", [{"ip": ip}])
        status.setdefault("hostIP", host_ip)
        status.setdefault("hostIPs", [{"ip": host_ip}])
        worker = self.workers.get(key)
        if worker is None:
            runc = None
            if self.runc is not None:
                uid = str(data["metadata"].get("uid"))
                netns_path = self.runc.node_netns if (data.get("spec") or {}).get("hostNetwork") \
                    else f"/run/netns/{self._pod_netns(uid)}"
                runc = RuncPod(self.runc, self.recorder, data, self.process_options.root_dir / "pods" / uid,
                               netns_path=netns_path, lookup=self._lookup, echo=is_echo(data))
            worker = ProcessPod(
                self.client, self.recorder, self.logs, self.process_options, key=key, pod=data, node=self.node,
                changed=lambda: self.controller.enqueue(key), zygote=self.zygote if runc is None else None,
                predecessors=self._leftovers.pop(str(data["metadata"].get("uid")), []), runc=runc,
            )
            self.workers[key] = worker
            worker.start()
        else:
            worker.update(data)
            if worker.runc is not None:
                worker.runc.pod = data
        current = worker.status()
        statuses = current["containerStatuses"]
        unready = [str(c["name"]) for c in statuses if not c["ready"]]
        desired = desired_pod_status(
            data, ip, now=format_time(datetime.now(UTC)), ready=bool(statuses) and not unready,
            message=f"containers with unready status: [{' '.join(unready)}]", containers=statuses,
            phase=current["phase"], init_containers=current.get("initContainerStatuses"), host_ip=host_ip,
        )
        if not status_up_to_date(stored, desired):
            await self.client.patch(
                Pod.Status, name, {"status": desired}, namespace=ns, patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )

    async def _ensure_echo(self, key: str, pod: Obj, ip: str) -> tuple[bool, str | None]:
        """Start (or restart, when the address, ports or Pod incarnation changed) the echo servers."""
        meta = pod["metadata"]
        ports = container_ports(pod)
        server = self.servers.get(key)
        wanted = EchoServer(EchoIdentity(meta["name"], meta.get("namespace") or "", self.cluster), ip, ports)
        if (
            server is not None
            and server.ip == ip
            and server.ports == wanted.ports
            and self._uids.get(key) == meta.get("uid")
            and server.listening
        ):
            return True, None
        await self._stop(key)
        pod_log = self.logs.pod(key, meta.get("uid"))
        by_port: dict[tuple[int, str], str] = {}
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("containerPort"):
                    by_port.setdefault((int(p["containerPort"]), str(p.get("protocol") or "TCP")), str(c["name"]))
            if not c.get("ports"):
                pod_log.container(str(c.get("name"))).write("echo: no container ports to listen on")
        containers: list[Obj] = (pod.get("spec") or {}).get("containers") or []
        first = str(containers[0].get("name")) if containers else ""

        def say(port: int, protocol: str, line: str) -> None:
            pod_log.container(by_port.get((port, protocol), first)).write(line)

        wanted.say = say
        try:
            await wanted.start()
        except OSError as e:
            msg = f"echo server cannot listen on {ip}: {e.strerror or e}"
            say(0, "", f"echo: {msg}")
            log.warning("echo server failed", extra={"pod": key, "error": msg})
            return False, msg
        self.servers[key] = wanted
        if self._uids.get(key) != meta.get("uid"):  # a new Pod's containers, reported as a kubelet does
            for c in containers:
                where = container_field_path(str(c.get("name")))
                self.recorder.normal(pod, "Pulled", f'Container image "{c.get("image")}" already present on machine',
                                     field_path=where)
                self.recorder.normal(pod, "Created", f"Created container: {c.get('name')}", field_path=where)
                self.recorder.normal(pod, "Started", f"Started container {c.get('name')}", field_path=where)
        self._uids[key] = meta.get("uid")
        log.info("echo servers listening", extra={"pod": key, "ip": ip, "ports": wanted.ports})
        return True, None

    async def _lookup(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A ConfigMap or Secret for a runc Pod's volumes (None when it does not exist)."""
        return await get_object(self.client, kind, namespace, name)

    def runc_pod(self, namespace: str, name: str) -> RuncPod | None:
        """The runc side of a Pod this node runs (kubectl exec, attach, port-forward)."""
        worker = self.workers.get(f"{namespace}/{name}")
        return worker.runc if worker is not None else None

    def _close_logs(self, key: str) -> None:
        """The containers stopped: followers of their logs reach the end; the lines stay readable."""
        current = self.logs.get(key)
        if current is not None:
            current.close()
