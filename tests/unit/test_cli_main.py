"""`isthmus <component>` imports only the module that registers it (cli/main.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from isthmus.cli.main import ALL, COMPONENTS, modules_for

_PROBE = """
import importlib, json, sys
from isthmus.cli.app import app
registered = {}
for name in %r:
    before = {c.name for c in app.registered_commands}
    importlib.import_module(f"isthmus.cli.{name}")
    for c in app.registered_commands:
        if c.name not in before:
            registered[c.name] = name
print(json.dumps(registered))
"""


def test_every_component_maps_to_the_module_that_registers_it() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE % (ALL,)], check=True, capture_output=True, text=True)
    registered = json.loads(out.stdout)
    for command, module in COMPONENTS.items():
        assert registered.get(command) == module, command


def test_a_component_imports_one_module_anything_else_all() -> None:
    assert modules_for(["isthmus", "agent", "--cluster-id", "c1"]) == ("agent",)
    assert modules_for(["isthmus", "egress-gateway"]) == ("egress",)
    assert modules_for(["isthmus"]) == ALL
    assert modules_for(["isthmus", "--help"]) == ALL
    assert modules_for(["isthmus", "show", "exports"]) == ALL
    assert modules_for(["isthmus", "agnet"]) == ALL


def test_the_component_runs_alone() -> None:
    """`isthmus dns --help` works with only its module imported, and lists its own options."""
    out = subprocess.run([sys.executable, "-m", "isthmus", "dns", "--help"], check=True, capture_output=True,
                         text=True)
    assert "--tcp-max-per-source" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "isthmus", "dns", "--ttl", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--ttl" in bad.stderr
    probe = ("import sys; sys.argv = ['isthmus', 'dns']; import isthmus.cli.main; "
             "print(sorted(m for m in sys.modules if m.startswith('isthmus.cli.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert "isthmus.cli.dns" in loaded and "isthmus.cli.apiserver" not in loaded
