"""`isthmus image load` and `isthmus image ls`: the images on the local clusterset's nodes.

`load` puts a locally built image on every node, as `kind load image-archive` does: each
kube-lite (the broker's too) has its own store (`<state>/kubelet/<node>/images`, see
docs/images-pull.md), and a pod whose `imagePullPolicy` is `IfNotPresent` or `Never` then runs it
without any registry. The work is in `isthmus.local.kubelite.images`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli.app import DEFAULT_STATE_DIR, LOCAL, IsthmusCommand, IsthmusGroup, StateDirOpt, app, fail
from isthmus.cli.output import JSON, TABLE, YAML, OutputOpt, print_document, print_table
from isthmus.local import plan
from isthmus.local.state import Layout, StateError, load_state

image_app = typer.Typer(
    name="image",
    help="Images on the local clusterset's nodes: load an archive onto every node, list what each holds.",
    cls=IsthmusGroup,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(image_app, name="image", rich_help_panel=LOCAL,
              short_help="Images on the local clusterset's nodes: load an archive onto every node, list what each "
                         "holds.")


def kubelite_root(layout: Layout, node: str) -> Path:
    """A node's kube-lite root dir (`up` passes it as --root-dir); its image store is `images/` in it."""
    return layout.root / "kubelet" / node


def _nodes(state_dir: Path) -> tuple[Layout, list[str]]:
    """The state dir's layout and its nodes (the broker first), or a user error."""
    layout = Layout.at(state_dir)
    try:
        state = load_state(layout)
    except StateError as e:
        raise fail(str(e)) from None
    if state is None:
        raise fail(f"no local clusterset in {layout.root} (start one with `isthmus up --state-dir {state_dir}`)")
    # as `up` names their root dirs: node 1 of a cluster by the cluster, node k > 1 (`--nodes`) by its Node
    return layout, [plan.BROKER] + [plan.cluster_name(i) if k == 1 else plan.node_name(plan.cluster_name(i), k)
                                    for i in range(1, state.clusters + 1) for k in range(1, state.nodes + 1)]


@image_app.command("load", cls=IsthmusCommand)
def load(
    archive: Annotated[Path, typer.Argument(help="An oci-archive or docker-archive (`podman save`, `skopeo copy ... "
                                                 "oci-archive:FILE:NAME`) naming its images.")],
    state_dir: StateDirOpt = DEFAULT_STATE_DIR,
) -> None:
    """Put the images of an archive on every node of the local clusterset (as `kind load image-archive`).

    Each image keeps the name the archive gives it, normalised as docker does (`busybox:1.36` is
    `docker.io/library/busybox:1.36`). Pods run it with `imagePullPolicy: IfNotPresent` or `Never`
    (with `Always`, or a `:latest` tag and no policy, the node asks the registry again).
    """
    from isthmus.local.kubelite.images import ImageStore, archive_names

    layout, nodes = _nodes(state_dir)
    try:
        archive_names(archive)  # a bad archive is refused before any node is touched
    except ValueError as e:
        raise fail(str(e)) from None

    async def run() -> dict[str, list[str]]:
        loaded: dict[str, list[str]] = {}
        for node in nodes:
            loaded[node] = await ImageStore(kubelite_root(layout, node)).load_archive(archive)
        return loaded

    try:
        loaded = asyncio.run(run())
    except ValueError as e:
        raise fail(str(e)) from None
    refs = list(dict.fromkeys(r for names in loaded.values() for r in names))
    for ref in refs:
        typer.echo(f"Loaded {ref} onto {', '.join(n for n in nodes if ref in loaded[n])}")


@image_app.command("ls", cls=IsthmusCommand)
def ls(state_dir: StateDirOpt = DEFAULT_STATE_DIR, output: OutputOpt = TABLE) -> None:
    """List the images each node of the local clusterset holds (pulled or loaded)."""
    from isthmus.local.kubelite.images import ImageStore

    layout, nodes = _nodes(state_dir)
    rows = [(node, image.ref, image.digest, image.size)
            for node in nodes for image in ImageStore(kubelite_root(layout, node)).images()]
    if output in (JSON, YAML):
        print_document({"kind": "List", "items": [
            {"node": n, "reference": r, "digest": d, "size": s} for n, r, d, s in rows]}, output)
        return
    if not rows:
        typer.echo(f"No images on the nodes of {layout.root}.")
        return
    print_table(["NODE", "IMAGE", "DIGEST", "SIZE"], [(n, r, d[:19], _size(s)) for n, r, d, s in rows], output)


def _size(n: int) -> str:
    """docker's human sizes (decimal units): 1.08MB."""
    if n < 1000:
        return f"{n}B"
    value = float(n)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000 or unit == "GB":
            break
    return f"{value:.3g}{unit}"
