"""The API surface of a kube-apiserver v1.32, type by type: discovery, verbs, statuses, scale.

Against a real `isthmus apiserver` process (TLS, bearer token), with kubectl v1.32 and lightkube:
- the discovery documents and `kubectl api-resources` equal kube v1.32's (the reference data in
  src/isthmus/apiserver/data and tests/reference);
- every creatable type goes through create/get/list/watch/update/patch (json, merge, strategic,
  apply)/delete with lightkube, and create/get/apply --server-side/patch/delete with kubectl;
- new objects get the status kube gives them at once, Pods kube's QoS class and default
  tolerations; the scale subresource works with `kubectl scale`.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from tests.harness.apiserverproc import Server
from tests.reference.fake_discovery import REFERENCE_API_RESOURCES, load_discovery
from tests.reference.manifests_v1_32 import MANIFESTS, manifest

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

Obj = dict[str, Any]
REFERENCE = load_discovery()["documents"]
NS = "conf"


def _server(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp(name))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def fresh() -> Iterator[Server]:
    """A server nothing is created in: its discovery must be kube's, to the byte."""
    with tempfile.TemporaryDirectory() as d:
        srv = Server(Path(d))
        try:
            yield srv
        finally:
            srv.stop()


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with namespace `conf`, for the lightkube walk and the status tests."""
    for srv in _server(tmp_path_factory, "walk"):
        srv.kubectl("create", "namespace", NS)
        yield srv


@pytest.fixture(scope="module")
def kubectl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    for srv in _server(tmp_path_factory, "kubectl"):
        srv.kubectl("create", "namespace", NS)
        yield srv


# ---------------------------------------------------------------- discovery


def test_every_resource_list_is_kubes(fresh: Server) -> None:
    """/api/v1 and every /apis/<group>/<version>: names, kinds, scope, verbs, short names,
    categories, subresources and storageVersionHash, in kube's order."""
    lists = [p for p, doc in REFERENCE.items() if doc.get("kind") == "APIResourceList"]
    assert len(lists) == 21
    for path in lists:
        assert fresh.get(path) == REFERENCE[path], path


def test_groups_and_preferred_versions_are_kubes(fresh: Server) -> None:
    assert fresh.get("/apis") == REFERENCE["/apis"]
    for path, doc in REFERENCE.items():
        if doc.get("kind") == "APIGroup":
            assert fresh.get(path) == doc, path
    assert fresh.get("/api")["versions"] == ["v1"]
    assert fresh.get("/apis/autoscaling")["preferredVersion"]["version"] == "v2"


def test_kubectl_api_resources_prints_kubes_table(fresh: Server) -> None:
    out = fresh.kubectl("api-resources").stdout
    assert out == REFERENCE_API_RESOURCES.read_text()


def test_verbs_a_type_does_not_serve_are_refused_as_kube_does(fresh: Server) -> None:
    # namespaces have no deletecollection; tokenreviews are create-only; componentstatuses read-only
    r = fresh.http.delete("/api/v1/namespaces")
    assert r.status_code == 405 and r.json()["reason"] == "MethodNotAllowed"
    assert fresh.http.get("/apis/authentication.k8s.io/v1/tokenreviews").status_code == 405
    assert fresh.http.get("/apis/authorization.k8s.io/v1/subjectaccessreviews/x").status_code == 404
    r = fresh.http.post("/api/v1/componentstatuses", json={"apiVersion": "v1", "kind": "ComponentStatus",
                                                           "metadata": {"name": "x"}})
    assert r.status_code == 405
    assert fresh.get("/api/v1/componentstatuses")["kind"] == "ComponentStatusList"


def test_authorization_reviews_answer_as_rbac(fresh: Server) -> None:
    """The reviews ask the server's authorizer: system:masters may do anything (no RBAC reason), others
    what the bootstrap policy binds to their groups."""
    ssar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "delete", "resource": "pods", "namespace": "default"}}}
    r = fresh.http.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=ssar)
    assert r.status_code == 201, r.text
    assert r.json()["status"] == {"allowed": True} and r.json()["spec"] == ssar["spec"]

    def sar(spec: dict[str, Any]) -> Any:
        out = fresh.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})).stdout
        return json.loads(out)["status"]

    healthz = {"path": "/healthz", "verb": "get"}
    assert sar({"user": "jane", "nonResourceAttributes": healthz}) == {"allowed": False}
    assert sar({"user": "jane", "groups": ["system:unauthenticated"], "nonResourceAttributes": healthz}) == {
        "allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole '
                                   '"system:public-info-viewer" to Group "system:unauthenticated"'}
    r = fresh.http.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "jane"}})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.resourceAttributes"
    r = fresh.http.post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", json={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}})
    assert r.status_code == 201 and r.json()["status"]["resourceRules"][0]["verbs"] == ["*"]
    # nothing was stored
    assert fresh.http.get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").status_code == 405


def test_create_of_bindings_binds_the_named_pod(fresh: Server) -> None:
    """The legacy bindings collection is kube's BindingREST (tests/integration/test_apiserver_binding.py)."""
    r = fresh.http.post("/api/v1/namespaces/default/bindings", json={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}})
    assert (r.status_code, r.json()["message"]) == (404, 'pods "p" not found')


# ---------------------------------------------------------------- the walk, with lightkube


@functools.cache  # lightkube registers one class per kind: make each once
def _resource(group_version: str, plural: str) -> Any:
    group, _, version = group_version.rpartition("/")
    doc = REFERENCE[f"/apis/{group_version}" if group else f"/api/{group_version}"]
    entry = next(r for r in doc["resources"] if r["name"] == plural)
    make = create_namespaced_resource if entry["namespaced"] else create_global_resource
    return make(group, version, entry["kind"], plural), entry["namespaced"]


def _has_status(group_version: str, plural: str) -> bool:
    group = group_version.rpartition("/")[0]
    doc = REFERENCE[f"/apis/{group_version}" if group else f"/api/{group_version}"]
    return any(r["name"] == f"{plural}/status" for r in doc["resources"])


def test_every_creatable_type_has_a_manifest() -> None:
    """The walk covers every stored type kube serves: all with a create verb but the virtual ones."""
    virtual = {"bindings", "tokenreviews", "selfsubjectreviews", "subjectaccessreviews",
               "localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews"}
    creatable = {(doc["groupVersion"], r["name"]) for doc in REFERENCE.values() if doc.get("kind") == "APIResourceList"
                 for r in doc["resources"] if "/" not in r["name"] and "create" in r["verbs"]
                 and r["name"] not in virtual}
    assert set(MANIFESTS) == creatable


@pytest.mark.parametrize("key", sorted(MANIFESTS), ids=lambda k: f"{k[0]}:{k[1]}")
def test_lightkube_walk(walk: Server, key: tuple[str, str]) -> None:
    gv, plural = key
    res, namespaced = _resource(gv, plural)
    ns = NS if namespaced else None
    body = manifest(gv, plural, ns)
    name = body["metadata"]["name"]
    c = walk.client

    created = c.create(res(body))
    assert created["metadata"]["uid"] and created["apiVersion"] == gv and created["kind"] == body["kind"]
    got = c.get(res, name, namespace=ns)
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert name in [o["metadata"]["name"] for o in c.list(res, namespace=ns)]

    events = c.watch(res, namespace=ns, fields={"metadata.name": name})
    kind, obj = next(iter(events))
    assert (kind, obj["metadata"]["name"]) == ("ADDED", name)
    events.close()  # type: ignore[attr-defined]

    got["metadata"]["labels"] = {"update": "1"}
    updated = c.replace(got)
    assert int(updated["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])
    c.patch(res, name, [{"op": "add", "path": "/metadata/annotations", "value": {"json": "1"}}], namespace=ns,
            patch_type=PatchType.JSON)
    c.patch(res, name, {"metadata": {"labels": {"merge": "1"}}}, namespace=ns, patch_type=PatchType.MERGE)
    c.patch(res, name, {"metadata": {"labels": {"strategic": "1"}}}, namespace=ns, patch_type=PatchType.STRATEGIC)
    applied = manifest(gv, plural, ns)
    applied["metadata"]["labels"] = {"apply": "1"}
    out = c.apply(res(applied), force=True)
    assert {"update": "1", "merge": "1", "strategic": "1", "apply": "1"}.items() <= out["metadata"]["labels"].items()
    assert out["metadata"]["annotations"] == {"json": "1"}
    assert any(e["manager"] == "conformance" and e["operation"] == "Apply" for e in out["metadata"]["managedFields"])

    if _has_status(gv, plural):
        # status is a subresource: a write of the main resource keeps it
        spec_write = c.patch(res, name, {"status": {"bogus": "x"}, "metadata": {"labels": {"s": "1"}}},
                             namespace=ns, patch_type=PatchType.MERGE)
        assert spec_write.get("status") == out.get("status")

    c.delete(res, name, namespace=ns)
    try:
        left = c.get(res, name, namespace=ns)
    except ApiError as e:
        assert e.status.code == 404
    else:  # held by a finalizer (namespaces, CRDs) until its controller lets it go
        assert left["metadata"]["deletionTimestamp"]


# ---------------------------------------------------------------- the walk, with kubectl


def test_kubectl_walk(kubectl_server: Server, tmp_path: Path) -> None:
    """create, get, apply --server-side, patch and delete of every type, each step one kubectl call."""
    k = kubectl_server
    docs = []
    for gv, plural in sorted(MANIFESTS):
        _, namespaced = _resource(gv, plural)
        docs.append(manifest(gv, plural, NS if namespaced else None))
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    n = len(docs)

    created = k.kubectl("create", "-f", str(f)).stdout.splitlines()
    assert len(created) == n and all(line.endswith(" created") for line in created)
    k.kubectl("get", "-f", str(f))  # as Tables
    names = k.kubectl("get", "-f", str(f), "-o", "name").stdout.splitlines()
    assert [n.split("/", 1)[1] for n in names] == [d["metadata"]["name"] for d in docs]
    items = json.loads(k.kubectl("get", "-f", str(f), "-o", "json").stdout)["items"]
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [(d["kind"], d["metadata"]["name"]) for d in docs]

    for d in docs:
        d["metadata"]["labels"] = {"applied": "yes"}
    f.write_text(yaml.safe_dump_all(docs))
    applied = k.kubectl("apply", "--server-side", "-f", str(f)).stdout.splitlines()
    assert len(applied) == n and all(line.endswith(" serverside-applied") for line in applied)
    patched = k.kubectl("patch", "-f", str(f), "--type=merge", "-p", '{"metadata":{"labels":{"patched":"yes"}}}')
    assert len(patched.stdout.splitlines()) == n
    k.kubectl("patch", "-f", str(f), "-p", '{"metadata":{"annotations":{"strategic":"yes"}}}')
    items = json.loads(k.kubectl("get", "-f", str(f), "-o", "json", "--show-managed-fields").stdout)["items"]
    for i in items:
        assert {"applied": "yes", "patched": "yes"}.items() <= i["metadata"]["labels"].items(), i["kind"]
        assert i["metadata"]["annotations"]["strategic"] == "yes"
        assert any(m["manager"] == "kubectl" and m["operation"] == "Apply" for m in i["metadata"]["managedFields"])

    deleted = k.kubectl("delete", "-f", str(f), "--wait=false").stdout.splitlines()
    assert len(deleted) == n and all(line.endswith(" deleted") for line in deleted)
    left = k.kubectl("get", "-f", str(f), "--ignore-not-found", "-o", "json").stdout
    # kubectl prints a List when several objects are left, the object itself when exactly one is.
    doc = json.loads(left) if left.strip() else {"items": []}
    for i in doc["items"] if "items" in doc else [doc]:
        assert i["metadata"].get("deletionTimestamp"), i["kind"]  # held by a finalizer


# ---------------------------------------------------------------- statuses and defaults kube gives at once


def _pod(name: str, resources: list[Obj | None], tolerations: list[Obj] | None = None) -> Obj:
    containers = [{"name": f"c{i}", "image": "busybox", **({"resources": r} if r else {})}
                  for i, r in enumerate(resources)]
    spec: Obj = {"containers": containers}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _create(srv: Server, path: str, body: Obj) -> Obj:
    r = srv.http.post(path, json=body)
    assert r.status_code == 201, r.text
    out: Obj = r.json()
    return out


@pytest.mark.parametrize(("resources", "qos"), [
    ([None], "BestEffort"),
    ([{"requests": {"cpu": "100m"}}], "Burstable"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}, None], "Burstable"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
    ([{"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "0.5", "memory": "128Mi"}},
      {"limits": {"cpu": 1, "memory": "1Gi"}}], "Guaranteed"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}], "Burstable"),
], ids=["besteffort", "requests-only", "one-container-without", "limits-only", "two-equal", "requests-below"])
def test_new_pod_is_pending_with_its_qos_class(walk: Server, resources: list[Obj | None], qos: str) -> None:
    name = f"qos-{qos.lower()}-{len(resources)}-{abs(hash(json.dumps(resources))) % 10000}"
    pod = _create(walk, f"/api/v1/namespaces/{NS}/pods", _pod(name, resources))
    assert pod["status"] == {"phase": "Pending", "qosClass": qos}
    assert walk.get(f"/api/v1/namespaces/{NS}/pods/{name}")["status"] == pod["status"]


def test_new_pod_tolerates_not_ready_and_unreachable_for_300s(walk: Server) -> None:
    pod = _create(walk, f"/api/v1/namespaces/{NS}/pods", _pod("tolerations", [None]))
    assert pod["spec"]["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ]
    # a pod that already tolerates one of them (here: every NoExecute taint) keeps its own
    own = {"operator": "Exists", "effect": "NoExecute"}
    pod = _create(walk, f"/api/v1/namespaces/{NS}/pods", _pod("own-tolerations", [None], [own]))
    assert pod["spec"]["tolerations"] == [own]
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
           "tolerationSeconds": 10}
    pod = _create(walk, f"/api/v1/namespaces/{NS}/pods", _pod("own-unreachable", [None], [own]))
    assert pod["spec"]["tolerations"] == [own, {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                                "effect": "NoExecute", "tolerationSeconds": 300}]


@pytest.mark.parametrize(("gv", "plural", "status"), [
    ("v1", "services", {"loadBalancer": {}}),
    ("v1", "namespaces", {"phase": "Active"}),
    ("v1", "persistentvolumeclaims", {"phase": "Pending"}),
    ("v1", "persistentvolumes", {"phase": "Pending"}),
    ("v1", "replicationcontrollers", {"replicas": 0}),
    ("apps/v1", "deployments", {}),
    ("apps/v1", "replicasets", {"replicas": 0}),
    ("apps/v1", "statefulsets", {"replicas": 0, "availableReplicas": 0}),
    ("apps/v1", "daemonsets", {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                               "numberReady": 0}),
    ("batch/v1", "jobs", {}),
    ("batch/v1", "cronjobs", {}),
    ("certificates.k8s.io/v1", "certificatesigningrequests", {}),
    ("networking.k8s.io/v1", "ingresses", {"loadBalancer": {}}),
    ("policy/v1", "poddisruptionbudgets", {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                                           "expectedPods": 0}),
    ("autoscaling/v2", "horizontalpodautoscalers", {"desiredReplicas": 0}),
    ("autoscaling/v1", "horizontalpodautoscalers", {"currentReplicas": 0, "desiredReplicas": 0}),
])
def test_new_object_has_kubes_initial_status(walk: Server, gv: str, plural: str, status: Obj) -> None:
    _, namespaced = _resource(gv, plural)
    body = manifest(gv, plural, NS if namespaced else None)
    body["metadata"]["name"] = "initial-" + body["metadata"]["name"]
    if plural == "namespaces":
        body["metadata"]["name"] = "initial-ns"
    body["status"] = {"sneaked": "in"}  # status is the status subresource's: a create cannot set it
    base = f"/apis/{gv}" if "/" in gv else f"/api/{gv}"
    path = f"{base}/namespaces/{NS}/{plural}" if namespaced else f"{base}/{plural}"
    created = _create(walk, path, body)
    assert created["status"] == status
    assert walk.get(f"{path}/{body['metadata']['name']}")["status"] == status


def test_a_new_node_keeps_the_status_it_is_created_with(walk: Server) -> None:
    """kube's Nodes (unlike other kinds) take status on create: a kubelet registers with it."""
    node = _create(walk, "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "initial-node"},
                                           "status": {"capacity": {"pods": "110"}}})
    assert node["status"]["capacity"] == {"pods": "110"}
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 0}}


def test_deployment_status_is_kept_by_spec_writes(walk: Server) -> None:
    body = manifest("apps/v1", "deployments", NS)
    body["metadata"]["name"] = "status-kept"
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/status-kept"
    _create(walk, f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    r = walk.http.patch(f"{path}/status", json={"status": {"replicas": 1, "readyReplicas": 1}})
    assert r.status_code == 200 and r.json()["spec"]["replicas"] == 1
    r = walk.http.patch(path, json={"spec": {"replicas": 2}, "status": {"replicas": 9}})
    assert r.json()["status"] == {"replicas": 1, "readyReplicas": 1} and r.json()["spec"]["replicas"] == 2


# ---------------------------------------------------------------- the scale subresource


def test_kubectl_scale_changes_spec_replicas_only(kubectl_server: Server) -> None:
    k = kubectl_server
    for gv, plural in (("apps/v1", "deployments"), ("apps/v1", "replicasets"), ("apps/v1", "statefulsets"),
                       ("v1", "replicationcontrollers")):
        body = manifest(gv, plural, NS)
        body["metadata"]["name"] = "scaled"
        base = f"/apis/{gv}" if "/" in gv else f"/api/{gv}"
        _create(k, f"{base}/namespaces/{NS}/{plural}", body)
        kind = body["kind"].lower()
        assert k.kubectl("-n", NS, "scale", f"{kind}/scaled", "--replicas=3").stdout.strip() == f"{kind}" \
            f"{'.apps' if gv == 'apps/v1' else ''}/scaled scaled"
        obj = k.get(f"{base}/namespaces/{NS}/{plural}/scaled")
        assert obj["spec"]["replicas"] == 3 and obj["metadata"]["generation"] == 2, plural
        scale = k.get(f"{base}/namespaces/{NS}/{plural}/scaled/scale")
        assert scale == {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {key: obj["metadata"][key] for key in ("name", "namespace", "uid", "resourceVersion",
                                                                 "creationTimestamp")},
            "spec": {"replicas": 3}, "status": {"replicas": 0, "selector": "app=conf"}}, plural


def test_scale_writes_check_resource_version_and_replicas(kubectl_server: Server) -> None:
    k = kubectl_server
    body = manifest("apps/v1", "deployments", NS)
    body["metadata"]["name"] = "scale-writes"
    body["spec"]["selector"] = {"matchLabels": {"app": "conf"},
                                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}
    body["spec"]["template"]["metadata"]["labels"]["tier"] = "web"
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/scale-writes"
    _create(k, f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    scale = k.get(f"{path}/scale")
    assert scale["status"]["selector"] == "app=conf,tier in (api,web)"
    # status written by a controller shows in the Scale; a scale write leaves it alone
    assert k.http.patch(f"{path}/status", {"status": {"replicas": 1}}).status_code == 200
    stale = dict(scale, spec={"replicas": 5})
    r = k.http.put(f"{path}/scale", stale)
    assert r.status_code == 409 and r.json()["reason"] == "Conflict"
    fresh_scale = k.get(f"{path}/scale")
    r = k.http.put(f"{path}/scale", dict(fresh_scale, spec={"replicas": 5}))
    assert r.status_code == 200 and r.json()["spec"] == {"replicas": 5} and r.json()["status"]["replicas"] == 1
    r = k.http.patch(f"{path}/scale", [{"op": "replace", "path": "/spec/replicas", "value": 2}],
                     "application/json-patch+json")
    assert r.status_code == 200 and r.json()["spec"] == {"replicas": 2}
    r = k.http.patch(f"{path}/scale", {"spec": {"replicas": -1}})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.replicas"
    r = k.http.patch(f"{path}/scale", {"spec": {"replicas": 0}})
    assert r.status_code == 200 and r.json()["spec"] == {}
    obj = k.get(path)
    assert obj["spec"]["replicas"] == 0 and obj["status"] == {"replicas": 1}
    # types without a scale subresource in kube have none here either
    assert k.http.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/x/scale").status_code == 404


def test_kubectl_typed_creates_send_protobuf_for_every_kind(kubectl_server: Server) -> None:
    """kubectl's `create <kind>` and `auth can-i` send protobuf bodies: the server decodes every kind."""
    k = kubectl_server
    for args in (["create", "serviceaccount", "typed"], ["create", "job", "typed", "--image=busybox"],
                 ["create", "cronjob", "typed", "--image=busybox", "--schedule=*/5 * * * *"],
                 ["create", "role", "typed", "--verb=get", "--resource=pods"],
                 ["create", "rolebinding", "typed", "--role=typed", "--user=jane"],
                 ["create", "clusterrole", "typed", "--verb=get", "--resource=nodes"],
                 ["create", "clusterrolebinding", "typed", "--clusterrole=typed", "--group=devs"],
                 ["create", "priorityclass", "typed", "--value=10"],
                 ["create", "quota", "typed", "--hard=pods=3,requests.cpu=1"],
                 ["create", "poddisruptionbudget", "typed", "--selector=app=x", "--min-available=1"]):
        assert k.kubectl("-n", NS, *args).stdout.strip().endswith(" created"), args
    assert k.get(f"/api/v1/namespaces/{NS}/resourcequotas/typed")["spec"] == {"hard": {"pods": "3",
                                                                                      "requests.cpu": "1"}}
    assert k.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/typed")["spec"]["minAvailable"] == 1
    assert k.kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"


# ---------------------------------------------------------------- one resource in two versions


def test_hpa_v1_and_v2_are_one_object_converted(kubectl_server: Server) -> None:
    """As kube: autoscaling/v2 is stored, v1 reads and writes the same objects converted (a CPU
    target; what v1 cannot say travels in annotations)."""
    k = kubectl_server
    body = manifest("apps/v1", "deployments", NS)
    body["metadata"]["name"] = "autoscaled"
    _create(k, f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    # kubectl autoscale writes autoscaling/v1 (as protobuf); kubectl get hpa reads v2
    k.kubectl("-n", NS, "autoscale", "deployment", "autoscaled", "--max=4", "--cpu-percent=60")
    v2 = json.loads(k.kubectl("-n", NS, "get", "hpa", "autoscaled", "-o", "json").stdout)
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
    assert v2["status"] == {"desiredReplicas": 0}
    base1 = f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers"
    base2 = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"
    # a v2-only field written in v2 shows in v1 as kube's annotation, and survives a v1 update
    memory = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                            "averageValue": "100Mi"}}}
    r = k.http.patch(f"{base2}/autoscaled", {"spec": {"metrics": [*v2["spec"]["metrics"], memory]}})
    assert r.status_code == 200, r.text
    v1 = k.get(f"{base1}/autoscaled")
    assert v1["apiVersion"] == "autoscaling/v1" and v1["spec"]["targetCPUUtilizationPercentage"] == 60
    assert json.loads(v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]) == [memory]
    assert v1["status"] == {"currentReplicas": 0, "desiredReplicas": 0}
    v1["spec"]["maxReplicas"] = 7
    r = k.http.put(f"{base1}/autoscaled", v1)
    assert r.status_code == 200 and r.json()["spec"]["maxReplicas"] == 7
    v2 = k.get(f"{base2}/autoscaled")
    assert v2["spec"]["maxReplicas"] == 7 and v2["spec"]["metrics"][1] == memory
    assert "annotations" not in v2["metadata"]
    assert [i["metadata"]["name"] for i in k.get(base1)["items"]] == ["autoscaled"]
    assert k.get(base1)["items"][0]["apiVersion"] == "autoscaling/v1"


def test_kubectl_get_prints_kubes_columns(kubectl_server: Server) -> None:
    k = kubectl_server
    headers = {
        ("batch/v1", "cronjobs"): "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE",
        ("batch/v1", "jobs"): "NAME STATUS COMPLETIONS DURATION AGE",
        ("apps/v1", "daemonsets"): "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE",
        ("v1", "persistentvolumeclaims"): "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS "
                                          "VOLUMEATTRIBUTESCLASS AGE",
        ("storage.k8s.io/v1", "storageclasses"): "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE "
                                                 "ALLOWVOLUMEEXPANSION AGE",
        ("scheduling.k8s.io/v1", "priorityclasses"): "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY",
        ("policy/v1", "poddisruptionbudgets"): "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
    }
    for (gv, plural), header in headers.items():
        _, namespaced = _resource(gv, plural)
        body = manifest(gv, plural, NS if namespaced else None)
        body["metadata"]["name"] = "printed"
        base = f"/apis/{gv}" if "/" in gv else f"/api/{gv}"
        _create(k, f"{base}/namespaces/{NS}/{plural}" if namespaced else f"{base}/{plural}", body)
        resource = plural + ("." + gv.split("/")[0] if "/" in gv else "")
        lines = k.kubectl("-n", NS, "get", resource, "printed").stdout.splitlines()
        assert " ".join(lines[0].split()) == header, plural
    row = k.kubectl("get", "priorityclass", "printed").stdout.splitlines()[1].split()
    assert row[:3] == ["printed", "1000", "false"] and row[-1] == "PreemptLowerPriority"


def test_pod_templates_get_the_pod_spec_defaults(walk: Server) -> None:
    body = manifest("v1", "podtemplates", NS)
    body["metadata"]["name"] = "defaulted"
    spec = _create(walk, f"/api/v1/namespaces/{NS}/podtemplates", body)["template"]["spec"]
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["containers"][0]["imagePullPolicy"]) == (
        "Always", "ClusterFirst", "IfNotPresent")
