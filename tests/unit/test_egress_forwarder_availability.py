"""Each ExternalService's forwarder survives a drain or a rollout of one of its pods: two replicas by
default, on different nodes where it can, rolled by surging one new pod before an old one stops, under a
PodDisruptionBudget that lets a drain take one pod at a time; the local clusterset runs min(nodes, 2)
of them; both commands that run the operator take `--forwarder-replicas`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isthmus.api.egress import FORWARDER_POD_LABEL, ExternalService
from isthmus.api.image import IMAGE
from isthmus.cli.lameduck import DEFAULT_SHUTDOWN_DELAY
from isthmus.cli.main import app
from isthmus.egress.operator import EgressOperator, forwarder_budget, forwarder_deployment, forwarder_labels
from isthmus.kube.manifests import deploy_dir, render
from isthmus.local.kubelite.scheduler import build_node_infos, score_inter_pod_affinity

WORKLOAD = "isthmus-fwd-default-pg"
HOST = "kubernetes.io/hostname"


def external_service() -> ExternalService:
    return ExternalService.model_validate({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"targetIP": "127.48.0.10", "sources": [{"service": {"name": "app"}, "sourceIPClaimName": "db"}],
                 "ports": [{"port": 5432}]}})


def deployment(**kwargs: Any) -> dict[str, Any]:
    es = external_service()
    return forwarder_deployment(es, WORKLOAD, forwarder_labels(es), IMAGE, (), **kwargs)


def test_a_forwarder_runs_two_replicas_rolled_one_surge_pod_at_a_time() -> None:
    spec = deployment()["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deployment(replicas=1)["spec"]["replicas"] == 1
    # The lame duck fits in the grace period: the kubelet's SIGKILL would otherwise cut it short.
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] > DEFAULT_SHUTDOWN_DELAY


def test_a_forwarders_second_pod_prefers_another_node() -> None:
    template = deployment()["spec"]["template"]
    nodes = [{"metadata": {"name": n, "labels": {HOST: n}}, "spec": {},
              "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}} for n in ("n1", "n2")]
    first = {"metadata": {"name": "fwd-1", "namespace": "isthmus-system", "labels": template["metadata"]["labels"]},
             "spec": {**template["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    placed = build_node_infos(nodes, [first])
    second = {"metadata": {"name": "fwd-2", "namespace": "isthmus-system", "labels": template["metadata"]["labels"]},
              "spec": template["spec"], "status": {"phase": "Pending"}}
    assert score_inter_pod_affinity(second, placed, placed) == {"n1": 0, "n2": 100}
    # Preferred, not required: on one node both still run.
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in template["spec"]["affinity"]["podAntiAffinity"]


def test_a_forwarders_budget_lets_a_drain_take_one_pod_at_a_time() -> None:
    es = external_service()
    dep = deployment()
    pdb = forwarder_budget(WORKLOAD, forwarder_labels(es))
    assert pdb["apiVersion"] == "policy/v1" and pdb["kind"] == "PodDisruptionBudget"
    assert {k: pdb["metadata"][k] for k in ("name", "namespace", "labels")} == {
        k: dep["metadata"][k] for k in ("name", "namespace", "labels")}
    # maxUnavailable, not minAvailable: a one-replica forwarder can still be drained.
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"] == dep["spec"]["selector"] == {"matchLabels": {FORWARDER_POD_LABEL: WORKLOAD}}
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_the_operator_refuses_zero_forwarder_replicas() -> None:
    with pytest.raises(ValueError, match="at least one forwarder replica"):
        EgressOperator(None, identity="t", forwarder_replicas=0)  # type: ignore[arg-type]


def test_the_local_clusterset_runs_one_forwarder_pod_per_node_up_to_two(tmp_path: Path) -> None:
    from isthmus.local import components, plan

    for nodes, want in ((1, 1), (2, 2), (3, 2)):
        directory = components.overlay(plan.cluster_plan(1, 2), deploy_dir(), tmp_path / f"c1-{nodes}",
                                       tmp_path / "pools", nodes=nodes)
        manager = next(o for o in render(directory)
                       if o["kind"] == "Deployment" and o["metadata"]["name"] == "isthmus-controller-manager")
        args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
        assert [a for a in args if a.startswith("--forwarder-replicas")] == [f"--forwarder-replicas={want}"]


@pytest.mark.parametrize("command", [["egress-operator"], ["controller-manager", "--controllers=egress-operator"]])
def test_both_commands_pass_forwarder_replicas_to_the_operator(command: list[str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Built as each command builds it (run_component's `build`), the operator gets the flag's value;
    2 without it."""
    import asyncio

    import isthmus.cli.egress as egress_cli
    import isthmus.cli.manager as manager_cli

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters: [{name: t, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: t, user: {token: x}}]\ncontexts: [{name: t, context: {cluster: t, user: t}}]\n")
    got: list[int] = []

    def part(client: Any, holder: str, image: str | None, workers: int, forwarder_replicas: int = 2) -> Any:
        got.append(forwarder_replicas)
        # A part is its Manager, which the controller manager stands by (cli/manager.py `Healthy`).
        return type("Part", (), {"ready": True, "healthy": True, "stand_by": lambda self, poll: None})()

    async def build_once(build: Any) -> None:
        await build()

    def run(name: str, build: Any, **kwargs: Any) -> None:
        asyncio.run(build_once(build))

    monkeypatch.setattr(egress_cli, "egress_operator_part", part)
    monkeypatch.setattr(egress_cli, "run_component", run)
    monkeypatch.setattr(manager_cli, "run_component", run)
    for extra, want in (([], 2), (["--forwarder-replicas", "1"], 1), (["--forwarder-replicas", "3"], 3)):
        result = CliRunner().invoke(app, [*command, "--kubeconfig", str(kubeconfig), *extra])
        assert result.exit_code == 0, result.output
        assert got.pop() == want
    result = CliRunner().invoke(app, [*command, "--kubeconfig", str(kubeconfig), "--forwarder-replicas", "0"])
    assert result.exit_code == 2
