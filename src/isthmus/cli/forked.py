"""What a process forked from a zygote (isthmus.procs) runs: the `isthmus` command, as
``python -m isthmus`` would run it.

The zygote is handed this program by reference (``isthmus.cli.forked:PROGRAM``: the local
clusterset's `isthmus.local.kubelite.processes.ENTRY`) and imports it after its preload, so the
process infrastructure never imports the CLI. `prepare`
runs once in the zygote before it freezes: it builds the click command tree (typer builds it on
every call, from every command's signature: about 7 MB of pages each child would otherwise copy)
and runs the start-up code every child runs (`_warm`). `run` is each child's command.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from isthmus.procs.entry import switched_on

__all__ = ["PROGRAM", "IsthmusProgram"]

WARM_ENV = "ISTHMUS_ZYGOTE_WARM"
"""``0`` turns `_warm` off (to measure what it saves)."""
PROG_NAME = "python -m isthmus"

class IsthmusProgram:
    """The `isthmus` command for a forked child (`isthmus.procs.entry.Program`)."""

    def __init__(self) -> None:
        self.command: Any = None
        """The `isthmus` click command, built before forking (None: each child builds its own)."""

    def prepare(self) -> None:
        if "isthmus.cli.main" not in sys.modules:  # a zygote that did not preload the CLI: nothing to build
            return
        with contextlib.suppress(Exception):  # typer builds the click command tree on every call: once, here
            import typer.main

            cli = sys.modules["isthmus.cli.main"]
            for name in cli.ALL:  # a zygote forked from a component holds only that component's command
                importlib.import_module(f"isthmus.cli.{name}")
            self.command = typer.main.get_command(cli.app)
        if switched_on(WARM_ENV):
            with contextlib.suppress(Exception):  # an optimisation: a child that runs it cold works the same
                _warm(self.command)

    def run(self, args: Sequence[str]) -> None:
        if self.command is not None:
            self.command.main(args=list(args), prog_name=PROG_NAME)
        else:
            from isthmus.cli.main import app

            app(prog_name=PROG_NAME)


PROGRAM = IsthmusProgram()


def _warm(command: Any, rounds: int = 10) -> None:
    """Run, before forking, the start-up code every child runs: parsing a command line (click) and
    building an API client (lightkube, httpx, the transport), a few times over.

    Python 3.11 writes into the code it runs: a function's bytecode is rewritten for the types it
    meets (quickening, then specialisation), and classes and module dictionaries get version tags
    on first use. Done here, those pages stay shared; left to the children, each copies them. With
    every pod forked from the supervisor's zygote, this took a pod's own memory from about 23 MB
    back to 17 MB (a kube-lite's zygote, forked from a running kube-lite, had had it for free).
    Nothing is left behind: no loop, thread or socket (a client connects on its first request),
    and what was built is garbage before the collection that precedes the freeze."""
    from lightkube import KubeConfig
    from lightkube.config.models import Cluster, User

    from isthmus.kube.client import client_for

    for _ in range(rounds):
        for name, sub in getattr(command, "commands", {}).items():
            with contextlib.suppress(Exception):
                sub.make_context(name, [], resilient_parsing=True)
        config = KubeConfig.from_one(cluster=Cluster(server="https://127.0.0.1:9"), user=User(token="warm"),
                                     namespace="default").get()
        assert config is not None
        client_for(config, field_manager="warm")

