"""deploy/member's agent: two replicas, a healthy standby on another node, rolled and drained one at a
time (issue 43: a single agent, recreated, left a drained node's endpoints in every other cluster's
imports until its new pod started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from isthmus.kube.manifests import deploy_dir, render

NAME = "isthmus-agent"


def _find(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == NAME]
    return obj


def test_two_replicas_roll_a_new_pod_in_first_and_a_budget_moves_one_at_a_time() -> None:
    objs = render(deploy_dir() / "member")
    dep = _find(objs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    [term] = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    budget = _find(objs, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def test_the_local_clusterset_runs_one_on_one_node_and_two_with_several(tmp_path: Path) -> None:
    from isthmus.local import components, plan

    for nodes, want in ((1, 1), (2, 2), (3, 2)):
        directory = components.overlay(plan.cluster_plan(1, 2), deploy_dir(), tmp_path / f"c1-{nodes}",
                                       tmp_path / "pools", nodes=nodes)
        assert _find(render(directory), "Deployment")["spec"]["replicas"] == want, nodes
