"""The kubelet's Events as a real cluster shows them: source `kubelet` from the node, the container
named in involvedObject.fieldPath, read through `kubectl describe pod` and the Events API."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Pod

from tests.harness.kubelite import NS, Lite, create, echo_deployment, kubectl, pods_of
from tests.harness.polling import eventually

pytestmark = [pytest.mark.timeout(120)]


async def pod_events(lite: Lite, pod: str) -> list[dict[str, Any]]:
    evs = [e.to_dict() async for e in lite.client.list(Event, namespace=NS)]
    return [e for e in evs if e["involvedObject"].get("kind") == "Pod" and e["involvedObject"]["name"] == pod]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubelet_events_name_the_container_and_the_node(apiserver: Any, lite: Lite) -> None:
    await create(lite.client, Deployment, echo_deployment("ev", 1))
    (pod,) = await eventually(lambda: _ready_pods(lite), what="a ready echo pod")
    name = pod["metadata"]["name"]

    async def started() -> list[dict[str, Any]]:
        return [e for e in await pod_events(lite, name) if e["reason"] == "Started"]

    (ev,) = await eventually(started, what="the Started event")
    ref = ev["involvedObject"]
    assert (ref["apiVersion"], ref["kind"], ref["namespace"], ref["uid"], ref["fieldPath"]) == (
        "v1", "Pod", NS, pod["metadata"]["uid"], "spec.containers{echo}")
    assert ref["resourceVersion"]
    assert ev["message"] == "Started container echo"
    assert ev["source"] == {"component": "kubelet", "host": pod["spec"]["nodeName"]}
    assert (ev["reportingComponent"], ev["reportingInstance"]) == ("kubelet", pod["spec"]["nodeName"])
    reasons = [e["reason"] for e in sorted(await pod_events(lite, name), key=lambda e: e["metadata"]["name"])]
    assert [r for r in reasons if r in ("Pulled", "Created", "Started")] == ["Pulled", "Created", "Started"]
    pulled = next(e for e in await pod_events(lite, name) if e["reason"] == "Pulled")
    assert pulled["message"] == 'Container image "echo:v1" already present on machine'

    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "describe", "pod", name)
    assert code == 0, out
    events = out[out.index("Events:"):]
    assert "kubelet" in events and "Started container echo" in events, events

    await lite.client.delete(Pod, name, namespace=NS)

    async def killing() -> list[dict[str, Any]]:
        return [e for e in await pod_events(lite, name) if e["reason"] == "Killing"]

    (kill,) = await eventually(killing, what="the Killing event")
    assert kill["message"] == "Stopping container echo"
    assert kill["involvedObject"]["fieldPath"] == "spec.containers{echo}"


async def _ready_pods(lite: Lite) -> list[dict[str, Any]]:
    pods = await pods_of(lite.client, {"app": "ev"})
    return [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in (p.get("status") or {}).get("conditions") or [])]
