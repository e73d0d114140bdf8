"""Deployment rollouts as kube's deployment controller v1.32 paces and reports them (pure parts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from isthmus.local.kubelite.workloads import (
    fenceposts,
    is_scaling_event,
    new_rs_replicas,
    paused_conditions,
    pod_available_in,
    replicaset_requeue,
    replicaset_status,
    revision_history,
    rollout_scales,
    rollout_status,
    scale_plan,
    stuck_requeue,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
TEMPLATE = {"metadata": {"labels": {"app": "gw"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def deploy(replicas: int = 2, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gw", "namespace": "d", "uid": "u", "generation": 1},
        "spec": {"replicas": replicas, "template": TEMPLATE, "progressDeadlineSeconds": 600, **spec},
        "status": status or {},
    }


def rs(name: str, spec: int, *, total: int | None = None, ready: int = 0, available: int | None = None,
       created: str = "2024-01-01T00:00:00Z", annotations: dict[str, str] | None = None,
       conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": 1, "creationTimestamp": created, "annotations": annotations or {}},
        "spec": {"replicas": spec},
        "status": {"observedGeneration": 1, "replicas": spec if total is None else total, "readyReplicas": ready,
                   "availableReplicas": ready if available is None else available,
                   **({"conditions": conditions} if conditions else {})},
    }


def conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_fenceposts_resolve_like_kube() -> None:
    assert fenceposts(deploy(2)) == (1, 0)  # 25% of 2: surge rounds up, unavailability down
    assert fenceposts(deploy(10)) == (3, 2)
    ru = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}
    assert fenceposts(deploy(2, strategy=ru)) == (0, 1)  # never both 0


def test_leader_only_ready_gateway_never_completes_and_exceeds_its_deadline() -> None:
    """Defect 4: 2 replicas, only the leader ready, default RollingUpdate (1 surge, 0 unavailable).
    The surge Pod can never become ready, so no old Pod may go: the rollout stalls for good."""
    old = rs("gw-old", 2, ready=1, created="2024-01-01T00:00:00Z")
    new = rs("gw-new", 0, created="2024-01-01T00:01:00Z")
    assert new_rs_replicas(deploy(2), [old, new], new) == 1
    assert rollout_scales(deploy(2), new, [old]) == {"gw-new": 1}
    surged = rs("gw-new", 1, ready=0, created="2024-01-01T00:01:00Z")
    assert rollout_scales(deploy(2), surged, [old]) == {}  # stuck: and it stays so

    created = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
               "message": 'Created new replica set "gw-new"', "lastUpdateTime": stamp(T0),
               "lastTransitionTime": stamp(T0)}
    before = {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 1,
              "availableReplicas": 1, "conditions": [created]}
    d = deploy(2, status=before)
    st = rollout_status(d, surged, [old, surged], T0 + timedelta(seconds=300))
    assert conds(st)["Progressing"]["reason"] == "NewReplicaSetCreated"  # no progress, not yet late
    assert conds(st)["Available"]["status"] == "False"  # 1 available of the 2 required
    assert stuck_requeue(d, st, T0 + timedelta(seconds=300)) == 301.0  # woken when the deadline passes
    st = rollout_status(d, surged, [old, surged], T0 + timedelta(seconds=601))
    p = conds(st)["Progressing"]
    assert (p["status"], p["reason"], p["message"]) == (
        "False", "ProgressDeadlineExceeded", 'ReplicaSet "gw-new" has timed out progressing.')
    again = rollout_status(deploy(2, status=st), surged, [old, surged], T0 + timedelta(seconds=900))
    assert again == st and stuck_requeue(deploy(2, status=st), again, T0) is None


def test_progress_moves_the_deadline_and_completion_is_reported() -> None:
    old_cond = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                "message": 'ReplicaSet "gw-new" is progressing.', "lastUpdateTime": stamp(T0),
                "lastTransitionTime": stamp(T0)}
    before = {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 2,
              "availableReplicas": 2, "conditions": [old_cond]}
    new, old = rs("gw-new", 2, ready=1), rs("gw-old", 1, ready=1)
    later = T0 + timedelta(seconds=500)
    st = rollout_status(deploy(2, status=before), new, [new, old], later)  # one more updated: progress
    p = conds(st)["Progressing"]
    assert p["reason"] == "ReplicaSetUpdated" and p["lastUpdateTime"] == stamp(later)
    assert p["lastTransitionTime"] == stamp(T0)
    new, old = rs("gw-new", 2, ready=2), rs("gw-old", 0)
    done = rollout_status(deploy(2, status=st), new, [new, old], later)
    assert conds(done)["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conds(done)["Available"]["reason"] == "MinimumReplicasAvailable"


def test_no_deadline_drops_progressing() -> None:
    new = rs("gw-new", 2, ready=2)
    st = rollout_status(deploy(2, progressDeadlineSeconds=2**31 - 1), new, [new], T0)
    assert "Progressing" not in conds(st)


def test_replica_failure_is_copied_from_the_new_replicaset() -> None:
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": 'pods "gw-new-x" is forbidden: violates PodSecurity', "lastTransitionTime": stamp(T0)}
    new = rs("gw-new", 2, total=0, conditions=[failure])
    st = rollout_status(deploy(2), new, [new], T0)
    f = conds(st)["ReplicaFailure"]
    assert (f["status"], f["reason"], f["message"]) == ("True", "FailedCreate", failure["message"])
    ok = rollout_status(deploy(2, status=st), rs("gw-new", 2, ready=2), [rs("gw-new", 2, ready=2)], T0)
    assert "ReplicaFailure" not in conds(ok)


def test_recreate_waits_for_old_pods_to_be_gone() -> None:
    d = deploy(2, strategy={"type": "Recreate"})
    new, old = rs("gw-new", 0), rs("gw-old", 2, ready=2)
    assert rollout_scales(d, new, [old]) == {"gw-old": 0}
    old = rs("gw-old", 0, total=0)
    assert rollout_scales(d, new, [old], old_pods_running=True) == {}  # a terminating Pod is still there
    assert rollout_scales(d, new, [old]) == {"gw-new": 2}


def test_max_unavailable_one_lets_the_gateway_roll() -> None:
    """The fix for defect 4: maxUnavailable 1 retires an old Pod without waiting for a new one."""
    ru = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    d = deploy(2, strategy=ru)
    new, old = rs("gw-new", 0, created="2024-01-01T00:01:00Z"), rs("gw-old", 2, ready=1)
    assert rollout_scales(d, new, [old]) == {"gw-old": 1}  # the not-ready old one goes first
    assert rollout_scales(d, new, [rs("gw-old", 1, ready=1)]) == {"gw-new": 1}


def test_minready_seconds_delay_availability_and_wake_the_controller() -> None:
    def pod(since: datetime) -> dict[str, Any]:
        return {"metadata": {"name": "p"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": stamp(since)}]}}

    r = {"metadata": {"name": "r", "generation": 1}, "spec": {"replicas": 2, "minReadySeconds": 10}}
    pods = [pod(T0), pod(T0 - timedelta(seconds=30))]
    st = replicaset_status(r, pods, T0 + timedelta(seconds=4))
    assert st["readyReplicas"] == 2 and st["availableReplicas"] == 1
    assert replicaset_requeue(r, pods, T0 + timedelta(seconds=4)) == 6.0
    assert pod_available_in(pod(T0), 10, T0 + timedelta(seconds=11)) == 0.0
    assert pod_available_in({"status": {}}, 10, T0) is None


def test_paused_and_resumed_conditions() -> None:
    d = deploy(2, paused=True)
    c = paused_conditions(d, "NOW")
    assert c is not None and c[-1]["status"] == "Unknown" and c[-1]["reason"] == "DeploymentPaused"
    assert c[-1]["message"] == "Deployment is paused"
    assert paused_conditions(deploy(2, status={"conditions": c}, paused=True), "L") is None
    r = paused_conditions(deploy(2, status={"conditions": c}), "L")
    assert r is not None and r[-1]["reason"] == "DeploymentResumed" and r[-1]["message"] == "Deployment is resumed"
    timed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    assert paused_conditions(deploy(2, status={"conditions": timed}, paused=True), "L") is None


def test_scaling_event_and_proportional_scaling() -> None:
    ann = {"deployment.kubernetes.io/desired-replicas": "10", "deployment.kubernetes.io/max-replicas": "13"}
    new = rs("gw-new", 6, annotations=ann, created="2024-01-01T00:01:00Z")
    old = rs("gw-old", 7, annotations=ann)
    assert not is_scaling_event(deploy(10), new, [old])
    assert is_scaling_event(deploy(20), new, [old])
    # 20 + 5 surge = 25 allowed, 13 there: 12 more shared by size (kube's TestScale "proportional")
    plan = scale_plan(deploy(20), new, [old])
    assert sum(plan.values()) == 25 and plan["gw-old"] > plan["gw-new"]
    assert scale_plan(deploy(3), rs("gw-new", 2), [rs("gw-old", 0)]) == {"gw-new": 3}  # one active


def test_revision_history_of_a_rollback() -> None:
    assert revision_history({}, "1") == "1"
    assert revision_history({"deployment.kubernetes.io/revision-history": "1,3"}, "5") == "1,3,5"
    assert revision_history({"deployment.kubernetes.io/revision-history": "1,3"}, "5", limit=4) == "3,5"


def test_statefulset_available_replicas_wait_for_min_ready_seconds() -> None:
    from isthmus.local.kubelite.workloads import statefulset_status

    now = datetime.now(UTC)
    just = {"metadata": {"name": "db-0", "labels": {"controller-revision-hash": "r"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(now)}]}}
    sts = {"metadata": {"name": "db", "generation": 1}, "spec": {"replicas": 1, "minReadySeconds": 60}}
    st = statefulset_status(sts, [just], "r")
    assert st["readyReplicas"] == 1 and st["availableReplicas"] == 0
    assert statefulset_status({**sts, "spec": {"replicas": 1}}, [just], "r")["availableReplicas"] == 1
