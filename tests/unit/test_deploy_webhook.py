"""deploy/member/webhook's matchConditions send the webhook exactly the objects
`isthmus.lb.admission.concerned` looks at: no more (an outage blocks less), no fewer (a bad config
cannot slip past admission)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, INGRESS_CLASS_ANNOTATION
from isthmus.apiserver.admission.policy.cel import compile_expression, to_cel
from isthmus.lb.admission import concerned

WEBHOOKS = Path(__file__).parents[2] / "deploy/member/webhook/webhooks.yaml"


def conditions() -> list[str]:
    out = []
    for doc in yaml.safe_load_all(WEBHOOKS.read_text()):
        for hook in doc["webhooks"]:
            if hook["name"].startswith("dklb."):  # egress's webhook takes every egress object
                out += [c["expression"] for c in hook["matchConditions"]]
    return out


def obj(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "d"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


CASES = [
    ("Service", "services", obj(type="LoadBalancer")),
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
]


@pytest.mark.parametrize(("kind", "resource", "o"), CASES)
def test_match_conditions_agree_with_admission(kind: str, resource: str, o: dict[str, Any]) -> None:
    request = {"operation": "CREATE", "resource": {"group": "", "version": "v1", "resource": resource}}
    activation = {"object": to_cel(o), "oldObject": to_cel(None), "request": to_cel(request)}
    exprs = conditions()
    assert len(exprs) == 2 and exprs[0] == exprs[1]  # validating and mutating alike
    program = compile_expression(exprs[0], ["object", "oldObject", "request"])
    assert bool(program.evaluate(activation)) == concerned(kind, o)
