"""Load balancing is an opt-in kustomize component (deploy/components/lb, class-less Services a second
one on top): deploy/member alone runs no translator, no pool manager and sends no Service to a
webhook; with the component, all of it, the pool manager in a namespace of its own."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from isthmus.api.lb import POOLS_NAMESPACE
from isthmus.kube.manifests import deploy_dir, render
from tests.harness.lb import lb_overlay

DEPLOY = deploy_dir()


def kubectl_kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to check the renders against kustomize (the Makefile's packages)"
    p = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    return next((o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name), None)


def args(objs: list[dict[str, Any]], deployment: str) -> list[str]:
    dep = find(objs, "Deployment", deployment)
    assert dep is not None, deployment
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_base_runs_no_load_balancing() -> None:
    objs = render(DEPLOY / "member")
    assert find(objs, "Deployment", "isthmus-pools") is None
    assert find(objs, "Namespace", POOLS_NAMESPACE) is None
    assert find(objs, "ServiceAccount", "isthmus-lb") is None
    assert find(objs, "IngressClass", "edgelb") is None
    assert find(objs, "MutatingWebhookConfiguration", "isthmus-lb") is None
    assert "--controllers=*,-lb" in args(objs, "isthmus-controller-manager")
    assert "--lb-class-less-services" not in args(objs, "isthmus-webhook")
    # The webhook stays: it serves egress's checks.
    validating = find(objs, "ValidatingWebhookConfiguration", "isthmus-lb")
    assert validating is not None and [w["name"] for w in validating["webhooks"]] == ["egress.validate.isthmus.io"]


def test_the_component_adds_translator_pool_manager_and_webhooks(tmp_path: Path) -> None:
    objs = render(lb_overlay(tmp_path))
    assert objs == kubectl_kustomize(tmp_path)
    assert "--controllers=*" in args(objs, "isthmus-controller-manager")
    assert "--lb-class-less-services" not in args(objs, "isthmus-controller-manager")
    assert "--lb-class-less-services" not in args(objs, "isthmus-webhook")
    assert find(objs, "IngressClass", "edgelb") is not None
    assert find(objs, "ServiceAccount", "isthmus-lb") is not None
    validating = find(objs, "ValidatingWebhookConfiguration", "isthmus-lb")
    assert validating is not None
    assert [w["name"] for w in validating["webhooks"]] == ["egress.validate.isthmus.io", "dklb.validate.isthmus.io"]
    mutating = find(objs, "MutatingWebhookConfiguration", "isthmus-lb")
    assert mutating is not None and [w["name"] for w in mutating["webhooks"]] == ["dklb.mutate.isthmus.io"]
    pools = find(objs, "Deployment", "isthmus-pools")
    assert pools is not None and pools["metadata"]["namespace"] == POOLS_NAMESPACE
    assert pools["spec"]["template"]["spec"]["containers"][0]["image"].startswith("ghcr.io/")


def test_the_class_less_opt_in_reaches_translator_and_webhook(tmp_path: Path) -> None:
    objs = render(lb_overlay(tmp_path, class_less=True))
    assert objs == kubectl_kustomize(tmp_path)
    assert "--lb-class-less-services" in args(objs, "isthmus-controller-manager")
    assert "--lb-class-less-services" in args(objs, "isthmus-webhook")


def test_the_pool_manager_lives_apart_at_the_level_it_needs(tmp_path: Path) -> None:
    """hostNetwork and a file capability gained at exec are beyond baseline: its own namespace,
    enforcing privileged, warning and auditing at baseline; everything it uses lives there."""
    objs = render(lb_overlay(tmp_path))
    ns = find(objs, "Namespace", POOLS_NAMESPACE)
    assert ns is not None
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    pools = [o for o in objs if o["metadata"]["name"] == "isthmus-pools" and o["kind"] != "Namespace"]
    assert {o["kind"] for o in pools} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                         "RoleBinding", "Deployment", "PodDisruptionBudget"}
    for o in pools:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == POOLS_NAMESPACE, o["kind"]
        for subject in o.get("subjects") or []:
            assert subject["namespace"] == POOLS_NAMESPACE
    # Nothing else runs in it (a privileged namespace holds only what needs it); its metrics Service
    # (for deploy/monitoring's ServiceMonitor) selects nothing but the pool manager there.
    others = [o for o in objs if o["metadata"].get("namespace") == POOLS_NAMESPACE and o not in pools]
    assert [(o["kind"], o["metadata"]["name"]) for o in others] == [("Service", "isthmus-metrics")]
    # Only the pool manager may escalate: HAProxy's file capability is gained at exec, which
    # no_new_privs forbids; its bounding set holds NET_BIND_SERVICE and nothing else.
    for dep in (o for o in objs if o["kind"] == "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        for c in spec["containers"]:
            escalates = c["securityContext"]["allowPrivilegeEscalation"]
            assert escalates is (dep["metadata"]["name"] == "isthmus-pools"), dep["metadata"]["name"]
    pod = find(objs, "Deployment", "isthmus-pools")["spec"]["template"]["spec"]  # type: ignore[index]
    assert pod["hostNetwork"] is True
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}


def test_the_broker_runs_its_pool_manager_in_the_same_namespace() -> None:
    objs = render(DEPLOY / "broker" / "controllers")
    pools = find(objs, "Deployment", "isthmus-pools")
    assert pools is not None and pools["metadata"]["namespace"] == POOLS_NAMESPACE
    assert find(objs, "Namespace", POOLS_NAMESPACE) is not None
    assert find(objs, "Deployment", "isthmus-mcsvc-broker")["metadata"]["namespace"] == "isthmus-system"  # type: ignore[index]


def test_the_manager_may_ask_for_the_translators_token_only_with_the_component(tmp_path: Path) -> None:
    def names(objs: list[dict[str, Any]]) -> list[str]:
        role = find(objs, "Role", "isthmus-controller-manager")
        assert role is not None
        return list(role["rules"][0]["resourceNames"])

    assert "isthmus-lb" not in names(render(DEPLOY / "member"))
    assert names(render(lb_overlay(tmp_path))) == ["isthmus-lb", "isthmus-mcsvc", "isthmus-egress-operator"]


def test_the_webhook_survives_drains_and_pressure_and_the_pool_managers_spread(tmp_path: Path) -> None:
    """A webhook that fails closed keeps a replica through a drain (a budget of one unavailable, which a
    one-replica install can still drain), is not preempted by ordinary pods, and its replicas, like the
    pool managers, prefer different nodes."""
    objs = render(lb_overlay(tmp_path))
    pdb = find(objs, "PodDisruptionBudget", "isthmus-webhook")
    assert pdb is not None and pdb["metadata"]["namespace"] == "isthmus-system"
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "isthmus-webhook"}}
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    webhook = find(objs, "Deployment", "isthmus-webhook")
    assert webhook is not None
    spec = webhook["spec"]["template"]["spec"]
    assert webhook["spec"]["replicas"] == 2
    assert webhook["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "isthmus-webhook"
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "isthmus-webhook"}}}]
    pools = find(objs, "Deployment", "isthmus-pools")
    assert pools is not None
    # HA as dklb pools: two replicas on two hosts (required: hostNetwork ports), one replaced at a time.
    assert pools["spec"]["replicas"] == 2
    assert pools["spec"]["strategy"] == {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    (term,) = pools["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "isthmus-pools"}}}
    assert pools["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 5  # the shutdown delay
    pdb = find(objs, "PodDisruptionBudget", "isthmus-pools")
    assert pdb is not None and pdb["metadata"]["namespace"] == "isthmus-pools"
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "isthmus-pools"}}


def test_the_local_clusterset_opts_in_class_less_services_included(tmp_path: Path) -> None:
    """The local clusterset has no other load balancer, and the seed's flows use class-less Services:
    its overlay adds both components, so they keep working unchanged."""
    from isthmus.local import components, plan

    directory = components.overlay(plan.cluster_plan(1, 2), DEPLOY, tmp_path / "c1", tmp_path / "pools")
    objs = render(directory)
    manager = args(objs, "isthmus-controller-manager")
    assert "--controllers=*" in manager and "--lb-class-less-services" in manager
    assert "--lb-class-less-services" in args(objs, "isthmus-webhook")
    assert find(objs, "Deployment", "isthmus-pools") is not None
    assert find(objs, "MutatingWebhookConfiguration", "isthmus-lb") is not None


def test_the_local_clusterset_runs_two_of_each_data_path_replica_with_several_nodes(tmp_path: Path) -> None:
    """One pool manager, DNS and webhook replica on one node (memory); two with several nodes, so a
    rollout or a drain of one node leaves one serving. The broker has one node: one pool manager."""
    from isthmus.local import components, plan

    def replicas(objs: list[dict[str, Any]]) -> dict[str, int]:
        return {name: find(objs, "Deployment", name)["spec"]["replicas"]  # type: ignore[index]
                for name in ("isthmus-pools", "isthmus-dns", "isthmus-webhook")}

    for nodes, want in ((1, 1), (2, 2), (3, 2)):
        directory = components.overlay(plan.cluster_plan(1, 2), DEPLOY, tmp_path / f"c1-{nodes}", tmp_path / "pools",
                                       nodes=nodes)
        assert replicas(render(directory)) == dict.fromkeys(("isthmus-pools", "isthmus-dns", "isthmus-webhook"), want)
    broker = render(components.broker_overlay(DEPLOY, tmp_path / "broker", tmp_path / "pools"))
    assert find(broker, "Deployment", "isthmus-pools")["spec"]["replicas"] == 1  # type: ignore[index]
