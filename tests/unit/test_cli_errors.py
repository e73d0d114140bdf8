"""Every user error of every command is one `error:` line on stderr and exit code 2: usage errors
(unknown command or option, missing or malformed value), bad kubeconfigs, refused confirmations."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from isthmus.cli.main import app

runner = CliRunner()


def _error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    return result.stderr.removeprefix("error: ").strip()


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "clusters: [{name: a, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: a, context: {cluster: a}}]\ncurrent-context: a\n"
    )
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "no such command 'nosuch' (see isthmus --help)"),
        (["--bogus"], "no such option: --bogus (see isthmus --help)"),
        (["proxy"], "missing option '--cluster-id' (see isthmus proxy --help)"),
        (["agent", "--cluster-id"], "option '--cluster-id' requires an argument (see isthmus agent --help)"),
        (["show"], "missing argument 'WHAT' (see isthmus show --help)"),
        (["join", "b.subm", "--bogus"], "no such option: --bogus (see isthmus join --help)"),
        (["demo", "--clusters", "x"], "invalid value for '--clusters': "),
        # Commands registered with a bare app.command get the same treatment from the application.
        (["apiserver", "--port", "many"], "invalid value for '--port': "),
        (["apiserver", "--port"], "option '--port' requires an argument (see isthmus apiserver --help)"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str) -> None:
    error = _error(args)
    assert error == message or (message.endswith(": ") and error.startswith(message)), error


def test_option_values_are_checked_the_same_everywhere(kubeconfig: Path) -> None:
    assert "a DNS-1123 label" in _error(["agent", "--cluster-id", "C_1"])
    assert _error(["agent", "--cluster-id", "c1", "--log-format", "xml"]) == "--log-format must be text or json, not 'xml'"
    assert _error(["agent", "--cluster-id", "c1", "--metrics-addr", "nope"]).startswith("--metrics-addr:")
    assert _error(["agent", "--cluster-id", "c1", "--workers", "0"]).startswith("invalid value for '--workers'")


def test_a_malformed_kubeconfig_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n  - bad: {\n")
    assert _error(["show", "exports", "--kubeconfig", str(bad)]).startswith(f"kubeconfig {bad} is not valid YAML: ")
    assert _error(["export", "web", "--kubeconfig", str(bad)]).startswith(f"kubeconfig {bad} is not valid YAML: ")
    assert _error(["agent", "--cluster-id", "c1", "--kubeconfig", str(bad)]).startswith(f"kubeconfig {bad} is not")
    empty = tmp_path / "noclusters.yaml"
    empty.write_text("apiVersion: v1\nkind: Config\ncontexts: [{name: a, context: {cluster: a}}]\ncurrent-context: a\n")
    assert _error(["show", "imports", "--kubeconfig", str(empty)]) == f"kubeconfig {empty} defines no clusters"


def test_an_unknown_context_lists_the_known_ones(kubeconfig: Path) -> None:
    assert _error(["show", "exports", "--kubeconfig", str(kubeconfig), "--context", "c2"]) == (
        f"context 'c2' not found in kubeconfig {kubeconfig} (contexts: a)"
    )


def test_leave_without_a_terminal_needs_yes(kubeconfig: Path, tmp_path: Path) -> None:
    # CliRunner's stdin is no terminal: leave refuses before it contacts anything.
    assert _error(["leave", "--kubeconfig", str(kubeconfig)]) == (
        "leave would remove this cluster from its clusterset: pass --yes to confirm (there is no terminal to ask on)"
    )
    assert _error(["leave", "--broker-info", str(tmp_path / "b.subm"), "--cluster-id", "c9"]) == (
        "leave would remove cluster c9 from the broker: pass --yes to confirm (there is no terminal to ask on)"
    )


def test_an_unreachable_server_is_one_line(kubeconfig: Path) -> None:
    assert _error(["show", "exports", "--kubeconfig", str(kubeconfig)]).startswith(
        "cannot reach the API server at http://127.0.0.1:1: "
    )
