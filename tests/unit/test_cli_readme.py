"""The README as a newcomer follows it: every program its shell blocks run is one `make` installs
(or the shell's, or the venv's), and its CLI synopsis names each command once, with flags the
command has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from isthmus.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

SHELL = {".", "export", "for", "done", "cd", "make"}
VENV = {"isthmus", ".venv/bin/pytest", ".venv/bin/python"}
ELSEWHERE = {"kubectl"}
"""Not a Debian 12 package: the Makefile says when it is missing (docs/deploy.md)."""
DEBIAN = {"dig": "bind9-dnsutils", "curl": "curl", "haproxy": "haproxy", "nft": "nft", "ip": "iproute2"}
"""The program → the Debian package that installs it."""


def _blocks(lang: str) -> list[str]:
    """The fenced blocks opened with ```lang (fences alternate: opening, closing)."""
    parts = re.split(r"^```(\w*)\n", README, flags=re.M)
    # parts: text, lang, block+text, lang, ...; a closing fence opens nothing ("" lang, block-less text).
    out, i = [], 1
    while i < len(parts) - 1:
        body = parts[i + 1]
        if parts[i] == lang:
            out.append(body)
        i += 4  # skip the closing fence's split too
    return out


def _code(line: str) -> str:
    return re.split(r"\s#\s", f" {line} ", maxsplit=1)[0].strip()


def _programs() -> set[str]:
    out = set()
    for block in _blocks("sh"):
        for line in block.splitlines():
            for part in re.split(r"&&|\|\||;|\||\$\(|\bdo\b|\bthen\b", _code(line)):
                words = part.strip().lstrip("\"'").split()
                if words:
                    out.add(words[0])
    return out


def _apt_packages() -> set[str]:
    found = re.search(r"^APT_PACKAGES \?=(.*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert found, "the Makefile has no APT_PACKAGES"
    return set(found.group(1).split())


def test_make_installs_every_program_the_readme_runs() -> None:
    programs = _programs()
    assert {"isthmus", "kubectl", "dig", "curl"} <= programs  # the parse found the hands-on part
    unknown = programs - SHELL - VENV - ELSEWHERE - set(DEBIAN)
    assert not unknown, f"the README runs {sorted(unknown)}: say which Debian package installs each (DEBIAN)"
    missing = {p: DEBIAN[p] for p in programs & set(DEBIAN) if DEBIAN[p] not in _apt_packages()}
    assert not missing, f"`make` does not install what the README runs: {missing} (Makefile APT_PACKAGES)"


def _synopsis() -> list[tuple[str, str, str]]:
    """(command, its flags and arguments, its comment) for each entry of the CLI section's synopsis."""
    block = next(b for b in _blocks("") if b.startswith("isthmus up"))
    entries: list[list[str]] = []
    for line in block.splitlines():
        if line.startswith("isthmus "):
            entries.append([line])
        elif line.strip():
            entries[-1].append(line)
    out = []
    for lines in entries:
        code = " ".join(_code(line) for line in lines)
        comment = " ".join(line.split(" # ", 1)[1].strip() for line in lines if " # " in line)
        out.append((code.split()[1], code, comment))
    return out


def test_the_cli_synopsis_names_each_command_once_with_flags_it_has() -> None:
    group: Any = typer.main.get_command(app)
    visible = {name for name, cmd in group.commands.items() if not cmd.hidden}
    entries = _synopsis()
    assert {name for name, _, _ in entries} == visible
    for name in visible:
        forms = [(code, comment) for n, code, comment in entries if n == name]
        comments = [comment for _, comment in forms]
        # Several lines for one command only as different uses, each saying which (`leave`).
        assert len(forms) == 1 or (all(comments) and len(set(comments)) == len(comments)), forms
        known = {o for p in group.commands[name].params for o in [*p.opts, *p.secondary_opts] if o.startswith("-")}
        for code, _ in forms:
            flags = set(re.findall(r"(?:(?<=[\s\[|/(])|^)(--?[a-zA-Z][\w-]*)", code))
            assert flags <= known, f"isthmus {name} has no {sorted(flags - known)}"
