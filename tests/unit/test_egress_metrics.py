"""Egress metrics read 0, not "No data", before anything happened: the flow and refusal counters of a
forwarder and a gateway exist from their start, and the binding gauges have every phase of each class
that exists (and nothing of a class deleted)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from isthmus.egress import metrics
from isthmus.egress.forwarder import ForwarderRuntime
from isthmus.egress.gateway import GatewayRuntime
from isthmus.runtime import REGISTRY

EGRESS = Path(metrics.__file__).parent


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


@pytest.mark.parametrize("component", ["forwarder", "gateway"])
async def test_flow_and_refusal_counters_exist_from_the_start(component: str) -> None:
    client: Any = None  # the constructors make no request
    if component == "forwarder":
        ForwarderRuntime(client, "shop-db", "isthmus-system", "127.0.0.1")
    else:
        GatewayRuntime(client, namespace="isthmus-system", identity="g", relay_ip="127.0.0.1")
    for direction in ("egress", "ingress"):
        for protocol in ("TCP", "UDP"):
            flows = sample("isthmus_egress_flows_total", component=component, direction=direction, protocol=protocol)
            assert flows is not None, (component, direction, protocol)
    refusals = {("forwarder", "egress", "not_a_source"), ("forwarder", "ingress", "no_rule"),
                ("gateway", "egress", "not_allowed"), ("gateway", "ingress", "not_the_target")}
    for comp, direction, reason in refusals:
        if comp == component:
            assert sample("isthmus_egress_refused_total", component=comp, direction=direction,
                          reason=reason) is not None, (direction, reason)
    if component == "gateway":
        assert sample("isthmus_egress_gateway_rules", direction="egress") is not None


def _literals(node: ast.AST) -> list[str]:
    """The string values an argument can take (a constant, or either side of `a if c else b`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def test_the_code_counts_only_series_that_start_at_zero() -> None:
    """The label values the forwarder and the gateway count with are the ones `start_series` creates."""
    used: set[tuple[str, str, str, str]] = set()
    for module, component in (("forwarder.py", "forwarder"), ("gateway.py", "gateway")):
        for call in ast.walk(ast.parse((EGRESS / module).read_text())):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            f = call.func
            if f.attr == "labels" and isinstance(f.value, ast.Name) and f.value.id in ("FLOWS", "REFUSED"):
                kind = "flows" if f.value.id == "FLOWS" else "refused"
                assert _literals(call.args[0]) == [component]
                for direction in _literals(call.args[1]):
                    for value in _literals(call.args[2]):
                        used.add((component, kind, direction, value))
            elif f.attr == "_refuse":
                for direction in _literals(call.args[0]):
                    for value in _literals(call.args[1]):
                        used.add((component, "refused", direction, value))
    declared = {(c, kind, d, v) for c, kinds in metrics.SERIES.items() for kind, pairs in kinds.items()
                for d, v in pairs}
    assert used == declared, (used - declared, declared - used)


class _Cache:
    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objs = objs

    def list(self) -> list[dict[str, Any]]:
        return list(self.objs)

    def index_keys(self, _index: str, value: str) -> list[str]:
        return [o["metadata"]["name"] for o in self.objs if o["spec"].get("sourceIPClassName") == value]


class _Operator:  # (held weakly by the collector: a plain namespace cannot be)
    def __init__(self, binder: Any) -> None:
        self.ready = True
        self.binder = binder


def test_binding_gauges_have_every_phase_of_each_class_at_zero() -> None:
    lab = {"metadata": {"name": "zero-lab"}, "spec": {"ranges": [{"start": "127.32.9.1", "end": "127.32.9.4"}]}}
    classes = _Cache([lab])
    claims = _Cache([{"metadata": {"name": "a", "namespace": "default"}, "spec": {"sourceIPClassName": "zero-lab"},
                      "status": {"phase": "Bound"}}])
    binder = SimpleNamespace(classes=SimpleNamespace(cache=classes), claims=SimpleNamespace(cache=claims),
                             sips=SimpleNamespace(cache=_Cache([])), externals=SimpleNamespace(cache=_Cache([])),
                             older=lambda _cls: [])
    operator: Any = _Operator(binder)
    metrics.track_operator(operator)
    try:
        for phase, n in (("Pending", 0), ("Bound", 1), ("Lost", 0)):
            assert sample("isthmus_egress_claims", **{"class": "zero-lab", "phase": phase}) == n, phase
        for phase in ("Available", "Bound", "Released", "Failed"):
            assert sample("isthmus_egress_source_ips", **{"class": "zero-lab", "phase": phase}) == 0, phase
        assert sample("isthmus_egress_class_capacity", **{"class": "zero-lab"}) == 4
        for state in ("true", "false", "unknown"):
            assert sample("isthmus_egress_external_services", ready=state) == 0, state
        # The class and its claims gone: its series go with them.
        classes.objs.clear()
        claims.objs.clear()
        assert sample("isthmus_egress_claims", **{"class": "zero-lab", "phase": "Pending"}) is None
        assert sample("isthmus_egress_source_ips", **{"class": "zero-lab", "phase": "Available"}) is None
    finally:
        metrics._OPERATORS.discard(operator)
