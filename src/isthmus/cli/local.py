"""`isthmus up`, `isthmus status`, `isthmus down`: the local clusterset (docs/local.md).

Flags, progress and printing only; the work is in `isthmus.local.up` (bring-up),
`isthmus.local.status` (status) and `isthmus.local.supervisor` (processes).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from isthmus.api.mcs import STALE_HEARTBEAT_SECONDS
from isthmus.cli.app import DEFAULT_STATE_DIR, LOCAL, StateDirOpt, command, default_state_dir, fail
from isthmus.cli.output import JSON, TABLE, YAML, Column, OutputOpt, print_document, print_table
from isthmus.diagnose.model import plural
from isthmus.local import plan
from isthmus.local.state import (
    PHASE_FAILED,
    PHASE_IMAGES,
    PHASE_RUNNING,
    PHASE_STOPPED,
    Layout,
    State,
    StateError,
    load_state,
    salvage_pids,
    save_state,
)
from isthmus.local.status.collect import collect_status
from isthmus.local.status.health import (
    HEALTH_FAILED,
    HEALTH_READY,
    HEALTH_RESTARTING,
    HEALTH_STANDBY,
    HEALTH_STARTING,
    PHASE_UNSUPERVISED,
)
from isthmus.local.supervisor import SUPERVISE_FLAG, is_ours, running_supervisor, tail, terminate
from isthmus.local.up import (
    RETRY_SIGNAL,
    machine_holder,
    nodes_mismatch,
    plan_in_use_message,
    spawn_supervisor,
    supervise,
)

READY_TIMEOUT = 90.0
STOP_TIMEOUT = 25.0
DOWN_TIMEOUT = 20.0


_ICON = {HEALTH_READY: ("✔", "green"), HEALTH_STARTING: ("…", "yellow"), HEALTH_RESTARTING: ("↻", "yellow"),
         HEALTH_FAILED: ("✘", "red"), "down": ("✘", "red"), HEALTH_STANDBY: ("◌", "green")}


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _status(layout: Layout) -> dict[str, Any]:
    return asyncio.run(collect_status(layout))


def _checked_status(layout: Layout) -> dict[str, Any]:
    """`_status`, a state.json that cannot be used being a user error."""
    try:
        return _status(layout)
    except StateError as e:
        raise fail(str(e)) from None


# --- up ------------------------------------------------------------------------------------------


@command("up", panel=LOCAL)
def up(
    clusters: Annotated[
        int | None,
        typer.Option("--clusters", help=f"Number of clusters c1..cN (1-{plan.MAX_CLUSTERS}; default "
                     f"{plan.DEFAULT_CLUSTERS}, or what the state dir holds).", show_default=False),
    ] = None,
    state_dir: StateDirOpt = DEFAULT_STATE_DIR,
    enable_clusterset_ip: Annotated[
        bool, typer.Option("--enable-clusterset-ip", help="Export services with a ClusterSet IP (VIP) by default.")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return once ready; leave the clusterset running.")
    ] = False,
    runtime: Annotated[
        str | None,
        typer.Option("--runtime", help="How pods run: `process` (the fast default: processes of this machine on "
                     "127.0.0.0/8) or `runc` (OCI containers of the images built here, a network namespace "
                     "per pod, root only). Fixed when the state dir is made.", show_default=False),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option("--nodes", help=f"Nodes per cluster (1-{plan.MAX_NODES}; default {plan.DEFAULT_NODES}, or what "
                     "the state dir holds): one kube-lite each, the cluster's controllers in the first; in runc mode "
                     "a network namespace each. Fixed when the state dir is made.", show_default=False),
    ] = None,
    supervise_flag: Annotated[bool, typer.Option(SUPERVISE_FLAG, hidden=True)] = False,
) -> None:
    """Start a broker and N clusters on this machine (127.0.0.0/8 only) and keep them running.

    After a crash of the supervisor, `up` keeps the parts still running and healthy and restarts
    only the others; on a running clusterset it retries the parts that refused to start."""
    layout = Layout.at(state_dir)
    try:
        if clusters is not None:
            plan.validate_count(clusters)
        if nodes is not None:
            plan.validate_nodes(nodes)
    except plan.PlanError as e:
        raise fail(str(e)) from None
    try:
        state = load_state(layout)
    except StateError as e:
        raise fail(str(e)) from None
    if state is not None and clusters is not None and clusters != state.clusters:
        raise fail(f"{layout.root} holds a clusterset of {plural(state.clusters, 'cluster')}, not {clusters}: "
                   "drop --clusters, or use another --state-dir")
    if state is not None and nodes is not None and nodes != state.nodes:
        raise fail(nodes_mismatch(layout, state.nodes, nodes))
    try:
        if runtime is not None:
            plan.validate_runtime(runtime)
        if state is not None and runtime is not None and runtime != state.runtime:
            raise plan.PlanError(f"{layout.root} holds a clusterset of the {state.runtime} runtime, not {runtime}: "
                                 "drop --runtime, or use another --state-dir")
        effective = runtime or (state.runtime if state is not None else plan.PROCESS)
        if effective == plan.RUNC and not supervise_flag:
            from isthmus.local.runcmode import check_prerequisites

            check_prerequisites()
    except plan.PlanError as e:
        raise fail(str(e)) from None
    if supervise_flag:
        try:
            raise typer.Exit(supervise(layout, clusters, enable_clusterset_ip, runtime, nodes))
        except plan.PlanError as e:
            raise fail(str(e)) from None
    console = _console()
    pid = running_supervisor(layout)
    if pid is not None:
        _up_while_running(console, layout, pid)
        return
    holder = machine_holder() if effective == plan.PROCESS else None  # runc mode: namespaces of its own
    if holder is not None and holder != str(layout.root):
        raise fail(plan_in_use_message(holder))
    started = time.monotonic()
    try:
        proc = spawn_supervisor(layout, clusters, enable_clusterset_ip, foreground=not detach, runtime=runtime,
                                nodes=nodes)
    except OSError as e:
        raise fail(f"cannot use the state dir {layout.root}: {e.strerror or e}") from None
    stop_requested = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    if not detach:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    doc = _watch_bringup(console, layout, lambda: proc.poll() is None, lambda: stop_requested)
    if doc is not None and doc["ready"]:
        _print_ready(console, doc, time.monotonic() - started)
        if detach:
            return
        console.print("[bold]Running.[/bold] Ctrl-C here (or `isthmus down` elsewhere) stops everything.")
    elif proc.poll() is not None:
        other = running_supervisor(layout)
        if proc.returncode == 0 and other is not None:  # another `up` won the race for this state dir
            console.print(f"Another `isthmus up` runs this clusterset (supervisor pid {other}).")
            return
        _explain_exit(console, layout)
        raise typer.Exit(1)
    elif not stop_requested:
        _explain_not_ready(console, layout, doc)
        if detach:
            console.print(f"The clusterset keeps running in the background; "
                          f"`isthmus status --state-dir {state_dir}` to watch, "
                          f"`isthmus down --state-dir {state_dir}` to stop it.")
            raise typer.Exit(1)
        console.print("Still trying in the foreground; Ctrl-C stops everything.")
    while not stop_requested and proc.poll() is None:
        time.sleep(0.2)
    if proc.poll() is None:
        console.print("Stopping the clusterset…")
        if is_ours(proc.pid, layout.root, marker=SUPERVISE_FLAG):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            console.print("[red]the supervisor did not stop in time;[/red] running `isthmus down` steps")
            _down(console, layout)
    code = proc.returncode
    if code not in (0, -signal.SIGTERM):
        _explain_exit(console, layout)
        raise typer.Exit(1)
    console.print("Stopped.")


def _up_while_running(console: Console, layout: Layout, pid: int) -> None:
    """`up` on a running clusterset: say so, after retrying the parts that refused to start."""
    doc = _checked_status(layout)
    failed = [row.name for row in _part_rows(doc) if row.health == HEALTH_FAILED]
    if not failed:
        console.print(f"The clusterset in {layout.root} is already running (supervisor pid {pid}).")
        _print_table(console, doc)
        return
    console.print(f"The clusterset in {layout.root} runs (supervisor pid {pid}); starting again: {', '.join(failed)}")
    if is_ours(pid, layout.root, marker=SUPERVISE_FLAG):
        os.kill(pid, RETRY_SIGNAL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and _failed_parts(layout) & {n.replace(" ", "-") for n in failed}:
        time.sleep(0.1)  # the supervisor has taken the signal once state.json says so
    after = _watch_bringup(console, layout, lambda: running_supervisor(layout) is not None, lambda: False)
    if after is not None and after["ready"]:
        _print_table(console, after)
        return
    _explain_not_ready(console, layout, after)
    raise typer.Exit(1)


def _failed_parts(layout: Layout) -> set[str]:
    try:
        state = load_state(layout)
    except StateError:
        return set()
    return {n for n, p in state.parts.items() if p.failed} if state is not None else set()


class _Row:
    """One part as the tables show it."""

    def __init__(self, name: str, health: str, addr: str, proc: dict[str, Any]) -> None:
        self.name, self.health, self.addr, self.proc = name, health, addr, proc

    @property
    def log_name(self) -> str:
        return self.name.replace(" ", "-")


def _part_rows(doc: dict[str, Any]) -> list[_Row]:
    """Every part, in start order."""
    rows = []
    broker_kinds = plan.broker_part_kinds(doc.get("runtime") or plan.PROCESS)
    for c, kinds, pod_kinds in ((doc["broker"], broker_kinds, plan.BROKER_POD_KINDS),
                                *((c, plan.CLUSTER_PART_KINDS, plan.POD_KINDS) for c in doc["clusters"])):
        procs = c["processes"]
        for kind in kinds:
            if kind not in c["parts"]:
                continue  # a status document of an older version
            if kind == plan.APISERVER:
                addr = c["server"]
            elif kind == plan.DNS:
                addr = f'{c["dns"]} (pod {procs[kind].get("pod") or "-"})'
            elif kind in pod_kinds:
                addr = f'pod {procs[kind].get("pod") or "-"}'
            elif kind == plan.UI:
                addr = (doc.get("ui") or {}).get("url") or "-"
            elif kind == plan.REGISTRY:  # its readiness is asked through the relay's door on the host
                net = doc.get("network") or {}
                addr = f'{net.get("registry", "-")} ({net.get("registryOnHost") or "-"} from here)'
            else:
                addr = procs[kind]["readyz"].removeprefix("http://").removesuffix("/readyz")
            rows.append(_Row(f"{c['name']} {kind}", c["parts"][kind], addr, procs[kind]))
    return rows


def _progress(doc: dict[str, Any] | None, elapsed: float) -> Group:
    if doc is None:
        return Group(Spinner("dots", text=f" preparing the state dir ({elapsed:.0f}s)"))
    grid = Table.grid(padding=(0, 2))
    for _ in range(4):
        grid.add_column()
    for row in _part_rows(doc):
        said = Text(row.proc.get("lastError") or "", style="red" if row.health == HEALTH_FAILED else "dim")
        if row.health == HEALTH_READY:
            grid.add_row(Text("✔", style="green"), Text(row.name, style="green"), Text(row.addr, style="dim"), "")
        elif row.health == HEALTH_STANDBY:
            grid.add_row(Text("◌", style="green"), Text(f"{row.name} (starts on first use)", style="green"),
                         Text(row.addr, style="dim"), "")
        elif row.health == HEALTH_FAILED:
            grid.add_row(Text("✘", style="red"), Text(f"{row.name} (not restarted)", style="red"),
                         Text(row.addr, style="dim"), said)
        elif row.health == HEALTH_RESTARTING:
            grid.add_row(Text("↻", style="yellow"), Text(f"{row.name} (restart {row.proc['restarts']})"),
                         Text(row.addr, style="dim"), said)
        elif row.health == HEALTH_STARTING:
            grid.add_row(Spinner("dots", style="yellow"), Text(row.name), Text(row.addr, style="dim"), "")
        else:
            grid.add_row(Text("·", style="dim"), Text(row.name, style="dim"), Text(row.addr, style="dim"), "")
    phase = doc["phase"]
    joined = sum(1 for c in doc["clusters"] if c["joined"])
    head = Text(f"Starting the local clusterset ({phase}; {joined}/{len(doc['clusters'])} joined; "
                f"{elapsed:.0f}s)", style="bold")
    return Group(head, grid)


def _watch_bringup(console: Console, layout: Layout, running: Callable[[], bool],
                   stopped: Callable[[], bool]) -> dict[str, Any] | None:
    """Show a line per part until all are ready, one is given up on, the supervisor exits, a
    signal, or the timeout."""
    started = time.monotonic()
    building = 0.0
    """Time spent building images (runc mode, a fresh machine: minutes): not counted against the timeout."""
    doc: dict[str, Any] | None = None
    with Live(_progress(None, 0), console=console, refresh_per_second=8, transient=False) as live:
        while time.monotonic() - started - building < READY_TIMEOUT and running() and not stopped():
            before = time.monotonic()
            try:
                doc = _status(layout) if layout.exists() else None
            except (StateError, FileNotFoundError):
                doc = None  # the supervisor is still writing its first state.json
            if doc is not None and doc["phase"] == PHASE_IMAGES:
                building += 0.3 + time.monotonic() - before
            live.update(_progress(doc, time.monotonic() - started))
            if doc is not None and (doc["ready"] or (doc["phase"] == PHASE_RUNNING and any(
                    r.health == HEALTH_FAILED for r in _part_rows(doc)))):
                break  # (a part failing before `running` fails the bring-up: the supervisor exits)
            time.sleep(0.3)
    if not console.is_terminal:
        console.line()  # a non-terminal Live leaves its last frame without a newline
    return doc


def _print_ready(console: Console, doc: dict[str, Any], elapsed: float) -> None:
    names = ", ".join(c["name"] for c in doc["clusters"])
    console.print(f"\n[bold green]The local clusterset is ready[/bold green] in {elapsed:.1f}s: "
                  f"broker + {plural(len(doc['clusters']), 'cluster')} ({names}).\n")
    c1 = doc["clusters"][0]
    dns_host, _, dns_port = c1["dns"].rpartition(":")
    console.print("Use it:", style="bold")
    for line in (
        f"export KUBECONFIG={doc['kubeconfig']}",
        f"kubectl --context {c1['name']} get namespaces",
        f"isthmus export <service> -n <namespace> --context {c1['name']}",
        f"dig @{dns_host} -p {dns_port} <service>.<namespace>.svc.clusterset.local",
        *([f"open {url}    # the live web view (isthmus ui)"] if (url := (doc.get("ui") or {}).get("url")) else []),
        f"isthmus status --state-dir {doc['stateDir']}    isthmus down --state-dir {doc['stateDir']}",
    ):
        console.print(f"  [cyan]{line}[/cyan]", highlight=False, soft_wrap=True)
    console.print()
    _print_table(console, doc)


def _explain_exit(console: Console, layout: Layout) -> None:
    """The supervisor is gone without a ready clusterset: why, naming the parts that failed."""
    try:
        state = load_state(layout)
    except StateError:
        state = None
    why = state.error if state is not None and state.phase == PHASE_FAILED and state.error else "it exited"
    console.print(f"[red]error:[/red] the clusterset did not come up: {escape(why)}", highlight=False, soft_wrap=True)
    named = [n for n in (state.parts if state is not None else {}) if n in why]
    for name in named[:3]:
        _print_tail(console, layout.log(name), lines=8)
    if not named:
        _print_tail(console, layout.log("supervisor"))
    console.print("The state dir and every cluster's data are kept: fix the cause, then run `isthmus up` again.")


def _explain_not_ready(console: Console, layout: Layout, doc: dict[str, Any] | None) -> None:
    if doc is None:
        console.print(f"[red]error:[/red] nothing came up within {READY_TIMEOUT:.0f}s")
        _print_tail(console, layout.log("supervisor"))
        return
    console.print("[red]error:[/red] the clusterset is not ready:")
    for problem in doc["problems"]:
        console.print(f"  {problem}", highlight=False, markup=False, soft_wrap=True)
    late = [r for r in _part_rows(doc) if r.health not in (HEALTH_READY, HEALTH_STANDBY)]
    late.sort(key=lambda r: r.health not in (HEALTH_FAILED, HEALTH_RESTARTING))
    for row in late[:3]:
        if "deployment" in row.proc:  # a pod: its log is the pod's (`kubectl logs`)
            console.print(f"  {row.name}: {row.proc['log']}", highlight=False, markup=False, soft_wrap=True)
        else:
            _print_tail(console, layout.log(row.log_name), lines=6)


def _print_tail(console: Console, path: Path, lines: int = 15) -> None:
    said = tail(path, lines)
    if said:
        console.print(f"[bold]last lines of {path}:[/bold]")
        for line in said:
            console.print(f"  {line}", style="dim", highlight=False, markup=False, soft_wrap=True)


# --- status --------------------------------------------------------------------------------------


def _health(parts: dict[str, str], procs: dict[str, dict[str, Any]]) -> str:
    out = []
    for kind, health in parts.items():
        icon, _ = _ICON.get(health, ("?", "red"))
        restarts = procs[kind]["restarts"]
        out.append(f"{icon} {kind}" + (f" ↻{restarts}" if restarts else ""))
    return "  ".join(out)


def _short_range(value: str | None) -> str:
    """`127.32.1.1-127.32.1.254` as `127.32.1.1-254` (the table is wide already)."""
    if not value or "-" not in value:
        return value or "-"
    first, last = value.split("-", 1)
    common = first.rsplit(".", 1)[0] + "."
    return f"{first}-{last[len(common):]}" if last.startswith(common) else value


def _membership(c: dict[str, Any]) -> str:
    if c["joined"] is None:
        return "unknown"
    if not c["joined"]:
        return "no"
    age = c["heartbeatAge"]
    if age is None:
        return "yes, no heartbeat"
    return f"yes, {age}s ago" + (" (stale)" if age > STALE_HEARTBEAT_SECONDS else "")


_CLUSTER_COLUMNS: list[Column | str] = ["NAME", "API SERVER", "DNS", "KUBELET", "POD CIDR", "SERVICE CIDR", "CLUSTERSET IP CIDR",
                    "NODEPORTS", "LB PUBLIC / PRIVATE", "EGRESS IPS", "JOINED / HEARTBEAT", Column("CONTEXT", wide=True),
                    Column("KUBECONFIG", wide=True)]


def _print_table(console: Console, doc: dict[str, Any], output: str = TABLE) -> None:
    verdict = Text("ready", style="bold green") if doc["ready"] else Text(f"not ready ({doc['phase']})", style="bold red")
    console.print(Text.assemble("Local clusterset in ", (doc["stateDir"], "bold"), ": ", verdict))
    if doc.get("error"):
        console.print(f"  [red]{escape(doc['error'])}[/red]", highlight=False, soft_wrap=True)
    if doc["phase"] == PHASE_UNSUPERVISED:
        console.print("  [yellow]the supervisor is gone: nothing restarts a part that exits. "
                      "`isthmus up` keeps the healthy parts and restarts the others; "
                      "`isthmus down` stops them.[/yellow]")
    b = doc["broker"]
    rows = [["broker", b["server"], "-", b.get("kubelet", "-"), b.get("podCIDR", "-"), b.get("serviceCIDR", "-"),
             b["clustersetIPCIDRRange"], b.get("nodePortRange", "-"),
             f'{b.get("poolPublicAddress", "-")} / {b.get("poolPrivateAddress", "-")}', "-", "-", "broker",
             b.get("kubeconfig", "-")]]
    for c in doc["clusters"]:
        rows.append([c["name"], c["server"], c["dns"], c.get("kubelet", "-"), c["podCIDR"], c["serviceCIDR"],
                     c["clustersetIPCIDR"], c["nodePortRange"], f'{c["poolPublicAddress"]} / {c["poolPrivateAddress"]}',
                     _short_range(c.get("egressSourceIPs")), _membership(c), c.get("context", "-"),
                     c.get("kubeconfig", "-")])
    print_table(_CLUSTER_COLUMNS, rows, output, file=console.file)
    # The parts get a table of their own: a cluster has eleven, and beside the addresses they wrapped.
    parts = [["broker", _health(b["parts"], b["processes"])]]
    parts += [[c["name"], _health(c["parts"], c["processes"])] for c in doc["clusters"]]
    print_table(["NAME", "PARTS"], parts, output, file=console.file)
    if doc.get("nodes", 1) > 1:  # `up --nodes`: each cluster's nodes (one kube-lite each)
        nodes_rows = [[c["name"], n["name"], n["address"], n["podCIDR"], n["kubelet"],
                       "controllers" if n["controllers"] else "-", n["health"]]
                      for c in doc["clusters"] for n in c.get("nodes") or []]
        print_table(["CLUSTER", "NODE", "ADDRESS", "POD CIDR", "KUBELET", "ROLE", "HEALTH"], nodes_rows, output,
                    file=console.file)
    if doc["problems"] and doc["phase"] not in (PHASE_STOPPED, PHASE_FAILED):
        console.print("Not ready:", style="bold red")
        for problem in doc["problems"]:
            console.print(f"  {problem}", highlight=False, markup=False, soft_wrap=True)
    vip = "on" if b["clustersetIPEnabled"] else "off (per export: --use-clusterset-ip true)"
    network = doc.get("network")
    nodes = (f"runc: pods in network namespaces of their own; nodes on {', '.join(c['nodeAddress'] for c in doc['clusters'])}"
             if network else f"Nodes and NodePorts on {plan.NODE_ADDRESS}")
    console.print(f"{nodes}; ClusterSet IP by default: {vip}; "
                  f"DNS zones clusterset.local and {plan.LOCAL_ZONE}.", highlight=False)
    if network:
        console.print(f"The clusterset's network: namespace {network['netns']} (`isthmus shell` enters it; "
                      f"`isthmus shell --node c1` a node's), apiservers at {network['fabricAddress']}:<port> inside, "
                      f"registry {network['registry']} ({network['registryOnHost']} from here), outside servers "
                      f"{network['outsideRange']}.", highlight=False, soft_wrap=True)
    console.print(f"KUBECONFIG={doc['kubeconfig']}  (contexts: broker, "
                  f"{', '.join(c['context'] for c in doc['clusters'])})", highlight=False, soft_wrap=True)
    ui = doc.get("ui") or {}
    if ui.get("url"):
        note = " (starts on first use)" if ui.get("standby") else "" if ui.get("ready") else " (not ready)"
        console.print(f"Web view: {ui['url']}{note}", highlight=False, soft_wrap=True)


@command("status", panel=LOCAL)
def status(
    state_dir: StateDirOpt = DEFAULT_STATE_DIR,
    output: OutputOpt = TABLE,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the clusterset is ready (or --timeout).")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help="With --wait: how long to wait.")
    ] = 60.0,
) -> None:
    """Show the local clusterset: its clusters, addresses, each part's health and membership.

    The clusters, API URLs, kubeconfigs, DNS addresses, address plan, each part's health and
    restarts, and membership and heartbeats as the broker has them. Exit code 0 only when ready."""
    if not timeout > 0:
        raise fail(f"--timeout must be more than 0 seconds, not {timeout:g}")
    layout = Layout.at(state_dir)
    if not layout.exists():
        raise fail(f"no local clusterset in {layout.root} (start one with `isthmus up --state-dir {state_dir}`)")
    doc = _checked_status(layout)
    if wait:
        deadline = time.monotonic() + timeout
        try:
            while not doc["ready"] and time.monotonic() < deadline:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                doc = _checked_status(layout)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
    if output in (JSON, YAML):
        print_document(doc, output)
    else:
        _print_table(_console(), doc, output)
    if not doc["ready"]:
        waited = f"after {timeout:g}s " if wait else ""
        raise fail(f"not ready {waited}({doc['phase']}): {'; '.join(doc['problems']) or 'unknown'}", code=1)


# --- down ----------------------------------------------------------------------------------------


def _recorded(layout: Layout) -> tuple[State | None, dict[str, int], str | None]:
    """(state, the PIDs of the parts it records, why state.json cannot be used): a damaged
    state.json still gives up the PIDs in it that are well-formed."""
    try:
        state = load_state(layout) if layout.root.exists() else None
    except StateError as e:
        pids = salvage_pids(layout)
        pids.pop("supervisor", None)
        return None, pids, e.problem
    pids = state.recorded_pids() if state is not None else {}
    pids.pop("supervisor", None)
    return state, pids, None


def _down(console: Console, layout: Layout) -> bool:
    """Stop the supervisor (it stops its parts) or, after a crash, the parts directly; True if all gone."""
    state, recorded, _ = _recorded(layout)
    sup = running_supervisor(layout)
    deadline = time.monotonic() + DOWN_TIMEOUT
    if sup is not None:
        with console.status(f"stopping the supervisor (pid {sup}) and its parts…"):
            if is_ours(sup, layout.root, marker=SUPERVISE_FLAG):
                os.kill(sup, signal.SIGTERM)
            while time.monotonic() < deadline and (
                is_ours(sup, layout.root) or any(is_ours(p, layout.root) for p in recorded.values())
            ):
                time.sleep(0.1)
    left = {n: p for n, p in recorded.items() if is_ours(p, layout.root)}
    if sup is not None and is_ours(sup, layout.root):
        left["supervisor"] = sup
    if left:
        console.print(f"stopping {plural(len(left), 'process', 'processes')} directly: {', '.join(sorted(left))}")
        left = terminate(left, layout.root, grace=5.0)
    if state is not None and running_supervisor(layout) is None and not left:
        state, _, _ = _recorded(layout)  # the supervisor may have written it while stopping
        if state is not None:
            for p in state.parts.values():
                p.pid = None
            state.supervisor_pid, state.phase = None, PHASE_STOPPED if state.phase != PHASE_FAILED else state.phase
            save_state(layout, state)
    if left:
        console.print(f"[red]error:[/red] still running: {', '.join(f'{n} (pid {p})' for n, p in left.items())}")
        return False
    if state is not None and state.runtime == plan.RUNC:  # what a killed kube-lite could not take down
        from isthmus.local.runcmode import cleanup

        containers, namespaces = cleanup(layout.root)
        if containers or namespaces:
            console.print(f"removed {plural(containers, 'leftover container')} and "
                          f"{plural(len(namespaces), 'network namespace')}")
    return True


@command("down", panel=LOCAL)
def down(state_dir: StateDirOpt = DEFAULT_STATE_DIR) -> None:
    """Stop everything `isthmus up` started on this state dir, and nothing else (state is kept)."""
    layout = Layout.at(state_dir)
    console = _console()
    _, recorded, damaged = _recorded(layout)
    anything = running_supervisor(layout) is not None or any(is_ours(p, layout.root) for p in recorded.values())
    if not anything:
        if damaged:
            raise fail(damaged)
        console.print(f"Nothing is running in {layout.root}.")
        return
    if not _down(console, layout):
        raise typer.Exit(1)
    # `isthmus up` alone resumes only the default state dir (flag > $ISTHMUS_STATE_DIR > ./.isthmus).
    same = layout.root == Layout.at(default_state_dir()).root
    resume = "isthmus up" if same else shlex.join(["isthmus", "up", "--state-dir", str(state_dir)])
    console.print(f"Stopped the local clusterset in {layout.root} (state kept: `{resume}` resumes it).")
    if damaged:  # everything it could verify is stopped; the file still needs fixing
        raise fail(damaged)
