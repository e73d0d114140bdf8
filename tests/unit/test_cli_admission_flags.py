"""User errors in the admission commands' flags: one `error:` line, exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from isthmus.cli.main import app


@pytest.mark.parametrize(("args", "message"), [
    (["apiserver", "--disable-admission-plugins", "DklbConfig,NoSuchPlugin"],
     "--disable-admission-plugins: unknown plugin 'NoSuchPlugin' (plugins: DklbConfig, MultiClusterService, Egress)"),
    (["webhook", "--listen", "nowhere"], "--listen must be HOST:PORT"),
    (["webhook", "--tls-secret", "just-a-name"], "--tls-secret must be NAMESPACE/NAME, not 'just-a-name'"),
    (["webhook", "--service", "ns/"], "--service must be NAMESPACE/NAME"),
    (["webhook", "--tls-cert-file", "/tmp/x.crt"], "--tls-cert-file and --tls-key-file go together"),
])
def test_bad_flags_exit_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    if args[0] == "apiserver":
        args = [*args, "--port", "0", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
