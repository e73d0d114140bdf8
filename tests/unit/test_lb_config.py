"""dklb-config parsing (both tables, defaults, strictness), the seed's naming rules, admission."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from isthmus.api.lb import (
    CREATION_STRATEGY_ANNOTATION,
    DKLB_CONFIG_ANNOTATION,
    EDGELB_CONTROLLER,
    ConfigError,
    CreationStrategy,
    backend_owner,
    frontend_owner,
    immutable_changes,
    ingress_backend_name,
    ingress_frontend_name,
    parse_ingress_config,
    parse_service_config,
    pool_name,
    service_backend_name,
)
from isthmus.lb import admission
from tests.harness.samples import SEED_EXAMPLE


def cfg(text: str) -> dict[str, str]:
    return {DKLB_CONFIG_ANNOTATION: text}


def test_service_defaults_are_the_seeds() -> None:
    c = parse_service_config({})
    assert (c.name, c.role, c.cpus, c.memory, c.size) == (None, "slave_public", 0.1, 128, 1)
    assert c.strategies.creation == CreationStrategy.IF_NOT_PRESENT
    assert c.effective_network == "" and c.public and c.frontends == [] and not c.proxy_protocol


def test_the_seed_example_maps_ports_and_forces_the_network() -> None:
    c = parse_service_config(cfg(SEED_EXAMPLE))
    assert (c.name, c.role, c.cpus, c.memory, c.size) == ("foo", "foo_lb", 0.2, 256, 3)
    assert [c.frontend_port(p) for p in (80, 8080, 3306)] == [10254, 23674, 3306]
    assert c.effective_network == "dcos"  # any role but slave_public: forcibly dcos
    assert not c.public


def test_ingress_defaults_and_http_port() -> None:
    c = parse_ingress_config({})
    assert c.frontends.http.port == 80 and c.role == "slave_public"
    c = parse_ingress_config(cfg("role: '*'\nfrontends:\n  http:\n    port: 8080\n"))
    assert c.frontends.http.port == 8080 and c.effective_network == "dcos"


@pytest.mark.parametrize(("text", "message"), [
    ("foo: 1", 'unknown field "foo"'),
    ("frontends: [{port: 1, servicePort: 2, extra: 3}]", 'unknown field "frontends[0].extra"'),
    ("memory: '128'", "memory: Input should be a valid integer"),
    ("cpus: 0", "cpus: Input should be greater than 0"),
    ("cpus: yes", "cpus: Input should be a valid number"),
    ("size: 0", "size: Input should be greater than or equal to 1"),
    ("strategies: {creation: Sometimes}", "'Sometimes' is not one of IfNotPresent, Once, Never"),
    ("frontends: [{port: 70000, servicePort: 80}]", "frontends[0].port: Input should be less than or equal to 65535"),
    ("frontends: [{port: 1, servicePort: 80}, {port: 2, servicePort: 80}]", "servicePort: 80 is mapped twice"),
    ("frontends: [{port: 1, servicePort: 80}, {port: 1, servicePort: 81}]", "port: 1 is used by another frontend"),
    ("name: Foo_Bar", "is not a valid pool name"),
    ("role: ''", "role: must not be empty"),
    ("cloudProviderConfiguration: '{nope'", "cloudProviderConfiguration: is not valid JSON"),
    ("- a", "must be a YAML mapping"),
    ("a: [", "is not valid YAML"),
])
def test_bad_service_configs_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_service_config(cfg(text))
    assert message in str(err.value)


def test_ingress_configs_refuse_service_fields() -> None:
    with pytest.raises(ConfigError, match='unknown field "cloudProviderConfiguration"'):
        parse_ingress_config(cfg("cloudProviderConfiguration: '{}'"))
    with pytest.raises(ConfigError, match=r'unknown field "frontends\.tcp"'):
        parse_ingress_config(cfg("frontends: {tcp: {port: 1}}"))


def test_the_creation_strategy_annotation_must_agree() -> None:
    assert parse_service_config({CREATION_STRATEGY_ANNOTATION: "Never"}).strategies.creation == CreationStrategy.NEVER
    with pytest.raises(ConfigError, match="contradicts"):
        parse_service_config({CREATION_STRATEGY_ANNOTATION: "Never", **cfg("strategies: {creation: Once}")})
    with pytest.raises(ConfigError, match="is not one of"):
        parse_service_config({CREATION_STRATEGY_ANNOTATION: "Always"})


def test_names_follow_the_seed() -> None:
    assert pool_name("kube/one", "default", "web") == "kube-one--default--web"
    assert pool_name("c1", "default", "web", ext=True) == "ext--c1--default--web"
    long = pool_name("c1", "n" * 40, "s" * 40)
    assert len(long) == 63 and long.startswith("c1--nnnn")
    assert long != pool_name("c1", "n" * 40, "s" * 39 + "t")  # the hash keeps long names apart
    assert service_backend_name("kube/one", "ns", "svc", 80) == "kube.one:ns:svc:80"
    assert ingress_backend_name("c1", "ns", "ing", "svc", 80) == "c1:ns:ing:svc:80"
    assert ingress_frontend_name("c1", "ns", "ing") == "c1:ns:ing"
    assert frontend_owner("c1:ns:ing").kind == "Ingress"  # type: ignore[union-attr]
    assert frontend_owner("c1:ns:svc:80").kind == "Service"  # type: ignore[union-attr]
    assert backend_owner("c1:ns:ing:svc:80").name == "ing"  # type: ignore[union-attr]
    assert frontend_owner("somebody-elses") is None and backend_owner("a:b") is None


def test_name_role_and_network_are_immutable_once_set() -> None:
    assert immutable_changes(cfg("role: a"), cfg("role: a\nsize: 2")) == []
    assert immutable_changes(cfg(""), cfg("name: x")) == []  # set for the first time
    problems = immutable_changes(cfg("name: x\nnetwork: n"), cfg("name: y"))
    assert len(problems) == 2 and "field name is immutable" in problems[0] and "field network" in problems[1]


def svc(config: str | None, ports: list[int] = [80]) -> dict[str, Any]:  # noqa: B006
    meta: dict[str, Any] = {"name": "s", "namespace": "d"}
    if config is not None:
        meta["annotations"] = {DKLB_CONFIG_ANNOTATION: config}
    return {"metadata": meta, "spec": {"type": "LoadBalancer", "loadBalancerClass": EDGELB_CONTROLLER,
                                       "ports": [{"port": p} for p in ports]}}


def test_admission_checks_service_ports_and_immutability() -> None:
    assert admission.validate("Service", "CREATE", svc(None), None) == []
    assert admission.validate("Service", "CREATE", svc("frontends: [{port: 1, servicePort: 81}]"), None) == [
        "frontends[0].servicePort: 81 is not a port of this Service (ports: 80)"]
    assert admission.validate("Service", "UPDATE", svc("role: b"), svc("role: a")) == [
        "field role is immutable once set (was 'a', now 'b'); delete and re-create the object to change it"]
    plain = {"metadata": {"name": "p"}, "spec": {"type": "ClusterIP"}}
    assert admission.validate("Service", "CREATE", plain, None) == []  # not concerned
    assert admission.validate("Service", "DELETE", svc("bogus: 1"), None) == []


def test_mutation_writes_the_defaults_once() -> None:
    ops = admission.mutate("Service", "CREATE", svc("size: 2"))
    assert len(ops) == 1 and ops[0]["path"] == "/metadata/annotations/kubernetes.dcos.io~1dklb-config"
    written = yaml.safe_load(ops[0]["value"])
    assert next(iter(written)) == "size" and written["role"] == "slave_public" and written["network"] == ""
    assert written["strategies"] == {"creation": "IfNotPresent"} and "name" not in written
    again = svc(ops[0]["value"])
    assert admission.mutate("Service", "CREATE", again) == []  # idempotent
    assert admission.mutate("Service", "CREATE", svc("bogus: 1")) == []  # left for validation
    ops = admission.mutate("Service", "CREATE", svc(None))
    assert ops[0]["op"] == "add" and ops[0]["path"] == "/metadata/annotations"
