"""RBAC over the wire: users with client certificates do exactly what their roles allow, and get
kube-apiserver's 403 for anything else; escalation is refused; reviews and kubectl agree."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.authentication.tls import issue_client_cert
from isthmus.apiserver.kubeconfig import kubeconfig_dict, write_kubeconfig
from isthmus.apiserver.server import ApiServer

TOKEN = "rbac-admin-token"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
Obj = dict[str, Any]


class Client:
    """One user of the server: a client certificate (CN = name, O = groups), or the admin token."""

    def __init__(self, srv: ApiServer, tmp: Path, user: str | None, groups: tuple[str, ...] = ()) -> None:
        assert srv.ca_pem is not None and srv.data_dir is not None
        self.srv = srv
        self.ssl = ssl.create_default_context(cadata=srv.ca_pem.decode())
        self.headers = {"Authorization": f"Bearer {TOKEN}"} if user is None else {}
        self.cert: tuple[bytes, bytes] | None = None
        if user is not None:
            self.cert = issue_client_cert(srv.data_dir / "tls", user, groups)
            d = tmp / f"cert-{user.replace(':', '_')}"
            d.mkdir(exist_ok=True)
            (d / "c.pem").write_bytes(self.cert[0])
            (d / "k.pem").write_bytes(self.cert[1])
            self.ssl.load_cert_chain(d / "c.pem", d / "k.pem")

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json"
                   ) -> tuple[int, Any]:
        headers = dict(self.headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        async with aiohttp.ClientSession() as s, s.request(method, self.srv.url + path, data=data, headers=headers,
                                                           ssl=self.ssl) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.call("GET", path)

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        code, out = await self.call(method, path, body)
        assert code in (200, 201), (code, out)
        return out


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def role(name: str, *rules: Obj, namespace: str | None = None) -> Obj:
    kind = "Role" if namespace else "ClusterRole"
    meta: Obj = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": list(rules)}


def binding(name: str, role_kind: str, role_name: str, *subjects: Obj, namespace: str | None = None) -> Obj:
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    meta: Obj = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"kind": role_kind, "name": role_name}, "subjects": list(subjects)}


def user(name: str) -> Obj:
    return {"kind": "User", "name": name}


def rule(verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None) -> Obj:
    out: Obj = {"verbs": verbs, "apiGroups": groups, "resources": resources}
    if names:
        out["resourceNames"] = names
    return out


async def setup_team(admin: Client) -> None:
    await admin.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    for ns in ("team", "default"):
        await admin.ok("POST", f"/api/v1/namespaces/{ns}/configmaps",
                       {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


def forbidden(message: str, name: str, kind: str, group: str = "") -> Obj:
    details: Obj = {k: v for k, v in (("name", name), ("group", group), ("kind", kind)) if v}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Forbidden", "details": details, "code": 403}


async def test_bootstrap_policy_is_kubes(srv: ApiServer, tmp_path: Path) -> None:
    admin = Client(srv, tmp_path, None)
    roles = {r["metadata"]["name"]: r for r in (await admin.ok("GET", f"{RBAC}/clusterroles"))["items"]}
    for name in ("cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user",
                 "system:public-info-viewer"):
        m = roles[name]["metadata"]
        assert m["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"  # edit and view: aggregate-to-* too
        assert m["annotations"] == {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    assert roles["cluster-admin"]["rules"] == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                                               {"verbs": ["*"], "nonResourceURLs": ["*"]}]
    bindings = {b["metadata"]["name"]: b for b in (await admin.ok("GET", f"{RBAC}/clusterrolebindings"))["items"]}
    assert bindings["cluster-admin"]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]
    assert [s["name"] for s in bindings["system:public-info-viewer"]["subjects"]] == [
        "system:authenticated", "system:unauthenticated"]
    assert [s["name"] for s in bindings["system:basic-user"]["subjects"]] == ["system:authenticated"]
    # A restart keeps them, and puts back what an admin took from an autoupdated role.
    del roles["system:basic-user"]["rules"][1]
    await admin.ok("PUT", f"{RBAC}/clusterroles/system:basic-user", roles["system:basic-user"])
    await srv.stop()
    await srv.start()
    again = await admin.ok("GET", f"{RBAC}/clusterroles/system:basic-user")
    assert {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]} in \
        again["rules"]


async def test_a_role_allows_exactly_its_verbs(srv: ApiServer, tmp_path: Path) -> None:
    admin, alice = Client(srv, tmp_path, None), Client(srv, tmp_path, "alice")
    await setup_team(admin)
    await admin.ok("POST", f"{RBAC}/namespaces/team/roles",
                   role("cm-reader", rule(["get", "list"], [""], ["configmaps"]), namespace="team"))
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-reads", "Role", "cm-reader", user("alice"), namespace="team"))
    assert (await alice.get("/api/v1/namespaces/team/configmaps/x"))[0] == 200
    assert (await alice.get("/api/v1/namespaces/team/configmaps"))[0] == 200
    # One verb outside the role, the same verb in another namespace, and at the cluster scope.
    code, body = await alice.post("/api/v1/namespaces/team/configmaps",
                                  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}})
    assert code == 403
    assert body == forbidden('configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" '
                             'in the namespace "team"', "", "configmaps")
    code, body = await alice.get("/api/v1/namespaces/default/configmaps/x")
    assert body == forbidden('configmaps "x" is forbidden: User "alice" cannot get resource "configmaps" in API group '
                             '"" in the namespace "default"', "x", "configmaps")
    code, body = await alice.get("/api/v1/configmaps")
    assert body["message"] == ('configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" '
                               "at the cluster scope")
    # A watch is its own verb, and so is deleting a collection.
    code, body = await alice.get("/api/v1/namespaces/team/configmaps?watch=1")
    assert code == 403 and 'cannot watch resource "configmaps"' in body["message"]
    code, body = await alice.call("DELETE", "/api/v1/namespaces/team/configmaps")
    assert code == 403 and 'cannot deletecollection resource "configmaps"' in body["message"]
    # An unknown resource is forbidden before it is unknown, as kube authorizes before routing.
    code, body = await alice.get("/apis/example.io/v1/namespaces/team/widgets")
    assert code == 403 and 'resource "widgets" in API group "example.io"' in body["message"]
    # Revoking is immediate: the index follows the store.
    await admin.ok("DELETE", f"{RBAC}/namespaces/team/rolebindings/alice-reads")
    assert (await alice.get("/api/v1/namespaces/team/configmaps/x"))[0] == 403


async def test_cluster_role_binding_scope_groups_and_service_accounts(srv: ApiServer, tmp_path: Path) -> None:
    admin = Client(srv, tmp_path, None)
    await setup_team(admin)
    await admin.ok("POST", f"{RBAC}/clusterroles", role("ns-reader", rule(["list"], [""], ["namespaces"])))
    await admin.ok("POST", f"{RBAC}/clusterrolebindings",
                   binding("ops-read-ns", "ClusterRole", "ns-reader", {"kind": "Group", "name": "ops"}))
    ops = Client(srv, tmp_path, "olga", ("ops",))
    assert (await ops.get("/api/v1/namespaces"))[0] == 200
    # A ServiceAccount subject of a RoleBinding is in the binding's namespace unless it says otherwise.
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("robot-view", "ClusterRole", "view", {"kind": "ServiceAccount", "name": "robot"},
                           namespace="team"))
    robot = Client(srv, tmp_path, "system:serviceaccount:team:robot", ("system:serviceaccounts",))
    other = Client(srv, tmp_path, "system:serviceaccount:default:robot", ("system:serviceaccounts",))
    assert (await robot.get("/api/v1/namespaces/team/configmaps/x"))[0] == 200
    assert (await robot.get("/api/v1/namespaces/default/configmaps/x"))[0] == 403
    assert (await other.get("/api/v1/namespaces/team/configmaps/x"))[0] == 403
    # view reads no secrets.
    code, body = await robot.get("/api/v1/namespaces/team/secrets")
    assert code == 403
    assert body["message"] == ('secrets is forbidden: User "system:serviceaccount:team:robot" cannot list resource '
                               '"secrets" in API group "" in the namespace "team"')
    # A binding whose role is missing says so in the denial.
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("ghostly", "Role", "ghost", user("gus"), namespace="team"))
    code, body = await Client(srv, tmp_path, "gus").get("/api/v1/namespaces/team/pods")
    assert body["message"].endswith('in the namespace "team": RBAC: role.rbac.authorization.k8s.io "ghost" not found')


async def test_resource_names_and_subresources(srv: ApiServer, tmp_path: Path) -> None:
    admin, bob = Client(srv, tmp_path, None), Client(srv, tmp_path, "bob")
    await setup_team(admin)
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "clusters.example.io"},
           "spec": {"group": "example.io", "scope": "Cluster",
                    "names": {"plural": "clusters", "singular": "cluster", "kind": "Cluster"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    await admin.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for _ in range(100):
        if (await admin.get("/apis/example.io/v1/clusters"))[0] == 200:
            break
        await asyncio.sleep(0.05)
    for name in ("c1", "c2"):
        await admin.ok("POST", "/apis/example.io/v1/clusters",
                       {"apiVersion": "example.io/v1", "kind": "Cluster", "metadata": {"name": name}})
    await admin.ok("POST", f"{RBAC}/clusterroles", role(
        "c1-status",
        rule(["get", "patch"], ["example.io"], ["clusters/status"], ["c1"]),
        rule(["get"], ["example.io"], ["clusters/*"]),  # kube has no <resource>/* wildcard: matches nothing
        rule(["get"], [""], ["*/status"]),
    ))
    await admin.ok("POST", f"{RBAC}/clusterrolebindings", binding("bob", "ClusterRole", "c1-status", user("bob")))
    patch = {"status": {"ready": True}}
    code, _ = await bob.call("PATCH", "/apis/example.io/v1/clusters/c1/status", patch, "application/merge-patch+json")
    assert code == 200
    code, body = await bob.call("PATCH", "/apis/example.io/v1/clusters/c2/status", patch,
                                "application/merge-patch+json")
    assert body == forbidden('clusters.example.io "c2" is forbidden: User "bob" cannot patch resource '
                             '"clusters/status" in API group "example.io" at the cluster scope', "c2", "clusters",
                             "example.io")
    code, body = await bob.call("PATCH", "/apis/example.io/v1/clusters/c1", patch, "application/merge-patch+json")
    assert code == 403 and 'cannot patch resource "clusters" in API group "example.io"' in body["message"]
    # resourceNames never match a list.
    assert (await bob.get("/apis/example.io/v1/clusters"))[0] == 403
    # `*/status` matches every status subresource of its groups; `clusters/*` nothing.
    assert (await bob.get("/api/v1/namespaces/team/pods/p/status"))[0] == 404  # allowed, then not found
    assert (await bob.get("/apis/example.io/v1/clusters/c2/status"))[0] == 403


async def test_node_subresources_are_authorized(srv: ApiServer, tmp_path: Path) -> None:
    admin, alice = Client(srv, tmp_path, None), Client(srv, tmp_path, "alice")
    await setup_team(admin)
    await admin.ok("POST", "/api/v1/namespaces/team/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    await admin.ok("POST", f"{RBAC}/namespaces/team/roles",
                   role("pods", rule(["get"], [""], ["pods"]), namespace="team"))
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice", "Role", "pods", user("alice"), namespace="team"))
    code, body = await alice.get("/api/v1/namespaces/team/pods/p/log")
    assert body == forbidden('pods "p" is forbidden: User "alice" cannot get resource "pods/log" in API group "" in '
                             'the namespace "team"', "p", "pods")
    code, body = await alice.post("/api/v1/namespaces/team/pods/p/exec?command=ls", {})
    assert code == 403 and 'cannot create resource "pods/exec"' in body["message"]
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-view", "ClusterRole", "view", user("alice"), namespace="team"))
    code, _ = await alice.get("/api/v1/namespaces/team/pods/p/log")
    assert code == 200  # a pod without a node has an empty log


async def test_non_resource_urls(srv: ApiServer, tmp_path: Path) -> None:
    admin = Client(srv, tmp_path, None)
    dave = Client(srv, tmp_path, "dave")
    # Every authenticated user may discover the API and read the version (system:discovery).
    for path in ("/api", "/apis", "/api/v1", "/version", "/healthz", "/openapi/v2"):
        assert (await dave.get(path))[0] == 200, path
    code, body = await dave.get("/metrics")
    assert body == forbidden('forbidden: User "dave" cannot get path "/metrics"', "", "")
    code, body = await dave.post("/api", {})
    assert body["message"] == 'forbidden: User "dave" cannot post path "/api"'
    await admin.ok("POST", f"{RBAC}/clusterroles", role("logs", {"verbs": ["get"], "nonResourceURLs": ["/logs/*"]}))
    await admin.ok("POST", f"{RBAC}/clusterrolebindings", binding("dave-logs", "ClusterRole", "logs", user("dave")))
    assert (await dave.get("/logs/kube.log"))[0] == 404  # allowed; this server has no such path
    assert (await dave.get("/logs"))[0] == 403
    # A Role cannot name non-resource URLs (they have no namespace).
    code, body = await admin.post(f"{RBAC}/namespaces/default/roles",
                                  role("bad", {"verbs": ["get"], "nonResourceURLs": ["/x"]}, namespace="default"))
    assert code == 422
    assert body["message"] == ('Role.rbac.authorization.k8s.io "bad" is invalid: rules[0].nonResourceURLs: Invalid '
                               'value: []string{"/x"}: namespaced rules cannot apply to non-resource URLs')


async def test_escalation_is_refused(srv: ApiServer, tmp_path: Path) -> None:
    admin, alice = Client(srv, tmp_path, None), Client(srv, tmp_path, "alice")
    await setup_team(admin)
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-admin", "ClusterRole", "admin", user("alice"), namespace="team"))
    # A namespace admin grants what they hold...
    await alice.ok("POST", f"{RBAC}/namespaces/team/roles",
                   role("cm", rule(["get"], [""], ["configmaps"]), namespace="team"))
    await alice.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("bob-cm", "Role", "cm", user("bob"), namespace="team"))
    await alice.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("bob-edit", "ClusterRole", "edit", user("bob"), namespace="team"))
    # ...and nothing more: not in a role,
    code, body = await alice.post(f"{RBAC}/namespaces/team/roles", role(
        "more", rule(["get", "list"], [""], ["nodes"]), rule(["get"], [""], ["configmaps"]), namespace="team"))
    assert body == forbidden(
        'roles.rbac.authorization.k8s.io "more" is forbidden: user "alice" (groups=["system:authenticated"]) is '
        'attempting to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["nodes"], '
        'Verbs:["get" "list"]}', "more", "roles", "rbac.authorization.k8s.io")
    # not by updating one she may edit,
    cm = await alice.ok("GET", f"{RBAC}/namespaces/team/roles/cm")
    cm["rules"].append(rule(["*"], ["*"], ["*"]))
    code, body = await alice.call("PUT", f"{RBAC}/namespaces/team/roles/cm", cm)
    assert code == 403 and "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}" in body["message"]
    # and not through a binding to a role she does not hold.
    code, body = await alice.post(f"{RBAC}/namespaces/team/rolebindings",
                                  binding("bob-root", "ClusterRole", "cluster-admin", user("bob"), namespace="team"))
    assert body["message"] == (
        'rolebindings.rbac.authorization.k8s.io "bob-root" is forbidden: user "alice" (groups=["system:authenticated"]) '
        'is attempting to grant RBAC permissions not currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}')
    code, body = await alice.post(f"{RBAC}/namespaces/team/rolebindings",
                                  binding("bob-ghost", "Role", "ghost", user("bob"), namespace="team"))
    assert (code, body["message"]) == (404, 'roles.rbac.authorization.k8s.io "ghost" not found')
    # The escalate and bind verbs lift the checks, as in kube.
    await admin.ok("POST", f"{RBAC}/clusterroles", role(
        "delegate", rule(["escalate"], ["rbac.authorization.k8s.io"], ["roles"]),
        rule(["bind"], ["rbac.authorization.k8s.io"], ["clusterroles"], ["cluster-admin"])))
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-delegate", "ClusterRole", "delegate", user("alice"), namespace="team"))
    await alice.ok("POST", f"{RBAC}/namespaces/team/roles", role("more", rule(["get"], [""], ["nodes"]),
                                                                  namespace="team"))
    await alice.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("bob-root", "ClusterRole", "cluster-admin", user("bob"), namespace="team"))
    # system:masters needs neither.
    await admin.ok("POST", f"{RBAC}/clusterroles", role("anything", rule(["*"], ["*"], ["*"])))


async def test_bindings_are_validated(srv: ApiServer, tmp_path: Path) -> None:
    admin = Client(srv, tmp_path, None)
    b = binding("b", "Role", "r", {"kind": "Robot", "name": "x"})
    code, body = await admin.post(f"{RBAC}/clusterrolebindings", b)
    assert code == 422
    assert body["message"] == ('ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported '
                               'value: "Role": supported values: "ClusterRole", subjects[0].kind: Unsupported value: '
                               '"Robot": supported values: "ServiceAccount", "User", "Group"]')
    out = await admin.ok("POST", f"{RBAC}/clusterrolebindings",
                         binding("b", "ClusterRole", "view", user("u"), {"kind": "ServiceAccount", "name": "s",
                                                                         "namespace": "default"}))
    assert out["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
    assert out["subjects"][0]["apiGroup"] == "rbac.authorization.k8s.io" and "apiGroup" not in out["subjects"][1]
    out["roleRef"]["name"] = "edit"
    code, body = await admin.call("PUT", f"{RBAC}/clusterrolebindings/b", out)
    assert code == 422 and body["message"].endswith("cannot change roleRef")


async def test_access_reviews_answer_from_rbac(srv: ApiServer, tmp_path: Path) -> None:
    admin, alice = Client(srv, tmp_path, None), Client(srv, tmp_path, "alice")
    await setup_team(admin)
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-view", "ClusterRole", "view", user("alice"), namespace="team"))
    ssar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "team"}}}
    out = await alice.ok("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssar)
    assert out["status"] == {"allowed": True, "reason": 'RBAC: allowed by RoleBinding "alice-view/team" of ClusterRole '
                                                        '"view" to User "alice"'}
    ssar["spec"]["resourceAttributes"]["namespace"] = "default"
    out = await alice.ok("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssar)
    assert out["status"] == {"allowed": False}
    # Asking about others is for those allowed to create SubjectAccessReviews.
    sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
           "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "team"}}}
    code, _ = await alice.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert code == 403
    assert (await admin.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar))["status"]["allowed"]
    lsar = {**sar, "kind": "LocalSubjectAccessReview", "metadata": {"namespace": "team"}}
    out = await admin.ok("POST", "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews", lsar)
    assert out["status"]["allowed"] is True
    rules = await alice.ok("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "team"}})
    status = rules["status"]
    assert status["incomplete"] is False and rules["spec"] == {}
    assert {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]} in status["resourceRules"]
    assert any("configmaps" in r.get("resources", []) and r["verbs"] == ["get", "list", "watch"]
               for r in status["resourceRules"])
    assert {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]} in \
        status["nonResourceRules"]
    code, body = await alice.post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {}})
    assert (code, body["message"]) == (400, "no namespace on request")


async def test_always_allow_mode(tmp_path: Path) -> None:
    server = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True, authorization_mode="AlwaysAllow")
    await server.start()
    try:
        anyone = Client(server, tmp_path, "anyone")
        assert (await anyone.get("/api/v1/namespaces/default/secrets"))[0] == 200
        # The bootstrap policy is there all the same, as kube creates it whatever the mode.
        assert (await anyone.get(f"{RBAC}/clusterroles/cluster-admin"))[0] == 200
    finally:
        await server.stop()


async def test_in_process_open_server_is_masters(tmp_path: Path) -> None:
    """Without a token everyone is system:masters: nothing is forbidden."""
    server = ApiServer()
    await server.start()
    try:
        async with aiohttp.ClientSession() as s, s.get(server.url + "/api/v1/secrets") as r:
            assert r.status == 200
    finally:
        await server.stop()


# ------------------------------------------------------------------ kubectl auth can-i


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig}.cache", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_auth_can_i(srv: ApiServer, tmp_path: Path) -> None:
    admin, alice = Client(srv, tmp_path, None), Client(srv, tmp_path, "alice")
    await setup_team(admin)
    await admin.ok("POST", f"{RBAC}/namespaces/team/roles", role(
        "cm", rule(["get", "list"], [""], ["configmaps"]), rule(["update"], [""], ["configmaps"], ["x"]),
        namespace="team"))
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-cm", "Role", "cm", user("alice"), namespace="team"))
    assert alice.cert is not None
    cfg = tmp_path / "alice.kubeconfig"
    write_kubeconfig(cfg, kubeconfig_dict("alice", srv.url, ca_pem=srv.ca_pem, client_cert=alice.cert,
                                          namespace="team"))
    assert (await kubectl(cfg, "auth", "can-i", "list", "configmaps"))[:2] == (0, "yes\n")
    assert (await kubectl(cfg, "auth", "can-i", "update", "configmaps/x"))[:2] == (0, "yes\n")
    assert (await kubectl(cfg, "auth", "can-i", "update", "configmaps/y"))[:2] == (1, "no\n")
    assert (await kubectl(cfg, "auth", "can-i", "create", "configmaps"))[:2] == (1, "no\n")
    assert (await kubectl(cfg, "auth", "can-i", "list", "configmaps", "-n", "default"))[:2] == (1, "no\n")
    assert (await kubectl(cfg, "auth", "can-i", "get", "/healthz"))[:2] == (0, "yes\n")
    assert (await kubectl(cfg, "auth", "can-i", "get", "/metrics"))[:2] == (1, "no\n")
    code, out, err = await kubectl(cfg, "auth", "can-i", "--list")
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert ["configmaps", "[]", "[]", "[get", "list]"] in lines
    assert ["configmaps", "[]", "[x]", "[update]"] in lines
    assert ["[/healthz]", "[]", "[get]"] in lines  # a non-resource row: no resource, the URL, no names, verbs
    assert not any(line[0].startswith("secrets") for line in lines if line)
    # What kubectl shows of a refusal is kube's Status message.
    code, _, err = await kubectl(cfg, "get", "configmaps", "-n", "default")
    assert code == 1
    assert ('Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource "configmaps" '
            'in API group "" in the namespace "default"') in err


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_as_a_namespace_admin(srv: ApiServer, tmp_path: Path) -> None:
    """kubectl's generators (protobuf bodies) create roles and bindings under the same checks."""
    admin, alice = Client(srv, tmp_path, None), Client(srv, tmp_path, "alice")
    await setup_team(admin)
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("alice-admin", "ClusterRole", "admin", user("alice"), namespace="team"))
    assert alice.cert is not None
    cfg = tmp_path / "alice.kubeconfig"
    write_kubeconfig(cfg, kubeconfig_dict("alice", srv.url, ca_pem=srv.ca_pem, client_cert=alice.cert,
                                          namespace="team"))
    code, _, err = await kubectl(cfg, "create", "role", "pod-reader", "--verb=get,list", "--resource=pods")
    assert code == 0, err
    code, _, err = await kubectl(cfg, "create", "rolebinding", "bob-reads", "--role=pod-reader", "--user=bob")
    assert code == 0, err
    code, _, err = await kubectl(cfg, "create", "role", "node-reader", "--verb=get", "--resource=nodes")
    assert code == 1
    assert ('roles.rbac.authorization.k8s.io "node-reader" is forbidden: user "alice" (groups=["system:authenticated"]) '
            'is attempting to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["nodes"], '
            'Verbs:["get"]}') in err
    code, _, err = await kubectl(cfg, "create", "clusterrolebinding", "x", "--clusterrole=view", "--user=bob")
    assert code == 1 and 'cannot create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at ' \
        "the cluster scope" in err


async def test_service_account_tokens_are_held_to_their_roles(srv: ApiServer, tmp_path: Path) -> None:
    """A ServiceAccount's token (TokenRequest) authenticates as its ServiceAccount, whose bindings
    decide: one verb outside its role is kube's 403 naming it."""
    admin = Client(srv, tmp_path, None)
    await setup_team(admin)
    await admin.ok("POST", "/api/v1/namespaces/team/serviceaccounts",
                   {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}})
    await admin.ok("POST", f"{RBAC}/namespaces/team/roles",
                   role("cm-rw", rule(["get", "list", "watch", "update"], [""], ["configmaps"]), namespace="team"))
    await admin.ok("POST", f"{RBAC}/namespaces/team/rolebindings",
                   binding("bot", "Role", "cm-rw", {"kind": "ServiceAccount", "name": "bot"}, namespace="team"))
    tr = await admin.ok("POST", "/api/v1/namespaces/team/serviceaccounts/bot/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    bot = Client(srv, tmp_path, None)
    bot.headers = {"Authorization": f"Bearer {tr['status']['token']}"}
    cm = await bot.ok("GET", "/api/v1/namespaces/team/configmaps/x")
    cm["data"] = {"k": "v"}
    await bot.ok("PUT", "/api/v1/namespaces/team/configmaps/x", cm)
    code, body = await bot.call("DELETE", "/api/v1/namespaces/team/configmaps/x")
    assert (code, body["message"]) == (403, 'configmaps "x" is forbidden: User "system:serviceaccount:team:bot" cannot '
                                            'delete resource "configmaps" in API group "" in the namespace "team"')
    # Its groups count too: system:serviceaccounts:<ns> may be bound as a Group.
    await admin.ok("POST", f"{RBAC}/clusterroles", role("sa-reader", rule(["list"], [""], ["secrets"])))
    await admin.ok("POST", f"{RBAC}/clusterrolebindings", binding(
        "team-sas", "ClusterRole", "sa-reader", {"kind": "Group", "name": "system:serviceaccounts:team"}))
    assert (await bot.get("/api/v1/secrets"))[0] == 200
