"""`isthmus proxy` flag validation: user errors (usage errors included) are one `error:` line and
exit 2, before anything starts."""

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
        (["--cluster-id", "c1", "--log-format", "xml"], "--log-format must be text or json"),
        (["--cluster-id", "c1", "--log-level", "loud"], "--log-level must be one of"),
        ([], "missing option '--cluster-id' (see isthmus proxy --help)"),
        (["--cluster-id", "c1", "--connect-timeout", "soon"], "invalid value for '--connect-timeout'"),
        (["--cluster-id", "c1", "--connect-timeout", "0"], "--connect-timeout"),
        (["--cluster-id", "c1", "--udp-idle-timeout", "-1"], "--udp-idle-timeout"),
        (["--cluster-id", "c1", "--metrics-addr", "nope"], "not host:port"),
        (["--cluster-id", "c1", "--kubeconfig", "/nonexistent/kubeconfig"], "kubeconfig"),
        (["--cluster-id", "c1", "--mode", "ebpf"], "'--mode'"),
    ],
)
def test_bad_flags_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["proxy", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_help_lists_the_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert "proxy" in result.output
    result = CliRunner().invoke(app, ["proxy", "--help"])
    assert result.exit_code == 0 and "--node-address" in result.output


def test_nftables_mode_without_nft_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nft on it
    result = CliRunner().invoke(app, ["proxy", "--cluster-id", "c1", "--mode", "nftables"])
    assert result.exit_code == 2, result.output
    assert "--mode nftables needs the nft command" in result.stderr
