"""The About API's ClusterProperty (KEP-2149): the model's validation, the CRD as about-api ships it,
and the pure rules join and the components apply to the two well-known properties."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from isthmus.api.about import (
    ABOUT_API_APPROVAL,
    API_APPROVED_ANNOTATION,
    BROKER_ANNOTATION,
    CLUSTER_ID_PROPERTY,
    CLUSTERSET_PROPERTY,
    WRITTEN_BY_LABEL,
    WRITTEN_BY_VALUE,
    ClusterProperty,
    ClusterPropertySpec,
    identity_mismatch,
)
from isthmus.api.base import ObjectMeta
from isthmus.api.crdcompat import incompatibilities
from isthmus.api.crdgen import crd_dir, crd_for, is_shared
from isthmus.clusterset.control import ClustersetError
from isthmus.clusterset.membership import check_properties


def _prop(name: str, value: str, *, ours: bool = False) -> ClusterProperty:
    labels = {WRITTEN_BY_LABEL: WRITTEN_BY_VALUE} if ours else None
    return ClusterProperty(metadata=ObjectMeta(name=name, labels=labels), spec=ClusterPropertySpec(value=value))


def test_value_must_not_be_empty() -> None:
    with pytest.raises(ValidationError):
        ClusterPropertySpec(value="")
    p = ClusterProperty.from_dict({"apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
                                   "metadata": {"name": CLUSTER_ID_PROPERTY}, "spec": {"value": "c1"}})
    assert p.value == "c1" and p.metadata.namespace is None


def test_an_object_of_the_older_served_version_reads_too() -> None:
    p = ClusterProperty.from_dict({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                                   "metadata": {"name": "x"}, "spec": {"value": "v"}})
    assert p.value == "v"


def test_a_property_without_spec_has_no_value() -> None:
    assert ClusterProperty.from_dict({"metadata": {"name": "x"}}).value is None


def test_crd_is_about_apis() -> None:
    crd = crd_for(ClusterProperty)
    assert crd["metadata"]["name"] == "clusterproperties.about.k8s.io"
    assert crd["metadata"]["annotations"] == {API_APPROVED_ANNOTATION: ABOUT_API_APPROVAL}
    spec = crd["spec"]
    assert spec["group"] == "about.k8s.io" and spec["scope"] == "Cluster"
    assert spec["names"]["categories"] == ["multicluster"]
    assert spec["names"]["singular"] == "clusterproperty"
    versions = {v["name"]: v for v in spec["versions"]}
    assert (versions["v1beta1"]["served"], versions["v1beta1"]["storage"]) == (True, True)
    assert (versions["v1alpha1"]["served"], versions["v1alpha1"]["storage"]) == (True, False)
    for v in versions.values():
        assert v["subresources"] == {"status": {}}
        assert [(c["name"], c["jsonPath"]) for c in v["additionalPrinterColumns"]] == [
            ("value", ".spec.value"), ("age", ".metadata.creationTimestamp")]
        schema = v["schema"]["openAPIV3Schema"]
        assert "spec" not in schema.get("required", [])  # upstream: spec is omitempty
        value_schema = schema["properties"]["spec"]
        assert value_schema["required"] == ["value"]
        assert value_schema["properties"]["value"] == {"description": "ClusterProperty value", "type": "string",
                                                       "minLength": 1}


def test_crd_is_shared_like_the_mcs_ones() -> None:
    crd = crd_for(ClusterProperty)
    assert is_shared(crd) and crd_dir(crd) == "shared"


def test_about_apis_own_crd_is_compatible() -> None:
    """about-api's config/crd/bases copy (v1beta1 only, no approval annotation here) serves Isthmus."""
    theirs = crd_for(ClusterProperty)
    theirs["spec"]["versions"] = [v for v in theirs["spec"]["versions"] if v["name"] == "v1beta1"]
    theirs["metadata"] = {"name": "clusterproperties.about.k8s.io"}
    assert incompatibilities(theirs, crd_for(ClusterProperty)) == []
    del theirs["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["value"]
    assert incompatibilities(theirs, crd_for(ClusterProperty)) == ["no field spec.value"]


def test_identity_mismatch_names_both_ids() -> None:
    assert identity_mismatch("c1", "c1") is None
    assert identity_mismatch("c1", None) is None  # joined before the About API: tolerated
    problem = identity_mismatch("c1", "prod-east")
    assert problem is not None and "'c1'" in problem and "'prod-east'" in problem


@pytest.mark.parametrize("force", [False, True])
def test_join_keeps_a_cluster_id_someone_else_set(force: bool) -> None:
    with pytest.raises(ClustersetError, match=r"names it 'prod-east', not 'c1'.*--cluster-id prod-east"):
        check_properties(_prop(CLUSTER_ID_PROPERTY, "prod-east"), None, "c1", "uid-1", force)


def test_join_replaces_its_own_cluster_id_only_with_force() -> None:
    ours = _prop(CLUSTER_ID_PROPERTY, "c0", ours=True)
    with pytest.raises(ClustersetError, match="--force"):
        check_properties(ours, None, "c1", "uid-1", False)
    check_properties(ours, None, "c1", "uid-1", True)


def test_join_refuses_a_cluster_of_another_clusterset() -> None:
    other = _prop(CLUSTERSET_PROPERTY, "uid-0")
    other.metadata.annotations = {BROKER_ANNOTATION: "https://b0 namespace isthmus-broker"}
    for force in (False, True):
        with pytest.raises(ClustersetError, match=r"another clusterset.*'uid-0' \(broker https://b0"):
            check_properties(None, other, "c1", "uid-1", force)
    ours = _prop(CLUSTERSET_PROPERTY, "uid-0", ours=True)
    with pytest.raises(ClustersetError, match="isthmus leave"):
        check_properties(None, ours, "c1", "uid-1", False)
    check_properties(None, ours, "c1", "uid-1", True)


def test_join_accepts_properties_that_already_agree() -> None:
    check_properties(_prop(CLUSTER_ID_PROPERTY, "c1"), _prop(CLUSTERSET_PROPERTY, "uid-1"), "c1", "uid-1", False)
