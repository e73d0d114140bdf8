"""Issue 43's review of deploy/: rollout strategies that can complete (defect 4: the leader-only-ready
egress gateway), disruption budgets that a drain can satisfy, priority for what is cluster-critical,
and spread across nodes for every Deployment of more than one replica."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.kube.manifests import deploy_dir, render

DEPLOY = deploy_dir()
BASES = ("member", "broker/webhook")


def objects(base: str) -> list[dict[str, Any]]:
    return render(DEPLOY / base)


def deployment(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == name)


def test_the_egress_gateway_rolls_one_pod_at_a_time_and_serves_its_leader() -> None:
    """Ready means healthy and the Service picks the leader by its label: a RollingUpdate without
    surge (hostNetwork ports) completes (tests/integration/test_gateway_rollout.py shows it)."""
    objs = objects("member")
    gateway = deployment(objs, "isthmus-egress-gateway")
    assert gateway["spec"]["replicas"] == 2
    assert gateway["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == "isthmus-egress-gateway")
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "isthmus-egress-gateway",
                                       "egress.isthmus.io/leader": "true"}


@pytest.mark.parametrize(("base", "name"), [("member", "isthmus-dns"), ("broker/webhook", "isthmus-mcsvc-webhook"),
                                            ("member", "isthmus-egress-gateway")])
def test_two_ready_replicas_get_a_budget_of_one(base: str, name: str) -> None:
    objs = objects(base)
    dep = deployment(objs, name)
    budget = next(o for o in objs if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == name)
    assert budget["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert budget["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert budget["spec"]["maxUnavailable"] == 1 and dep["spec"]["replicas"] == 2
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_dns_and_the_gateway_are_cluster_critical() -> None:
    objs = objects("member")
    for name in ("isthmus-dns", "isthmus-egress-gateway"):
        assert deployment(objs, name)["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    for name in ("isthmus-agent", "isthmus-controller-manager"):  # control loops: an outage delays, nothing breaks
        assert "priorityClassName" not in deployment(objs, name)["spec"]["template"]["spec"]


def spreads_by_host(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    for c in spec.get("topologySpreadConstraints") or []:
        if c["topologyKey"] == "kubernetes.io/hostname" and c["labelSelector"]["matchLabels"].items() <= labels.items():
            return True
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    for term in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        t = term["podAffinityTerm"]
        if t["topologyKey"] == "kubernetes.io/hostname" and t["labelSelector"]["matchLabels"].items() <= labels.items():
            return True
    return False


@pytest.mark.parametrize("base", BASES)
def test_every_multi_replica_deployment_spreads_over_nodes(base: str) -> None:
    many = [o for o in objects(base) if o["kind"] == "Deployment" and o["spec"].get("replicas", 1) > 1]
    assert many
    lonely = [o["metadata"]["name"] for o in many
              if not spreads_by_host(o["spec"]["template"]["spec"], o["spec"]["template"]["metadata"]["labels"])]
    assert lonely == []
