"""Workload planning: template hashes, Deployment scale/rollout plans and status, StatefulSet order."""

from __future__ import annotations

from typing import Any

from isthmus.local.kubelite.pods import container_ports, desired_pod_status, is_echo, status_up_to_date
from isthmus.local.kubelite.workloads import (
    Expectations,
    deployment_plan,
    deployment_status,
    max_unavailable,
    pod_from_template,
    statefulset_plan,
    statefulset_status,
    template_hash,
)

TEMPLATE = {
    "metadata": {"labels": {"app": "w"}, "annotations": {"isthmus.io/workload": "echo"}},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
}


def deploy(replicas: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": "d", "uid": "dep-uid", "generation": 2},
        "spec": {"replicas": replicas, "template": TEMPLATE, **spec},
    }


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    created: str = "2024-01-01T00:00:00Z",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}, "creationTimestamp": created},
        "status": {
            "podIP": "127.1.1.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_template_hash_is_stable_and_name_safe() -> None:
    h = template_hash(TEMPLATE)
    assert h == template_hash({"spec": TEMPLATE["spec"], "metadata": TEMPLATE["metadata"]})
    assert h != template_hash(TEMPLATE, 1) and h != template_hash({**TEMPLATE, "spec": {}})
    assert 1 <= len(h) <= 10 and all(ch in "bcdfghjklmnpqrstvwxz2456789" for ch in h)


def test_pod_from_template() -> None:
    p = pod_from_template(
        deploy(), "w-h-abcde", labels={"pod-template-hash": "h"}, spec_overrides={"hostname": "x"}
    )
    assert p["metadata"]["labels"] == {"app": "w", "pod-template-hash": "h"}
    assert p["metadata"]["annotations"] == {"isthmus.io/workload": "echo"}
    assert p["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "w",
            "uid": "dep-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert p["spec"] == {"containers": [{"name": "c", "image": "i"}], "hostname": "x"}
    assert "hostname" not in TEMPLATE["spec"]  # the template is not mutated


def test_deployment_scale_up_and_down() -> None:
    h = template_hash(TEMPLATE)
    plan = deployment_plan(deploy(3), [pod("a", labels={"pod-template-hash": h})], h)
    assert len(plan.create) == 2 and all(
        n.startswith(f"w-{h}-") and len(n) == len(f"w-{h}-") + 5 for n in plan.create
    )
    assert len(set(plan.create)) == 2 and not plan.delete
    pods = [pod(n, labels={"pod-template-hash": h}, ready=n != "b") for n in "abc"]
    plan = deployment_plan(deploy(1), pods, h)
    assert not plan.create and len(plan.delete) == 2 and "b" in plan.delete  # not-ready goes first


def test_deployment_rollout_deletes_old_as_new_become_ready() -> None:
    h = template_hash(TEMPLATE)
    old = [pod(n, labels={"pod-template-hash": "old"}) for n in ("o1", "o2")]
    plan = deployment_plan(deploy(2), old, h)
    assert len(plan.create) == 2 and not plan.delete  # new first, old keep serving
    new = [
        pod("n1", labels={"pod-template-hash": h}),
        pod("n2", labels={"pod-template-hash": h}, ready=False),
    ]
    plan = deployment_plan(deploy(2), old + new, h)
    assert not plan.create and len(plan.delete) == 1
    recreate = deployment_plan(deploy(2, strategy={"type": "Recreate"}), old, h)
    assert sorted(recreate.delete) == ["o1", "o2"] and not recreate.create


def test_deployment_status_and_conditions() -> None:
    h = template_hash(TEMPLATE)
    pods = [pod("a", labels={"pod-template-hash": h}), pod("b", labels={"pod-template-hash": h}, ready=False)]
    st = deployment_status(deploy(2), pods, h, "T1")
    assert st["observedGeneration"] == 2 and st["replicas"] == 2 and st["updatedReplicas"] == 2
    assert st["readyReplicas"] == st["availableReplicas"] == 1 and st["unavailableReplicas"] == 1
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "False" and conds["Progressing"]["reason"] == "ReplicaSetUpdated"
    pods[1] = pod("b", labels={"pod-template-hash": h})
    st2 = deployment_status({**deploy(2), "status": st}, pods, h, "T2")
    conds2 = {c["type"]: c for c in st2["conditions"]}
    assert conds2["Available"]["status"] == "True" and conds2["Available"]["lastTransitionTime"] == "T2"
    assert conds2["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conds2["Progressing"]["lastTransitionTime"] == "T1"  # still True: transition time kept
    st3 = deployment_status({**deploy(2), "status": st2}, pods, h, "T3")
    assert st3 == st2  # nothing changed: identical (no write)


def test_max_unavailable() -> None:
    assert max_unavailable(deploy(4)) == 1  # 25% of 4
    assert max_unavailable(deploy(3)) == 0  # 25% of 3 rounds down
    assert max_unavailable(deploy(4, strategy={"type": "Recreate"})) == 0
    assert (
        max_unavailable(deploy(4, strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}))
        == 2
    )


def sts(replicas: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "db", "generation": 1},
        "spec": {"replicas": replicas, "template": TEMPLATE, **spec},
    }


def test_statefulset_ordered_creation_and_scale_down() -> None:
    rev = "db-r1"
    lab = {"controller-revision-hash": rev}
    assert statefulset_plan(sts(), [], rev).create == ["db-0"]
    assert (
        statefulset_plan(sts(), [pod("db-0", labels=lab, ready=False)], rev).create == []
    )  # waits for Ready
    assert statefulset_plan(sts(), [pod("db-0", labels=lab)], rev).create == ["db-1"]
    assert statefulset_plan(sts(podManagementPolicy="Parallel"), [], rev).create == ["db-0", "db-1", "db-2"]
    three = [pod(f"db-{i}", labels=lab) for i in range(3)]
    assert statefulset_plan(sts(1), three, rev).delete == ["db-2"]  # highest first, one at a time


def test_statefulset_rolling_update_one_at_a_time_from_the_top() -> None:
    old = [pod(f"db-{i}", labels={"controller-revision-hash": "db-r0"}) for i in range(3)]
    plan = statefulset_plan(sts(), old, "db-r1")
    assert plan.delete == ["db-2"] and not plan.create
    assert statefulset_plan(sts(updateStrategy={"type": "OnDelete"}), old, "db-r1").delete == []
    st = statefulset_status({**sts(), "status": {"currentRevision": "db-r0"}}, old, "db-r1")
    assert st["currentRevision"] == "db-r0" and st["updateRevision"] == "db-r1"
    assert st["updatedReplicas"] == 0 and st["currentReplicas"] == 3 and st["readyReplicas"] == 3
    new = [pod(f"db-{i}", labels={"controller-revision-hash": "db-r1"}) for i in range(3)]
    st = statefulset_status({**sts(), "status": st}, new, "db-r1")
    assert st["currentRevision"] == "db-r1" and st["currentReplicas"] == st["updatedReplicas"] == 3


def test_expectations() -> None:
    exp = Expectations(ttl=60)
    exp.expect("d/w", creates=["a"], deletes=["b"])
    assert not exp.satisfied("d/w", {"b"})
    assert not exp.satisfied("d/w", {"a", "b"})
    assert exp.satisfied("d/w", {"a"})
    assert exp.satisfied("d/other", set())
    short = Expectations(ttl=0)
    short.expect("k", creates=["never"])
    assert short.satisfied("k", set())


def test_pod_status_is_stable() -> None:
    p: dict[str, Any] = {
        "metadata": {"name": "p", "annotations": {"isthmus.io/workload": "echo"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                }
            ]
        },
    }
    assert is_echo(p) and container_ports(p) == [(53, "UDP"), (80, "TCP")]
    st = desired_pod_status(p, "127.101.0.9", now="T1")
    assert st["phase"] == "Running" and st["podIP"] == "127.101.0.9" and st["hostIP"] == "127.0.0.1"
    assert all(c["status"] == "True" for c in st["conditions"])
    assert st["containerStatuses"][0] == {
        "name": "c",
        "ready": True,
        "started": True,
        "state": {"running": {"startedAt": "T1"}},
        "image": "i",
        "imageID": "",
        "restartCount": 0,
    }
    again = desired_pod_status({**p, "status": st}, "127.101.0.9", now="T2")
    assert again == st and status_up_to_date(st, again)
    failing = desired_pod_status({**p, "status": st}, "127.101.0.9", now="T3", ready=False, message="boom")
    ready = next(c for c in failing["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["message"] == "boom" and ready["lastTransitionTime"] == "T3"
    assert not status_up_to_date(st, failing)
