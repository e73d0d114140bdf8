"""DaemonSet Pods as kube's controller makes them since 1.12: pinned by node affinity, bound by the
scheduler, which places them where other Pods may not go (cordoned Nodes, Nodes under pressure)."""

from __future__ import annotations

from typing import Any, cast

from isthmus.local.kubelite.daemonsets import DaemonSetController, daemonset_plan
from isthmus.local.kubelite.scheduler import build_node_infos, feasible


def ds() -> dict[str, Any]:
    return {
        "metadata": {"name": "agent", "namespace": "default", "uid": "ds-uid", "generation": 1},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": spec,
            "status": {"allocatable": {"cpu": "2", "memory": "2Gi", "pods": "10"}}}


def daemon_pod(node_name: str) -> dict[str, Any]:
    return DaemonSetController.new_pod(cast(Any, None), ds(), f"agent-{node_name}", node_name, "h1")


def test_daemon_pod_is_left_to_the_scheduler_and_pinned_by_affinity() -> None:
    pod = daemon_pod("n2")
    assert "nodeName" not in pod["spec"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}
    ok, failed = feasible(pod, build_node_infos([node("n1"), node("n2")], []))
    assert [i.name for i in ok] == ["n2"]
    assert failed["n1"].reasons == ("node(s) didn't match Pod's node affinity/selector",)


def test_an_unbound_daemon_pod_counts_for_its_node() -> None:
    pending = {**daemon_pod("n1"), "status": {"phase": "Pending"}}
    pending["metadata"] = {**pending["metadata"], "creationTimestamp": "2026-01-01T00:00:00Z"}
    plan = daemonset_plan(ds(), [node("n1")], [pending], "h1", 0.0)
    assert plan.create == {} and plan.delete == []


def test_daemon_pods_go_where_others_may_not() -> None:
    cordoned = node("n1", unschedulable=True,
                    taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                            {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}])
    ok, _ = feasible(daemon_pod("n1"), build_node_infos([cordoned], []))
    assert [i.name for i in ok] == ["n1"]
    # Not ready (NoSchedule) stops new daemon Pods too: their toleration is for NoExecute only (kube).
    not_ready = node("n1", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    assert feasible(daemon_pod("n1"), build_node_infos([not_ready], []))[0] == []
