"""pods/<name>/eviction, PodDisruptionBudgets and `kubectl drain` as against kube-apiserver v1.32.

Against a real `isthmus apiserver` process: Pods bound to a Node with the Binding subresource, their
status and the PDBs' status written as the kubelet and the disruption controller would; a thread
plays the kubelet's part in a drain (a terminating Pod on the node is removed, grace 0)."""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.apiserverproc import Server

Obj = dict[str, Any]
NS = "ev"
NODE = "node-1"
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    with tempfile.TemporaryDirectory() as d:
        s = Server(Path(d))
        try:
            s.kubectl("create", "namespace", NS)
            r = s.http.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
            assert r.status_code == 201, r.text
            yield s
        finally:
            s.stop()


def _ok(r: Any, code: int = 200) -> Any:
    assert r.status_code == code, r.text
    return r.json()


def running_pod(srv: Server, name: str, labels: dict[str, str] | None = None, ready: bool = True,
                owner: Obj | None = None, volumes: list[Obj] | None = None, phase: str = "Running") -> Obj:
    """A Pod bound to NODE whose kubelet reported it `phase` (and Ready or not)."""
    meta: Obj = {"name": name, "labels": labels or {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [owner]
    _ok(srv.http.post(f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes or []}}), 201)
    _ok(srv.http.post(f"/api/v1/namespaces/{NS}/pods/{name}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": NODE}}),
        201)
    return _ok(srv.http.patch(f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": {
        "phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}))


def pdb(srv: Server, name: str, status: Obj, spec: Obj | None = None, observed: bool = True) -> Obj:
    """A PDB over app=web with the status the disruption controller would have written."""
    spec = spec or {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    created = _ok(srv.http.post(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec}), 201)
    full = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0, **status,
            "observedGeneration": created["metadata"]["generation"] if observed else 0}
    return _ok(srv.http.patch(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{name}/status",
                              {"status": full}))


def evict(srv: Server, name: str, query: str = "", **body: Any) -> tuple[int, Obj, dict[str, str]]:
    data = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": name, "namespace": NS}, **body}).encode()
    req = urllib.request.Request(f"{srv.url}/api/v1/namespaces/{NS}/pods/{name}/eviction{query}", data=data,
                                 method="POST", headers={"Authorization": f"Bearer {srv.http.token}",
                                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=srv.http.ctx, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def pod(srv: Server, name: str) -> Obj | None:
    r = srv.http.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    return None if r.status_code == 404 else _ok(r)


def cleanup(srv: Server) -> None:
    srv.http.request("DELETE", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets")
    srv.http.request("DELETE", f"/api/v1/namespaces/{NS}/pods", {"gracePeriodSeconds": 0})


@pytest.fixture(autouse=True)
def _clean(srv: Server) -> Iterator[None]:
    yield
    cleanup(srv)


SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def test_without_a_budget_the_pod_is_marked_and_deleted_with_the_evictions_options(srv: Server) -> None:
    running_pod(srv, "a")
    code, body, _ = evict(srv, "a")
    assert (code, body) == (201, SUCCESS)
    p = pod(srv, "a")
    assert p is not None and p["metadata"]["deletionTimestamp"]  # bound: the kubelet has its grace period
    assert p["metadata"]["deletionGracePeriodSeconds"] == 30
    target = [c for c in p["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert target == [{"type": "DisruptionTarget", "status": "True",
                       "lastTransitionTime": target[0]["lastTransitionTime"], "reason": "EvictionByEvictionAPI",
                       "message": "Eviction API: evicting"}]
    running_pod(srv, "b")
    code, body, _ = evict(srv, "b", deleteOptions={"gracePeriodSeconds": 0})
    assert code == 201 and pod(srv, "b") is None


def test_a_budget_with_no_disruptions_allowed_refuses_with_429(srv: Server) -> None:
    running_pod(srv, "a")
    pdb(srv, "web", {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1})
    code, body, headers = evict(srv, "a")
    assert code == 429
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": VIOLATES,
                    "reason": "TooManyRequests", "details": {"causes": [{
                        "reason": "DisruptionBudget",
                        "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]},
                    "code": 429}
    assert "Retry-After" not in headers
    p = pod(srv, "a")
    assert p is not None and "deletionTimestamp" not in p["metadata"]
    assert all(c["type"] != "DisruptionTarget" for c in p["status"]["conditions"])


def test_a_budget_not_yet_observed_asks_to_retry_in_10s(srv: Server) -> None:
    running_pod(srv, "a")
    pdb(srv, "web", {"disruptionsAllowed": 1}, observed=False)
    code, body, headers = evict(srv, "a")
    assert code == 429 and headers["Retry-After"] == "10"
    assert body["details"] == {"causes": [{"reason": "DisruptionBudget",
                                           "message": "The disruption budget web is still being processed by the "
                                                      "server."}], "retryAfterSeconds": 10}


def test_an_eviction_spends_one_disruption_and_records_the_pod(srv: Server) -> None:
    running_pod(srv, "a")
    running_pod(srv, "b")
    pdb(srv, "web", {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2})
    code, _, _ = evict(srv, "a")
    assert code == 201
    status = _ok(srv.http.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/web"))["status"]
    assert status["disruptionsAllowed"] == 0 and list(status["disruptedPods"]) == ["a"]
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]
    code, body, _ = evict(srv, "b")
    assert code == 429 and body["message"] == VIOLATES
    out = srv.kubectl("get", "pdb", "web", "-n", NS).stdout.split("\n")[1].split()
    assert out[:4] == ["web", "1", "N/A", "0"]


def test_two_budgets_over_one_pod_are_refused(srv: Server) -> None:
    running_pod(srv, "a")
    pdb(srv, "one", {"disruptionsAllowed": 1})
    pdb(srv, "two", {"disruptionsAllowed": 1})
    code, body, _ = evict(srv, "a")
    assert (code, body) == (500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                                             "subresource does not support.", "code": 500})


def test_unhealthy_pods_follow_the_unhealthy_pod_eviction_policy(srv: Server) -> None:
    running_pod(srv, "sick", ready=False)
    pdb(srv, "web", {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 1},
        spec={"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}})
    assert evict(srv, "sick")[0] == 429  # IfHealthyBudget: the application is already disrupted
    cleanup(srv)
    running_pod(srv, "sick", ready=False)
    pdb(srv, "web", {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 1},
        spec={"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}, "unhealthyPodEvictionPolicy":
              "AlwaysAllow"})
    assert evict(srv, "sick", deleteOptions={"gracePeriodSeconds": 0})[0] == 201
    assert pod(srv, "sick") is None
    status = _ok(srv.http.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/web"))["status"]
    assert status["disruptionsAllowed"] == 0 and "disruptedPods" not in status  # nothing was spent


def test_pending_and_finished_pods_ignore_the_budget(srv: Server) -> None:
    pdb(srv, "web", {"disruptionsAllowed": 0})
    running_pod(srv, "pending", phase="Pending")
    running_pod(srv, "done", phase="Succeeded")
    assert evict(srv, "pending")[0] == 201
    assert evict(srv, "done")[0] == 201
    assert pod(srv, "done") is None  # finished: no grace period


def test_dry_run_changes_nothing(srv: Server) -> None:
    running_pod(srv, "a")
    pdb(srv, "web", {"disruptionsAllowed": 1})
    assert evict(srv, "a", query="?dryRun=All")[0] == 201
    p = pod(srv, "a")
    assert p is not None and "deletionTimestamp" not in p["metadata"]
    status = _ok(srv.http.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/web"))["status"]
    assert status["disruptionsAllowed"] == 1
    code, body, _ = evict(srv, "a", query="?dryRun=All", deleteOptions={"dryRun": ["Other"]})
    assert (code, body["message"]) == (500, "Non-matching dry-run options in request and content: [All] and [Other]")


def test_eviction_refusals_of_the_request_itself(srv: Server) -> None:
    running_pod(srv, "a")
    code, body, _ = evict(srv, "missing")
    assert (code, body["message"]) == (404, 'pods "missing" not found')
    data = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b"}}
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/a/eviction", data)
    assert (r.status_code, r.json()["message"]) == (400, "name in URL does not match name in Eviction object")
    code, body, _ = evict(srv, "a", deleteOptions={"preconditions": {"uid": "nope"}})
    assert code == 409 and "the UID in the precondition (nope) does not match the UID in record" in body["message"]
    # policy/v1beta1 Evictions are accepted too
    r = srv.http.post(f"/api/v1/namespaces/{NS}/pods/a/eviction",
                      {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "a"}})
    assert r.status_code == 201, r.text


def test_pdb_validation_is_kubes(srv: Server) -> None:
    def create(spec: Obj) -> str:
        r = srv.http.post(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "bad"}, "spec": spec})
        assert r.status_code == 422, r.text
        return str(r.json()["message"])

    sel = {"matchLabels": {"app": "web"}}
    assert create({"minAvailable": 1, "maxUnavailable": 1, "selector": sel}).startswith(
        'PodDisruptionBudget.policy "bad" is invalid: spec: Invalid value: policy.PodDisruptionBudgetSpec{MinAvailable:')
    assert create({"minAvailable": "120%", "selector": sel}) == (
        'PodDisruptionBudget.policy "bad" is invalid: spec.minAvailable: Invalid value: intstr.IntOrString{Type:1, '
        'IntVal:0, StrVal:"120%"}: must not be greater than 100%')
    assert create({"maxUnavailable": -1, "selector": sel}) == (
        'PodDisruptionBudget.policy "bad" is invalid: spec.maxUnavailable: Invalid value: -1: must be greater than or '
        'equal to 0')
    assert create({"minAvailable": 1, "selector": sel, "unhealthyPodEvictionPolicy": "Never"}) == (
        'PodDisruptionBudget.policy "bad" is invalid: spec.unhealthyPodEvictionPolicy: Unsupported value: "Never": '
        'supported values: "AlwaysAllow", "IfHealthyBudget"')
    assert create({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}) == (
        'PodDisruptionBudget.policy "bad" is invalid: spec.selector.matchExpressions[0].values: Required value: must '
        "be specified when `operator` is 'In' or 'NotIn'")


def replicaset(srv: Server) -> Obj:
    """The ownerReference of a ReplicaSet `web` (created if need be): drain evicts only Pods with a controller."""
    r = srv.http.get(f"/apis/apps/v1/namespaces/{NS}/replicasets/web")
    rs = r.json() if r.status_code == 200 else _ok(srv.http.post(f"/apis/apps/v1/namespaces/{NS}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        201)
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


class FakeKubelet:
    """What the node's kubelet does to a terminating Pod once its containers stopped: deletes it, grace 0."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        for _ in range(600):  # bounded: 2 minutes at most
            if self.stop.wait(0.2):
                return
            pods = self.srv.http.get(f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}").json().get("items", [])
            for p in pods:
                if p["metadata"].get("deletionTimestamp"):
                    m = p["metadata"]
                    self.srv.http.request("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                                          {"gracePeriodSeconds": 0})

    def __enter__(self) -> FakeKubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def test_kubectl_drain_evicts_the_nodes_pods_and_cordon_uncordon(srv: Server) -> None:
    ds = _ok(srv.http.post(f"/apis/apps/v1/namespaces/{NS}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        201)
    rs_owner = replicaset(srv)
    running_pod(srv, "web-a", owner=rs_owner)
    running_pod(srv, "web-b", owner=rs_owner, volumes=[{"name": "scratch", "emptyDir": {}}])
    running_pod(srv, "agent-x", labels={"app": "agent"}, owner={
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"], "controller": True})
    pdb(srv, "web", {"disruptionsAllowed": 2, "currentHealthy": 2, "desiredHealthy": 0, "expectedPods": 2},
        spec={"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}})

    with FakeKubelet(srv):
        p = srv.kubectl("drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")
    lines = p.stdout.strip().split("\n") + p.stderr.strip().split("\n")
    assert "node/node-1 cordoned" in lines
    assert f"Warning: ignoring DaemonSet-managed Pods: {NS}/agent-x" in lines
    assert {f"evicting pod {NS}/web-a", f"evicting pod {NS}/web-b", "pod/web-a evicted", "pod/web-b evicted",
            "node/node-1 drained"} <= set(lines)
    assert pod(srv, "web-a") is None and pod(srv, "web-b") is None and pod(srv, "agent-x") is not None
    node = srv.get(f"/api/v1/nodes/{NODE}")
    assert node["spec"]["unschedulable"] is True
    assert srv.kubectl("get", "node", NODE).stdout.split("\n")[1].split()[1] == "Unknown,SchedulingDisabled"

    assert srv.kubectl("uncordon", NODE).stdout == f"node/{NODE} uncordoned\n"
    assert "unschedulable" not in srv.get(f"/api/v1/nodes/{NODE}")["spec"]
    assert srv.kubectl("cordon", NODE).stdout == f"node/{NODE} cordoned\n"
    assert srv.get(f"/api/v1/nodes/{NODE}")["spec"]["unschedulable"] is True
    srv.kubectl("uncordon", NODE)


def test_kubectl_drain_waits_on_a_budget_that_allows_nothing(srv: Server) -> None:
    running_pod(srv, "web-c", owner=replicaset(srv))
    pdb(srv, "web", {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1})
    p = srv.kubectl("drain", NODE, "--ignore-daemonsets", "--timeout=2s", check=False)
    assert p.returncode != 0
    assert (f'error when evicting pods/"web-c" -n "{NS}" (will retry after 5s): {VIOLATES}') in p.stderr
    assert pod(srv, "web-c") is not None
    srv.kubectl("uncordon", NODE)


def test_admission_policies_see_evictions_and_bindings(srv: Server) -> None:
    """A ValidatingAdmissionPolicy on pods/eviction (an operator guarding its Pods) refuses the
    Eviction itself, as kube admits it as a create of the subresource; the Pod stays."""
    running_pod(srv, "guarded", labels={"app": "guarded"})
    vap = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": "no-evicting-guarded"},
           "spec": {"matchConstraints": {"resourceRules": [{
               "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction", "pods/binding"],
               "operations": ["CREATE"]}]},
               "validations": [{"expression": "object.metadata.name != 'guarded'",
                                "message": "guarded pods stay"}]}}
    _ok(srv.http.post("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", vap), 201)
    _ok(srv.http.post("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "no-evicting-guarded"},
        "spec": {"policyName": "no-evicting-guarded", "validationActions": ["Deny"]}}), 201)
    try:
        code, body, _ = evict(srv, "guarded", query="?dryRun=All")
        for _ in range(50):  # the policy is compiled moments after it is written
            if code != 201:
                break
            time.sleep(0.1)
            code, body, _ = evict(srv, "guarded", query="?dryRun=All")
        code, body, _ = evict(srv, "guarded")
        assert code == 422 and body["message"].endswith(
            "ValidatingAdmissionPolicy 'no-evicting-guarded' with binding 'no-evicting-guarded' denied request: "
            "guarded pods stay"), body
        r = srv.http.post(f"/api/v1/namespaces/{NS}/bindings", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "guarded"}, "target": {"name": "n2"}})
        assert r.status_code == 422, r.text
        p = pod(srv, "guarded")
        assert p is not None and "deletionTimestamp" not in p["metadata"]
        running_pod(srv, "free", labels={"app": "free"})
        assert evict(srv, "free")[0] == 201
    finally:
        srv.http.delete("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/no-evicting-guarded")
        srv.http.delete("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/no-evicting-guarded")


def test_a_terminating_pod_outlives_its_status_updates_until_the_kubelet_deletes_it(srv: Server) -> None:
    """An evicted Pod terminates for its grace period: the kubelet's status writes meanwhile keep it
    (kube's shouldDeleteDuringUpdate), its final delete (grace 0) removes it; with a finalizer, that
    delete leaves it for the finalizer's removal."""
    running_pod(srv, "slow")
    assert evict(srv, "slow")[0] == 201
    _ok(srv.http.patch(f"/api/v1/namespaces/{NS}/pods/slow/status", {"status": {"phase": "Running",
                                                                                "message": "stopping"}}))
    p = pod(srv, "slow")
    assert p is not None and p["status"]["message"] == "stopping"
    srv.http.request("DELETE", f"/api/v1/namespaces/{NS}/pods/slow", {"gracePeriodSeconds": 0})
    assert pod(srv, "slow") is None

    running_pod(srv, "held")
    _ok(srv.http.patch(f"/api/v1/namespaces/{NS}/pods/held", {"metadata": {"finalizers": ["test/hold"]}}))
    assert evict(srv, "held")[0] == 201
    srv.http.request("DELETE", f"/api/v1/namespaces/{NS}/pods/held", {"gracePeriodSeconds": 0})
    p = pod(srv, "held")
    assert p is not None and p["metadata"]["deletionGracePeriodSeconds"] == 0
    _ok(srv.http.patch(f"/api/v1/namespaces/{NS}/pods/held", {"metadata": {"finalizers": None}}))
    assert pod(srv, "held") is None


def test_kubectl_create_raw_evicts(srv: Server) -> None:
    running_pod(srv, "raw")
    body = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "raw", "namespace": NS},
                       "deleteOptions": {"gracePeriodSeconds": 0}})
    out = srv.kubectl("create", "--raw", f"/api/v1/namespaces/{NS}/pods/raw/eviction", "-f", "-", stdin=body).stdout
    assert json.loads(out) == SUCCESS
    assert pod(srv, "raw") is None
    running_pod(srv, "raw2")
    pdb(srv, "web", {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1})
    p = srv.kubectl("create", "--raw", f"/api/v1/namespaces/{NS}/pods/raw2/eviction", "-f", "-", check=False,
                    stdin=body.replace('"raw"', '"raw2"'))
    assert p.returncode == 1 and p.stderr == f"Error from server (TooManyRequests): {VIOLATES}\n"
