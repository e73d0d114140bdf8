"""`isthmus kube-lite` flag validation: bad input is exit code 2 with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from isthmus.cli.kubelite import kube_lite as _kube_lite  # noqa: F401  (registers the command)
from isthmus.cli.main import app

GOOD = ["--kubeconfig", "/nonexistent/kubeconfig", "--cluster-name", "c1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--pod-cidr", "127.101.0.0/33", "--service-cidr", "127.201.0.0/16"],
            "pod CIDR '127.101.0.0/33' is not",
        ),
        (["--pod-cidr", "10.0.0.0/16", "--service-cidr", "127.201.0.0/16"], "outside 127.0.0.0/8"),
        (["--pod-cidr", "127.101.0.1/16", "--service-cidr", "127.201.0.0/16"], "host bits set"),
        (["--pod-cidr", "127.101.0.0/16", "--service-cidr", "127.101.128.0/17"], "overlap"),
        (
            ["--pod-cidr", "127.101.0.0/16", "--service-cidr", "127.201.0.0/16", "--node-port-range", "3-1"],
            "port range",
        ),
        (
            ["--pod-cidr", "127.101.0.0/16", "--service-cidr", "127.201.0.0/16", "--metrics-addr", "nope"],
            "host:port",
        ),
        (["--pod-cidr", "127.101.0.0/16", "--service-cidr", "127.201.0.0/16"], "kubeconfig /nonexistent/kubeconfig not found"),
        (["--service-cidr", "127.201.0.0/16"], "missing option '--pod-cidr' (see isthmus kube-lite --help)"),
        (
            ["--pod-cidr", "127.101.0.0/16", "--service-cidr", "127.201.0.0/16", "--log-format", "yaml"],
            "--log-format must be text or json",
        ),
    ],
)
def test_bad_flags_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["kube-lite", *GOOD, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_bad_cluster_name() -> None:
    args = ["kube-lite", "--kubeconfig", "k", "--cluster-name", "C_1"]
    result = CliRunner().invoke(
        app, [*args, "--pod-cidr", "127.101.0.0/16", "--service-cidr", "127.201.0.0/16"]
    )
    assert result.exit_code == 2 and "DNS-1123" in result.output


def test_hidden() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert "kube-lite" not in result.output


def test_root_dir_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    kc = tmp_path / "kc"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    result = CliRunner().invoke(app, [
        "kube-lite", "--kubeconfig", str(kc), "--cluster-name", "c1", "--pod-cidr", "127.101.0.0/16",
        "--service-cidr", "127.201.0.0/16", "--root-dir", str(tmp_path / "file" / "kubelet"),
    ])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: --root-dir {tmp_path / 'file' / 'kubelet'}: Not a directory\n"
