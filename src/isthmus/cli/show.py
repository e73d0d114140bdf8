"""`isthmus show` plug-ins: each capability's CLI module registers the things it can list, so the
`show` command (in cli/discovery.py, which owns its discovery-only flags) never imports another
capability's code. `cli.main` imports every command module, so the registry is full at start."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ShowRequest:
    """What `show` parsed for a plug-in; `namespace` None means every namespace."""

    what: str
    namespace: str | None
    output: str
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
