"""Impersonation over the wire, as kube-apiserver does it: `kubectl --as` acts as the user it names,
held to that user's permissions, and only a requestor allowed to `impersonate` may ask."""

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
from isthmus.apiserver.server import ApiServer

TOKEN = "impersonation-admin-token"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
Obj = dict[str, Any]


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _ssl(srv: ApiServer, tmp: Path, user: str | None, groups: tuple[str, ...] = ()) -> ssl.SSLContext:
    assert srv.ca_pem is not None and srv.data_dir is not None
    ctx = ssl.create_default_context(cadata=srv.ca_pem.decode())
    if user is not None:
        cert, key = issue_client_cert(srv.data_dir / "tls", user, groups)
        (tmp / f"{user}.crt").write_bytes(cert)
        (tmp / f"{user}.key").write_bytes(key)
        ctx.load_cert_chain(tmp / f"{user}.crt", tmp / f"{user}.key")
    return ctx


async def call(srv: ApiServer, ctx: ssl.SSLContext, method: str, path: str, body: Any = None,
               headers: list[tuple[str, str]] | None = None, admin: bool = False) -> tuple[int, Any]:
    hdrs: list[tuple[str, str]] = list(headers or [])
    if admin:
        hdrs.append(("Authorization", f"Bearer {TOKEN}"))
    if body is not None:
        hdrs.append(("Content-Type", "application/json"))
    async with aiohttp.ClientSession() as s, s.request(
            method, srv.url + path, data=None if body is None else json.dumps(body), headers=hdrs, ssl=ctx) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text


async def admin_ok(srv: ApiServer, tmp: Path, method: str, path: str, body: Any) -> None:
    code, out = await call(srv, _ssl(srv, tmp, None), method, path, body, admin=True)
    assert code in (200, 201), (code, out)


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not installed (the Makefile's test dependencies include it)")
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig}.cache", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def setup(srv: ApiServer, tmp: Path) -> None:
    await admin_ok(srv, tmp, "POST", "/api/v1/namespaces",
                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    await admin_ok(srv, tmp, "POST", "/api/v1/namespaces/team/configmaps",
                   {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


def status(message: str, reason: str, code: int, details: Obj) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details, "code": code}


async def test_kubectl_as_a_service_account_tells_the_truth(srv: ApiServer, tmp_path: Path) -> None:
    """The admin's `--as=system:serviceaccount:...` runs as the ServiceAccount, with its groups; can-i
    says what the ServiceAccount may do, not what the admin may."""
    await setup(srv, tmp_path)
    cfg = tmp_path / "admin.kubeconfig"
    srv.write_kubeconfig(cfg)
    sa = "system:serviceaccount:team:robot"
    code, out, err = await kubectl(cfg, "auth", "whoami", f"--as={sa}", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["status"]["userInfo"] == {
        "username": sa, "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]}
    assert (await kubectl(cfg, "auth", "can-i", "list", "configmaps", "-n", "team", f"--as={sa}"))[:2] == (1, "no\n")
    assert (await kubectl(cfg, "auth", "can-i", "list", "configmaps", "-n", "team"))[:2] == (0, "yes\n")
    code, _, err = await kubectl(cfg, "get", "configmaps", "-n", "team", f"--as={sa}")
    assert code == 1
    assert ('configmaps is forbidden: User "system:serviceaccount:team:robot" cannot list resource "configmaps" '
            'in API group "" in the namespace "team"') in err
    await admin_ok(srv, tmp_path, "POST", f"{RBAC}/namespaces/team/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "robot-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]})
    assert (await kubectl(cfg, "auth", "can-i", "list", "configmaps", "-n", "team", f"--as={sa}"))[:2] == (0, "yes\n")
    assert (await kubectl(cfg, "auth", "can-i", "delete", "configmaps", "-n", "team", f"--as={sa}"))[:2] == (1, "no\n")
    code, out, err = await kubectl(cfg, "get", "configmap", "x", "-n", "team", f"--as={sa}", "-o", "name")
    assert (code, out) == (0, "configmap/x\n"), err
    code, body = await call(srv, _ssl(srv, tmp_path, None), "GET",
                            "/api/v1/namespaces/team/configmaps?watch=true&timeoutSeconds=1&fieldSelector=metadata.name=x",
                            headers=[("Impersonate-User", sa)], admin=True)  # a watch, on aiohttp's path
    assert code == 200, body
    assert (body["type"], body["object"]["metadata"]["name"]) == ("ADDED", "x")  # one event: the body is its JSON
    # A user and groups of one's choosing, with the groups kube adds.
    code, out, err = await kubectl(cfg, "auth", "whoami", "--as=jane", "--as-group=devs", "--as-group=ops",
                                   "--as-uid=1234", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["status"]["userInfo"] == {
        "username": "jane", "uid": "1234", "groups": ["devs", "ops", "system:authenticated"]}


async def test_only_who_may_impersonate_does(srv: ApiServer, tmp_path: Path) -> None:
    await setup(srv, tmp_path)
    bob = _ssl(srv, tmp_path, "bob")
    code, out = await call(srv, bob, "GET", "/api/v1/namespaces/team/configmaps", headers=[("Impersonate-User", "alice")])
    assert (code, out) == (403, status(
        'users "alice" is forbidden: User "bob" cannot impersonate resource "users" in API group "" at the cluster '
        'scope', "Forbidden", 403, {"name": "alice", "kind": "users"}))
    code, out = await call(srv, bob, "GET", "/api/v1/namespaces/team/configmaps",
                           headers=[("Impersonate-User", "system:serviceaccount:team:robot")])
    assert (code, out) == (403, status(
        'serviceaccounts "robot" is forbidden: User "bob" cannot impersonate resource "serviceaccounts" in API '
        'group "" in the namespace "team"', "Forbidden", 403, {"name": "robot", "kind": "serviceaccounts"}))
    # bob may be alice (only alice) and may claim one scope: the request is then alice's, held to
    # alice's permissions.
    await admin_ok(srv, tmp_path, "POST", f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "be-alice"},
        "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["alice"]},
                  {"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/example.com/scope"],
                   "verbs": ["impersonate"], "resourceNames": ["read"]}]})
    await admin_ok(srv, tmp_path, "POST", f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bob-alice"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "be-alice"},
        "subjects": [{"kind": "User", "name": "bob"}]})
    code, out = await call(srv, bob, "GET", "/api/v1/namespaces/team/configmaps", headers=[("Impersonate-User", "alice")])
    assert (code, out["message"]) == (403, 'configmaps is forbidden: User "alice" cannot list resource "configmaps" '
                                           'in API group "" in the namespace "team"')
    # A watch (served by aiohttp, not the lean path) is alice's too.
    code, out = await call(srv, bob, "GET", "/api/v1/namespaces/team/configmaps?watch=true&timeoutSeconds=1",
                           headers=[("Impersonate-User", "alice")])
    assert (code, out["message"]) == (403, 'configmaps is forbidden: User "alice" cannot watch resource "configmaps" '
                                           'in API group "" in the namespace "team"')
    code, out = await call(srv, bob, "POST", WHOAMI, {"apiVersion": "authentication.k8s.io/v1",
                                                     "kind": "SelfSubjectReview"},
                           headers=[("Impersonate-User", "alice"), ("Impersonate-Extra-Example.com%2fScope", "read")])
    assert code == 201, out
    assert out["status"]["userInfo"] == {"username": "alice", "groups": ["system:authenticated"],
                                         "extra": {"example.com/scope": ["read"]}}
    code, out = await call(srv, bob, "POST", WHOAMI, {"apiVersion": "authentication.k8s.io/v1",
                                                     "kind": "SelfSubjectReview"},
                           headers=[("Impersonate-User", "alice"), ("Impersonate-Extra-Example.com%2fScope", "write")])
    assert (code, out["message"]) == (403, 'userextras.authentication.k8s.io "write" is forbidden: User "bob" cannot '
                                           'impersonate resource "userextras/example.com/scope" in API group '
                                           '"authentication.k8s.io" at the cluster scope')
    code, out = await call(srv, bob, "GET", "/api/v1/namespaces/team/configmaps", headers=[("Impersonate-User", "carol")])
    assert (code, out["message"]) == (403, 'users "carol" is forbidden: User "bob" cannot impersonate resource "users" '
                                           'in API group "" at the cluster scope')
    # Groups without a user: kube's filter answers with a plain-text internal error.
    code, out = await call(srv, bob, "GET", "/api/v1/namespaces/team/configmaps", headers=[("Impersonate-Group", "devs")])
    assert (code, out) == (500, 'Internal Server Error: "/api/v1/namespaces/team/configmaps": requested '
                                '[{Group  devs    }] without impersonating a user')


async def test_editors_may_impersonate_service_accounts_of_their_namespace(srv: ApiServer, tmp_path: Path) -> None:
    """kube's `edit` role (system:aggregate-to-edit) grants `impersonate` on serviceaccounts."""
    await setup(srv, tmp_path)
    await admin_ok(srv, tmp_path, "POST", f"{RBAC}/namespaces/team/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "dana-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "dana"}]})
    dana = _ssl(srv, tmp_path, "dana")
    code, out = await call(srv, dana, "POST", WHOAMI, {"apiVersion": "authentication.k8s.io/v1",
                                                      "kind": "SelfSubjectReview"},
                           headers=[("Impersonate-User", "system:serviceaccount:team:default")])
    assert code == 201, out
    assert out["status"]["userInfo"]["username"] == "system:serviceaccount:team:default"
    code, out = await call(srv, dana, "GET", "/api/v1/namespaces/default/configmaps",
                           headers=[("Impersonate-User", "system:serviceaccount:default:default")])
    assert (code, out["message"]) == (403, 'serviceaccounts "default" is forbidden: User "dana" cannot impersonate '
                                           'resource "serviceaccounts" in API group "" in the namespace "default"')
