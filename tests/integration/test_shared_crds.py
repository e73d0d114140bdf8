"""Defect 3 of issue 43: CRDs shared with other projects. A ServiceExport CRD Submariner installed
(mcs-api v0.1.0's schema, with objects in it) survives installing and uninstalling Isthmus with
real kubectl, `join`'s CRD step keeps it as it is, and `isthmus diagnose` says who installed it and
that it is compatible; an incompatible one is refused and reported."""

from __future__ import annotations

import asyncio
import copy
import shutil
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Service

from isthmus.clusterset.control import ClustersetError
from isthmus.clusterset.crds import ensure_crds
from isthmus.kube.helpers import get_or_none, wait_established
from isthmus.kube.manifests import deploy_dir
from tests.harness.apiserver import RunningApiServer

DEPLOY = deploy_dir()
SUBMARINER_CRD = Path(__file__).parents[1] / "reference" / "mcs_api_serviceexports_v0_1_0.yaml"
NAME = "serviceexports.multicluster.x-k8s.io"
BROKER = create_namespaced_resource("isthmus.io", "v1alpha1", "Broker", "brokers")
ServiceExport = create_namespaced_resource("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports")


def kubectl_binary() -> str:
    path = shutil.which("kubectl")
    assert path is not None, "kubectl is needed (the Makefile's packages install it)"
    return path


async def run(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return proc.returncode or 0, out.decode()


async def kubectl(server: RunningApiServer, *args: str) -> tuple[int, str]:
    return await run(kubectl_binary(), f"--kubeconfig={server.kubeconfig}",
                     f"--cache-dir={server.data_dir / 'kubectl-cache'}", *args)


async def diagnose(server: RunningApiServer, wanted: str) -> str:
    """`isthmus diagnose` of a broker (a Broker object as deploy-broker writes it: a context that is
    neither broker nor member gets no `crds` check)."""
    client = server.client()
    if await get_or_none(client, Namespace, "isthmus-broker") is None:
        await client.create(Namespace(metadata=ObjectMeta(name="isthmus-broker")))
    if await get_or_none(client, BROKER, "broker", namespace="isthmus-broker") is None:
        await client.create(BROKER.from_dict({"metadata": {"name": "broker", "namespace": "isthmus-broker"},
                                              "spec": {}}))
    out = ""
    for _ in range(3):  # a check slower than diagnose's own timeouts on a loaded machine says so: ask again
        _, out = await run(sys.executable, "-m", "isthmus", "diagnose", "--kubeconfig", server.kubeconfig)
        if wanted in out:
            break
    return out


async def install_as_submariner(client: AsyncClient, crd: dict[str, Any]) -> None:
    """As Submariner's operator does: a plain create under its own field manager, then objects."""
    await client.create(CustomResourceDefinition.from_dict(crd), field_manager="submariner-operator")
    await asyncio.wait_for(wait_established(client, NAME), 30)
    await client.create(Namespace(metadata=ObjectMeta(name="shop")))
    await client.create(ServiceExport.from_dict({"metadata": {"name": "cart", "namespace": "shop"}}),
                        field_manager="subctl")
    await client.create(Service.from_dict({"metadata": {"name": "cart", "namespace": "shop"},
                                           "spec": {"ports": [{"port": 80}]}}))
    await client.create(Deployment.from_dict({
        "metadata": {"name": "cart", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "cart"}},
                 "template": {"metadata": {"labels": {"app": "cart"}},
                              "spec": {"containers": [{"name": "c", "image": "cart"}]}}}}))


def submariner_crd(v1beta1: bool = True) -> dict[str, Any]:
    """Submariner's v0.1.0 ServiceExport CRD; with v1beta1, as mcs-api v0.5 serves it: the same schema
    served again as v1beta1, the storage version (what Isthmus's clients speak)."""
    crd = cast(dict[str, Any], yaml.safe_load(SUBMARINER_CRD.read_text()))
    if v1beta1:
        (alpha,) = crd["spec"]["versions"]
        crd["spec"]["versions"] = [{**alpha, "storage": False}, {**copy.deepcopy(alpha), "name": "v1beta1"}]
    return crd


async def test_submariners_serviceexport_crd_and_its_objects_survive_install_and_uninstall(
    apiserver: RunningApiServer,
) -> None:
    client = apiserver.client()
    await install_as_submariner(client, submariner_crd())
    before = await client.get(CustomResourceDefinition, NAME)

    plan = await asyncio.wait_for(ensure_crds(client, "isthmus-cli"), 60)  # what join and deploy-broker do
    assert plan.kept == {NAME: "installed by submariner-operator, compatible (not stored: spec, status.conditions[].observedGeneration)"}
    assert {c["metadata"]["name"] for c in plan.apply} >= {"serviceimports.multicluster.x-k8s.io",
                                                          "clusters.isthmus.io"}
    after = await client.get(CustomResourceDefinition, NAME)
    assert after.metadata.resourceVersion == before.metadata.resourceVersion  # not even re-applied

    code, out = await kubectl(apiserver, "apply", "--server-side", "-k", str(DEPLOY / "crds" / "isthmus"))
    assert code == 0, out
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "member"))
    assert code == 0, out
    assert "customresourcedefinition" not in out
    wanted = f"{NAME}: installed by submariner-operator, compatible (not stored: spec, status.conditions[].observedGeneration)"
    report = await diagnose(apiserver, wanted)
    assert wanted in report, report
    assert "serviceimports.multicluster.x-k8s.io: installed by Isthmus" in report, report

    # As docs/deploy.md says: the namespace goes first, and what it held may be gone before kubectl gets to it.
    code, out = await kubectl(apiserver, "delete", "-k", str(DEPLOY / "member"), "--wait=false", "--ignore-not-found")
    assert code == 0, out
    assert "customresourcedefinition" not in out
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "broker"))  # the broker's, on the same API
    assert code == 0, out
    code, out = await kubectl(apiserver, "delete", "-k", str(DEPLOY / "broker"), "--wait=false", "--ignore-not-found")
    assert code == 0, out
    assert "customresourcedefinition" not in out

    still = await client.get(CustomResourceDefinition, NAME)
    assert still.metadata.uid == before.metadata.uid
    assert "spec" not in still.spec.versions[0].schema.openAPIV3Schema.properties  # Submariner's schema
    assert (await client.get(ServiceExport, "cart", namespace="shop")).metadata.name == "cart"
    assert (await client.get(Service, "cart", namespace="shop")).metadata.name == "cart"  # users' objects untouched
    assert (await client.get(Deployment, "cart", namespace="shop")).metadata.name == "cart"
    assert await get_or_none(client, CustomResourceDefinition, "clusters.isthmus.io") is not None  # ours kept too



async def test_incompatible_shared_crd_is_refused_untouched_and_reported(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    crd = submariner_crd()
    for version in crd["spec"]["versions"]:
        del version["subresources"]
        del version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    await install_as_submariner(client, crd)
    before = await client.get(CustomResourceDefinition, NAME)

    with pytest.raises(ClustersetError, match=(
            f"{NAME} \\(installed by submariner-operator\\): no status subresource; no field status.conditions")):
        await asyncio.wait_for(ensure_crds(client, "isthmus-cli"), 60)
    assert (await client.get(CustomResourceDefinition, NAME)).metadata.resourceVersion == before.metadata.resourceVersion
    assert await get_or_none(client, CustomResourceDefinition, "clusters.isthmus.io") is None  # nothing half-done

    code, out = await kubectl(apiserver, "apply", "--server-side", "-k", str(DEPLOY / "crds" / "isthmus"))
    assert code == 0, out
    wanted = (f"{NAME}: incompatible: no status subresource; no field status.conditions[].type, "
              "status.conditions[].status")
    report = await diagnose(apiserver, wanted)
    assert wanted in report, report
    assert "✘ crds" in report, report


async def test_shared_crds_we_installed_are_upgraded(apiserver: RunningApiServer) -> None:
    """A shared CRD applied from deploy/crds/shared (kubectl's field manager, our label) is ours to upgrade."""
    code, out = await kubectl(apiserver, "apply", "--server-side", "-k", str(DEPLOY / "crds" / "shared"))
    assert code == 0, out
    client = apiserver.client()
    plan = await asyncio.wait_for(ensure_crds(client, "isthmus-cli"), 60)
    assert plan.kept == {}
    report = await diagnose(apiserver, f"{NAME}: installed by Isthmus")
    assert f"{NAME}: installed by Isthmus" in report, report


async def test_a_foreign_crd_serving_only_v1alpha1_is_refused_and_diagnose_says_it_predates_v1beta1(
    apiserver: RunningApiServer,
) -> None:
    client = apiserver.client()
    await install_as_submariner(client, submariner_crd(v1beta1=False))
    with pytest.raises(ClustersetError, match=f"{NAME} \\(installed by submariner-operator\\): does not serve v1beta1 "
                                              "\\(serves v1alpha1\\): it predates v1beta1"):
        await asyncio.wait_for(ensure_crds(client, "isthmus-cli"), 60)
    code, out = await kubectl(apiserver, "apply", "--server-side", "-k", str(DEPLOY / "crds" / "isthmus"))
    assert code == 0, out
    wanted = f"{NAME}: incompatible: does not serve v1beta1 (serves v1alpha1): it predates v1beta1"
    report = await diagnose(apiserver, wanted)
    assert wanted in report, report
