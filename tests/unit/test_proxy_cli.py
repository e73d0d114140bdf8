"""`isthmus proxy` flag validation: user errors exit 2 with a message, before anything starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import isthmus.cli.main  # registers the other commands, so "proxy" is a subcommand
import isthmus.cli.proxy  # noqa: F401
from isthmus.cli.app import app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster-id", "Not_A_Label"], "DNS-1123"),
        (["--cluster-id", "c1", "--node-address", "localhost"], "not an IP address"),
        (["--cluster-id", "c1", "--log-format", "xml"], "log format"),
        (["--cluster-id", "c1", "--connect-timeout", "0"], "--connect-timeout"),
        (["--cluster-id", "c1", "--udp-idle-timeout", "-1"], "--udp-idle-timeout"),
        (["--cluster-id", "c1", "--metrics-addr", "nope"], "not host:port"),
        (["--cluster-id", "c1", "--kubeconfig", "/nonexistent/kubeconfig"], "kubeconfig"),
    ],
)
def test_bad_flags_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["proxy", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_help_lists_the_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert "proxy" in result.output
    result = CliRunner().invoke(app, ["proxy", "--help"])
    assert result.exit_code == 0 and "--node-address" in result.output
