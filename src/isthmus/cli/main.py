"""Entry point: import the command modules so they register on the app.

A long-running component (`isthmus agent`, `dns`, `proxy`, ...) imports only its own command
module: every process of a clusterset then skips the others' imports (pydantic models of every
API, the apiserver, the CLI tables), about 15-20 MB of RSS and half a second of start-up each.
Anything else (`isthmus`, `--help`, `show`, `up`, a typo) imports every command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

ALL = ("agent", "agnhost", "apiserver", "crds", "demo", "diagnose", "discovery", "dns", "egress", "exposure", "image",
       "kubelite", "lb", "local", "manager", "netrelay", "pools", "proxy", "shell", "ui", "version", "webhook")
COMPONENTS = {
    "agent": "agent", "apiserver": "apiserver", "dns": "dns", "proxy": "proxy", "kube-lite": "kubelite",
    "lb": "lb", "pools": "pools", "webhook": "webhook", "mcsvc": "exposure", "mcsvc-broker": "exposure",
    "egress-operator": "egress", "egress-forwarder": "egress", "egress-gateway": "egress",
    "controller-manager": "manager", "ui": "ui", "netrelay": "netrelay", "shell": "shell", "agnhost": "agnhost",
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


def kubectl_plugin() -> None:
    """`kubectl isthmus ...`: kubectl runs the `kubectl-isthmus` it finds on PATH. Usage lines and
    errors then name the command as the user typed it."""
    if {"--install-completion", "--show-completion"} & set(sys.argv[1:2]):
        # typer's scripts would name a program `kubectl isthmus`; kubectl's own completion asks
        # kubectl_complete-isthmus instead.
        from isthmus.cli.app import fail

        raise SystemExit(fail("kubectl completes `kubectl isthmus` through kubectl_complete-isthmus (installed "
                              "with it); `isthmus --install-completion` completes `isthmus`").exit_code)
    app(prog_name="kubectl isthmus", complete_var="_KUBECTL_ISTHMUS_COMPLETE")


def kubectl_plugin_complete() -> None:
    """`kubectl isthmus <TAB>`: kubectl (1.26+) runs `kubectl_complete-isthmus WORD... INCOMPLETE` and
    reads cobra's answer: one candidate a line, then `:4` (no file completion)."""
    import typer
    from typer._click.shell_completion import CompletionItem, ShellComplete

    class _Kubectl(ShellComplete):
        name = "kubectl"
        source_template = ""

        def source_vars(self) -> dict[str, Any]:
            return {}

        def get_completion_args(self) -> tuple[list[str], str]:
            return [], ""

        def format_completion(self, item: CompletionItem) -> str:
            return str(item.value)

    words = sys.argv[1:]
    incomplete = words.pop() if words else ""
    complete = _Kubectl(typer.main.get_command(app), {}, "kubectl isthmus", "_KUBECTL_ISTHMUS_COMPLETE")
    for item in complete.get_completions(words, incomplete):
        print(item.value)
    print(":4")


__all__ = ["app", "kubectl_plugin", "kubectl_plugin_complete"]
