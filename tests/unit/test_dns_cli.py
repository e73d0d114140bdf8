"""`isthmus dns` flag validation: bad input is exit code 2 with a clear message, never a traceback."""

from __future__ import annotations

import inspect
import os

import pytest
from typer.testing import CliRunner

from isthmus.cli.dns import dns as _dns  # registers the command
from isthmus.cli.main import app
from isthmus.dns.metrics import DnsStats, add_snapshots
from isthmus.dns.server import TcpLimits, parse_listen
from isthmus.dns.workers import parse_workers


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster-id", "c1", "--listen", "127.0.0.1"], "is not HOST:PORT"),
        (["--cluster-id", "c1", "--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--cluster-id", "c1", "--listen", "localhost:53"], "not an IP address"),
        (["--cluster-id", "C_1"], "(a DNS-1123 label)"),
        (["--cluster-id", "c1", "--zone", "bad..zone"], "is not a DNS name"),
        (["--cluster-id", "c1", "--ttl", "-1"], "--ttl"),
        (["--cluster-id", "c1", "--metrics-addr", "nope"], "not host:port"),
        (["--cluster-id", "c1", "--kubeconfig", "/nonexistent/kubeconfig"], "error:"),
        (["--cluster-id", "c1", "--log-format", "xml"], "--log-format must be text or json"),
        (["--cluster-id", "c1", "--local-zone", "clusterset.local."], "must differ"),
        (["--cluster-id", "c1", "--tcp-query-timeout", "0"], "--tcp-query-timeout must"),
        (["--cluster-id", "c1", "--tcp-query-timeout", "inf"], "--tcp-query-timeout must"),
        (["--cluster-id", "c1", "--tcp-idle-timeout", "nan"], "--tcp-idle-timeout must"),
        (["--cluster-id", "c1", "--tcp-max-connections", "0"], "--tcp-max-connections must"),
        (["--cluster-id", "c1", "--tcp-max-per-source", "-1"], "--tcp-max-per-source must"),
        (["--cluster-id", "c1", "--workers", "many"], "--workers 'many': expected a number, 0 or auto"),
        (["--cluster-id", "c1", "--workers", "-2"], "--workers '-2'"),
        (["--cluster-id", "c1", "--udp-batch", "-1"], "--udp-batch must be 0"),
        (["--cluster-id", "c1", "--workers", "2", "--kubeconfig", "/nonexistent/kubeconfig"], "error:"),
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


def test_tcp_flag_defaults_are_the_servers() -> None:
    params = inspect.signature(_dns).parameters
    flags = {
        f: params[f"tcp_{f}"].default
        for f in ("query_timeout", "idle_timeout", "max_connections", "max_per_source")
    }
    assert TcpLimits(**flags) == TcpLimits()


def test_workers_count() -> None:
    assert parse_workers("1") == 1 and parse_workers("3") == 3
    assert parse_workers("auto") == parse_workers("0") == (os.cpu_count() or 1)


def test_snapshots_add_counters_and_keep_the_newest_gauges() -> None:
    a, b = DnsStats(), DnsStats()
    a.queries[(1, 0)] = 5
    a.hits, a.records, a.tcp_closed["idle_timeout"] = 5, 9, 2
    a.observe_many(3000, 5)
    b.queries[(1, 0)] = 1
    b.queries[(28, 0)] = 2
    b.hits, b.records, b.ready = 3, 7, True
    b.observe_ns(20_000)
    total = DnsStats(worker=0)
    total.load(add_snapshots(a.snapshot(), b.snapshot()))
    assert dict(total.queries) == {(1, 0): 6, (28, 0): 2}
    assert total.hits == 8 and total.records == 7 and total.ready
    assert total.tcp_closed["idle_timeout"] == 2
    assert sum(total.latency) == 6 and total.latency_sum_ns == 15_000 + 20_000
