"""Karmada's MultiClusterService webhook rules (isthmus.exposure.admission), with kube's wording."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.api.mcsvc import PERMANENT_ID_LABEL
from isthmus.exposure import admission


def mcs(name: str = "web", **spec: Any) -> dict[str, Any]:
    spec.setdefault("types", ["CrossCluster"])
    return {"apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterService",
            "metadata": {"name": name, "namespace": "shop"}, "spec": spec}


def test_a_valid_object_passes() -> None:
    obj = mcs(types=["CrossCluster", "LoadBalancer"], ports=[{"name": "http", "port": 80}, {"port": 443}],
              providerClusters=[{"name": "c1"}], consumerClusters=[{"name": "c2"}], range={"clusterNames": ["c2"]})
    assert admission.validate("CREATE", obj) == []


@pytest.mark.parametrize(("obj", "field", "text"), [
    (mcs(types=[]), "spec.types", "Required value: MultiClusterService types should not be empty"),
    (mcs(types=["NodePort"]), "spec.types[0]",
     'Unsupported value: "NodePort": supported values: "CrossCluster", "LoadBalancer"'),
    (mcs(ports=[{"port": 0}]), "spec.ports[0].port", "Invalid value: 0: must be between 1 and 65535, inclusive"),
    (mcs(ports=[{"port": 70000}]), "spec.ports[0].port",
     "Invalid value: 70000: must be between 1 and 65535, inclusive"),
    (mcs(ports=[{"name": "http", "port": 80}, {"name": "http", "port": 81}]), "spec.ports[1].name",
     'Duplicate value: "http"'),
    (mcs(ports=[{"name": "Http_1", "port": 80}]), "spec.ports[0].name", 'Invalid value: "Http_1": a lowercase RFC 1123'),
    (mcs(providerClusters=[{"name": "C1!"}]), "spec.providerClusters[0].name", 'Invalid value: "C1!": a lowercase'),
    (mcs(consumerClusters=[{"name": "x" * 49}]), "spec.consumerClusters[0].name",
     "must be no more than 48 characters"),
    (mcs(range={"clusterNames": ["-bad"]}), "spec.range.clusterNames[0]", 'Invalid value: "-bad"'),
    (mcs(range={"clusterNames": ["c2"]}, consumerClusters=[{"name": "c3"}]), "spec.range.clusterNames",
     "conflicts with spec.consumerClusters"),
    (mcs(name="1web"), "metadata.name", 'Invalid value: "1web": a DNS-1035 label'),
    # Whole strings, as kube matches them (issue 40 item 3: Python's `$` matches before a final newline).
    (mcs(name="web\n"), "metadata.name", 'Invalid value: "web\n": a DNS-1035 label'),
    (mcs(ports=[{"name": "http\n", "port": 80}]), "spec.ports[0].name", 'Invalid value: "http\n": a lowercase'),
    (mcs(providerClusters=[{"name": "c1\n"}]), "spec.providerClusters[0].name", 'Invalid value: "c1\n"'),
])
def test_bad_input_is_refused_naming_the_field(obj: dict[str, Any], field: str, text: str) -> None:
    errors = admission.validate("CREATE", obj)
    assert any(f == field and text in m for f, m in errors), errors


def test_the_message_aggregates_like_kube() -> None:
    errors = admission.validate("CREATE", mcs(types=[], ports=[{"port": 0}]))
    text = admission.message(errors)
    assert text.startswith("[spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, ")
    assert admission.message(errors[:1]) == "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"


def test_types_may_change_but_the_permanent_id_may_not() -> None:
    old = mcs(types=["LoadBalancer"])
    old["metadata"]["labels"] = {PERMANENT_ID_LABEL: "a"}
    new = mcs(types=["CrossCluster"])
    new["metadata"]["labels"] = {PERMANENT_ID_LABEL: "a"}
    assert admission.validate("UPDATE", new, old) == []
    new["metadata"]["labels"] = {PERMANENT_ID_LABEL: "b"}
    assert admission.validate("UPDATE", new, old)[0][0] == f"metadata.labels[{PERMANENT_ID_LABEL}]"


def test_mutation_adds_a_permanent_id_once_and_keeps_it_on_update() -> None:
    patch = admission.mutate("CREATE", mcs())
    assert patch[0]["path"] == "/metadata/labels" and len(patch[0]["value"][PERMANENT_ID_LABEL]) == 36
    labelled = mcs()
    labelled["metadata"]["labels"] = {"team": "a"}
    patch = admission.mutate("CREATE", labelled)
    assert patch[0]["op"] == "add" and patch[0]["path"].endswith("permanent-id")
    labelled["metadata"]["labels"][PERMANENT_ID_LABEL] = "x"
    assert admission.mutate("UPDATE", labelled) == []
    old = mcs()
    old["metadata"]["labels"] = {PERMANENT_ID_LABEL: "kept"}
    assert admission.mutate("UPDATE", mcs(), old)[0]["value"] == {PERMANENT_ID_LABEL: "kept"}


async def test_webhook_reviews_answer_like_the_plugin() -> None:
    request = {"uid": "1", "kind": {"group": "networking.karmada.io", "kind": "MultiClusterService"},
               "operation": "CREATE", "name": "web", "object": mcs(ports=[{"port": 0}])}
    denied = await admission.review_validate(request)
    assert not denied.allowed and denied.code == 422
    assert denied.message == ('MultiClusterService.networking.karmada.io "web" is invalid: '
                              "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive")
    other = await admission.review_validate({**request, "kind": {"group": "", "kind": "Service"}})
    assert other.allowed
    mutated = await admission.review_mutate({**request, "object": mcs()})
    assert mutated.patch and mutated.patch[0]["path"] == "/metadata/labels"


def test_discovery_port_annotations_take_ascii_digits_only() -> None:
    """"²" is a digit to str.isdigit() but not to int(): a value with it is refused, not a crash."""
    from isthmus.api.mcsvc import parse_service_ports
    from isthmus.discovery.endpoints import InvalidAnnotation, exported_ports

    with pytest.raises(InvalidAnnotation):
        exported_ports({"isthmus.io/exported-ports": "8²"})
    assert parse_service_ports("http=8²/TCP,web=80/TCP") == [("web", 80, "TCP")]
