"""PodDisruptionBudget status as kube's disruption controller computes it (pure parts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from isthmus.local.kubelite.disruption import (
    ExpectedPods,
    ScaleError,
    budget_status,
    disrupted_pods,
    expected_pods,
    failed_status,
    healthy_pods,
)

NOW = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


OBJECTS: dict[tuple[str, str], dict[str, Any]] = {
    ("Deployment", "web"): {"metadata": {"name": "web", "uid": "d1"}, "spec": {"replicas": 4}},
    ("ReplicaSet", "web-a"): {"metadata": {"name": "web-a", "uid": "r1", "ownerReferences": [
        {"kind": "Deployment", "name": "web", "uid": "d1", "controller": True}]}, "spec": {"replicas": 3}},
    ("ReplicaSet", "web-b"): {"metadata": {"name": "web-b", "uid": "r2", "ownerReferences": [
        {"kind": "Deployment", "name": "web", "uid": "d1", "controller": True}]}, "spec": {"replicas": 1}},
    ("StatefulSet", "db"): {"metadata": {"name": "db", "uid": "s1"}, "spec": {"replicas": 3}},
}


def lookup(kind: str, ns: str, name: str) -> dict[str, Any] | None:
    return OBJECTS.get((kind, name))


def pod(name: str, owner: tuple[str, str, str] | None = None, *, ready: bool = True,
        terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "d"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": owner[2], "controller": True}]
    if terminating:
        meta["deletionTimestamp"] = stamp(NOW)
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pdb(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "b", "namespace": "d", "generation": 3}, "spec": spec, "status": {}}


WEB = [pod("web-a-1", ("ReplicaSet", "web-a", "r1")), pod("web-a-2", ("ReplicaSet", "web-a", "r1")),
       pod("web-b-1", ("ReplicaSet", "web-b", "r2"), ready=False)]


def test_expected_pods_from_the_controllers_scale() -> None:
    # minAvailable as a number: the Pods there; as a percentage or maxUnavailable: the Deployment's scale
    assert expected_pods(pdb(minAvailable=2), WEB, lookup) == ExpectedPods(3, 2, [])
    assert expected_pods(pdb(minAvailable="50%"), WEB, lookup) == ExpectedPods(4, 2, [])
    assert expected_pods(pdb(minAvailable="30%"), WEB, lookup) == ExpectedPods(4, 2, [])  # rounded up
    assert expected_pods(pdb(maxUnavailable="30%"), WEB, lookup) == ExpectedPods(4, 2, [])  # 4 - ceil(1.2)
    assert expected_pods(pdb(maxUnavailable=9), WEB, lookup) == ExpectedPods(4, 0, [])
    db = [pod(f"db-{i}", ("StatefulSet", "db", "s1")) for i in range(2)]
    assert expected_pods(pdb(maxUnavailable=1), db, lookup) == ExpectedPods(3, 2, [])
    bare = [*db, pod("loner")]
    assert expected_pods(pdb(maxUnavailable=1), bare, lookup) == ExpectedPods(3, 2, ["loner"])


def test_a_pod_of_a_controller_without_scale_fails_safe() -> None:
    daemon = [pod("agent-x", ("DaemonSet", "agent", "ds1"))]
    with pytest.raises(ScaleError, match='found no controllers for pod "agent-x"'):
        expected_pods(pdb(maxUnavailable=1), daemon, lookup)
    assert expected_pods(pdb(minAvailable=1), daemon, lookup) == ExpectedPods(1, 1, [])  # a number needs no scale
    st = failed_status({**pdb(), "status": {"observedGeneration": 3, "disruptionsAllowed": 2}},
                       'found no controllers for pod "agent-x"', "T")
    (cond,) = st["conditions"]
    assert st["disruptionsAllowed"] == 0
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "DisruptionAllowed", "False", "SyncFailed", 'found no controllers for pod "agent-x"')


def test_disrupted_pods_expire_after_two_minutes_or_when_gone() -> None:
    budget = {**pdb(), "status": {"disruptedPods": {
        "web-a-1": stamp(NOW - timedelta(seconds=30)),   # awaited
        "web-a-2": stamp(NOW - timedelta(minutes=3)),    # overdue: dropped, warned about
        "gone": stamp(NOW - timedelta(seconds=10)),      # the Pod is gone: dropped
    }}}
    kept, recheck, overdue = disrupted_pods(budget, WEB, NOW)
    assert kept == {"web-a-1": stamp(NOW - timedelta(seconds=30))}
    assert recheck == NOW + timedelta(seconds=90)
    assert [p["metadata"]["name"] for p in overdue] == ["web-a-2"]
    assert healthy_pods(WEB, kept, NOW) == 1  # web-a-1 awaited, web-b-1 not ready
    assert healthy_pods([*WEB, pod("t", terminating=True)], {}, NOW) == 2


def test_budget_status_and_condition() -> None:
    st = budget_status(pdb(minAvailable=2), 3, ExpectedPods(3, 2, []), {}, "T1")
    assert {k: v for k, v in st.items() if k != "conditions"} == {
        "observedGeneration": 3, "disruptedPods": {}, "disruptionsAllowed": 1,
        "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}
    (cond,) = st["conditions"]
    assert cond == {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": "",
                    "observedGeneration": 3, "lastTransitionTime": "T1"}
    low = budget_status({**pdb(minAvailable=2), "status": st}, 2, ExpectedPods(3, 2, []), {}, "T2")
    assert low["disruptionsAllowed"] == 0
    assert (low["conditions"][0]["reason"], low["conditions"][0]["lastTransitionTime"]) == ("InsufficientPods", "T2")
    none = budget_status(pdb(maxUnavailable=1), 0, ExpectedPods(0, 0, []), {}, "T")
    assert none["disruptionsAllowed"] == 0  # nothing expected: nothing to disrupt


def test_stale_disruption_target_is_cleaned_after_two_minutes() -> None:
    from isthmus.local.kubelite.disruption import stale_disruption_in

    def marked(ago: timedelta, **extra: Any) -> dict[str, Any]:
        p = pod("p")
        p["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                          "reason": extra.pop("reason", "EvictionByEvictionAPI"),
                                          "lastTransitionTime": stamp(NOW - ago)})
        p["status"].update(extra)
        return p

    assert stale_disruption_in(marked(timedelta(seconds=30)), NOW) == 90.0
    assert stale_disruption_in(marked(timedelta(minutes=3)), NOW) == 0.0
    assert stale_disruption_in(marked(timedelta(minutes=3), phase="Failed"), NOW) is None
    assert stale_disruption_in(marked(timedelta(minutes=3), reason="TerminationByKubelet"), NOW) is None
    assert stale_disruption_in(pod("p", terminating=True), NOW) is None
    assert stale_disruption_in(pod("p"), NOW) is None
