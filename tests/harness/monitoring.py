"""The Grafana dashboard deploy/monitoring ships and the metric names its expressions read, for the
monitoring tests (moved from tests/unit/test_monitoring.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import promql_parser

from isthmus.kube.manifests import deploy_dir

MONITORING = deploy_dir() / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$cluster": ".*"}
"""What Grafana substitutes before Prometheus sees an expression."""


def metric_names(expr: str) -> set[str]:
    """The metric names a dashboard expression reads, from the AST Prometheus's own grammar gives
    (promql-parser): a typo'd function, a bad matcher or a missing bracket fails here, as it would
    fail the panel."""
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def expressions(dash: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            out.extend(t["expr"] for t in p.get("targets") or [] if t.get("expr"))
            walk(p.get("panels") or [])

    walk(dash["panels"])
    for var in dash["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and query:
            # label_values(<series selector>, <label>): the selector is the PromQL part
            out.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", str(query)))
    return out
