"""The node lifecycle controller's pure parts: conditions of a silent kubelet, taints in step with
conditions and cordon, and when a Pod on a NoExecute-tainted Node must go."""

from __future__ import annotations

from typing import Any

from isthmus.local.kubelite.nodelifecycle import desired_taints, eviction_due, gc_reason, stale_conditions

NOW = 1_800_000_000.0
NOW_TEXT = "2027-01-15T08:00:00Z"


def node(ready: str | None = "True", *, taints: list[Any] | None = None, unschedulable: bool = False,
         **conditions: str) -> dict[str, Any]:
    conds = [{"type": t, "status": s, "lastHeartbeatTime": "2027-01-15T07:59:00Z"} for t, s in conditions.items()]
    if ready is not None:
        conds.append({"type": "Ready", "status": ready, "reason": "KubeletReady",
                      "lastHeartbeatTime": "2027-01-15T07:59:00Z"})
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": "n1"}, "spec": spec, "status": {"conditions": conds}}


def test_silent_kubelet_conditions_become_unknown() -> None:
    conds = {c["type"]: c for c in stale_conditions(node("True", MemoryPressure="False", NetworkUnavailable="False"),
                                                    NOW, never_posted=False)}
    for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        assert conds[t]["status"] == "Unknown"
        assert conds[t]["reason"] == "NodeStatusUnknown"
        assert conds[t]["message"] == "Kubelet stopped posting node status."
        assert conds[t]["lastTransitionTime"] == NOW_TEXT
    assert conds["Ready"]["lastHeartbeatTime"] == "2027-01-15T07:59:00Z"  # the last one it posted
    assert conds["NetworkUnavailable"]["status"] == "False"  # not one the controller watches
    never = {c["type"]: c for c in stale_conditions(node(None), NOW, never_posted=True)}
    assert never["Ready"]["reason"] == "NodeStatusNeverUpdated"
    assert never["Ready"]["message"] == "Kubelet never posted node status."


def test_taints_follow_ready() -> None:
    assert desired_taints(node("True"), NOW) == []
    assert desired_taints(node("Unknown"), NOW) == [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": NOW_TEXT},
    ]
    assert [(t["key"], t["effect"]) for t in desired_taints(node("False"), NOW)] == [
        ("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute")]
    # Ready again: ours go, someone else's stay; an existing taint keeps its timeAdded.
    other = {"key": "dedicated", "value": "x", "effect": "NoExecute"}
    kept = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2027-01-01T00:00:00Z"}
    assert desired_taints(node("True", taints=[other, kept]), NOW) == [other]
    assert kept in desired_taints(node("Unknown", taints=[other, kept]), NOW)


def test_cordon_and_pressure_taints() -> None:
    assert desired_taints(node("True", unschedulable=True), NOW) == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    cordoned = desired_taints(node("True", unschedulable=True), NOW)
    assert desired_taints(node("True", taints=cordoned), NOW) == []  # uncordon removes it
    pressure = desired_taints(node("True", MemoryPressure="True", DiskPressure="True", PIDPressure="True"), NOW)
    assert {t["key"] for t in pressure} == {"node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure",
                                            "node.kubernetes.io/pid-pressure"}
    assert {t["effect"] for t in pressure} == {"NoSchedule"}


def test_eviction_times() -> None:
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": NOW_TEXT}
    bare: dict[str, Any] = {"spec": {}}
    assert eviction_due(bare, [taint], NOW + 1) == NOW + 1  # not tolerated: now
    default = {"spec": {"tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                         "effect": "NoExecute", "tolerationSeconds": 300}]}}
    assert eviction_due(default, [taint], NOW + 1) == NOW + 300
    forever = {"spec": {"tolerations": [{"operator": "Exists"}]}}
    assert eviction_due(forever, [taint], NOW) is None
    assert eviction_due(bare, [{"key": "x", "effect": "NoSchedule"}], NOW) is None


def test_pod_gc_reasons() -> None:
    nodes = {"n1": node("True"), "n2": node("False", taints=[{"key": "node.kubernetes.io/out-of-service",
                                                              "effect": "NoExecute"}])}

    def p(on: str, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": "p", "namespace": "default"}
        if deleting:
            meta["deletionTimestamp"] = NOW_TEXT
        return {"metadata": meta, "spec": {"nodeName": on} if on else {}}

    assert gc_reason(p("n1"), nodes, {}, NOW) is None
    assert gc_reason(p("gone"), nodes, {"gone": NOW - 10}, NOW) is None  # quarantine: 40 s
    assert gc_reason(p("gone"), nodes, {"gone": NOW - 40}, NOW) == "orphaned"
    assert gc_reason(p("", deleting=True), nodes, {}, NOW) == "unscheduled"
    assert gc_reason(p(""), nodes, {}, NOW) is None
    assert gc_reason(p("n2", deleting=True), nodes, {}, NOW) == "out-of-service"
    assert gc_reason(p("n2"), nodes, {}, NOW) is None
    assert gc_reason(p("n1", deleting=True), nodes, {}, NOW) is None  # a ready Node's kubelet finishes it
