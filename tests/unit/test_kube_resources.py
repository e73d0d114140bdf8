"""isthmus.kube.resources: our CRDs as lightkube resources."""

from __future__ import annotations

from lightkube import codecs
from lightkube.core.resource import NamespacedResourceG, api_info
from lightkube.generic_resource import get_generic_resource

from isthmus.api import CRD_MODELS
from isthmus.api.mcs import ServiceImport
from isthmus.kube.resources import RESOURCES, from_lightkube, resource_for, to_lightkube


def test_every_model_has_a_resource() -> None:
    assert set(RESOURCES) == set(CRD_MODELS)
    for model, res in RESOURCES.items():
        info = api_info(res)
        assert (info.resource.group, info.resource.version, info.resource.kind, info.plural) == (
            model.crd.group,
            model.crd.version,
            model.crd.kind,
            model.crd.plural,
        )
        assert issubclass(res, NamespacedResourceG) == model.crd.namespaced
        assert api_info(res.Status).action == "status"
        assert resource_for(model) is res  # idempotent
        assert get_generic_resource(model.crd.api_version, model.crd.kind) is res  # type: ignore[no-untyped-call]


def test_round_trip_through_lightkube() -> None:
    si = ServiceImport.model_validate(
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"type": "Headless", "ports": [{"port": 80}]},
        }
    )
    lk = to_lightkube(si)
    assert type(lk) is RESOURCES[ServiceImport]
    assert lk.metadata is not None and lk.metadata.name == "web"
    assert lk["spec"]["type"] == "Headless"
    assert from_lightkube(ServiceImport, lk) == si


def test_lightkube_codecs_know_our_kinds() -> None:
    (obj,) = codecs.load_all_yaml(
        "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: web, namespace: shop}\n"
    )
    assert type(obj).__name__ == "ServiceExport"
    assert obj.metadata is not None and obj.metadata.namespace == "shop"
