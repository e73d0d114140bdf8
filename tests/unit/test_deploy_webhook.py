"""The dklb webhooks of deploy/components/lb send `isthmus webhook` exactly the objects
`isthmus.lb.admission.concerned` looks at: no more (an outage blocks less, and another class's
Services never wait on us), no fewer (a bad config cannot slip past admission). Both with and
without the class-less opt-in (deploy/components/lb/class-less), in the rendered manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, EDGELB_CONTROLLER, INGRESS_CLASS_ANNOTATION
from isthmus.apiserver.admission.policy.cel import compile_expression, to_cel
from isthmus.kube.manifests import deploy_dir, render
from isthmus.lb.admission import MATCH_CONDITION, MATCH_CONDITION_CLASS_LESS, concerned
from tests.harness.lb import lb_overlay


def dklb_conditions(objs: list[dict[str, Any]]) -> list[str]:
    out = []
    for doc in objs:
        if doc["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        for hook in doc["webhooks"]:
            if hook["name"].startswith("dklb."):  # egress's webhook takes every egress object
                assert hook["failurePolicy"] == "Fail"
                out += [" ".join(c["expression"].split()) for c in hook["matchConditions"]]
    return out


def obj(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "d"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


CASES = [
    ("Service", "services", obj(type="LoadBalancer")),
    ("Service", "services", obj(type="LoadBalancer", loadBalancerClass=EDGELB_CONTROLLER)),
    ("Service", "services", obj(type="LoadBalancer", loadBalancerClass="io.cilium/l2-announcer")),
    ("Service", "services", obj({DKLB_CONFIG_ANNOTATION: "size: 2"}, type="LoadBalancer",
                                loadBalancerClass="io.cilium/l2-announcer")),
    ("Service", "services", obj(type="ClusterIP")),
    ("Service", "services", obj()),
    ("Service", "services", obj({DKLB_CONFIG_ANNOTATION: "size: 2"}, type="ClusterIP")),
    ("Service", "services", obj({"other": "1"}, type="NodePort")),
    ("Ingress", "ingresses", obj()),
    ("Ingress", "ingresses", obj(ingressClassName="edgelb")),
    ("Ingress", "ingresses", obj(ingressClassName="nginx")),
    ("Ingress", "ingresses", obj({INGRESS_CLASS_ANNOTATION: "edgelb"})),
    ("Ingress", "ingresses", obj({INGRESS_CLASS_ANNOTATION: "nginx"}, ingressClassName="edgelb")),
    ("Ingress", "ingresses", obj({DKLB_CONFIG_ANNOTATION: ""}, ingressClassName="nginx")),
    ("Ingress", "ingresses", obj({DKLB_CONFIG_ANNOTATION: ""})),
]


def evaluate(expression: str, resource: str, o: dict[str, Any]) -> bool:
    request = {"operation": "CREATE", "resource": {"group": "", "version": "v1", "resource": resource}}
    activation = {"object": to_cel(o), "oldObject": to_cel(None), "request": to_cel(request)}
    return bool(compile_expression(expression, ["object", "oldObject", "request"]).evaluate(activation))


@pytest.mark.parametrize("class_less", [False, True])
@pytest.mark.parametrize(("kind", "resource", "o"), CASES)
def test_match_conditions_agree_with_admission(kind: str, resource: str, o: dict[str, Any], class_less: bool) -> None:
    expression = MATCH_CONDITION_CLASS_LESS if class_less else MATCH_CONDITION
    assert evaluate(expression, resource, o) == concerned(kind, o, class_less)


@pytest.mark.parametrize("class_less", [False, True])
def test_rendered_webhooks_carry_the_condition(tmp_path: Path, class_less: bool) -> None:
    exprs = dklb_conditions(render(lb_overlay(tmp_path, class_less=class_less)))
    want = MATCH_CONDITION_CLASS_LESS if class_less else MATCH_CONDITION
    assert exprs == [" ".join(want.split())] * 2  # validating and mutating alike


def test_another_class_and_no_class_are_never_sent_by_default() -> None:
    for o in (obj(type="LoadBalancer", loadBalancerClass="io.cilium/l2-announcer"), obj(type="LoadBalancer")):
        assert not evaluate(MATCH_CONDITION, "services", o)
    assert evaluate(MATCH_CONDITION, "services", obj(type="LoadBalancer", loadBalancerClass=EDGELB_CONTROLLER))
    # The opt-in takes class-less ones, never another class's.
    assert evaluate(MATCH_CONDITION_CLASS_LESS, "services", obj(type="LoadBalancer"))
    assert not evaluate(MATCH_CONDITION_CLASS_LESS, "services",
                        obj(type="LoadBalancer", loadBalancerClass="io.cilium/l2-announcer"))


def test_the_base_sends_no_service_to_the_webhook() -> None:
    objs = render(deploy_dir() / "member")
    assert dklb_conditions(objs) == []
    for doc in objs:
        for hook in doc.get("webhooks") or []:
            assert all("services" not in r["resources"] for r in hook["rules"]), hook["name"]
