"""api/lb.py's dklb-config parsing, field by field, beyond test_lb_config.py: every field of both
of the seed's tables with its default and its type strictness, and the naming helpers' edges."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.api.lb import (
    CREATION_STRATEGY_ANNOTATION,
    DKLB_CONFIG_ANNOTATION,
    ConfigError,
    CreationStrategy,
    backend_owner,
    cluster_name_part,
    frontend_owner,
    immutable_changes,
    parse_ingress_config,
    parse_service_config,
    pool_name,
)
from isthmus.lb import admission


def cfg(text: str) -> dict[str, str]:
    return {DKLB_CONFIG_ANNOTATION: text}


@pytest.mark.parametrize("parse", [parse_service_config, parse_ingress_config])
def test_every_common_field_has_the_seeds_default(parse: Any) -> None:
    for given in ({}, None, cfg(""), cfg("   \n"), cfg("~"), cfg("{}")):
        c = parse(given)
        assert (c.name, c.role, c.network, c.cpus, c.memory, c.size) == (None, "slave_public", None, 0.1, 128, 1)
        assert c.strategies.creation == CreationStrategy.IF_NOT_PRESENT
        assert c.public and c.effective_network == ""


@pytest.mark.parametrize("parse", [parse_service_config, parse_ingress_config])
def test_every_common_field_is_read(parse: Any) -> None:
    c = parse(cfg("name: p1\nrole: slave_public\nnetwork: n1\ncpus: 2\nmemory: 512\nsize: 4\n"
                  "strategies: {creation: Never}\n"))
    assert (c.name, c.role, c.network, c.cpus, c.memory, c.size) == ("p1", "slave_public", "n1", 2.0, 512, 4)
    assert isinstance(c.cpus, float) and c.strategies.creation == CreationStrategy.NEVER
    assert c.effective_network == "n1"  # a public pool keeps the network it is given


@pytest.mark.parametrize(("text", "message"), [
    ("name: 1", "name: Input should be a valid string"),
    ("role: 1", "role: Input should be a valid string"),
    ("network: [a]", "network: Input should be a valid string"),
    ("cpus: '0.5'", "cpus: Input should be a valid number"),
    ("cpus: true", "cpus: Input should be a valid number"),
    ("memory: 1.5", "memory: Input should be a valid integer"),
    ("memory: true", "memory: Input should be a valid integer"),
    ("size: '2'", "size: Input should be a valid integer"),
    ("strategies: Once", "strategies: Input should be a valid dictionary"),
    ("strategies: {creation: 1}", "strategies.creation: Input should be"),
    ("strategies: {other: 1}", 'unknown field "strategies.other"'),
    ("name: " + "a" * 64, "is not a valid pool name"),
])
@pytest.mark.parametrize("parse", [parse_service_config, parse_ingress_config])
def test_types_are_strict_and_problems_named(parse: Any, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(cfg(text))
    assert message in str(err.value)
    assert str(err.value).startswith(f"invalid {DKLB_CONFIG_ANNOTATION}: ")


def test_service_only_fields() -> None:
    c = parse_service_config(cfg("frontends: [{port: 8000, servicePort: 80}]\nproxyProtocol: true"))
    assert c.proxy_protocol and c.frontend_port(80) == 8000 and c.frontend_port(443) == 443
    c = parse_service_config(cfg("cloudProviderConfiguration: '{\"pools\": []}'\n"
                                 "frontends: [{port: 8000, servicePort: 80}]"))
    assert c.frontend_port(80) == 80  # .frontends ignored with cloudProviderConfiguration (the seed)
    assert parse_service_config({}).proxy_protocol is False and parse_service_config({}).frontends == []
    for text, message in (("proxyProtocol: 'yes'", "proxyProtocol: Input should be a valid boolean"),
                          ("frontends: {port: 1}", "frontends: Input should be a valid list"),
                          ("frontends: [{port: 1}]", "frontends[0].servicePort: Field required"),
                          ("frontends: [{port: 0, servicePort: 1}]", "frontends[0].port: Input should be greater")):
        with pytest.raises(ConfigError) as err:
            parse_service_config(cfg(text))
        assert message in str(err.value)


def test_ingress_only_fields() -> None:
    assert parse_ingress_config(cfg("frontends: {}")).frontends.http.port == 80
    assert parse_ingress_config(cfg("frontends: {http: {}}")).frontends.http.port == 80
    for text, message in (("frontends: {http: {port: 0}}", "frontends.http.port: Input should be greater"),
                          ("frontends: []", "frontends: Input should be"),
                          ("proxyProtocol: true", 'unknown field "proxyProtocol"')):
        with pytest.raises(ConfigError) as err:
            parse_ingress_config(cfg(text))
        assert message in str(err.value)


def test_the_creation_strategy_annotation_alone_and_agreeing() -> None:
    both = {CREATION_STRATEGY_ANNOTATION: "Once", **cfg("strategies: {creation: Once}")}
    assert parse_ingress_config(both).strategies.creation == CreationStrategy.ONCE
    assert parse_ingress_config({CREATION_STRATEGY_ANNOTATION: "Once"}).strategies.creation == CreationStrategy.ONCE


def test_immutability_ignores_unparseable_old_configs_and_names_removals() -> None:
    assert immutable_changes(cfg("a: ["), cfg("role: x")) == []
    assert immutable_changes(None, cfg("role: x")) == []
    (removed,) = immutable_changes(cfg("name: p"), cfg("size: 2"))
    assert "field name is immutable once set (was 'p', now None)" in removed
    with pytest.raises(ConfigError, match="is not valid YAML"):
        immutable_changes(cfg("role: a"), cfg("role: ["))


def test_pool_names_are_valid_and_stable() -> None:
    assert cluster_name_part("a/b/c") == "a.b.c"
    assert pool_name("Kube.One", "NS", "Web_1") == "kube-one--ns--web-1"
    assert pool_name("c", "ns", "n") == pool_name("c", "ns", "n")
    long = pool_name("c1", "n" * 40, "s" * 40, ext=True)
    assert len(long) <= 63 and long.startswith("ext--c1--") and not long.endswith("-")
    assert frontend_owner("c1:ns:svc:http") is None  # a Service frontend ends in a port number
    assert backend_owner("c1::ing:svc:80") is None and frontend_owner("c1:ns") is None
    owner = backend_owner("kube.one:ns:svc:80")
    assert owner is not None and (owner.cluster, owner.kind, owner.name) == ("kube.one", "Service", "svc")


def test_admission_skips_the_port_check_with_cloud_provider_configuration() -> None:
    obj = {"metadata": {"annotations": cfg("cloudProviderConfiguration: '{}'\nfrontends: [{port: 1, servicePort: 9}]")},
           "spec": {"type": "LoadBalancer", "loadBalancerClass": "isthmus.io/edgelb", "ports": [{"port": 80}]}}
    assert admission.validate("Service", "CREATE", obj, None) == []
    no_ports = {"metadata": {"annotations": cfg("frontends: [{port: 1, servicePort: 9}]")},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": "isthmus.io/edgelb"}}
    assert admission.validate("Service", "CREATE", no_ports, None) == [
        "frontends[0].servicePort: 9 is not a port of this Service (ports: none)"]
