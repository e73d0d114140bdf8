"""The Node: what a kubelet registers and keeps fresh for the machine it runs on.

Each kube-lite is one node of its cluster (``<cluster>-node`` for the first, ``<cluster>-node-<k>`` for the
others: `isthmus up --nodes N`), the kubelet of the Pods bound to it. At
start it registers the Node (labels, ``spec.podCIDR``) and from then on keeps its status as a
kubelet does: addresses (InternalIP and Hostname), the kubelet endpoint's port in
``status.daemonEndpoints.kubeletEndpoint.Port`` (where the apiserver proxies ``kubectl logs``),
capacity and allocatable (this machine's CPUs and memory, 110 pods), nodeInfo, and the
conditions with a heartbeat every ``HEARTBEAT_SECONDS``; its Lease in ``kube-node-lease`` is
renewed as often. A Node deleted by someone is registered again at the next beat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import uuid
from datetime import UTC, datetime
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from isthmus.kube.helpers import is_not_found
from isthmus.local.kubelite import FIELD_MANAGER
from isthmus.local.kubelite.pods import HOST_IP, format_time

__all__ = ["HEARTBEAT_SECONDS", "KUBELET_VERSION", "NodeAgent", "node_object", "node_status"]

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0
"""kubelet's nodeStatusUpdateFrequency and lease renew interval (it renews every 10 s)."""
LEASE_SECONDS = 40
"""kubelet's nodeLeaseDurationSeconds."""
NODE_LEASE_NAMESPACE = "kube-node-lease"
KUBELET_VERSION = "v1.32.0-isthmus"
MAX_PODS = 110

Obj = dict[str, Any]


def _arch() -> str:
    m = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(m, m or "amd64")


def _memory_ki() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    return 0


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def node_object(name: str, pod_cidr: str, *, control_plane: bool = True) -> Obj:
    """The Node as the kubelet registers it; spec.podCIDR is what node IPAM would give it (the
    plan's slice: the kubelet's --pod-cidr). Only the node that runs the cluster's controllers
    carries the control-plane role."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _arch(),
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": _arch(),
    }
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
    }


def node_status(name: str, kubelet_port: int, *, now: str, old: Obj | None = None, address: str = HOST_IP) -> Obj:
    """The status a kubelet posts: Ready, no pressure, this machine's capacity; transition times kept."""
    old_conds = {c.get("type"): c for c in (old or {}).get("conditions") or []}

    def cond(ctype: str, status: str, reason: str, message: str) -> Obj:
        prev = old_conds.get(ctype) or {}
        return {
            "type": ctype,
            "status": status,
            "lastHeartbeatTime": now,
            "lastTransitionTime": prev.get("lastTransitionTime") if prev.get("status") == status else now,
            "reason": reason,
            "message": message,
        }

    memory = _memory_ki()
    resources = {"cpu": str(os.cpu_count() or 1), "memory": f"{memory}Ki", "pods": str(MAX_PODS),
                 "ephemeral-storage": "0"}
    uname = platform.uname()
    return {
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "capacity": resources,
        "allocatable": dict(resources),
        "nodeInfo": {
            "machineID": _read("/etc/machine-id"),
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "bootID": _read("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": uname.release,
            "osImage": platform.freedesktop_os_release().get("PRETTY_NAME", "Linux")
            if hasattr(platform, "freedesktop_os_release") and os.path.exists("/etc/os-release") else "Linux",
            "containerRuntimeVersion": "isthmus-kube-lite://1",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": _arch(),
        },
    }


def _micro_time(t: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with six fractional digits."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Registers the Node and beats its status and Lease until cancelled."""

    def __init__(self, client: AsyncClient, *, name: str, pod_cidr: str, kubelet_port: int,
                 address: str = HOST_IP, control_plane: bool = True) -> None:
        """address: the InternalIP (runc mode: the node's address in its network namespace);
        control_plane: the node runs the cluster's controllers (its role label)."""
        self.control_plane = control_plane
        self.address = address
        self.client = client
        self.name = name
        self.pod_cidr = pod_cidr
        self.kubelet_port = kubelet_port
        self.registered = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                await self.beat()
                self.registered.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the apiserver away or refusing: keep beating, as a kubelet
                log.warning("node status not posted", extra={"node": self.name, "error": str(e)})
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def beat(self) -> None:
        try:
            current = (await self.client.get(Node, self.name)).to_dict()
        except ApiError as e:
            if not is_not_found(e):
                raise
            created = await self.client.create(
                cast(Node, Node.from_dict(node_object(self.name, self.pod_cidr, control_plane=self.control_plane))), field_manager=FIELD_MANAGER
            )
            current = created.to_dict()
            log.info("node registered", extra={"node": self.name})
        now = format_time(datetime.now(UTC))
        status = node_status(self.name, self.kubelet_port, now=now, old=current.get("status"), address=self.address)
        await self.client.patch(
            Node.Status, self.name, {"status": status}, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER
        )
        await self._renew_lease(current)

    async def _renew_lease(self, node: Obj) -> None:
        now = _micro_time(datetime.now(UTC))
        owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": node["metadata"].get("uid")}
        try:
            await self.client.patch(
                Lease, self.name, {"spec": {"holderIdentity": self.name, "renewTime": now}},
                namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER,
            )
        except ApiError as e:
            if not is_not_found(e):
                raise
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
            }
            await self.client.create(cast(Lease, Lease.from_dict(lease)), field_manager=FIELD_MANAGER)
