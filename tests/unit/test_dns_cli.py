"""`isthmus dns` flag validation: bad input is exit code 2 with a clear message, never a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from isthmus.cli.dns import dns as _dns  # noqa: F401  (registers the command)
from isthmus.cli.main import app
from isthmus.dns.server import parse_listen


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster-id", "c1", "--listen", "127.0.0.1"], "is not HOST:PORT"),
        (["--cluster-id", "c1", "--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--cluster-id", "c1", "--listen", "localhost:53"], "not an IP address"),
        (["--cluster-id", "C_1"], "not a DNS-1123 label"),
        (["--cluster-id", "c1", "--zone", "bad..zone"], "is not a DNS name"),
        (["--cluster-id", "c1", "--ttl", "-1"], "--ttl"),
        (["--cluster-id", "c1", "--metrics-addr", "nope"], "not host:port"),
        (["--cluster-id", "c1", "--kubeconfig", "/nonexistent/kubeconfig"], "error:"),
        (["--cluster-id", "c1", "--log-format", "xml"], "log format"),
        (["--cluster-id", "c1", "--local-zone", "clusterset.local."], "must differ"),
    ],
)
def test_bad_flags_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["dns", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert parse_listen("[::1]:53") == ("::1", 53)
    with pytest.raises(ValueError):
        parse_listen(":53")
