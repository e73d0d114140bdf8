"""Workload planning: template hashes, Deployment scale/rollout plans and status, StatefulSet order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from isthmus.local.kubelite.pods import container_ports, desired_pod_status, is_echo, status_up_to_date
from isthmus.local.kubelite.workloads import (
    Expectations,
    deployment_status,
    equal_ignore_hash,
    find_new_replicaset,
    max_unavailable,
    new_replicaset,
    pod_from_template,
    replicaset_plan,
    replicaset_status,
    revision_of,
    rollout_scales,
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


def rs(
    name: str, replicas: int, revision: int, *, available: int = 0, total: int | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "generation": 1,
            "annotations": {"deployment.kubernetes.io/revision": str(revision)},
            "labels": {"pod-template-hash": name.rsplit("-", 1)[1]},
            "creationTimestamp": f"T{revision}",
        },
        "spec": {"replicas": replicas, "template": TEMPLATE},
        "status": {
            "observedGeneration": 1,
            "replicas": replicas if total is None else total,
            "readyReplicas": available,
            "availableReplicas": available,
        },
    }


def test_replicaset_scale_up_and_down() -> None:
    plan = replicaset_plan(rs("w-h", 3, 1), [pod("a")])
    assert len(plan.create) == 2 and all(
        n.startswith("w-h-") and len(n) == len("w-h-") + 5 for n in plan.create
    )
    assert len(set(plan.create)) == 2 and not plan.delete
    pods = [pod(n, ready=n != "b") for n in "abc"]
    plan = replicaset_plan(rs("w-h", 1, 1), pods)
    assert not plan.create and len(plan.delete) == 2 and "b" in plan.delete  # not-ready goes first
    st = replicaset_status(rs("w-h", 3, 1), pods)
    assert st == {
        "observedGeneration": 1,
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
    }


def test_new_replicaset_for_a_template() -> None:
    h = template_hash(TEMPLATE)
    body = new_replicaset(
        {**deploy(3), "spec": {**deploy(3)["spec"], "selector": {"matchLabels": {"app": "w"}}}}, h, 4, 3
    )
    meta = body["metadata"]
    assert meta["name"] == f"w-{h}" and meta["labels"] == {"app": "w", "pod-template-hash": h}
    assert meta["annotations"]["deployment.kubernetes.io/revision"] == "4" and revision_of(body) == 4
    assert (
        meta["ownerReferences"][0]["kind"] == "Deployment" and meta["ownerReferences"][0]["uid"] == "dep-uid"
    )
    assert body["spec"]["selector"] == {"matchLabels": {"app": "w", "pod-template-hash": h}}
    assert body["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] == h
    assert "pod-template-hash" not in TEMPLATE["metadata"]["labels"]  # not mutated


def test_undo_finds_the_old_replicaset_by_template() -> None:
    """kubectl rollout undo copies an old ReplicaSet's template back, with `resources: {}` added:
    the same template to Go, so the same ReplicaSet."""
    old = rs("w-old", 0, 1)
    old["spec"]["template"] = {
        "metadata": {"labels": {"app": "w", "pod-template-hash": "old"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    undone = {
        "metadata": {"labels": {"app": "w"}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]},
    }
    assert equal_ignore_hash(old["spec"]["template"], undone)
    d = {**deploy(2), "spec": {**deploy(2)["spec"], "template": undone}}
    assert find_new_replicaset(d, [old, rs("w-new", 2, 2)], "other") == old
    other = rs("w-x", 2, 2)
    other["spec"]["template"] = {"spec": {"containers": [{"name": "c", "image": "other"}]}}
    assert find_new_replicaset(deploy(2), [other], "nope") is None


def test_rolling_update_scales_old_down_as_new_become_available() -> None:
    """maxSurge 25% of 2 → 1, maxUnavailable 25% of 2 → 0: one step per sync, as kube's controller."""
    new, old, older = rs("w-n", 0, 3, total=0), rs("w-o", 2, 2, available=2), rs("w-p", 1, 1, available=1)
    # 3 Pods already, no room to surge; 3 available where 2 are needed: the oldest set shrinks
    assert rollout_scales(deploy(2), new, [older, old]) == {"w-p": 0}
    assert rollout_scales(deploy(2), new, [old]) == {"w-n": 1}  # surge by one
    new = rs("w-n", 1, 3, available=0, total=1)
    assert rollout_scales(deploy(2), new, [old]) == {}  # its Pod is not available yet: nothing goes
    new = rs("w-n", 1, 3, available=1, total=1)
    assert rollout_scales(deploy(2), new, [old]) == {"w-o": 1}  # 3 available, 2 needed
    assert rollout_scales(deploy(2), new, [rs("w-o", 1, 2, available=1)]) == {"w-n": 2}
    new = rs("w-n", 2, 3, available=2, total=2)
    assert rollout_scales(deploy(2), new, [rs("w-o", 1, 2, available=1)]) == {"w-o": 0}
    recreate = deploy(2, strategy={"type": "Recreate"})
    assert rollout_scales(recreate, rs("w-n", 0, 3, total=0), [old]) == {"w-o": 0}
    gone = rs("w-o", 0, 2, total=0)
    assert rollout_scales(recreate, rs("w-n", 0, 3, total=0), [gone], old_pods_running=True) == {}
    assert rollout_scales(recreate, rs("w-n", 0, 3, total=0), [gone]) == {"w-n": 2}


T1, T2, T3 = (datetime(2024, 1, 1, 0, 0, s, tzinfo=UTC) for s in (1, 2, 3))


def test_deployment_status_and_conditions() -> None:
    new = rs("w-n", 2, 2, available=1, total=2)
    old = rs("w-o", 1, 1, available=1)
    st = deployment_status(deploy(2), new, [new, old], T1)
    assert st["observedGeneration"] == 2 and st["replicas"] == 3 and st["updatedReplicas"] == 2
    assert st["readyReplicas"] == st["availableReplicas"] == 2 and st["unavailableReplicas"] == 1
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "True" and conds["Progressing"]["reason"] == "ReplicaSetUpdated"
    assert conds["Progressing"]["message"] == 'ReplicaSet "w-n" is progressing.'
    new = rs("w-n", 2, 2, available=2, total=2)
    old = rs("w-o", 0, 1, total=0)
    st2 = deployment_status({**deploy(2), "status": st}, new, [new, old], T2)
    conds2 = {c["type"]: c for c in st2["conditions"]}
    assert conds2["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conds2["Progressing"]["message"] == 'ReplicaSet "w-n" has successfully progressed.'
    assert conds2["Progressing"]["lastTransitionTime"] == "2024-01-01T00:00:01Z"  # still True: kept
    assert conds2["Available"]["lastTransitionTime"] == "2024-01-01T00:00:01Z"
    st3 = deployment_status({**deploy(2), "status": st2}, new, [new, old], T3)
    assert st3 == st2  # nothing changed: identical (no write)
    low = deployment_status(deploy(4), rs("w-n", 4, 1, available=1, total=4), [], T1)
    assert {c["type"]: c["status"] for c in low["conditions"]}["Available"] == "False"


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
