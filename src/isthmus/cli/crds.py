"""`isthmus crds`: print or write the CustomResourceDefinitions generated from isthmus.api."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from isthmus.api.crdgen import OWN_DIR, SHARED_DIR, all_crds, crd_dir, crd_file_name, kustomization, to_yaml
from isthmus.cli.app import MEMBERSHIP, ContextOpt, KubeconfigOpt, command, fail
from isthmus.cli.output import FORMATS, JSON, YAML, print_document
from isthmus.diagnose.model import plural

if TYPE_CHECKING:
    from isthmus.kube.storagemigration import CrdMigration


MIGRATE = "migrate"


@command("crds", panel=MEMBERSHIP)
def crds(
    action: Annotated[str | None, typer.Argument(
        metavar=MIGRATE, show_default=False, autocompletion=lambda incomplete: [
            a for a in (MIGRATE,) if a.startswith(incomplete)],
        help=f"{MIGRATE}: on the cluster, rewrite every object of the CRDs Isthmus installed at their storage "
             "version, then trim status.storedVersions to it (after an upgrade; join, deploy-broker and up do it "
             "too).")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="yaml|json", autocompletion=lambda incomplete: [
            f for f in (YAML, JSON) if f.startswith(incomplete)],
        help="Output format: yaml or json.")] = YAML,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            help="Write one GROUP_PLURAL.yaml per CRD here instead of printing them.",
            file_okay=False,
        ),
    ] = None,
    only: Annotated[str | None, typer.Option(
        "--only", metavar=f"{OWN_DIR}|{SHARED_DIR}", autocompletion=lambda incomplete: [
            f for f in (OWN_DIR, SHARED_DIR) if f.startswith(incomplete)],
        help=f"Only Isthmus's own CRDs ({OWN_DIR}) or only the other projects' APIs it speaks "
             f"({SHARED_DIR}: mcs-api's ServiceExport and ServiceImport, the About API's ClusterProperty, "
             "Karmada's MultiClusterService).")] = None,
) -> None:
    """Print the CRDs of every Isthmus resource, to apply with `kubectl apply -f -`.

    YAML documents, or with -o json one List; --output-dir writes shared/ and isthmus/, one file per
    CRD and a kustomization each (deploy/crds). `isthmus crds migrate` moves a cluster's objects to
    the storage version of the CRDs Isthmus installed (docs/deploy.md: Upgrading)."""
    if action is not None:
        if action != MIGRATE:
            raise fail(f"unknown action {action!r}: the only one is {MIGRATE}")
        _migrate(kubeconfig, context, only)
        return
    if output not in (YAML, JSON):
        if output in FORMATS or output_dir is not None:
            raise fail(f"--output must be yaml or json, not {output!r}")
        # `crds -o DIR` was --output-dir's short spelling: -o is a format now, but such scripts still work.
        typer.echo(f"warning: crds -o DIR is deprecated: use --output-dir {output}", err=True)
        output_dir = Path(output)
    if only not in (None, OWN_DIR, SHARED_DIR):
        raise fail(f"--only must be {OWN_DIR} or {SHARED_DIR}, not {only!r}")
    manifests = [c for c in all_crds() if only is None or crd_dir(c) == only]
    if output_dir is None:
        if output == JSON:
            print_document({"apiVersion": "v1", "kind": "List", "items": manifests}, JSON)
        else:
            typer.echo(to_yaml(manifests), nl=False)
        return
    try:
        for directory in sorted({crd_dir(c) for c in manifests}):
            (output_dir / directory).mkdir(parents=True, exist_ok=True)
            (output_dir / directory / "kustomization.yaml").write_text(kustomization(directory, manifests))
        for crd in manifests:
            (output_dir / crd_dir(crd) / crd_file_name(crd)).write_text(to_yaml([crd]))
    except OSError as err:
        raise fail(f"cannot write CRDs to {output_dir}: {err.strerror or err}") from None
    typer.echo(f"wrote {plural(len(manifests), 'CRD')} to {output_dir}", err=True)


def _migrate(kubeconfig: Path | None, context: str | None, only: str | None) -> None:
    """Exit 2 with what is left when an object could not be rewritten (storedVersions kept)."""
    from isthmus.kube.client import COMMAND_TIMEOUT, make_client
    from isthmus.kube.storagemigration import MigrationError, migrate_installed

    if only not in (None, OWN_DIR, SHARED_DIR):
        raise fail(f"--only must be {OWN_DIR} or {SHARED_DIR}, not {only!r}")
    wanted = [c for c in all_crds() if only is None or crd_dir(c) == only]

    async def run() -> list[CrdMigration]:
        client = make_client(kubeconfig, context, field_manager="isthmus-migrate", timeout=COMMAND_TIMEOUT)
        try:
            return await migrate_installed(client, wanted)
        finally:
            await client.close()

    try:
        results = asyncio.run(run())
    except MigrationError as err:
        raise fail(f"storage migration incomplete, status.storedVersions kept where objects remain: {err}") from None
    moved = [r for r in results if r.trimmed or r.rewritten]
    for r in results:
        if r.trimmed or r.skipped.startswith(("installed by", "stores at")):
            typer.echo(r.summary(), err=True)
    typer.echo(f"migrated {plural(len(moved), 'CRD')} ({sum(r.rewritten for r in moved)} objects rewritten); "
               f"{plural(len(results) - len(moved), 'other')} already at their storage version or not ours", err=True)
