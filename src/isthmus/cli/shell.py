"""`isthmus shell`: a command inside a runc-mode clusterset's network, as `docker exec` into kind's.

The clusterset's pods, registry and node addresses are reachable only inside its network
namespaces (nothing is routed from the host, by design), so `curl`/`dig` against them runs there:
in the fabric namespace by default (which routes to every node and pod), or in one node's.
The command is exec'ed by `ip netns exec` in place of this process (which also remounts /sys for
the namespace, so `ip link` and /sys/class/net agree): its exit code is the command's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Annotated

import typer

from isthmus.cli.app import DEFAULT_STATE_DIR, LOCAL, StateDirOpt, command, fail


@command("shell", panel=LOCAL, no_args_is_help=False)
def shell(
    cmd: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- COMMAND ARGS", show_default=False,
                       help="What to run (default: $SHELL, else /bin/bash). Put it after `--`."),
    ] = None,
    state_dir: StateDirOpt = DEFAULT_STATE_DIR,
    node: Annotated[
        str | None,
        typer.Option("--node", metavar="CLUSTER", show_default=False,
                     help="Run in this cluster's node namespace (broker, c1, c2, ...) instead of the fabric."),
    ] = None,
) -> None:
    """Run a command (default: a shell) inside the runc-mode clusterset's network.

    In the fabric namespace, which reaches every node address (10.255.0.1x), pod IP, edge and
    registry address; with --node, in that cluster's node namespace (its ClusterIPs and NodePorts
    work there, as on a node). For example: `isthmus shell -- curl -s http://10.255.0.2:5000/v2/`."""
    from isthmus.local.network import plan
    from isthmus.local.state import Layout
    from isthmus.runtime import netns

    layout = Layout.at(state_dir)
    try:
        doc = json.loads(layout.state_file.read_text())
    except FileNotFoundError:
        raise fail(f"no local clusterset in {layout.root} (start one with "
                   f"`isthmus up --runtime runc --state-dir {state_dir}`)") from None
    except (OSError, ValueError) as err:
        raise fail(f"cannot read {layout.state_file}: {getattr(err, 'strerror', None) or err}") from None
    if not isinstance(doc, dict) or doc.get("runtime", "process") != "runc":
        raise fail(f"the local clusterset in {layout.root} runs pods as processes (--runtime process): it has no "
                   "network of its own, its addresses are on this machine's loopback (see `isthmus status`)")
    cs = doc.get("netns") if isinstance(doc.get("netns"), str) else None
    cs = cs or plan.clusterset_id(layout.root)
    name = cs
    if node is not None:
        clusters = doc.get("clusters")
        try:
            name = plan.node_net(cs, node, clusters if isinstance(clusters, int) else plan.MAX_CLUSTERS).netns
        except plan.PlanError as err:
            raise fail(f"--node: {err}") from None
    if os.geteuid() != 0:
        raise fail("isthmus shell enters the clusterset's network namespaces: run it as root (as `up` was)")
    if not netns.exists(name):
        raise fail(f"network namespace {name} does not exist: is the clusterset up? "
                   f"(`isthmus status --state-dir {state_dir}`)")
    argv = list(cmd or [os.environ.get("SHELL") or "/bin/bash"])
    if shutil.which(argv[0]) is None:
        raise fail(f"{argv[0]}: command not found", code=127)
    ip = shutil.which("ip")
    if ip is None:
        raise fail("ip (iproute2) is not installed")
    if not cmd and sys.stdin.isatty():
        where = f"node {node}" if node else "the fabric"
        print(f"entering {where} ({name}); `exit` leaves", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(ip, [ip, "netns", "exec", name, *argv])
