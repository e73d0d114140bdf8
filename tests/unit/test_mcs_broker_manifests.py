"""deploy/broker names what api/mcs.py names, and deploy-broker moves it to the namespace it is given."""

from __future__ import annotations

from typing import Any

from isthmus.api.mcs import (
    BROKER_INFO_CONFIGMAP,
    BROKER_MEMBER_ROLE,
    BROKER_MEMBER_WRITES_POLICY,
    CLUSTER_SA_PREFIX,
    DEFAULT_BROKER_NAMESPACE,
    SOURCE_CLUSTER_LABEL,
)
from isthmus.clusterset.broker import broker_manifests


def _by_kind(namespace: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in broker_manifests(namespace):
        out.setdefault(obj["kind"], []).append(obj)
    return out


def test_the_manifests_use_the_api_names() -> None:
    objs = _by_kind(DEFAULT_BROKER_NAMESPACE)
    assert [o["metadata"]["name"] for o in objs["Namespace"]] == [DEFAULT_BROKER_NAMESPACE]
    (role,) = objs["Role"]
    assert role["metadata"] == {"name": BROKER_MEMBER_ROLE, "namespace": DEFAULT_BROKER_NAMESPACE}
    assert any(r.get("resourceNames") == [BROKER_INFO_CONFIGMAP] for r in role["rules"])
    assert not any("secrets" in r["resources"] for r in role["rules"])
    (policy,) = objs["ValidatingAdmissionPolicy"]
    (binding,) = objs["ValidatingAdmissionPolicyBinding"]
    assert policy["metadata"] == {"name": BROKER_MEMBER_WRITES_POLICY}  # cluster-scoped: no namespace
    assert binding["metadata"] == {"name": BROKER_MEMBER_WRITES_POLICY}
    assert binding["spec"]["policyName"] == BROKER_MEMBER_WRITES_POLICY
    text = str(policy["spec"])
    assert f"':{CLUSTER_SA_PREFIX}'" in text and SOURCE_CLUSTER_LABEL in text
    # CRDs come from deploy/crds (deploy-broker installs them apart): `delete -k deploy/broker` keeps them
    assert "CustomResourceDefinition" not in objs


def test_another_namespace_moves_the_namespaced_objects_only() -> None:
    objs = _by_kind("shared-broker")
    assert [o["metadata"]["name"] for o in objs["Namespace"]] == ["shared-broker"]
    assert objs["Role"][0]["metadata"]["namespace"] == "shared-broker"
    assert "namespace" not in objs["ValidatingAdmissionPolicy"][0]["metadata"]
