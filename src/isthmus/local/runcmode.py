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
from pathlib import Path

from isthmus.local.plan import PlanError

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
