"""deploy/member's controller manager as an HA control plane runs kube-controller-manager: two replicas
that are ready as standbys, rolled one new pod before one old, spread over nodes, under a budget a
drain can satisfy; the local clusterset runs one on one node, two with several."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from isthmus.kube.manifests import deploy_dir, render

DEPLOY = deploy_dir()
NAME = "isthmus-controller-manager"


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def test_two_replicas_roll_a_new_pod_in_before_an_old_one_goes() -> None:
    dep = find(render(DEPLOY / "member"), "Deployment", NAME)
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    spec, labels = dep["spec"]["template"]["spec"], dep["spec"]["template"]["metadata"]["labels"]
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]


def test_a_budget_of_one_lets_a_drain_move_one_replica_at_a_time() -> None:
    objs = render(DEPLOY / "member")
    dep, budget = find(objs, "Deployment", NAME), find(objs, "PodDisruptionBudget", NAME)
    assert budget["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert budget["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert budget["spec"]["maxUnavailable"] == 1 and "minAvailable" not in budget["spec"]
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_the_local_clusterset_runs_one_on_one_node_and_two_with_several(tmp_path: Path) -> None:
    from isthmus.local import components, plan

    for nodes, want in ((1, 1), (2, 2), (3, 2)):
        directory = components.overlay(plan.cluster_plan(1, 2), DEPLOY, tmp_path / f"c1-{nodes}", tmp_path / "pools",
                                       nodes=nodes)
        assert find(render(directory), "Deployment", NAME)["spec"]["replicas"] == want, nodes
