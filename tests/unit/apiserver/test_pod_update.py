"""ValidatePodUpdate's pure parts: what counts as a change (kube's Semantic.DeepEqual), the diff kube
appends, and the Pod defaulting and status kube gives on create."""

from __future__ import annotations

import copy
from typing import Any

from isthmus.apiserver.registry.pod import PodStrategy, default_pod, semantic, validate_pod_update


def live(**spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}],
                                                              **spec}}
    default_pod(obj)
    return obj


def test_go_zero_values_and_equal_quantities_are_no_change() -> None:
    old = live(hostNetwork=False, containers=[{"name": "c", "image": "busybox",
                                                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])
    new = copy.deepcopy(old)
    new["spec"].pop("hostNetwork")
    new["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1000m", "memory": "1024Mi"},
                                                 "requests": {"cpu": "1", "memory": "1Gi"}}
    new["spec"]["nodeSelector"] = {}
    assert validate_pod_update(new, old) == []
    assert semantic({"a": False, "b": 0, "c": "", "d": [], "e": {}, "f": None}) == {}
    assert semantic({"automountServiceAccountToken": False}) == {"automountServiceAccountToken": False}


def test_the_diff_names_go_fields_and_elides_identical_ones() -> None:
    old = live()
    new = copy.deepcopy(old)
    new["spec"]["restartPolicy"] = "Never"
    new["spec"]["containers"][0]["image"] = "alpine"  # allowed: not in the diff
    [cause] = validate_pod_update(new, old)
    assert cause["field"] == "spec" and cause["reason"] == "FieldValueForbidden"
    diff = cause["message"].split("\n", 1)[1]
    # go-cmp's layout: two equal fields of context each side, values aligned, the rest elided
    assert diff == ("  core.PodSpec{\n"
                    "  \t... // 2 identical fields\n"
                    "  \tContainers:                    {{Name: \"c\", Image: \"busybox\", ImagePullPolicy: "
                    "\"Always\", TerminationMessagePath: \"/dev/termination-log\", TerminationMessagePolicy: "
                    "\"File\"}},\n"
                    "  \tEphemeralContainers:           nil,\n"
                    '- \tRestartPolicy:                 "Always",\n'
                    '+ \tRestartPolicy:                 "Never",\n'
                    "  \tTerminationGracePeriodSeconds: &30,\n"
                    "  \tActiveDeadlineSeconds:         nil,\n"
                    "  \t... // 32 identical fields\n"
                    "  }\n")


def test_pointer_fields_print_with_an_ampersand_and_grace_may_go_from_negative_to_one() -> None:
    old = live(terminationGracePeriodSeconds=-1)
    new = copy.deepcopy(old)
    new["spec"]["terminationGracePeriodSeconds"] = 1
    assert validate_pod_update(new, old) == []
    new["spec"]["terminationGracePeriodSeconds"] = 5
    [cause] = validate_pod_update(new, old)
    assert "- \tTerminationGracePeriodSeconds: &-1,\n+ \tTerminationGracePeriodSeconds: &5,\n" in cause["message"]


def test_qos_change_is_refused_besides_the_diff() -> None:
    old = live()
    old["status"] = {"qosClass": "BestEffort"}
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    causes = validate_pod_update(new, old)
    assert [(c["field"], c["message"].split("\n")[0][:40]) for c in causes] == [
        ("metadata", "Invalid value: \"BestEffort\": Pod QoS is "),
        ("spec", "Forbidden: pod updates may not change fi")]


def test_host_network_defaults_host_ports_and_gates_give_the_condition() -> None:
    pod = live(hostNetwork=True, initContainers=[{"name": "i", "image": "x", "ports": [{"containerPort": 7}]}])
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    default_pod(pod)
    assert pod["spec"]["containers"][0]["ports"][0]["hostPort"] == 80
    assert pod["spec"]["initContainers"][0]["ports"][0]["hostPort"] == 7
    status = PodStrategy().initial_status(live(schedulingGates=[{"name": "g"}]))
    assert status is not None and status["conditions"][0]["reason"] == "SchedulingGated"
    assert "conditions" not in (PodStrategy().initial_status(live()) or {})


def test_a_pod_stored_before_a_default_existed_can_still_be_updated() -> None:
    stored = live(hostNetwork=True)
    stored["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "protocol": "TCP"}]  # no hostPort yet
    new = copy.deepcopy(stored)
    new["metadata"]["labels"] = {"a": "b"}
    default_pod(new)  # the update is defaulted: hostPort 80
    assert validate_pod_update(new, stored) != []
    assert PodStrategy().validate_update(new, stored) == []


def test_a_negative_grace_period_is_one_second_on_a_bound_pod() -> None:
    bound = live(nodeName="n1", terminationGracePeriodSeconds=-5)
    assert PodStrategy().deletion_grace(bound, {}) == 1
    assert PodStrategy().deletion_grace(bound, {"gracePeriodSeconds": -1}) == 1
    assert PodStrategy().deletion_grace(bound, {"gracePeriodSeconds": 0}) == 0
    assert PodStrategy().deletion_grace(live(), {"gracePeriodSeconds": 30}) == 0  # unbound: at once


def test_a_gated_pods_required_node_affinity_may_only_narrow() -> None:
    def affinity(*exprs: dict[str, Any], terms: int = 1) -> dict[str, Any]:
        term = {"matchExpressions": list(exprs)}
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term] * terms}}}

    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    disk = {"key": "disk", "operator": "Exists"}
    old = live(schedulingGates=[{"name": "g"}], affinity=affinity(zone))
    new = copy.deepcopy(old)
    new["spec"]["affinity"] = affinity(zone, disk)
    new["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 1, "preference": {"matchExpressions": [disk]}}]
    assert validate_pod_update(new, old) == []
    new["spec"]["affinity"] = affinity(zone, terms=2)
    [cause] = validate_pod_update(new, old)
    assert cause["field"] == "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    assert cause["message"].endswith(": no additions/deletions to non-empty NodeSelectorTerms list are allowed")
    new["spec"]["affinity"] = affinity(disk)
    [cause] = validate_pod_update(new, old)
    assert cause["message"] == (
        'Invalid value: core.NodeSelectorTerm{MatchExpressions:[]core.NodeSelectorRequirement{'
        'core.NodeSelectorRequirement{Key:"disk", Operator:"Exists", Values:[]string(nil)}}, '
        'MatchFields:[]core.NodeSelectorRequirement(nil)}: only additions are allowed (no mutations or deletions)')
    ungated = live(affinity=affinity(zone))
    narrowed = copy.deepcopy(ungated)
    narrowed["spec"]["affinity"] = affinity(zone, disk)
    assert validate_pod_update(narrowed, ungated)[0]["field"] == "spec"  # not gated: the spec is immutable
