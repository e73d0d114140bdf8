"""kubectl habits of every command: `-h`, help without type placeholders, shell completion through
click's environment protocol, `kubectl isthmus` as a plugin, `isthmus version`, and where the
state dir and the kubeconfig are found (flag > environment > default)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from isthmus.cli.app import STATE_DIR_ENV
from isthmus.cli.discovery import SHOW_CHOICES, SHOW_WHAT
from isthmus.cli.main import app
from isthmus.cli.show import SHOWS

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
PLACEHOLDERS = re.compile(r"<(bool|str|int|float|path|file|dir|text|datetime|list\[[^\]]*\])>", re.IGNORECASE)


def _commands() -> list[str]:
    group: Any = typer.main.get_command(app)
    return sorted(group.commands)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", STATE_DIR_ENV)}
    return {**env, "PYTHONPATH": str(ROOT / "src"), **extra}


@pytest.mark.parametrize("command", ["", *_commands()])
def test_every_help_reads_without_type_placeholders_and_h_is_help(command: str) -> None:
    args = [command] if command else []
    full = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "160"})
    short = runner.invoke(app, [*args, "-h"], env={"COLUMNS": "160"})
    assert full.exit_code == 0 and short.exit_code == 0, full.output
    assert short.output == full.output
    assert "Usage:" in full.output
    assert not PLACEHOLDERS.search(full.output), PLACEHOLDERS.findall(full.output)


def test_show_names_every_thing_it_can_list() -> None:
    assert SHOW_CHOICES == (*SHOW_WHAT, *SHOWS)  # the help and completion list what `show` accepts


def _complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for the last word of `words` (click's protocol, as typer wires it)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    p = subprocess.run([sys.executable, "-m", "isthmus"], capture_output=True, text=True, timeout=60,
                       env=_env(_ISTHMUS_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword),
                                **(env or {})))
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_completion_of_commands_choices_and_flags() -> None:
    assert _complete("isthmus sho") == ["show"]
    assert _complete("isthmus sh") == ["shell", "show"]
    assert {"up", "status", "down", "version", "show", "export"} <= set(_complete("isthmus "))
    assert _complete("isthmus show ex") == ["exports"]
    assert set(_complete("isthmus show ")) == set(SHOW_CHOICES)
    assert _complete("isthmus show exports -o ") == ["table", "wide", "json", "yaml"]
    assert _complete("isthmus version --output j") == ["json"]
    assert "--state-dir" in _complete("isthmus status --")
    assert _complete("isthmus crds -o ") == ["yaml", "json"]


def test_the_completion_script_is_offered() -> None:
    # typer's switch for naming the shell instead of detecting it (the test's shell is anyone's guess)
    p = subprocess.run([sys.executable, "-m", "isthmus", "--show-completion", "bash"], capture_output=True, text=True,
                       timeout=60, env=_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"))
    assert p.returncode == 0 and "_ISTHMUS_COMPLETE=complete_bash" in p.stdout, p.stderr


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_finds_and_runs_the_plugin(tmp_path: Path) -> None:
    """The console script pip makes from pyproject's entry point, on PATH as kubectl-isthmus."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("kubectl-isthmus", "kubectl_complete-isthmus"):
        module, _, func = scripts[name].partition(":")
        assert module == scripts["isthmus"].split(":")[0]  # the same application
        (bin_dir / name).write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
        (bin_dir / name).chmod(0o755)
    script = bin_dir / "kubectl-isthmus"
    env = _env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", KUBECONFIG=str(tmp_path / "none"))
    listed = subprocess.run(["kubectl", "plugin", "list"], capture_output=True, text=True, timeout=30, env=env)
    assert str(script) in listed.stdout
    version = subprocess.run(["kubectl", "isthmus", "version", "--client", "-o", "json"], capture_output=True,
                             text=True, timeout=60, env=env)
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout)["client"]["version"]
    usage = subprocess.run(["kubectl", "isthmus", "show", "--bogus"], capture_output=True, text=True, timeout=60,
                           env=env)
    assert usage.returncode == 2
    assert usage.stderr.strip() == "error: no such option: --bogus (see kubectl isthmus show --help)"
    helped = subprocess.run(["kubectl", "isthmus", "show", "-h"], capture_output=True, text=True, timeout=60, env=env)
    assert "Usage: kubectl isthmus show [OPTIONS] WHAT" in helped.stdout
    wrong = subprocess.run(["kubectl", "isthmus", "--show-completion"], capture_output=True, text=True, timeout=60,
                           env=env)  # typer's script would be for a program named `kubectl isthmus`
    assert wrong.returncode == 2 and "kubectl_complete-isthmus" in wrong.stderr
    # kubectl's own completion asks kubectl_complete-isthmus (cobra's answer: candidates, then `:4`)
    for words, expected in ((["sho"], ["show"]), (["sh"], ["shell", "show"]), (["show", "exports", "-o", ""], ["table", "wide", "json", "yaml"])):
        asked = subprocess.run(["kubectl", "__complete", "isthmus", *words], capture_output=True, text=True,
                               timeout=60, env=env)
        assert asked.stdout.splitlines() == [*expected, ":4"], asked.stderr


# --- version ------------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: connections are refused


def _kubeconfig(path: Path, servers: dict[str, str], current: str) -> Path:
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": n, "cluster": {"server": url}} for n, url in servers.items()],
        "contexts": [{"name": n, "context": {"cluster": n}} for n in servers],
        "current-context": current,
    }))
    return path


def test_version_client_never_contacts_a_server(tmp_path: Path) -> None:
    result = runner.invoke(app, ["version", "--client", "-o", "yaml", "--kubeconfig", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.stdout)
    assert doc["kind"] == "Version" and "clusters" not in doc
    assert doc["client"]["python"] == ".".join(map(str, sys.version_info[:3]))
    table = runner.invoke(app, ["version", "--client"])
    assert table.stdout.startswith(f"Client Version: {doc['client']['version']} (Python ")


def test_version_shows_an_unreachable_cluster_in_its_row(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    kc = _kubeconfig(tmp_path / "kc", {"gone": url, "also-gone": url}, "gone")
    result = runner.invoke(app, ["version", "--kubeconfig", str(kc), "-o", "json"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    doc = json.loads(result.stdout)
    assert [c["context"] for c in doc["clusters"]] == ["also-gone", "gone"]  # every context of the kubeconfig
    for row in doc["clusters"]:
        assert row["server"] == url and row["serverVersion"] is None and row["components"] == []
        assert row["error"].startswith(f"cannot reach the API server at {url}")
    table = runner.invoke(app, ["version", "--kubeconfig", str(kc), "--context", "gone"])
    lines = table.stdout.splitlines()
    assert table.exit_code == 1 and lines[1].split() == ["CLUSTER", "COMPONENT", "VERSION", "READY", "ERROR"]
    assert lines[2].split()[:4] == ["gone", "kubernetes", "-", "-"] and "cannot reach the API server" in lines[2]
    assert len(lines) == 3


# --- where things are found ---------------------------------------------------------------------


def _show_error(args: list[str], cwd: Path, **env: str) -> str:
    """The one error line of `isthmus show exports` run in `cwd`: it names the server it tried."""
    p = subprocess.run([sys.executable, "-m", "isthmus", "show", "exports", *args], capture_output=True, text=True,
                       timeout=60, cwd=cwd, env=_env(HOME=str(cwd), **env))
    assert p.returncode == 2, (p.stdout, p.stderr)
    return p.stderr.strip()


def test_kubeconfig_precedence_flag_env_state_dir_default(tmp_path: Path) -> None:
    urls = {n: f"http://127.0.0.1:{_closed_port()}" for n in ("flag", "env", "statedir", "dotdir", "home")}
    (tmp_path / ".kube").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / ".isthmus").mkdir()
    kcs = {
        "flag": _kubeconfig(tmp_path / "flag.yaml", {"flag": urls["flag"]}, "flag"),
        "env": _kubeconfig(tmp_path / "env.yaml", {"env": urls["env"]}, "env"),
        "statedir": _kubeconfig(tmp_path / "state" / "kubeconfig", {"c1": urls["statedir"]}, "c1"),
        "dotdir": _kubeconfig(tmp_path / ".isthmus" / "kubeconfig", {"c1": urls["dotdir"]}, "c1"),
        "home": _kubeconfig(tmp_path / ".kube" / "config", {"home": urls["home"]}, "home"),
    }
    everything = {"KUBECONFIG": str(kcs["env"]), STATE_DIR_ENV: str(tmp_path / "state")}
    assert urls["flag"] in _show_error(["--kubeconfig", str(kcs["flag"])], tmp_path, **everything)
    assert urls["env"] in _show_error([], tmp_path, **everything)
    assert urls["statedir"] in _show_error([], tmp_path, **{STATE_DIR_ENV: str(tmp_path / "state")})
    assert urls["dotdir"] in _show_error([], tmp_path)  # ./.isthmus, where `isthmus up` keeps it
    (tmp_path / ".isthmus" / "kubeconfig").unlink()
    assert urls["home"] in _show_error([], tmp_path)
    # --context picks a context of whichever kubeconfig was chosen
    assert "context 'c9' not found in kubeconfig" in _show_error(["--context", "c9"], tmp_path,
                                                                  **{STATE_DIR_ENV: str(tmp_path / "state")})


def test_components_never_take_the_state_dir_kubeconfig(tmp_path: Path) -> None:
    """A pod started from a shell that set ISTHMUS_STATE_DIR must still use its own ServiceAccount."""
    group: Any = typer.main.get_command(app)
    ctx = group.make_context("isthmus", ["agent", "--help"], resilient_parsing=True)
    for name in ("agent", "dns", "proxy", "lb", "pools", "webhook", "mcsvc", "mcsvc-broker", "egress-operator",
                 "egress-forwarder", "egress-gateway", "controller-manager"):
        option = next(p for p in group.commands[name].get_params(ctx) if p.name == "kubeconfig")
        assert option.callback is None, name
    for name in ("show", "export", "unexport", "join", "leave", "deploy-broker", "expose", "version"):
        option = next(p for p in group.commands[name].get_params(ctx) if p.name == "kubeconfig")
        assert option.callback is not None, name


def test_state_dir_precedence_flag_env_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    said = runner.invoke(app, ["status"], env={STATE_DIR_ENV: str(tmp_path / "from-env")})
    assert said.exit_code == 2 and f"no local clusterset in {tmp_path / 'from-env'}" in said.stderr
    said = runner.invoke(app, ["status", "--state-dir", str(tmp_path / "flag")],
                         env={STATE_DIR_ENV: str(tmp_path / "from-env")})
    assert f"no local clusterset in {tmp_path / 'flag'}" in said.stderr
    said = runner.invoke(app, ["status"], env={STATE_DIR_ENV: ""})
    assert f"no local clusterset in {(tmp_path / '.isthmus')}" in said.stderr.replace("\n", "")
    down = runner.invoke(app, ["down"], env={STATE_DIR_ENV: str(tmp_path / "from-env")})
    assert down.exit_code == 0 and str(tmp_path / "from-env") in down.stdout


def test_a_kubeconfig_found_is_not_one_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`leave --broker-info` refuses an explicit --kubeconfig, not the local clusterset's found by default."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".isthmus").mkdir()
    _kubeconfig(tmp_path / ".isthmus" / "kubeconfig", {"c1": f"http://127.0.0.1:{_closed_port()}"}, "c1")
    args = ["leave", "--broker-info", str(tmp_path / "none.subm"), "--cluster-id", "c9", "--yes"]
    found = runner.invoke(app, args, env={"KUBECONFIG": "", STATE_DIR_ENV: ""})
    assert found.exit_code == 2 and "cannot read broker-info" in found.stderr
    given = runner.invoke(app, [*args, "--kubeconfig", str(tmp_path / ".isthmus" / "kubeconfig")])
    assert given.exit_code == 2 and "use either --kubeconfig" in given.stderr


def test_help_groups_commands_sorted_each_with_its_whole_summary() -> None:
    """`isthmus --help` as kubectl's: the commands in groups, users' first and the components
    last, sorted within each group, each by one whole sentence on one line (never cut)."""
    from isthmus.cli.app import PANELS

    out = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    group: Any = typer.main.get_command(app)
    panels: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        head = re.match(r"╭─ (.+?) ─", line)
        if head:
            panels.append((head.group(1), []))
        elif panels and (row := re.match(r"│ (\S+) +(.+?) *│$", line)):
            panels[-1][1].append(row.group(1))
            name, summary = row.groups()
            if name in group.commands:
                assert summary.endswith(".") and len(summary) <= 110, (name, summary)
                assert summary == group.commands[name].get_short_help_str(), name
    by_panel = dict(panels)
    assert [p for p, _ in panels if p in PANELS] == list(PANELS) and "Commands" not in by_panel
    listed = [name for p in PANELS for name in by_panel[p]]
    visible = sorted(name for name, cmd in group.commands.items() if not cmd.hidden)
    assert sorted(listed) == visible and len(listed) == len(visible)
    for p in PANELS:
        assert by_panel[p] == sorted(by_panel[p]), p
    assert {"agent", "dns", "proxy", "webhook", "egress-forwarder", "pools", "lb"} <= set(by_panel[PANELS[-1]])
    assert not {"up", "show", "export", "diagnose", "join"} & set(by_panel[PANELS[-1]])


@pytest.mark.parametrize("shell", ["zsh", "fish", "powershell"])
def test_completion_shows_each_commands_summary_whole_on_one_line(shell: str) -> None:
    """zsh, fish and PowerShell show a command's summary beside it: never cut (click's 45
    characters) nor broken over lines (typer's 80-column rendering)."""
    summary = "Check every cluster of the clusterset and the broker, and say what to run next."
    extra = {"powershell": {"_TYPER_COMPLETE_WORD_TO_COMPLETE": "dia"},
             "fish": {"_TYPER_COMPLETE_FISH_ACTION": "get-args"}}.get(shell, {})
    p = subprocess.run([sys.executable, "-m", "isthmus"], capture_output=True, text=True, timeout=60,
                       env=_env(_ISTHMUS_COMPLETE=f"complete_{shell}", _TYPER_COMPLETE_ARGS="isthmus dia", **extra))
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if "diagnose" in line]
    assert len(lines) == 1 and summary in lines[0], p.stdout
    long = subprocess.run([sys.executable, "-m", "isthmus"], capture_output=True, text=True, timeout=60,
                          env=_env(_ISTHMUS_COMPLETE=f"complete_{shell}", _TYPER_COMPLETE_ARGS="isthmus eg",
                                   **{k: "eg" if k.endswith("WORD_TO_COMPLETE") else v for k, v in extra.items()}))
    assert len(long.stdout.strip().splitlines()) == 3, long.stdout  # egress-*: one line each, however long
