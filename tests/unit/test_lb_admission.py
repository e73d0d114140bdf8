"""dklb-config admission beyond Services: edgelb Ingresses, and the AdmissionReview handlers
`isthmus webhook` serves (the Service checks live beside the parser in test_lb_config.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import yaml

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, EDGELB_CONTROLLER, INGRESS_CLASS_ANNOTATION
from isthmus.lb import admission


def ing(config: str | None, *, cls: str | None = "edgelb", by_spec: bool = False) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {"rules": []}
    if config is not None:
        annotations[DKLB_CONFIG_ANNOTATION] = config
    if cls is not None:
        if by_spec:
            spec["ingressClassName"] = cls
        else:
            annotations[INGRESS_CLASS_ANNOTATION] = cls
    return {"metadata": {"name": "i", "namespace": "d", "annotations": annotations}, "spec": spec}


def test_edgelb_ingresses_get_the_defaults_written() -> None:
    for obj in (ing(None), ing(None, by_spec=True)):
        ops = admission.mutate("Ingress", "CREATE", obj)
        assert len(ops) == 1
        value = ops[0]["value"]  # the whole annotations map when the object has none yet
        written = yaml.safe_load(value[DKLB_CONFIG_ANNOTATION] if isinstance(value, dict) else value)
        assert written["frontends"] == {"http": {"port": 80}} and written["role"] == "slave_public"
        assert "name" not in written


def test_other_ingresses_are_left_alone() -> None:
    assert admission.mutate("Ingress", "CREATE", ing(None, cls="nginx")) == []
    assert admission.mutate("Ingress", "CREATE", ing(None, cls=None)) == []
    # Another class's Ingress is its controller's, annotation or not: never blocked by ours.
    assert admission.validate("Ingress", "CREATE", ing("bogus: 1", cls="nginx", by_spec=True), None) == []
    # One naming no class may be ours by the default IngressClass (admission cannot look): annotated, checked.
    assert admission.validate("Ingress", "CREATE", ing("bogus: 1", cls=None), None) == ['unknown field "bogus"']


def lb_service(cls: str | None, config: str | None = "bogus: 1") -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "LoadBalancer", "ports": [{"port": 80}]}
    if cls is not None:
        spec["loadBalancerClass"] = cls
    annotations = {DKLB_CONFIG_ANNOTATION: config} if config is not None else {}
    return {"metadata": {"name": "s", "namespace": "d", "annotations": annotations}, "spec": spec}


def test_only_edgelb_services_are_handled_unless_class_less_ones_are_opted_in() -> None:
    """Issue 43, defect 1: a Service of another class (Cilium's, MetalLB's, a cloud's) is never
    mutated nor blocked; a class-less one only with the admin's opt-in."""
    cilium = lb_service("io.cilium/l2-announcer")
    for class_less in (False, True):
        assert admission.validate("Service", "CREATE", cilium, None, class_less) == []
        assert admission.mutate("Service", "CREATE", lb_service("io.cilium/l2-announcer", None), class_less) == []
        assert admission.validate("Service", "CREATE", lb_service(EDGELB_CONTROLLER), None, class_less) == [
            'unknown field "bogus"']
        assert admission.mutate("Service", "CREATE", lb_service(EDGELB_CONTROLLER, None), class_less) != []
    assert admission.validate("Service", "CREATE", lb_service(None), None) == []
    assert admission.mutate("Service", "CREATE", lb_service(None, None)) == []
    assert admission.validate("Service", "CREATE", lb_service(None), None, class_less=True) == ['unknown field "bogus"']
    assert admission.mutate("Service", "CREATE", lb_service(None, None), class_less=True) != []


async def test_the_handlers_follow_the_opt_in() -> None:
    review = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Service"}, "operation": "CREATE",
              "object": lb_service(None)}
    assert (await admission.handlers()[admission.VALIDATE_PATH](review)).allowed
    assert not (await admission.handlers(class_less=True)[admission.VALIDATE_PATH](review)).allowed


def test_ingress_configs_are_validated_and_immutable() -> None:
    assert admission.validate("Ingress", "CREATE", ing("frontends: {http: {port: 8080}}"), None) == []
    assert admission.validate("Ingress", "CREATE", ing("frontends: {http: {port: '80'}}"), None) == [
        "frontends.http.port: Input should be a valid integer"]
    assert admission.validate("Ingress", "UPDATE", ing("network: b"), ing("network: a")) == [
        "field network is immutable once set (was 'a', now 'b'); delete and re-create the object to change it"]


def test_a_non_public_role_writes_the_forced_network() -> None:
    ops = admission.mutate("Ingress", "CREATE", ing("role: private"))
    written = yaml.safe_load(ops[0]["value"])
    assert next(iter(written)) == "role"  # the user's keys keep their place
    assert written["network"] == "dcos"
    assert admission.mutate("Ingress", "UPDATE", ing(ops[0]["value"])) == []


async def test_review_handlers_answer_in_kubes_shape() -> None:
    bad = {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Service"}, "operation": "CREATE",
           "object": {"metadata": {"name": "s", "annotations": {
               DKLB_CONFIG_ANNOTATION: "frontends: [{port: 1, servicePort: 81}]"}},
               "spec": {"type": "LoadBalancer", "loadBalancerClass": EDGELB_CONTROLLER,
                        "ports": [{"port": 80}, {"port": 8080}]}}}
    review = (await admission.review_validate(bad)).to_review("u1")["response"]
    assert review["uid"] == "u1" and review["allowed"] is False
    assert review["status"]["code"] == 422
    assert review["status"]["message"] == (
        f"metadata.annotations[{DKLB_CONFIG_ANNOTATION}]: frontends[0].servicePort: 81 is not a port of this "
        "Service (ports: 80, 8080)")
    good = dict(bad, object=ing(None), kind={"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"})
    review = (await admission.review_mutate(good)).to_review("u2")["response"]
    assert review["allowed"] is True and review["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(review["patch"]))
    assert patch[0]["path"] == "/metadata/annotations/kubernetes.dcos.io~1dklb-config"
    status = dict(bad, subResource="status")
    assert (await admission.review_validate(status)).allowed  # status writes carry no config change
    other = dict(bad, kind={"group": "", "version": "v1", "kind": "ConfigMap"})
    assert (await admission.review_validate(other)).allowed


def svc(config: str) -> dict[str, Any]:
    return {"metadata": {"name": "s", "namespace": "d", "annotations": {DKLB_CONFIG_ANNOTATION: config}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": EDGELB_CONTROLLER, "ports": [{"port": 80}]}}


def test_values_that_cannot_run_a_pool_are_refused_with_their_field() -> None:
    """Issue 40, item 5: these were admitted, then broke the pool (a status over the apiserver's
    3 MiB limit, nbthread above HAProxy's MAX_THREADS, maxconn HAProxy cannot get descriptors for)."""
    for config, problem in [
        ("size: 100000", "size: Input should be less than or equal to 100"),
        ("cpus: 1000", "cpus: Input should be less than or equal to 64"),
        ("memory: 2147483647", "memory: Input should be less than or equal to 65536"),
        ("cpus: .inf", "cpus: Input should be a finite number"),
        ("cpus: .nan", "cpus: Input should be a finite number"),
    ]:
        assert admission.validate("Service", "CREATE", svc(config), None) == [problem], config
        assert admission.validate("Ingress", "CREATE", ing(config), None) == [problem], config
    assert admission.validate("Service", "CREATE", svc("size: 100\ncpus: 64\nmemory: 65536"), None) == []


def test_duplicate_keys_are_refused_not_silently_last_wins() -> None:
    assert admission.validate("Service", "CREATE", svc("cpus: 1\nsize: 2\ncpus: 2\n"), None) == [
        "cpus: duplicate key (line 3): give each field once"]
    assert admission.validate("Service", "CREATE", svc("frontends:\n- port: 1\n  servicePort: 80\n  port: 2\n"),
                              None) == ["frontends[0].port: duplicate key (line 4): give each field once"]
    assert admission.validate("Ingress", "CREATE", ing("frontends: {http: {port: 81, port: 82}}"), None) == [
        "frontends.http.port: duplicate key (line 1): give each field once"]


def test_a_deeply_nested_config_is_refused_not_a_crash() -> None:
    deep = "[" * 5000 + "]" * 5000
    assert admission.validate("Service", "CREATE", svc(deep), None) == [
        f"{DKLB_CONFIG_ANNOTATION} is nested too deeply to be a configuration object"]
