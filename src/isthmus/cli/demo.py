"""`isthmus demo`: the scripted tour (exit 0 when every step works)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli.app import LOCAL, STATE_DIR_ENV, command, fail


@command("demo", panel=LOCAL)
def demo(
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", envvar=STATE_DIR_ENV, show_envvar=True, show_default=False,
                     help="A fresh (absent or empty) state dir. Default: a temporary one."),
    ] = None,
    clusters: Annotated[int, typer.Option("--clusters", min=2, help="How many clusters to start.")] = 3,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary state dir (logs, kubeconfigs) after the tour.")
    ] = False,
    runtime: Annotated[
        str, typer.Option("--runtime", help="`process` (default) or `runc`: see `isthmus up --runtime`.")
    ] = "process",
    drill: Annotated[
        bool, typer.Option("--drill", help="Run the operations drill instead of the tour: `kubectl rollout restart` "
                           "and `kubectl drain` of c1 under traffic on every path, failures counted, then uninstall "
                           "(docs/operations.md).")
    ] = False,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, max=8, help="Nodes per cluster (`isthmus up --nodes`); the drill needs 2.")
    ] = 1,
) -> None:
    """Run the scripted tour on a local clusterset; exits non-zero naming the step that failed.

    The clusterset is always stopped (`isthmus down`) at the end, whatever happened; a temporary
    state dir is then removed (it says so), unless --keep.
    """
    from isthmus.local import plan
    from isthmus.local.demo import run_demo

    try:
        plan.validate_runtime(runtime)
        if runtime == plan.RUNC:
            from isthmus.local.runcmode import check_prerequisites

            check_prerequisites()
    except plan.PlanError as e:
        raise fail(str(e)) from None
    if drill:
        from isthmus.local.drill import run_drill

        if nodes < 2:
            raise fail("--drill drains each node of c1 in turn: it needs --nodes 2 or more")
        raise typer.Exit(run_drill(state_dir=state_dir, clusters=clusters, keep=keep, runtime=runtime, nodes=nodes)[0])
    raise typer.Exit(run_demo(state_dir=state_dir, clusters=clusters, keep=keep, runtime=runtime, nodes=nodes))
