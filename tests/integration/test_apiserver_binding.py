"""pods/<name>/binding (and the legacy bindings collection) as kube-apiserver v1.32 answers them:
against a real `isthmus apiserver` process, with raw requests, `kubectl create --raw` and lightkube."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Binding, Pod

from tests.harness.apiserverproc import Server

NS = "bind"


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    with tempfile.TemporaryDirectory() as d:
        s = Server(Path(d))
        try:
            s.kubectl("create", "namespace", NS)
            yield s
        finally:
            s.stop()


def _pod(srv: Server, name: str, **spec: Any) -> None:
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods", json={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}})
    assert r.status_code == 201, r.text


def _binding(name: str, node: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, **meta},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def _get(srv: Server, name: str) -> Any:
    return srv.get(f"/api/v1/namespaces/{NS}/pods/{name}")


def test_binding_sets_node_name_once_and_marks_the_pod_scheduled(srv: Server) -> None:
    _pod(srv, "p1")
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/p1/binding",
                      json=_binding("p1", "node-a", annotations={"scheduled-by": "me"}))
    assert r.status_code == 201, r.text
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    pod = _get(srv, "p1")
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["metadata"]["annotations"]["scheduled-by"] == "me"
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(scheduled) == 1 and scheduled[0]["status"] == "True" and scheduled[0]["lastTransitionTime"]

    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/p1/binding", json=_binding("p1", "node-b"))
    assert r.status_code == 409
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": 'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned '
                                   'to node "node-a"',
                        "reason": "Conflict", "details": {"name": "p1", "kind": "pods/binding"}, "code": 409}
    assert _get(srv, "p1")["spec"]["nodeName"] == "node-a"


def test_binding_refusals_are_kubes(srv: Server) -> None:
    _pod(srv, "p2")
    path = f"/api/v1/namespaces/{NS}/pods/p2/binding"
    r = srv.http.post(path, json=_binding("other", "n"))
    assert (r.status_code, r.json()["message"]) == (400, "name in URL does not match name in Binding object")
    r = srv.http.post(path, json={**_binding("p2", "n"), "target": {"kind": "Pod", "name": "n"}})
    assert r.status_code == 500
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": 'target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>"',
                        "code": 500}
    r = srv.http.post(path, json={**_binding("p2", "n"), "target": {}})
    assert (r.status_code, r.json()["message"]) == (500, "target.name: Required value")
    r = srv.http.post(path, json=_binding("p2", "n", uid="not-its-uid"))
    assert r.status_code == 409 and "Precondition failed: UID in precondition: not-its-uid" in r.json()["message"]
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/nope/binding", json=_binding("nope", "n"))
    assert (r.status_code, r.json()["message"]) == (404, 'pods "nope" not found')
    r = srv.http.post(path + "?dryRun=All", json=_binding("p2", "n"))
    assert r.status_code == 201 and "nodeName" not in _get(srv, "p2")["spec"]
    assert srv.http.get(path).status_code == 405

    _pod(srv, "gated", schedulingGates=[{"name": "wait"}])
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/gated/binding", json=_binding("gated", "n"))
    assert (r.status_code, r.json()["message"]) == (
        409, 'Operation cannot be fulfilled on pods/binding "gated": pod gated has non-empty .spec.schedulingGates')


def test_a_pod_being_deleted_is_not_bound(srv: Server) -> None:
    _pod(srv, "going")
    r = srv.http.patch(f"/api/v1/namespaces/{NS}/pods/going", {"metadata": {"finalizers": ["test/hold"]}})
    assert r.status_code == 200, r.text
    assert srv.http.delete(f"/api/v1/namespaces/{NS}/pods/going").status_code == 200
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/going/binding", json=_binding("going", "n"))
    assert (r.status_code, r.json()["message"]) == (
        409, 'Operation cannot be fulfilled on pods/binding "going": pod going is being deleted, cannot be assigned '
             'to a host')
    srv.http.patch(f"/api/v1/namespaces/{NS}/pods/going", {"metadata": {"finalizers": None}})


def test_legacy_bindings_collection_binds_the_pod_named_in_the_body(srv: Server) -> None:
    _pod(srv, "p3")
    r = srv.http.post(f"/api/v1/namespaces/{NS}/bindings", json=_binding("p3", "node-c"))
    assert r.status_code == 201, r.text
    assert _get(srv, "p3")["spec"]["nodeName"] == "node-c"
    assert srv.http.get(f"/api/v1/namespaces/{NS}/bindings").status_code == 405


def test_kubectl_create_raw_binds(srv: Server) -> None:
    _pod(srv, "p4")
    out = srv.kubectl("create", "--raw", f"/api/v1/namespaces/{NS}/pods/p4/binding", "-f", "-",
                      stdin=json.dumps(_binding("p4", "node-d"))).stdout
    assert json.loads(out)["status"] == "Success"
    assert srv.kubectl("get", "pod", "p4", "-n", NS, "-o", "jsonpath={.spec.nodeName}").stdout == "node-d"
    p = srv.kubectl("create", "--raw", f"/api/v1/namespaces/{NS}/pods/p4/binding", "-f", "-",
                    stdin=json.dumps(_binding("p4", "node-e")), check=False)
    assert p.returncode == 1
    assert p.stderr == ('Error from server (Conflict): Operation cannot be fulfilled on pods/binding "p4": pod p4 is '
                        'already assigned to node "node-d"\n')


def test_lightkube_binds_through_the_subresource_and_the_collection(srv: Server) -> None:
    """kube answers a Binding with a Status, which lightkube cannot decode as a Binding (as against a
    real cluster); the write itself is what lightkube's request made."""
    _pod(srv, "p5")
    _pod(srv, "p6")
    body = Pod.Binding(metadata=ObjectMeta(name="p5"), target=ObjectReference(kind="Node", name="node-f"))
    with pytest.raises(msgspec.ValidationError):
        srv.client.create(body, name="p5", namespace=NS)
    assert _get(srv, "p5")["spec"]["nodeName"] == "node-f"
    legacy = Binding(metadata=ObjectMeta(name="p6"), target=ObjectReference(kind="Node", name="node-g"))
    with pytest.raises(msgspec.ValidationError):
        srv.client.create(legacy, namespace=NS)
    assert _get(srv, "p6")["spec"]["nodeName"] == "node-g"
