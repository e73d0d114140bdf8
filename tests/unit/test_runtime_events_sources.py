"""The recorder's kube-shaped sources: fieldPath, per-component children, source.host, dict objects."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.runtime import EventRecorder
from isthmus.runtime.events import container_field_path
from tests.unit.test_runtime_events import Clock, FakeClient

pytestmark = pytest.mark.timeout(10)

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web-1", "namespace": "prod", "uid": "p-1", "resourceVersion": "9"}}


async def test_kubelet_child_reports_node_as_host_and_container_field_path() -> None:
    client = FakeClient()
    root = EventRecorder(client, "kube-lite", instance="machine", clock=Clock())  # type: ignore[arg-type]
    kubelet = root.child("kubelet", host="c1-node", instance="c1-node")
    assert root.child("kubelet", host="c1-node", instance="c1-node") is kubelet  # one per component
    kubelet.normal(POD, "Started", "Started container web", field_path=container_field_path("web"))
    kubelet.normal(POD, "Started", "Started container web", field_path=container_field_path("web"))
    kubelet.normal(POD, "Started", "Started container side", field_path=container_field_path("side"))
    await root.flush()  # a child's queue is flushed with its parent
    (ev, side) = client.created
    ref = ev.involvedObject
    assert (ref.apiVersion, ref.kind, ref.name, ref.namespace, ref.uid, ref.resourceVersion, ref.fieldPath) == (
        "v1", "Pod", "web-1", "prod", "p-1", "9", "spec.containers{web}")
    assert side.involvedObject.fieldPath == "spec.containers{side}"
    assert ev.source.component == "kubelet" and ev.source.host == "c1-node"
    assert ev.reportingComponent == "kubelet" and ev.reportingInstance == "c1-node"
    assert [p[2]["count"] for p in client.patches] == [2]
    await root.aclose()


async def test_controller_child_leaves_host_out_and_the_default_keeps_the_machine() -> None:
    client = FakeClient()
    root = EventRecorder(client, "isthmus-agent", instance="machine")  # type: ignore[arg-type]
    await root.emit(POD, "Normal", "Seen", "x")
    await root.child("deployment-controller").emit(POD, "Normal", "ScalingReplicaSet", "y")
    own, ctrl = client.created
    assert own.source.host == "machine" and own.involvedObject.fieldPath is None
    assert ctrl.source.component == "deployment-controller" and ctrl.source.host is None
    assert ctrl.reportingComponent == "deployment-controller" and ctrl.reportingInstance is None


async def test_a_new_object_under_an_old_name_gets_its_own_event() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "statefulset-controller")  # type: ignore[arg-type]
    again: dict[str, Any] = {**POD, "metadata": {**POD["metadata"], "uid": "p-2"}}  # type: ignore[dict-item]
    await rec.emit(POD, "Normal", "Pulled", "x")
    await rec.emit(again, "Normal", "Pulled", "x")
    assert len(client.created) == 2 and not client.patches
