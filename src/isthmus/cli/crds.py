"""`isthmus crds`: print or write the CustomResourceDefinitions generated from isthmus.api."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from isthmus.api.crdgen import all_crds, crd_file_name, to_yaml
from isthmus.cli.app import command, fail


@command("crds")
def crds(
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            "-o",
            help="Write one <group>_<plural>.yaml per CRD here instead of multi-document YAML on stdout.",
            file_okay=False,
        ),
    ] = None,
) -> None:
    """Print the CRDs of every Isthmus resource (apply them with `kubectl apply -f -`)."""
    manifests = all_crds()
    if output_dir is None:
        typer.echo(to_yaml(manifests), nl=False)
        return
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        for crd in manifests:
            (output_dir / crd_file_name(crd)).write_text(to_yaml([crd]))
    except OSError as err:
        raise fail(f"cannot write CRDs to {output_dir}: {err.strerror or err}") from None
    typer.echo(f"wrote {len(manifests)} CRDs to {output_dir}", err=True)
