"""haproxy.cfg rendering: what a pool spec turns into, and that the real HAProxy accepts it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from isthmus.api.lb import (
    InstanceState,
    LoadBalancerPoolSpec,
    PoolFrontendStatus,
    PoolInstanceStatus,
    Reason,
    summarize_status,
)
from isthmus.haproxy.config import (
    Layout,
    PoolConfigError,
    Slot,
    assign_slots,
    instance_addresses,
    quote,
    render,
    slot_count,
)

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def _spec(**haproxy: object) -> LoadBalancerPoolSpec:
    return LoadBalancerPoolSpec.model_validate({"role": "slave_public", "haproxy": haproxy})


SPEC = {
    "frontends": [
        {
            "name": "c1:default:web",
            "bindPort": 80,
            "protocol": "HTTP",
            "linkBackend": {
                "defaultBackend": "c1:default:web:80",
                "map": [
                    {"backend": "c1:default:api:80", "hostEq": "Api.Example.COM", "pathBeg": "/v1"},
                    {"backend": "c1:default:api:80", "pathReg": "^/x[0-9]+$"},
                    {"backend": "c1:default:web:80", "pathExact": '/it\'s "odd" $HOME'},
                ],
            },
        },
        {"name": "c1:default:db", "bindPort": 0, "protocol": "TCP", "linkBackend": {}},
    ],
    "backends": [
        {
            "name": "c1:default:web:80",
            "protocol": "HTTP",
            "servers": [{"address": "127.0.0.1", "port": 8080}],
            "rewriteHttp": {"request": {}},
            "healthCheck": {"protocol": "HTTP", "path": "/healthz"},
        },
        {"name": "c1:default:api:80", "protocol": "HTTP"},
        {
            "name": "c1:default:db:5432",
            "protocol": "TCP",
            "proxyProtocol": True,
            "servers": [{"address": "127.0.0.2", "port": 5432}],
            "healthCheck": {"protocol": "TCP", "periodSeconds": 3, "failureThreshold": 4},
        },
    ],
}


def _layout() -> Layout:
    return Layout(
        addresses=instance_addresses("slave_public", "127.30.250.1", "127.30.250.2"),
        stats_port=9090,
        frontend_ports={"c1:default:web": 8081, "c1:default:db": 15432},
    )


def test_rendering_is_deterministic_and_binds_public_pools_on_both_addresses() -> None:
    text = render("p", _spec(**SPEC), _layout(), Path("/run/p/admin.sock"))
    assert text == render("p", _spec(**SPEC), _layout(), Path("/run/p/admin.sock"))
    for port in (9090, 8081, 15432):
        assert f"bind 127.30.250.1:{port}" in text and f"bind 127.30.250.2:{port}" in text
    assert instance_addresses("internal", "127.30.250.1", "127.30.250.2") == ("127.30.250.2",)


def test_routing_rules_keep_list_order_and_unmatched_requests_get_404_or_reject() -> None:
    text = render("p", _spec(**SPEC), _layout(), Path("/s"))
    rules = [line.strip() for line in text.splitlines() if "use_backend" in line]
    assert rules[0].startswith(
        "use_backend c1:default:api:80 if { req.hdr(host),field(1,:),lower -m str 'api.example.com' }"
    )
    assert "path -m reg '^/x[0-9]+$'" in rules[1]
    assert 'path -m str "/it\'s \\"odd\\" \\$HOME"' in rules[2]
    assert "default_backend isthmus-reject" in text  # TCP frontend without a default
    assert "http-request return status 404" in text


def test_backends_get_slots_headers_and_proxy_protocol() -> None:
    text = render("p", _spec(**SPEC), _layout(), Path("/s"))
    web = text.split("\nbackend c1:default:web:80\n")[1].split("\n\n")[0]
    assert (
        "option forwardfor" in web
        and "X-Forwarded-Port %[dst_port]" in web
        and "X-Forwarded-Proto http" in web
    )
    assert web.count("    server s") == 8 and web.count(" disabled") == 7
    db = text.split("\nbackend c1:default:db:5432\n")[1].split("\n\n")[0]
    assert all(line.endswith("send-proxy-v2") for line in db.splitlines() if "server s" in line)


def test_haproxy_accepts_every_rendered_config(tmp_path: Path) -> None:
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(render("p", _spec(**SPEC), _layout(), tmp_path / "admin.sock"))
    done = subprocess.run(
        [HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("haproxy", "message"),
    [
        ({"backends": [{"name": "bad name"}]}, "not a valid HAProxy proxy name"),
        (
            {"frontends": [{"name": "f", "bindPort": 80, "linkBackend": {"defaultBackend": "nope"}}]},
            "does not define",
        ),
        (
            {
                "backends": [{"name": "b"}],
                "frontends": [
                    {
                        "name": "f",
                        "bindPort": 80,
                        "protocol": "HTTP",
                        "linkBackend": {"map": [{"backend": "b", "pathBeg": "/a\nb"}]},
                    }
                ],
            },
            "line breaks",
        ),
        (
            {
                "backends": [{"name": "b"}],
                "frontends": [
                    {
                        "name": "f",
                        "bindPort": 80,
                        "protocol": "HTTP",
                        "linkBackend": {"map": [{"backend": "b", "pathReg": "(["}]},
                    }
                ],
            },
            "not a regular expression",
        ),
        ({"backends": [{"name": "b", "balance": "bogus"}]}, "balance"),
    ],
)
def test_specs_haproxy_cannot_run_are_refused_with_a_message(
    haproxy: dict[str, object], message: str
) -> None:
    layout = Layout(addresses=("127.30.250.3",), stats_port=9091, frontend_ports={"f": 80})
    with pytest.raises(PoolConfigError, match=message):
        render("p", _spec(**haproxy), layout, Path("/s"))


def test_slots_grow_by_powers_of_two_and_servers_keep_their_slot() -> None:
    assert [slot_count(n) for n in (0, 8, 9, 17)] == [8, 8, 16, 32]
    first = assign_slots([("10.0.0.1", 80), ("10.0.0.2", 80)], None)
    assert first is not None and len(first) == 8
    second = assign_slots([("10.0.0.2", 80), ("10.0.0.3", 80)], first)
    assert second is not None and second[1] == Slot("10.0.0.2", 80) and second[0] == Slot("10.0.0.3", 80)
    assert assign_slots([(f"10.0.1.{i}", 80) for i in range(9)], first) is None  # needs a reload
    assert quote("a b") == "'a b'"


def _inst(slot: int, state: InstanceState, gen: int = 2) -> PoolInstanceStatus:
    return PoolInstanceStatus(
        slot=slot,
        state=state,
        observed_generation=gen,
        public_address=f"127.30.251.{slot + 1}",
        private_address=f"127.31.251.{slot + 1}",
        frontends=[PoolFrontendStatus(name="f", port=80, public_addresses=[f"127.30.251.{slot + 1}"])],
    )


def test_status_summary_counts_serving_instances() -> None:
    part = summarize_status(2, 2, [_inst(0, InstanceState.RUNNING)], public=True)
    assert part.ready == "1/2" and part.instances[1].state == InstanceState.PENDING
    assert part.conditions[0].status == "True" and part.conditions[0].reason == Reason.PARTIALLY_READY
    full = summarize_status(
        2, 2, [_inst(0, InstanceState.RUNNING), _inst(1, InstanceState.RUNNING)], public=True
    )
    assert full.conditions[0].reason == Reason.ALL_READY and full.observed_generation == 2
    assert full.addresses == "127.30.251.1,127.30.251.2,127.31.251.1,127.31.251.2"
    assert full.frontends[0].public_addresses == ["127.30.251.1", "127.30.251.2"]
    none = summarize_status(1, 3, [_inst(0, InstanceState.RUNNING)], public=True)  # old generation
    assert none.conditions[0].status == "False" and none.conditions[0].reason == Reason.NO_INSTANCE


def test_metrics_are_served_only_by_a_binary_with_the_prometheus_exporter(tmp_path: Path) -> None:
    from isthmus.haproxy.process import has_prometheus_exporter

    without = render("p", _spec(**SPEC), _layout(), Path("/s"), prometheus=False)
    assert "prometheus-exporter" not in without and "stats uri /" in without
    fake = tmp_path / "haproxy"
    fake.write_text("#!/bin/sh\necho 'Available services : none'\n")
    fake.chmod(0o755)
    assert has_prometheus_exporter(str(fake)) is False
    assert has_prometheus_exporter(HAPROXY) is True  # Debian's 2.6 has it: /metrics is rendered


def test_maxconn_stays_within_the_file_limit_haproxy_can_raise_itself_to() -> None:
    """HAProxy refuses to start ("Cannot raise FD limit to 32785, limit is 20000") when maxconn needs
    more descriptors than the hard limit: memory 512 did on a host limited to 20,000."""
    spec = _spec()
    spec.mem = 512
    text = render("p", spec, _layout(), Path("/tmp/a.sock"), max_fds=20000)
    maxconn = int(next(ln.split()[1] for ln in text.splitlines() if ln.strip().startswith("maxconn")))
    assert maxconn < 10000 and 2 * maxconn + 64 < 20000
    spec.mem = 128
    assert "maxconn 4096" in render("p", spec, _layout(), Path("/tmp/a.sock"), max_fds=20000)
    assert "maxconn 16384" in render("p", _spec_mem(512), _layout(), Path("/tmp/a.sock"))  # no limit given


def _spec_mem(mem: int) -> LoadBalancerPoolSpec:
    spec = _spec()
    spec.mem = mem
    return spec


def test_health_checks_are_rendered_on_every_server_slot() -> None:
    text = render("p", _spec(**SPEC), _layout(), Path("/tmp/a.sock"))
    web = text.split("\nbackend c1:default:web:80\n")[1].split("\n\n")[0]
    assert "option httpchk" in web and "http-check send meth GET uri '/healthz'" in web
    assert "http-check expect rstatus ^[1-4]" in web and "timeout check 1s" in web
    assert all(ln.endswith("check inter 1s fall 2 rise 2") for ln in web.splitlines() if "server s" in ln)
    db = text.split("\nbackend c1:default:db:5432\n")[1].split("\n\n")[0]
    assert "httpchk" not in db  # a connect check only
    assert all(ln.endswith(" check inter 3s fall 4 rise 2 send-proxy-v2") for ln in db.splitlines() if "server s" in ln)
    api = text.split("\nbackend c1:default:api:80\n")[1].split("\n\n")[0]
    assert " check" not in api  # no health check asked


def test_the_broker_pool_checks_http_ports_over_http_and_others_by_connecting() -> None:
    from isthmus.exposure.haproxy import pool_spec
    from isthmus.exposure.plan import Backends, Server

    spec, _ = pool_spec(Backends(ports=[("http", 80, "TCP"), ("db", 5432, "TCP")],
                                 servers={"http": [Server("c1", "127.0.0.5", 8080)], "db": [Server("c1", "127.0.0.5", 5432)]}))
    checks = {b.name: b.health_check for b in spec.haproxy.backends}
    assert checks["port-80-tcp"] is not None and checks["port-80-tcp"].protocol == "HTTP"
    assert checks["port-5432-tcp"] is not None and checks["port-5432-tcp"].protocol == "TCP"
