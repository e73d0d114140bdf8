"""deploy/monitoring against the code: every metric the Grafana dashboard draws is one the components
export (read from the registries of the imported component modules, not from a list), every
clusterset-level metric is drawn, the ConfigMap carries the dashboard JSON as it is, and the
ServiceMonitor reaches every component's metrics port through the Service it selects.

After editing grafana-dashboard.json, rewrite its ConfigMap:
`PYTHONPATH=src python -m tests.unit.test_monitoring --write`."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.registry import CollectorRegistry

from isthmus.kube.manifests import deploy_dir, render
from tests.harness.monitoring import DASHBOARD, MONITORING, dashboard, expressions, metric_names

CONFIGMAP = MONITORING / "grafana-dashboard.yaml"
DASHBOARD_KEY = "isthmus-clusterset.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

COMPONENT_MODULES = (
    "isthmus.discovery.agent",
    "isthmus.dns.service",
    "isthmus.proxy.proxy",
    "isthmus.lb.controller",
    "isthmus.haproxy.manager",
    "isthmus.exposure.member",
    "isthmus.exposure.broker",
    "isthmus.egress.operator",
    "isthmus.egress.gateway",
    "isthmus.egress.forwarder",
    "isthmus.runtime.webhook",
    "isthmus.kube.transport",
)
"""Every component a Deployment in deploy/ runs: importing them registers all their metrics."""

CLUSTERSET_MODULES = ("isthmus.discovery.metrics", "isthmus.dns.metrics", "isthmus.exposure.metrics", "isthmus.haproxy.metrics",
                      "isthmus.egress.metrics")


def configmap_text(dashboard: str) -> str:
    body = "".join(f"    {line}\n" if line else "\n" for line in dashboard.splitlines())
    return (
        "# The dashboard of grafana-dashboard.json for Grafana's dashboard sidecar (label grafana_dashboard), in\n"
        "# folder Isthmus. Generated: edit the JSON, then `PYTHONPATH=src python -m tests.unit.test_monitoring\n"
        "# --write` (a test holds the two equal).\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: isthmus-grafana-dashboard\n"
        "  namespace: isthmus-system\n  labels:\n    grafana_dashboard: \"1\"\n"
        "    app.kubernetes.io/part-of: isthmus\n  annotations:\n    grafana_folder: Isthmus\n"
        f"data:\n  {DASHBOARD_KEY}: |\n{body}"
    )


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every series name a scrape of `registry` can show, with the suffixes of each type."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("_sum", "_count", "_created"), "info": ("_info",), "gaugehistogram": ("_bucket", "_gsum",
                                                                                                  "_gcount")}
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + s for s in suffixes.get(family.type, ()))
        names.update(s.name for s in family.samples)
    return names


def registry_names() -> set[str]:
    for module in COMPONENT_MODULES:
        importlib.import_module(module)
    from isthmus.runtime import REGISTRY

    return exported_names(REGISTRY)


def test_metric_names_reads_only_metric_selectors() -> None:
    expr = ('sum by (cluster) (rate(isthmus_dns_answers_total{cluster=~"$cluster", job="isthmus_x"}'
            '[$__rate_interval])) / on() group_left isthmus_b or vector(0)')
    assert metric_names(expr) == {"isthmus_dns_answers_total", "isthmus_b"}
    with pytest.raises(ValueError):
        metric_names("sum(rate(isthmus_x[5m])")


def test_exported_names_take_suffixes_into_account() -> None:
    from prometheus_client import Counter, Gauge, Histogram

    reg = CollectorRegistry()
    Counter("x_events", "h", ["a"], registry=reg)
    Histogram("x_seconds", "h", registry=reg)
    Gauge("x_things", "h", registry=reg)
    names = exported_names(reg)
    assert {"x_events_total", "x_seconds_bucket", "x_seconds_sum", "x_seconds_count", "x_things"} <= names
    assert "x_events" in names and "x_nothing" not in names


def test_every_metric_the_dashboard_draws_is_exported() -> None:
    exported = registry_names()
    used: dict[str, set[str]] = {}
    exprs = expressions(dashboard())
    assert len(exprs) > 20
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"an expression reads no isthmus metric: {expr}"
        for n in names:
            used.setdefault(n, set()).add(expr)
    missing = {n: sorted(e) for n, e in used.items() if n not in exported}
    assert not missing, f"the dashboard reads metrics no component exports: {missing}"


def test_every_clusterset_metric_is_exported_and_drawn() -> None:
    exported = registry_names()
    drawn = {n for e in expressions(dashboard()) for n in metric_names(e)}
    families: list[str] = []
    for module in CLUSTERSET_MODULES:
        families.extend(importlib.import_module(module).CLUSTERSET_METRICS)
    assert len(families) >= 20
    for family in families:
        assert family in exported, f"{family} is listed as a clusterset metric but no collector yields it"
        assert {family, f"{family}_total"} & drawn, f"{family} is not drawn by the dashboard"


def test_clusterset_metrics_have_help_and_follow_prometheus_naming() -> None:
    registry_names()
    from isthmus.runtime import REGISTRY

    ours: set[str] = set()
    for module in CLUSTERSET_MODULES:
        ours.update(importlib.import_module(module).CLUSTERSET_METRICS)
    seen = set()
    for family in REGISTRY.collect():
        if family.name not in ours:
            continue
        seen.add(family.name)
        assert family.documentation and len(family.documentation) > 20, family.name
        assert family.name.startswith("isthmus_")
        assert not family.name.endswith("_total"), "counters get _total from the client"
        if family.type == "gauge":
            assert not family.name.endswith(("_count", "_sum", "_bucket")), family.name
    assert seen == ours


def test_every_exported_family_is_documented() -> None:
    """docs/metrics.md has a row for every family a component exports (counters under their _total name)."""
    registry_names()
    from isthmus.dns.metrics import DnsStats
    from isthmus.runtime import REGISTRY

    worker = DnsStats(worker=0)  # the --workers families appear only with a worker
    rows = set(re.findall(r"^\| `([a-z_:]+)`", DOCS.read_text(), flags=re.MULTILINE))
    missing = []
    for family in REGISTRY.collect():
        if family.name.startswith(("process_", "python_")):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        if name not in rows:
            missing.append(name)
    del worker
    assert not missing, f"not documented in docs/metrics.md: {missing}"
    assert {"isthmus_exports", "isthmus_dns_answers_total", "isthmus_dns_worker_queries_total"} <= rows


def test_the_queries_in_the_docs_parse_and_read_exported_metrics() -> None:
    block = re.search(r"```promql\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    assert block is not None
    queries: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(" ") and queries:
            queries[-1] += " " + line.strip()  # a query continued on the next line
        else:
            queries.append(line)
    assert len(queries) >= 5
    exported = registry_names()
    for q in queries:
        names = metric_names(q)
        assert names and names <= exported, q


def test_dashboard_is_grafana_shaped() -> None:
    dash = dashboard()
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p.get("description"), f"panel {p['title']!r} says what it shows"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]!r} and {p['title']!r} overlap"
                cells[(x, y)] = p["title"]


def test_configmap_carries_the_dashboard_for_the_grafana_sidecar() -> None:
    assert CONFIGMAP.read_text() == configmap_text(DASHBOARD.read_text()), (
        "grafana-dashboard.yaml is stale: PYTHONPATH=src python -m tests.unit.test_monitoring --write")
    cm = next(o for o in render(MONITORING) if o["kind"] == "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][DASHBOARD_KEY]) == dashboard()


def _operator_made() -> list[dict[str, Any]]:
    """What the egress operator creates per ExternalService in isthmus-system: the forwarder Deployment
    (a component of its own, with /metrics), beside the manifests."""
    from isthmus.api.egress import ExternalService, forwarder_workload_name
    from isthmus.egress.operator import forwarder_deployment, forwarder_labels

    es = ExternalService.from_dict({"metadata": {"name": "db", "namespace": "shop"}, "spec": {
        "targetIP": "127.48.0.10", "ports": [{"port": 5432}],
        "sources": [{"service": {"name": "app"}, "sourceIPClaimName": "c"}]}})
    workload = forwarder_workload_name("shop", "db")
    return [forwarder_deployment(es, workload, forwarder_labels(es), "isthmus:test", [])]


def _deploy_objects() -> list[dict[str, Any]]:
    root = deploy_dir()
    return [*render(root / "member"), *render(root / "member" / "pools"), *render(root / "broker" / "controllers"),
            *render(root / "broker" / "webhook"), *render(MONITORING), *_operator_made()]


def _workloads() -> list[dict[str, Any]]:
    return [o for o in _deploy_objects() if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_service_monitor_reaches_every_component_metrics_port() -> None:
    objs = render(MONITORING)
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == 1
    sm = monitors[0]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    services = [o for o in _deploy_objects() if o["kind"] == "Service"
                and o["metadata"].get("namespace") in sm["spec"]["namespaceSelector"]["matchNames"]
                and _matches(sm["spec"]["selector"]["matchLabels"], o["metadata"].get("labels") or {})]
    assert sm["spec"]["endpoints"], "at least one endpoint"
    for selected in services:  # every Service it selects names the ports it scrapes
        names = {p.get("name") for p in selected["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            assert ep["port"] in names, (
                f"endpoint port {ep['port']} is not a port name of Service {selected['metadata']['name']}")
    by_namespace = {o["metadata"]["namespace"]: o for o in services}
    assert sorted(by_namespace) == ["isthmus-pools", "isthmus-system"], "a metrics Service in each namespace"
    targets = set()
    for svc in services:
        assert svc["spec"].get("publishNotReadyAddresses") is True, "standbys and unready pods are scraped too"
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        targets.update(ports[ep["port"]]["targetPort"] for ep in sm["spec"]["endpoints"])
    for ep in sm["spec"]["endpoints"]:
        assert ep.get("path", "/metrics") == "/metrics"
    assert len(targets) == 1
    target = targets.pop()
    workloads = _workloads()
    assert len(workloads) >= 10
    assert "isthmus-egress-forwarder" in {w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name")
                                          for w in workloads}
    for w in workloads:
        name = w["metadata"]["name"]
        pod = w["spec"]["template"]
        svc = by_namespace.get(w["metadata"]["namespace"])
        assert svc is not None, f"no metrics Service the ServiceMonitor selects in {name}'s namespace"
        assert _matches(svc["spec"]["selector"], pod["metadata"]["labels"]), f"Service selector misses {name}"
        for c in pod["spec"]["containers"]:
            addr = next((a.split("=", 1)[1] for a in c.get("args") or [] if a.startswith("--metrics-addr=")), None)
            assert addr is not None, f"{name}/{c['name']} serves no /metrics"
            named = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
            assert target in named, f"{name}/{c['name']} has no port named {target!r}"
            assert str(named[target]) == addr.rsplit(":", 1)[1], (
                f"{name}/{c['name']}: port {target!r} is {named[target]}, --metrics-addr says {addr}")


def test_service_monitor_labels_jobs_by_component_and_renames_no_metric_label() -> None:
    sm = next(o for o in render(MONITORING) if o["kind"] == "ServiceMonitor")
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in sm["spec"]["endpoints"][0]["relabelings"]}
    assert relabel["job"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
    # A target label named like a metric's own label makes Prometheus rename the metric's label to
    # exported_<name> (without honorLabels), which would break the dashboard's `by (...)`.
    registry_names()
    from isthmus.runtime import REGISTRY

    labels: set[str] = set()
    for collector in list(REGISTRY._collector_to_names):  # the registry has no public walk of label names
        for family in collector.collect():
            labels.update(getattr(family, "_labelnames", ()))
            labels.update(k for s in family.samples for k in s.labels)
        labels.update(getattr(collector, "_labelnames", ()))
    assert "component" in labels and "cluster" in labels  # the walk sees labelled families without samples
    assert not set(relabel) & labels
    assert not sm["spec"]["endpoints"][0].get("honorLabels")
    for w in _workloads():
        assert w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name"), w["metadata"]["name"]


def test_monitoring_is_not_part_of_the_bases() -> None:
    """The ServiceMonitor needs prometheus-operator's CRD: no base pulls deploy/monitoring in."""
    for base in ("member", "broker", "broker/controllers", "broker/webhook"):
        kinds = {o["kind"] for o in render(deploy_dir() / base)}
        assert "ServiceMonitor" not in kinds, base
    assert yaml.safe_load((MONITORING / "kustomization.yaml").read_text())["resources"]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        CONFIGMAP.write_text(configmap_text(DASHBOARD.read_text()))
        print(f"wrote {CONFIGMAP}")
    else:
        sys.exit("usage: python -m tests.unit.test_monitoring --write")
