"""The CRD registry's version rules as apiextensions-apiserver's: storedVersions kept and appended,
validated against spec.versions, the API-approval annotation, and None conversion of custom resources."""

from __future__ import annotations

import copy
from typing import Any

from isthmus.apiserver.registry.customresource import crd_resources
from isthmus.apiserver.registry.customresourcedefinition import (
    CustomResourceDefinitionStrategy,
    validate_api_approval,
    validate_stored_versions,
)


def crd(*versions: tuple[str, bool], stored: list[str] | None = None, group: str = "example.com") -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"name": f"widgets.{group}"},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": n, "served": True, "storage": s,
                               "schema": {"openAPIV3Schema": {"type": "object"}}} for n, s in versions]}}
    if stored is not None:
        out["status"] = {"storedVersions": stored}
    return out


def test_create_stores_the_storage_version_and_update_appends_a_new_one() -> None:
    strategy = CustomResourceDefinitionStrategy()
    new = crd(("v1alpha1", True), stored=["bogus"])
    strategy.prepare_for_create(new)
    assert new["status"] == {"storedVersions": ["v1alpha1"]}  # the status starts over
    upgraded = crd(("v1alpha1", False), ("v1beta1", True), stored=["v1alpha1"])
    strategy.prepare_for_update(upgraded, new)
    assert upgraded["status"]["storedVersions"] == ["v1alpha1", "v1beta1"]
    back = crd(("v1alpha1", True), ("v1beta1", False), stored=["v1alpha1", "v1beta1"])
    strategy.prepare_for_update(back, upgraded)
    assert back["status"]["storedVersions"] == ["v1alpha1", "v1beta1"]  # never removed by an update


def test_stored_versions_must_stay_in_spec_and_hold_the_storage_version() -> None:
    assert validate_stored_versions(crd(("v1alpha1", False), ("v1beta1", True), stored=["v1alpha1", "v1beta1"])) == []
    assert validate_stored_versions(crd(("v1beta1", True), stored=["v1alpha1", "v1beta1"])) == [{
        "reason": "FieldValueInvalid", "field": "status.storedVersions[0]",
        "message": 'Invalid value: "v1alpha1": missing from spec.versions; v1alpha1 was previously a storage '
                   "version, and must remain in spec.versions until a storage migration ensures no data remains "
                   "persisted in v1alpha1 and removes v1alpha1 from status.storedVersions"}]
    assert validate_stored_versions(crd(("v1alpha1", False), ("v1beta1", True), stored=["v1alpha1"])) == [{
        "reason": "FieldValueInvalid", "field": "status.storedVersions",
        "message": 'Invalid value: []string{"v1alpha1"}: must have the storage version v1beta1'}]
    assert validate_stored_versions(crd(("v1", True))) == [{
        "reason": "FieldValueInvalid", "field": "status.storedVersions",
        "message": "Invalid value: []string(nil): must have at least one stored version"}]


def test_a_status_write_may_trim_stored_versions_a_spec_write_may_not_drop_a_stored_one() -> None:
    strategy = CustomResourceDefinitionStrategy()
    live = crd(("v1alpha1", False), ("v1beta1", True), stored=["v1alpha1", "v1beta1"])
    trimmed = copy.deepcopy(live)
    trimmed["status"]["storedVersions"] = ["v1beta1"]
    assert strategy.validate_update(trimmed, live) == []
    dropped = crd(("v1beta1", True), stored=["v1alpha1", "v1beta1"])
    assert [c["field"] for c in strategy.validate_update(dropped, live)] == ["status.storedVersions[0]"]


def test_api_approval_of_protected_groups() -> None:
    ann = "api-approved.kubernetes.io"
    missing = crd(("v1", True), group="about.k8s.io")
    assert [c["message"] for c in validate_api_approval(missing, None)] == [
        'Required value: protected groups must have approval annotation "api-approved.kubernetes.io", see '
        "https://github.com/kubernetes/enhancements/pull/1111"]
    assert validate_api_approval(missing, missing) == []  # unchanged state: updates pass
    for value, ok in (("https://github.com/kubernetes/enhancements/pull/3084", True), ("unapproved: test", True),
                      ("approved", False), ("", False)):
        c = crd(("v1", True), group="x.kubernetes.io")
        c["metadata"]["annotations"] = {ann: value}
        assert (validate_api_approval(c, None) == []) is ok, value
    assert validate_api_approval(crd(("v1", True), group="multicluster.x-k8s.io"), None) == []


def test_custom_resources_are_stored_at_the_storage_version_and_served_at_the_one_asked() -> None:
    infos = {i.version: i for i in crd_resources(crd(("v1alpha1", False), ("v1beta1", True)))}
    obj = {"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}}
    stored = infos["v1alpha1"].strategy.to_storage(obj)
    assert stored["apiVersion"] == "example.com/v1beta1" and obj["apiVersion"] == "example.com/v1alpha1"
    assert infos["v1alpha1"].strategy.from_storage(stored)["apiVersion"] == "example.com/v1alpha1"
    assert infos["v1beta1"].strategy.from_storage(stored) is stored
