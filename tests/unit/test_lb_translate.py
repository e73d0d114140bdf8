"""The translator's pure parts: the seed's Service example, Ingress priority and pathType rules,
merging into shared pools, status ordering, the show views, and every example's config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from isthmus.api.lb import (
    DKLB_CONFIG_ANNOTATION,
    ConfigError,
    LoadBalancerPoolStatus,
    parse_ingress_config,
    parse_service_config,
)
from isthmus.lb.controller import is_edgelb_ingress, is_lb_service, may_clear_status
from isthmus.lb.translate import (
    load_balancer_ingress,
    merge,
    ready_node_addresses,
    remove_owner,
    translate_ingress,
    translate_service,
)
from isthmus.lb.views import load_balancer_rows, pool_rows
from tests.harness.samples import SEED_EXAMPLE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lb"


def seed_service() -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": "foo", "annotations": {DKLB_CONFIG_ANNOTATION: SEED_EXAMPLE}},
            "spec": {"type": "LoadBalancer", "ports": [
                {"name": "http", "port": 80, "nodePort": 30080}, {"name": "mgmt", "port": 8080, "nodePort": 30081},
                {"name": "mysql", "port": 3306, "nodePort": 30082}, {"name": "dns", "port": 53, "protocol": "UDP"}]}}


def test_the_seed_service_example() -> None:
    svc = seed_service()
    frag = translate_service("kube/one", svc, parse_service_config(svc["metadata"]["annotations"]), ["10.0.0.2", "10.0.0.1"])
    assert frag.pool == "foo"
    assert [(f.name, f.bind_port, f.protocol) for f in frag.frontends] == [
        ("kube.one:default:foo:80", 10254, "TCP"), ("kube.one:default:foo:8080", 23674, "TCP"),
        ("kube.one:default:foo:3306", 3306, "TCP")]
    assert [b.name for b in frag.backends] == [f.name for f in frag.frontends]
    assert [(s.address, s.port) for s in frag.backends[2].servers] == [("10.0.0.2", 30082), ("10.0.0.1", 30082)]
    assert frag.settings.role == "foo_lb" and frag.settings.network == "dcos" and frag.settings.count == 3
    assert [p.reason for p in frag.problems] == ["UnsupportedProtocol"]  # UDP is the seed's non-goal


def test_nodes_are_ready_ones_sorted() -> None:
    def node(addr: str, ready: str, unschedulable: bool = False) -> dict[str, Any]:
        return {"spec": {"unschedulable": unschedulable}, "status": {
            "addresses": [{"type": "InternalIP", "address": addr}], "conditions": [{"type": "Ready", "status": ready}]}}

    assert ready_node_addresses([node("10.0.0.9", "True"), node("10.0.0.1", "True"), node("10.0.0.5", "False"),
                                 node("10.0.0.6", "True", True)]) == ["10.0.0.1", "10.0.0.9"]


def ingress(rules: list[dict[str, Any]], default: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": rules}
    if default:
        spec["defaultBackend"] = {"service": {"name": default, "port": {"number": 80}}}
    return {"metadata": {"namespace": "ns", "name": "ing"}, "spec": spec}


def path(p: str, svc: str, kind: str = "Prefix") -> dict[str, Any]:
    return {"path": p, "pathType": kind, "backend": {"service": {"name": svc, "port": {"number": 80}}}}


SERVICES = {f"ns/{n}": {"metadata": {"name": n}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 31000 + i}]}}
            for i, n in enumerate(("s1", "s2", "s3"))}


def test_ingress_priority_and_path_types() -> None:
    ing = ingress([
        {"http": {"paths": [path("/", "s1")]}},
        {"host": "*.foo.com", "http": {"paths": [path("/", "s2")]}},
        {"host": "foo.com", "http": {"paths": [path("", "s1", "ImplementationSpecific"), path("/bar/", "s2"),
                                                path("/bar", "s3", "Exact")]}},
    ], default="s1")
    frag = translate_ingress("c1", ing, parse_ingress_config({}), SERVICES, ["127.0.0.1"])
    (fe,) = frag.frontends
    assert fe.name == "c1:ns:ing" and fe.bind_port == 80 and fe.protocol == "HTTP"
    entries = [(e.host_eq, e.host_reg, e.path_exact, e.path_reg, e.path_beg, e.backend) for e in fe.link_backend.map]
    assert entries == [
        ("foo.com", None, "/bar", None, None, "c1:ns:ing:s3:80"),  # Exact before Prefix for one path
        ("foo.com", None, None, "^/bar(/|$)", None, "c1:ns:ing:s2:80"),  # trailing slash ignored
        ("foo.com", None, None, None, None, "c1:ns:ing:s1:80"),  # the empty path: catch-all of its host
        (None, "^[^.]+\\.foo\\.com$", None, None, None, "c1:ns:ing:s2:80"),  # wildcard after exact hosts
        (None, None, None, None, None, "c1:ns:ing:s1:80"),  # no host: last
    ]
    assert fe.link_backend.default_backend == "c1:ns:ing:s1:80"
    assert re.match(entries[1][3], "/bar/baz") and not re.match(entries[1][3], "/barbaz")
    assert all(b.rewrite_http is not None and b.protocol == "HTTP" for b in frag.backends)


def test_ingress_backends_that_cannot_serve_answer_503_with_a_warning() -> None:
    services = dict(SERVICES)
    services["ns/plain"] = {"metadata": {"name": "plain"}, "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}}
    ing = ingress([{"http": {"paths": [path("/a", "missing"), path("/b", "plain")]}}])
    frag = translate_ingress("c1", ing, parse_ingress_config({}), services, ["127.0.0.1"])
    assert all(b.servers == [] for b in frag.backends)
    messages = [p.message for p in frag.problems]
    assert any("ns/missing does not exist" in m for m in messages)
    assert any("ns/plain is of type ClusterIP" in m for m in messages)


def test_merge_keeps_other_owners_and_refuses_their_ports() -> None:
    one = translate_service("c1", {"metadata": {"namespace": "ns", "name": "one"},
                                   "spec": {"ports": [{"port": 80, "nodePort": 30001}]}},
                            parse_service_config({DKLB_CONFIG_ANNOTATION: "name: shared"}), ["n"])
    two = translate_service("c1", {"metadata": {"namespace": "ns", "name": "two"},
                                   "spec": {"ports": [{"port": 80, "nodePort": 30002}, {"port": 81, "nodePort": 30003}]}},
                            parse_service_config({DKLB_CONFIG_ANNOTATION: "name: shared\nsize: 3"}), ["n"])
    first = merge(None, one, apply_settings=True)
    assert first.spec is not None and first.spec.count == 1
    second = merge(first.spec, two, apply_settings=False)
    assert second.spec is not None
    assert [c.port for c in second.conflicts] == [80] and second.conflicts[0].holder == "c1:ns:one:80"
    assert second.placed == ["c1:ns:two:81"]
    assert [f.name for f in second.spec.haproxy.frontends] == ["c1:ns:one:80", "c1:ns:two:81"]
    assert second.spec.count == 1  # the creator's settings stay
    assert remove_owner(second.spec, one.owner) is not None
    rest = remove_owner(second.spec, one.owner)
    assert rest is not None and remove_owner(rest, two.owner) is None  # nothing left: delete the pool


def test_a_port_another_pool_binds_is_refused_to_the_newcomer_only() -> None:
    svc = {"metadata": {"namespace": "ns", "name": "web"}, "spec": {"ports": [{"port": 80, "nodePort": 30001},
                                                                            {"port": 81, "nodePort": 30002}]}}
    frag = translate_service("c1", svc, parse_service_config({}), ["n"])
    elsewhere = {80: ("c1--other--db", "c1:other:db:80")}
    new = merge(None, frag, apply_settings=True, elsewhere=elsewhere)
    assert [(c.port, c.pool) for c in new.conflicts] == [(80, "c1--other--db")]
    assert new.conflicts[0].describe() == "Service other/db in pool c1--other--db"
    assert new.placed == ["c1:ns:web:81"]
    # Already bound in its own pool: it holds the port, it is not the newcomer.
    assert new.spec is not None
    held = merge(merge(None, frag, apply_settings=True).spec, frag, apply_settings=True, elsewhere=elsewhere)
    assert held.conflicts == [] and held.placed == ["c1:ns:web:80", "c1:ns:web:81"]


def test_shared_with_names_namespaces_or_star() -> None:
    cfg = parse_service_config({DKLB_CONFIG_ANNOTATION: "name: shop\nsharedWith: [team-a, '*']"})
    assert cfg.shared_with == ["team-a", "*"]
    with pytest.raises(ConfigError, match=r"sharedWith\[1\]: 'Team\\n' is neither a namespace name nor \*"):
        parse_service_config({DKLB_CONFIG_ANNOTATION: "sharedWith: [ok, \"Team\\n\"]"})


def test_status_lists_hostnames_then_private_then_public() -> None:
    status = LoadBalancerPoolStatus.from_dict({"hostnames": ["lb.example"], "frontends": [
        {"name": "f", "port": 8080, "privateAddresses": ["10.0.0.2", "10.0.0.1"], "publicAddresses": ["1.2.3.4"]},
        {"name": "other", "port": 9090, "privateAddresses": ["10.0.0.3"]}]})
    got = load_balancer_ingress(status, ["f"])
    assert [e.get("hostname") or e.get("ip") for e in got] == ["lb.example", "10.0.0.1", "10.0.0.2", "1.2.3.4"]
    assert got[1]["ports"] == [{"port": 8080, "protocol": "TCP"}]


def test_classes() -> None:
    assert is_lb_service({"spec": {"type": "LoadBalancer", "loadBalancerClass": "isthmus.io/edgelb"}})
    assert not is_lb_service({"spec": {"type": "LoadBalancer"}})  # class-less: another controller's by default
    assert is_lb_service({"spec": {"type": "LoadBalancer"}}, class_less=True)
    for class_less in (False, True):
        assert not is_lb_service({"spec": {"type": "LoadBalancer", "loadBalancerClass": "other.io/lb"}}, class_less)
        assert not is_lb_service({"spec": {"type": "ClusterIP"}}, class_less)
    # Status of another class's object is never cleared (it would fight that controller's writes).
    assert not may_clear_status("Service", {"spec": {"type": "LoadBalancer", "loadBalancerClass": "other.io/lb"}})
    assert not may_clear_status("Service", {"spec": {"type": "LoadBalancer"}})
    assert may_clear_status("Service", {"spec": {"type": "LoadBalancer"}}, class_less=True)
    assert may_clear_status("Service", {"spec": {"type": "ClusterIP", "loadBalancerClass": "isthmus.io/edgelb"}})
    assert not may_clear_status("Ingress", {"spec": {"ingressClassName": "nginx"}})
    assert not may_clear_status("Ingress", {"spec": {}})
    assert may_clear_status("Ingress", {"spec": {"ingressClassName": "edgelb"}})
    ours = {"metadata": {"name": "e"}, "spec": {"controller": "isthmus.io/edgelb"}}
    default = {"metadata": {"name": "d", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
               "spec": {"controller": "isthmus.io/edgelb"}}
    assert is_edgelb_ingress({"metadata": {"annotations": {"kubernetes.io/ingress.class": "edgelb"}}}, [])
    assert not is_edgelb_ingress({"metadata": {"annotations": {"kubernetes.io/ingress.class": "nginx"}}}, [ours])
    assert is_edgelb_ingress({"spec": {"ingressClassName": "e"}}, [ours])
    assert not is_edgelb_ingress({"spec": {}}, [ours])
    assert is_edgelb_ingress({"spec": {}}, [default])


def test_views_name_owners() -> None:
    pool = {"metadata": {"name": "p"}, "spec": {"haproxy": {
        "frontends": [{"name": "c1:ns:svc:80", "bindPort": 8080}, {"name": "hand-made", "bindPort": 81}],
        "backends": [{"name": "c1:ns:svc:80", "servers": [{"address": "n", "port": 30000}]}]}}}
    (row,) = pool_rows([pool])
    assert [f["owner"] for f in row["frontends"]] == ["Service/ns/svc", "-"] and not row["healthy"]
    assert pool_rows([pool], namespace="elsewhere") == []
    svc = {"metadata": {"namespace": "ns", "name": "svc", "annotations": {DKLB_CONFIG_ANNOTATION: "bogus: 1"}}}
    (lb,) = load_balancer_rows([("Service", svc)], [pool], {("Service", "ns", "svc"): "PortConflict: x"})
    assert lb["pool"] == "p" and 'unknown field "bogus"' in lb["problem"] and lb["lastWarning"] == "PortConflict: x"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_config_parses(name: str) -> None:
    for doc in yaml.safe_load_all((EXAMPLES / name).read_text()):
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
        if doc["kind"] == "Service" and (doc.get("spec") or {}).get("type") == "LoadBalancer":
            cfg = parse_service_config(annotations)
            ports = {p["port"] for p in doc["spec"]["ports"]}
            assert all(f.service_port in ports for f in cfg.frontends)
        elif doc["kind"] == "Ingress":
            parse_ingress_config(annotations)


def test_cloud_provider_configuration_makes_a_dedicated_ext_pool() -> None:
    svc = {"metadata": {"namespace": "ns", "name": "web"},
           "spec": {"ports": [{"port": 80, "nodePort": 30001}]}}
    cfg = parse_service_config({DKLB_CONFIG_ANNOTATION: "cloudProviderConfiguration: '{\"aws\": {}}'\n"
                                                        "frontends: [{port: 9999, servicePort: 80}]\nnetwork: n1"})
    frag = translate_service("c1", svc, cfg, ["10.0.0.1"])
    assert frag.pool == "ext--c1--ns--web"
    assert frag.settings.cloud_provider_configuration == '{"aws": {}}'
    assert [f.bind_port for f in frag.frontends] == [80] and frag.settings.network == ""  # both ignored
    spec = merge(None, frag, apply_settings=True).spec
    assert spec is not None and spec.cloud_provider_configuration == '{"aws": {}}'
