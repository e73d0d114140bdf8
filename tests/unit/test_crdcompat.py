"""isthmus.api.crdcompat and the CRD plan of join/deploy-broker: who installed a shared CRD, whether
it carries what Isthmus uses, and what is applied or kept."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from isthmus.api.crdcompat import ISTHMUS, field_paths, has_field, incompatibilities, installed_by, not_stored
from isthmus.api.crdgen import all_crds
from isthmus.clusterset.control import ClustersetError
from isthmus.clusterset.crds import plan_crds

OURS = {c["metadata"]["name"]: c for c in all_crds()}
EXPORTS = "serviceexports.multicluster.x-k8s.io"
SUBMARINER_V0_1 = yaml.safe_load(
    (Path(__file__).parents[1] / "reference" / "mcs_api_serviceexports_v0_1_0.yaml").read_text())


def serving_v1beta1(crd: dict[str, Any]) -> dict[str, Any]:
    """An mcs-api CRD as v0.5 ships it: the v1alpha1 schema served again as v1beta1, the storage version."""
    out = copy.deepcopy(crd)
    (alpha,) = out["spec"]["versions"]
    out["spec"]["versions"] = [{**alpha, "storage": False}, {**copy.deepcopy(alpha), "name": "v1beta1", "storage": True}]
    return out


SUBMARINER = serving_v1beta1(SUBMARINER_V0_1)


def managed(*entries: tuple[str, str, str | None]) -> list[dict[str, Any]]:
    return [{"manager": m, "time": t, **({"subresource": sub} if sub else {})} for m, t, sub in entries]


def test_installer_from_label_then_managers() -> None:
    crd = copy.deepcopy(SUBMARINER)
    crd["metadata"]["managedFields"] = managed(("kube-apiserver", "2026-01-01T00:00:00Z", "status"),
                                               ("submariner-operator", "2026-01-02T00:00:00Z", None),
                                               ("kubectl-edit", "2026-01-03T00:00:00Z", None))
    assert installed_by(crd) == "submariner-operator"  # the first writer of the CRD itself, not its status
    crd["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    assert installed_by(crd) == "Helm"
    crd["metadata"]["labels"] = {"app.kubernetes.io/part-of": "isthmus"}
    assert installed_by(crd) == ISTHMUS
    del crd["metadata"]["labels"]
    crd["metadata"]["managedFields"] += managed(("isthmus-cli", "2026-01-04T00:00:00Z", None))
    assert installed_by(crd) == ISTHMUS
    assert installed_by({"metadata": {}}) is None


def test_has_field_follows_lists_maps_and_preserved_unknown_fields() -> None:
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"ports": {"type": "array", "items": {"type": "object", "properties": {
                     "port": {"type": "integer"}}}}}},
        "status": {"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {
            "type": "string"}}}}}}
    assert has_field(schema, "spec.ports[].port")
    assert not has_field(schema, "spec.ports[].name")  # items without preserve-unknown-fields prune it
    assert has_field(schema, "spec.anything")  # kept by preserve-unknown-fields
    assert has_field(schema, "status.labels{}")
    assert not has_field(schema, "status.conditions")
    assert list(field_paths(schema)) == ["spec", "spec.ports", "spec.ports[].port", "status", "status.labels"]


def test_submariners_serviceexport_is_compatible_without_our_extensions() -> None:
    assert incompatibilities(SUBMARINER, OURS[EXPORTS]) == []
    assert not_stored(SUBMARINER, OURS[EXPORTS]) == ["spec", "status.conditions[].observedGeneration"]


def test_what_makes_a_shared_crd_incompatible() -> None:
    crd = copy.deepcopy(SUBMARINER)
    crd["spec"]["scope"] = "Cluster"
    del crd["spec"]["versions"][0]
    crd["spec"]["versions"][0]["name"] = "v2"
    assert incompatibilities(crd, OURS[EXPORTS]) == ["scope Cluster, not Namespaced",
                                                     "does not serve v1beta1 (serves v2)"]


def test_a_shared_crd_serving_only_v1alpha1_is_incompatible_and_says_it_predates_v1beta1() -> None:
    """Isthmus's clients speak v1beta1: mcs-api before v0.5 (Submariner's v0.1.0 copy) cannot serve them."""
    assert incompatibilities(SUBMARINER_V0_1, OURS[EXPORTS]) == [
        "does not serve v1beta1 (serves v1alpha1): it predates v1beta1, which Isthmus speaks; upgrading that "
        "project's CRD to one serving v1beta1 fixes it"]
    # served as v1beta1 but not v1alpha1 is enough: Isthmus never asks for v1alpha1
    only_beta = copy.deepcopy(SUBMARINER)
    del only_beta["spec"]["versions"][0]
    assert incompatibilities(only_beta, OURS[EXPORTS]) == []


def test_plan_keeps_compatible_applies_ours_and_refuses_incompatible() -> None:
    wanted = list(OURS.values())
    theirs = copy.deepcopy(SUBMARINER)
    theirs["metadata"]["managedFields"] = managed(("submariner-operator", "2026-01-02T00:00:00Z", None))
    plan = plan_crds(wanted, {EXPORTS: theirs})
    assert set(plan.kept) == {EXPORTS} and EXPORTS not in {c["metadata"]["name"] for c in plan.apply}
    assert len(plan.apply) == len(wanted) - 1
    ours_before = copy.deepcopy(OURS[EXPORTS])  # installed by us: upgraded
    assert len(plan_crds(wanted, {EXPORTS: ours_before}).apply) == len(wanted)
    del theirs["spec"]["versions"][1]["subresources"]
    with pytest.raises(ClustersetError, match=f"{EXPORTS} \\(installed by submariner-operator\\): no status subresource"):
        plan_crds(wanted, {EXPORTS: theirs})


def test_diagnose_says_when_a_crd_isthmus_installed_still_lists_an_older_stored_version() -> None:
    from isthmus.diagnose.checks import shared_crd_note

    crd = copy.deepcopy(OURS[EXPORTS])
    crd["status"] = {"storedVersions": ["v1alpha1", "v1beta1"]}
    assert shared_crd_note(crd, OURS[EXPORTS]) == (
        "installed by Isthmus, storage migration pending (status.storedVersions: v1alpha1, v1beta1): "
        "isthmus crds migrate")
    crd["status"] = {"storedVersions": ["v1beta1"]}
    assert shared_crd_note(crd, OURS[EXPORTS]) == "installed by Isthmus"
