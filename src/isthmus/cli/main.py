"""Entry point: import the command modules so they register on the app.

A long-running component (`isthmus agent`, `dns`, `proxy`, ...) imports only its own command
module: every process of a clusterset then skips the others' imports (pydantic models of every
API, the apiserver, the CLI tables), about 15-20 MB of RSS and half a second of start-up each.
Anything else (`isthmus`, `--help`, `show`, `up`, a typo) imports every command.
"""

from __future__ import annotations

import importlib
import sys

ALL = ("agent", "apiserver", "crds", "demo", "diagnose", "discovery", "dns", "egress", "kubelite", "lb", "local",
       "mcsvc", "pools", "proxy", "ui", "webhook")
COMPONENTS = {
    "agent": "agent", "apiserver": "apiserver", "dns": "dns", "proxy": "proxy", "kube-lite": "kubelite",
    "lb": "lb", "pools": "pools", "webhook": "webhook", "mcsvc": "mcsvc", "mcsvc-broker": "mcsvc",
    "egress-operator": "egress", "egress-forwarder": "egress", "egress-gateway": "egress",
    "ui": "ui",
}
"""Command → the one module that registers it (tests/unit/test_cli_main.py checks the table)."""


def modules_for(argv: list[str]) -> tuple[str, ...]:
    """The command modules to import for this command line."""
    first = argv[1] if len(argv) > 1 else ""
    module = COMPONENTS.get(first)
    return (module,) if module is not None else ALL


for _name in modules_for(sys.argv):
    importlib.import_module(f"isthmus.cli.{_name}")

from isthmus.cli.app import app  # noqa: E402 - after the commands registered on it

__all__ = ["app"]
