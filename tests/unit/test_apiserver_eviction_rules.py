"""The eviction subresource's rules and PodDisruptionBudget validation, as pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.handlers import binding, eviction
from isthmus.apiserver.registry import poddisruptionbudget as pdbv

Obj = dict[str, Any]
NOW = "2026-12-07T20:00:00Z"


def _pdb(status: Obj, generation: int = 1) -> Obj:
    return {"metadata": {"name": "web", "generation": generation},
            "status": {"observedGeneration": generation, "desiredHealthy": 2, "currentHealthy": 3, **status}}


def test_spend_takes_one_disruption_and_records_the_pod() -> None:
    out = eviction.spend(_pdb({"disruptionsAllowed": 2}), "a", NOW, dry_run=False)
    assert out["status"]["disruptionsAllowed"] == 1 and out["status"]["disruptedPods"] == {"a": NOW}
    assert "conditions" not in out["status"]  # still allowed: the condition is the controller's
    last = eviction.spend(out, "b", NOW, dry_run=False)["status"]
    assert last["disruptionsAllowed"] == 0 and set(last["disruptedPods"]) == {"a", "b"}
    assert last["conditions"] == [{"type": "DisruptionAllowed", "status": "False", "observedGeneration": 1,
                                   "reason": "InsufficientPods", "message": "", "lastTransitionTime": NOW}]
    dry = eviction.spend(_pdb({"disruptionsAllowed": 1}), "a", NOW, dry_run=True)["status"]
    assert dry["disruptionsAllowed"] == 0 and "disruptedPods" not in dry


@pytest.mark.parametrize(("status", "generation", "code", "text"), [
    ({"disruptionsAllowed": 0}, 1, 429, "The disruption budget web needs 2 healthy pods and has 3 currently"),
    ({"disruptionsAllowed": 1, "observedGeneration": 1}, 2, 429,
     "The disruption budget web is still being processed by the server."),
    ({"disruptionsAllowed": -1}, 1, 403, 'poddisruptionbudget.policy "web" is forbidden: pdb disruptions allowed '
                                         "is negative"),
])
def test_spend_refuses_as_kube(status: Obj, generation: int, code: int, text: str) -> None:
    pdb = _pdb(status, generation)
    pdb["status"].update(status)
    with pytest.raises(ApiError) as e:
        eviction.spend(pdb, "a", NOW, dry_run=False)
    assert e.value.code == code
    assert text in e.value.message or text in str(e.value.details)


def test_too_many_disrupted_pods_is_forbidden() -> None:
    pods = {f"p{i}": NOW for i in range(eviction.MAX_DISRUPTED_PODS + 1)}
    with pytest.raises(ApiError) as e:
        eviction.spend(_pdb({"disruptionsAllowed": 5, "disruptedPods": pods}), "a", NOW, dry_run=False)
    assert e.value.code == 403 and "DisruptedPods map too big" in e.value.message


def test_selectors_that_match_nothing() -> None:
    labels = {"app": "web"}
    assert eviction.selects({"matchLabels": {"app": "web"}}, labels)
    assert not eviction.selects(None, labels) and not eviction.selects({}, labels)
    assert not eviction.selects({"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}, labels)
    assert eviction.selects({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, labels)


def test_pods_that_ignore_budgets() -> None:
    def pod(phase: str, deleting: bool = False) -> Obj:
        m: Obj = {"name": "p"}
        if deleting:
            m["deletionTimestamp"] = NOW
        return {"metadata": m, "status": {"phase": phase}}

    assert [eviction.can_ignore_pdb(pod(p)) for p in ("Pending", "Running", "Succeeded", "Failed")] == [
        True, False, True, True]
    assert eviction.can_ignore_pdb(pod("Running", deleting=True))
    assert eviction.should_enforce_resource_version(pod("Pending"))
    assert not eviction.should_enforce_resource_version(pod("Failed"))


def test_dry_run_propagation() -> None:
    assert eviction.delete_options({}, True) == {"dryRun": ["All"]}
    assert eviction.delete_options({"deleteOptions": {"gracePeriodSeconds": 5}}, True) == {
        "gracePeriodSeconds": 5, "dryRun": ["All"]}
    assert eviction.delete_options({"deleteOptions": {"dryRun": ["All"]}}, False) == {"dryRun": ["All"]}


def test_binding_assigns_once_and_keeps_the_scheduled_transition_time() -> None:
    live: Obj = {"metadata": {"name": "p"}, "spec": {}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "then"}]}}
    bound = binding.assign(live, "n", {"a": "b"}, NOW)
    assert bound["spec"]["nodeName"] == "n" and bound["metadata"]["annotations"] == {"a": "b"}
    assert bound["status"]["conditions"] == [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                             "lastTransitionTime": NOW}]
    assert "nodeName" not in live["spec"]  # the stored object is not touched
    with pytest.raises(ApiError) as e:
        binding.assign(bound, "m", {}, NOW)
    assert e.value.message == 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n"'
    assert binding.validate({"target": {"kind": "Service", "name": ""}}) == [
        'target.kind: Unsupported value: "Service": supported values: "Node", "<empty>"', "target.name: Required value"]


def test_pdb_validation_words() -> None:
    assert pdbv.int_or_percent("50%", "spec.minAvailable") == []
    assert pdbv.int_or_percent("half", "spec.minAvailable")[0]["message"] == (
        'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"half"}: a valid percent string must be a numeric '
        "string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")
    causes = pdbv.label_selector({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
                                 "spec.selector")
    assert causes[0]["field"] == "spec.selector.matchExpressions[0].values"
    assert causes[0]["message"].startswith("Forbidden: may not be specified when `operator` is 'Exists'")
    assert pdbv.validate_status({"disruptionsAllowed": -1})[0]["field"] == "status.disruptionsAllowed"
