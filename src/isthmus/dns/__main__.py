"""`python -m isthmus.dns ARGS` = `isthmus dns ARGS` (for the benchmark and before the CLI wires it in)."""

from __future__ import annotations

import sys

from isthmus.cli.dns import dns as _dns  # noqa: F401  (registers the command)
from isthmus.cli.main import app  # every other command too: typer collapses a one-command app


def main() -> None:
    app(["dns", *sys.argv[1:]], prog_name="isthmus")


if __name__ == "__main__":
    main()
