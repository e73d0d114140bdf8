"""`isthmus show` plug-ins: each capability's CLI module registers the things it can list, so the
`show` command (in cli/discovery.py, which owns its discovery-only flags) never imports another
capability's code. `cli.main` imports every command module, so the registry is full at start."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class ShowRequest:
    """What `show` parsed for a plug-in; `namespace` None means every namespace."""

    what: str
    namespace: str | None
    output: str
    """table, wide, json or yaml (cli/output.py)."""
    kubeconfig: Path | None
    context: str | None


@dataclass(frozen=True)
class Show:
    run: Callable[[ShowRequest], None]
    default_all_namespaces: bool = False
    """Without -n: every namespace (cluster-scoped things filtered by namespace), not the context's."""


SHOWS: dict[str, Show] = {}


def register_show(
    what: str, run: Callable[[ShowRequest], None], *, default_all_namespaces: bool = False
) -> None:
    """Make `isthmus show <what>` call `run`."""
    SHOWS[what] = Show(run, default_all_namespaces)


def age(at: datetime | str | None, ref: datetime | None = None) -> str:
    """kubectl-style age of a time (or an RFC 3339 string): 45s, 12m, 3h, 5d; `-` when unknown."""
    if not at:
        return "-"
    when = datetime.fromisoformat(at) if isinstance(at, str) else at
    secs = max(0, int(((ref or datetime.now(UTC)) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"
