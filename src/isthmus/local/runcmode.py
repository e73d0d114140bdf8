"""What `isthmus up --runtime runc` adds to the local clusterset: the prerequisites it checks, and
how its parts are told where they run.

The control plane stays on the host as a cloud gives it (apiservers on 127.0.0.1, kube-lite as the
node's agent, the supervisor); everything else — every pod, the registry, the demo's outside
servers — lives in network namespaces `up` makes (local/network/), reached from the host only
through the relay part (`isthmus netrelay`) and `isthmus shell`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from isthmus.local.plan import PlanError

if TYPE_CHECKING:
    from isthmus.local.network.plan import FabricPlan

CNI_BIN = Path("/usr/lib/cni")
REQUIRED_COMMANDS = ("runc", "ip", "nft", "skopeo", "umoci", "docker-registry", "mmdebstrap")
"""Debian's packages runc mode runs (the Makefile installs them): the OCI runtime, iproute2 and
nftables for the namespaces and the service proxy, skopeo and umoci for images, the registry, and
mmdebstrap for building the images."""
REQUIRED_CNI = ("bridge", "host-local", "loopback")


def missing_prerequisites() -> list[str]:
    """What this machine lacks for runc mode, one phrase each (empty: nothing)."""
    out: list[str] = []
    if os.geteuid() != 0:
        out.append("root (runc mode makes network namespaces, mounts and cgroups, as a kubelet does)")
    out += [f"`{c}`" for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    out += [f"the CNI plugin {CNI_BIN / p}" for p in REQUIRED_CNI if not (CNI_BIN / p).exists()]
    return out


def check_prerequisites() -> None:
    """Refuse runc mode up front, naming everything missing (PlanError: exit code 2 at the CLI)."""
    missing = missing_prerequisites()
    if missing:
        raise PlanError("--runtime runc needs " + ", ".join(missing)
                        + " (`make install` installs the Debian packages: runc, iproute2, nftables, skopeo, "
                          "umoci, docker-registry, mmdebstrap, containernetworking-plugins)")


# --- the network ------------------------------------------------------------------------------------

MIRRORED_REGISTRIES = ("docker.io", "ghcr.io", "registry.k8s.io", "quay.io")
"""Registries kube-lite reads from the clusterset's own registry instead (containerd's mirrors, as
kind configures them): images keep their usual names and no pull leaves the clusterset."""


def fabric_of(root: Path, clusters: int, nodes: int = 1) -> FabricPlan:
    from isthmus.local.network.plan import fabric_plan

    return fabric_plan(root, clusters, nodes=nodes)


def ensure_network(root: Path, clusters: int, nodes: int = 1) -> FabricPlan:
    """Make the clusterset's namespaces (idempotent), and make each node's whole egress range local
    there, as 127.0.0.0/8 is on the host: the gateway binds any claimed source IP of its class
    without adding addresses one by one, and the fabric routes the answers back to that node."""
    from isthmus.local.network import fabric
    from isthmus.runtime import netns

    fp = fabric_of(root, clusters, nodes)
    fabric.ensure(fp)
    for node in fp.nodes:
        if node.egress_range is not None:  # every node: the gateway may run on any (speaker.py)
            block = node.egress_range[0].rsplit(".", 1)[0] + ".0/24"
            netns.call_in(node.netns_path, _route_local, block)
    return fp


def _route_local(block: str) -> None:
    import subprocess

    subprocess.run(["ip", "route", "replace", "local", block, "dev", "lo", "table", "local"],
                   check=True, capture_output=True, timeout=10)


def teardown_network(root: Path) -> list[str]:
    """Remove every namespace of this state dir's clusterset (its pods' too); the names removed."""
    from isthmus.local.network import fabric
    from isthmus.local.network.plan import clusterset_id

    return fabric.teardown_id(clusterset_id(root))


def kube_lite_args(fp: FabricPlan, cluster: str, api_port: int, node: int = 1) -> list[str]:
    """What kube-lite is told in runc mode: its node's namespace and address, where images come
    from, and where pods reach its apiserver (the relay on the fabric)."""
    from isthmus.local.network.plan import FABRIC_GATEWAY

    net = fp.node(cluster, node)
    mirrors = [a for host in MIRRORED_REGISTRIES for a in ("--registry-mirror", f"{host}=http://{fp.registry}")]
    return ["--runtime", "runc", "--netns", net.netns, "--node-address", net.address, *mirrors,
            "--api-address-in-pods", f"{FABRIC_GATEWAY}:{api_port}"]


def fabric_link(fp: FabricPlan, root: Path) -> Path:
    """`<state dir>/network/fabric`, a link to the fabric namespace: what the relay is told, so its
    command line names the state dir as every part's does (the supervisor signals only those)."""
    link = root / "network" / "fabric"
    link.parent.mkdir(mode=0o700, exist_ok=True)
    if not link.is_symlink() or os.readlink(link) != fp.netns_path:
        tmp = link.with_name(".fabric.tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(fp.netns_path)
        tmp.replace(link)
    return link


def relay_args(fp: FabricPlan, root: Path, registry_port: int, api_ports: list[int]) -> list[str]:
    """`isthmus netrelay`'s doors: every apiserver into the fabric (pods dial 10.255.0.1:<its port>),
    and the fabric's registry onto the host (127.0.0.1:<registry_port>: `up` pushes the images there,
    and the supervisor asks it whether it is ready)."""
    from isthmus.local.network.plan import FABRIC_GATEWAY
    from isthmus.local.plan import HOST

    out = ["--netns", str(fabric_link(fp, root))]
    for port in api_ports:
        # Also on the fabric's own loopback: the kubeconfigs of the state dir work in `isthmus shell`.
        out += ["--listen", f"{FABRIC_GATEWAY}:{port}={HOST}:{port}", "--listen", f"{HOST}:{port}={HOST}:{port}"]
    out += ["--publish", f"{HOST}:{registry_port}={fp.registry}"]
    return out


def registry_argv(fp: FabricPlan, root: Path) -> list[str]:
    """Debian's docker-registry, exec'ed inside the fabric (`ip netns exec` execs in place: the PID
    the supervisor records is the registry's own, and its command line names the state dir)."""
    from isthmus.local import registry

    return ["ip", "netns", "exec", fp.netns, *registry.argv(registry.registry_paths(root).config)]


# --- images -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """One image `python -m isthmus.local.images.build --json` made (or found in its cache)."""

    layout: Path
    ref_name: str
    digest: str


def read_built(path: Path) -> dict[str, Built]:
    """The build's JSON: reference → its OCI layout, the layout's name for it, its digest."""
    import json

    try:
        doc = json.loads(path.read_text())
        return {str(ref): Built(Path(a["layout"]), str(a["ref_name"]), str(a["digest"])) for ref, a in doc.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise PlanError(f"the image build left no usable {path}: {e}") from None


async def push_images(built: dict[str, Built], registry: str) -> str | None:
    """Push every built image under its usual path (without the registry host: kube-lite reads these
    registries through the mirror), skipping what the registry holds already; the Isthmus image's
    digest."""
    from isthmus.api.image import IMAGE
    from isthmus.local.registry import push

    digest = None
    for ref, art in built.items():
        path = ref.split("/", 1)[1]  # docker.io/library/busybox:latest -> library/busybox:latest
        await push(art.layout, art.ref_name, registry, path)
        if ref == IMAGE:
            digest = art.digest
    return digest


def write_registry_config(root: Path, fp: FabricPlan) -> Path:
    """The registry's config in the state dir (`<root>/registry/`, its data beside it)."""
    from isthmus.local.registry import write_config

    return write_config(root, fp.registry)


# --- down -----------------------------------------------------------------------------------------------


def leftover_containers(root: Path) -> list[tuple[Path, str]]:
    """Containers a node of this state dir left running (its kube-lite was killed, not stopped):
    (runc state dir, container id) from every node's `runc list`."""
    import json
    import subprocess

    out: list[tuple[Path, str]] = []
    for state in sorted((root / "kubelet").glob("*/runc")):
        try:
            p = subprocess.run(["runc", "--root", str(state), "list", "--format", "json"], capture_output=True,
                               text=True, timeout=10, check=False)
            listed = json.loads(p.stdout or "null") or []
        except (OSError, ValueError, subprocess.TimeoutExpired):
            continue
        out += [(state, str(c["id"])) for c in listed if isinstance(c, dict) and c.get("id")]
    return out


def cleanup(root: Path) -> tuple[int, list[str]]:
    """What `down` does after the parts are gone: kill the containers nothing stops any more
    (SIGKILL: their kube-lite, which would have given them their grace period, is gone), then remove
    the clusterset's namespaces. (containers removed, namespaces removed)."""
    import subprocess

    left = leftover_containers(root)
    for state, cid in left:
        subprocess.run(["runc", "--root", str(state), "delete", "--force", cid], capture_output=True, timeout=30,
                       check=False)
    unmount_leftovers(root)
    return len(left), teardown_network(root)


def leftover_mounts(root: Path, mounts_text: str | None = None) -> list[str]:
    """Mount points under `<root>/kubelet/` (the containers' rootfs overlays and volume mounts kube-lite
    made), deepest first. `runc delete` removes a container, not the rootfs kube-lite mounted for it."""
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/self/mounts").read_text()
        except OSError:
            return []
    prefix = str(root / "kubelet") + "/"
    points = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) > 1:
            point = fields[1].encode().decode("unicode_escape")  # /proc/mounts octal-escapes spaces
            if point.startswith(prefix):
                points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


def unmount_leftovers(root: Path) -> int:
    """Unmount what a killed kube-lite left mounted under the state dir (so `down` leaves no mount and
    the state dir can be removed); how many."""
    import subprocess

    points = leftover_mounts(root)
    for point in points:
        subprocess.run(["umount", point], capture_output=True, timeout=30, check=False)
    return len(points)
