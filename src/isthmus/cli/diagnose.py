"""`isthmus diagnose` and `isthmus gather`: flags and printing; the checks and the archive are in
`isthmus.diagnose` (docs/diagnose.md)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from isthmus.api.base import now
from isthmus.cli import complete
from isthmus.cli.app import TROUBLESHOOT, KubeconfigOpt, command, fail
from isthmus.cli.output import JSON, TABLE, YAML, output_option, print_document
from isthmus.diagnose.model import MARKS, Diagnosis, Status, plural

if TYPE_CHECKING:
    from isthmus.diagnose.gather import Archive
    from isthmus.diagnose.run import ContextRef

ContextsOpt = Annotated[
    list[str] | None,
    typer.Option("--context", metavar="CONTEXT",
                 help="A kubeconfig context to check; repeat for several (default: every context).",
                 show_default=False, autocompletion=complete.contexts),
]
_COLOURS = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "bright_black"}


def _refs(kubeconfig: Path | None, contexts: list[str] | None) -> list[ContextRef]:
    from isthmus.diagnose.run import select_contexts

    return list(select_contexts(str(kubeconfig) if kubeconfig else None, contexts))


def render(result: Diagnosis, colour: bool) -> str:
    """The table form: one block per context, one line per check, its details and next step
    indented under it; lines are never wrapped."""
    lines: list[str] = []
    width = max((len(c.name) for t in result.targets for c in t.checks), default=8)
    for t in result.targets:
        head = t.title
        extra = [r for r in t.roles] + ([f"cluster {t.cluster_id}"] if t.cluster_id and t.cluster_id != t.title else [])
        if extra:
            head += f" ({', '.join(extra)})"
        lines.append(typer.style(head, bold=True) if colour else head)
        for c in t.checks:
            mark = MARKS[c.status]
            if colour:
                mark = typer.style(mark, fg=_COLOURS[c.status], bold=True)
            lines.append(f"  {mark} {c.name.ljust(width)}  {c.message}")
            lines += [f"      {d}" for d in c.details]
            if c.next and c.status in (Status.FAIL, Status.WARN):
                lines.append(f"      → {c.next}")
        lines.append("")
    counts = result.counts()
    summary = f"{counts['pass']} passed, {plural(counts['warn'], 'warning')}, {counts['fail']} failed"
    if counts["skip"]:
        summary += f", {counts['skip']} skipped"
    lines.append(summary)
    return "\n".join(lines)


@command("diagnose", panel=TROUBLESHOOT)
def diagnose(
    kubeconfig: KubeconfigOpt = None,
    context: ContextsOpt = None,
    output: Annotated[str, output_option((TABLE, JSON, YAML))] = TABLE,
    wait: Annotated[bool, typer.Option("--wait", help="Check again every 2 s until everything passes (or --timeout).")]
    = False,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help="With --wait: how long to wait.")
    ] = 120.0,
) -> None:
    """Check every cluster of the clusterset and the broker, and say what to run next.

    API, join state and heartbeat, CRD versions, DNS, VIPs, clocks, CIDR overlaps, and each
    capability's own health.

    Prints one line per check (passed, warning or failed) with the reason and the next command
    to run. Exit code: 1 when a check fails, 0 otherwise, 2 on bad input.
    """
    from isthmus.diagnose.run import diagnose as run_diagnose
    from isthmus.diagnose.run import diagnose_until

    if timeout <= 0:
        raise fail(f"--timeout must be more than 0 seconds, not {timeout:g}")
    refs = _refs(kubeconfig, context)
    hint = str(kubeconfig) if kubeconfig else None
    explicit = bool(context)

    def progress(result: Diagnosis) -> None:
        failing = ", ".join(f"{t.title}/{c.name}" for t, c in result.failures()[:5])
        typer.echo(f"waiting: {plural(len(result.failures()), 'check')} failing ({failing})", err=True)

    if wait:
        result = asyncio.run(diagnose_until(refs, kubeconfig=hint, explicit=explicit, timeout=timeout,
                                            on_round=progress))
    else:
        result = asyncio.run(run_diagnose(refs, kubeconfig=hint, explicit=explicit))
    if output != TABLE:
        print_document(result.to_dict(), output)
    else:
        typer.echo(render(result, colour=sys.stdout.isatty()))
    if not result.ok:
        raise typer.Exit(1)


@command("gather", panel=TROUBLESHOOT)
def gather(
    kubeconfig: KubeconfigOpt = None,
    context: ContextsOpt = None,
    archive: Annotated[
        Path | None,
        typer.Option("--archive", help="The .tar.gz to write (default: isthmus-gather-<time>.tar.gz here).",
                     show_default=False, dir_okay=False),
    ] = None,
) -> None:
    """Collect what a bug report needs from every cluster into one archive.

    Isthmus objects, isthmus-system workloads, Events, pod logs and a diagnosis, from every cluster
    and the broker (Secret data never included)."""
    from isthmus.diagnose.gather import gather as run_gather
    from isthmus.diagnose.run import diagnose as run_diagnose

    refs = _refs(kubeconfig, context)
    path = archive or Path(f"isthmus-gather-{now().strftime('%Y%m%dT%H%M%SZ')}.tar.gz")
    if path.parent != Path() and not path.parent.is_dir():
        raise fail(f"--archive: directory {path.parent} does not exist")

    async def body() -> Archive:
        hint = str(kubeconfig) if kubeconfig else None
        diagnosis = await run_diagnose(refs, kubeconfig=hint, explicit=bool(context))
        return await run_gather(refs, path, diagnosis.to_dict())

    arch = asyncio.run(body())
    files, errors = arch.files, arch.errors
    size = path.stat().st_size
    typer.echo(f"wrote {path} ({plural(len(files), 'file')}, {size / 1024:.0f} KiB) from "
               f"{plural(len(refs), 'context')}")
    for e in errors:
        typer.echo(f"  not collected: {e['context']}: {e['what']}: {e['error']}", err=True)
