"""Pod Security labels of deploy/'s namespaces, and every pod template held to its namespace's
`enforce` level with the embedded apiserver's v1.32 checks (kube's PodSecurity admission): the
member base, the broker's webhook, the forwarders the egress operator creates, and the local
clusterset's overlays of both runtimes (runc's hostNetwork gateway needs its namespace relabelled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from isthmus.api.egress import ExternalService
from isthmus.api.image import IMAGE
from isthmus.apiserver.admission.podsecurity.checks import evaluate
from isthmus.egress.operator import forwarder_deployment, forwarder_labels, forwarder_namespace_labels
from isthmus.kube.manifests import deploy_dir, render
from isthmus.local import components, plan

DEPLOY = deploy_dir()
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


def namespaces(objs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in objs if o["kind"] == "Namespace"}


def violations(objs: list[dict[str, Any]], labels: dict[str, dict[str, str]]) -> list[str]:
    """`<kind>/<name>: <check>` for each template its namespace's enforce level refuses."""
    out = []
    for o in objs:
        if o["kind"] not in WORKLOADS:
            continue
        ns = labels[o["metadata"]["namespace"]]
        level = ns.get("pod-security.kubernetes.io/enforce", "privileged")
        template = o["spec"]["template"]
        for reason, detail in evaluate(level, None, template.get("metadata") or {}, template["spec"]):
            out.append(f"{o['kind']}/{o['metadata']['name']}: {reason} ({detail})")
    return out


def test_isthmus_system_enforces_restricted_and_every_member_pod_passes() -> None:
    objs = render(DEPLOY / "member")
    labels = namespaces(objs)
    assert labels["isthmus-system"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["isthmus-system"]["pod-security.kubernetes.io/warn"] == "restricted"
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] in WORKLOADS} == {"isthmus-system"}
    assert violations(objs, labels) == []


def test_a_pod_beyond_restricted_is_caught() -> None:
    """The check above can fail: a hostNetwork gateway in isthmus-system is refused."""
    objs = render(DEPLOY / "member")
    gateway = next(o for o in objs if o["metadata"]["name"] == "isthmus-egress-gateway" and o["kind"] == "Deployment")
    gateway["spec"]["template"]["spec"]["hostNetwork"] = True
    assert violations([gateway], namespaces(objs)) == [
        "Deployment/isthmus-egress-gateway: host namespaces (hostNetwork=true)"]


def test_the_broker_namespace_and_webhook_pass_restricted() -> None:
    broker = namespaces(render(DEPLOY / "broker"))
    assert broker["isthmus-broker"]["pod-security.kubernetes.io/enforce"] == "restricted"
    webhook = render(DEPLOY / "broker" / "webhook")
    assert violations(webhook, {"isthmus-system": {"pod-security.kubernetes.io/enforce": "restricted"}}) == []


def test_the_forwarders_the_operator_runs_pass_restricted() -> None:
    es = ExternalService.model_validate({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"targetIP": "127.48.0.10", "sources": [{"service": {"name": "app"}, "sourceIPClaimName": "db"}],
                 "ports": [{"port": 5432}]}})
    body = forwarder_deployment(es, "isthmus-fwd-default-pg", forwarder_labels(es), IMAGE, ())
    assert violations([body], {"isthmus-system": {"pod-security.kubernetes.io/enforce": "restricted"}}) == []
    assert forwarder_namespace_labels()["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("runtime", [plan.PROCESS, plan.RUNC])
def test_the_local_clustersets_pods_are_admitted(runtime: str, tmp_path: Path) -> None:
    cluster = plan.cluster_plan(1, 2, runtime)
    directory = components.overlay(cluster, DEPLOY, tmp_path / "manifests", tmp_path / "pools")
    objs = render(directory)
    labels = namespaces(objs)
    assert violations(objs, labels) == []
    enforce = labels["isthmus-system"]["pod-security.kubernetes.io/enforce"]
    assert enforce == ("privileged" if runtime == plan.RUNC else "restricted")
