"""What a zygote's children run: the entry point its caller hands it.

A zygote forks processes that `python -m <module> ...` would have started. Which module, and
what a child calls to become that command, is the caller's to say (as
`multiprocessing.set_forkserver_preload` leaves the preload to its caller): an `Entry` names the
``-m`` module and a `Program` by reference (``package.module:attribute``), which the zygote
imports after its preload, prepares once before freezing (what every child would otherwise
build for itself), and runs in each child with the arguments after the module. Nothing here
imports the program: this package sits below whatever it starts.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

__all__ = ["ENV", "Entry", "Program", "enabled", "switched_on"]

ENV = "ISTHMUS_ZYGOTE"
"""``0`` turns the fork server off: callers exec instead (`enabled`)."""


def switched_on(variable: str) -> bool:
    """A switch that is on unless the variable says 0, false, no or off."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


def enabled() -> bool:
    return switched_on(ENV)


class Program(Protocol):
    """What a forked child runs, as ``python -m <module>`` would."""

    def prepare(self) -> None:
        """In the zygote, once its preload is imported and before it freezes: build what every
        child would otherwise build for itself (an optimisation: a child must work without it)."""

    def run(self, args: Sequence[str]) -> None:
        """In a child: run the command `args` (the arguments after ``-m <module>``); return or
        raise SystemExit with its exit status."""


@dataclass(frozen=True)
class Entry:
    """The command a zygote's children are: ``[sys.executable, "-m", module, ...]``, run by
    `program` (``package.module:attribute``, a `Program`)."""

    module: str
    program: str

    def forkable(self, argv: Sequence[str]) -> bool:
        """True for ``python -m <module> ...`` run by this very interpreter (what the zygote can become)."""
        return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] == self.module

    def load(self) -> Program:
        """Import the program (in the zygote or a child: never in this package's importers)."""
        module, _, attribute = self.program.partition(":")
        return cast(Program, getattr(importlib.import_module(module), attribute))

    def main_path(self) -> str:
        """``sys.argv[0]`` as ``python -m <module>`` sets it: the module's file (a package's ``__main__.py``)."""
        loaded = importlib.import_module(self.module)
        path = str(loaded.__file__)
        if hasattr(loaded, "__path__"):
            return os.path.join(os.path.dirname(path), "__main__.py")
        return path

    def args(self) -> list[str]:
        """How a zygote's command line names this entry (`server.main` reads it back)."""
        return ["--module", self.module, "--program", self.program]
