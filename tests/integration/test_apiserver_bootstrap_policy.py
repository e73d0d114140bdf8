"""kube's bootstrap policy as a user sees it with kubectl: the default roles and bindings, ClusterRole
aggregation (admin/edit/view and a user's role joining view), kube-system's authentication reader,
and the API Priority and Fairness defaults."""

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
import yaml

from isthmus.apiserver.server import ApiServer

TOKEN = "bootstrap-policy-token"
Obj = dict[str, Any]


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def kubectl(cfg: Path, *args: str, stdin: str | None = None) -> str:
    """kubectl's output; a failure fails the test with kubectl's words."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not installed (the Makefile's test dependencies include it)")
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={cfg}", f"--cache-dir={cfg}.cache", *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def get(cfg: Path, *args: str) -> Any:
    return json.loads(await kubectl(cfg, "get", *args, "-o", "json"))


async def can_i(cfg: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={cfg}", f"--cache-dir={cfg}.cache", "auth", "can-i", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return out.decode().strip()


async def until(check: Any, what: str) -> None:
    """The aggregation controller works on its own: wait (bounded) for what it should reach."""
    for _ in range(100):
        if await check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"not reached in 5 s: {what}")


async def test_admin_edit_and_view_aggregate(srv: ApiServer, tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    srv.write_kubeconfig(cfg)
    admin = yaml.safe_load(await kubectl(cfg, "get", "clusterrole", "admin", "-o", "yaml"))
    assert admin["aggregationRule"] == {"clusterRoleSelectors": [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}
    # kube's 25 rules, the matching roles by name: edit's (aggregate-to-edit's 13, then view's 10), then
    # system:aggregate-to-admin's 2.
    edit = await get(cfg, "clusterrole", "edit")
    assert len(edit["rules"]) == 23
    assert admin["rules"] == edit["rules"] + (await get(cfg, "clusterrole", "system:aggregate-to-admin"))["rules"]
    assert admin["rules"][23] == {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"],
                                  "verbs": ["create"]}
    assert {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]} in admin["rules"]
    view = await get(cfg, "clusterrole", "view")
    assert view["metadata"]["labels"] == {"kubernetes.io/bootstrapping": "rbac-defaults",
                                          "rbac.authorization.k8s.io/aggregate-to-edit": "true"}
    assert view["rules"] == (await get(cfg, "clusterrole", "system:aggregate-to-view"))["rules"]
    # A user's role labelled aggregate-to-view joins view, and through it edit and admin...
    await kubectl(cfg, "apply", "-f", "-", stdin=yaml.safe_dump({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "podtemplates-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["get", "list", "watch"]}]}))
    templates = {"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["get", "list", "watch"]}

    async def joined() -> bool:
        roles = [await get(cfg, "clusterrole", r) for r in ("view", "edit", "admin")]
        return all(templates in (r["rules"] or []) for r in roles)

    await until(joined, "podtemplates-view's rule in view, edit and admin")
    await kubectl(cfg, "create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol", "-n", "default")
    assert await can_i(cfg, "list", "podtemplates", "-n", "default", "--as=carol") == "yes"
    # ...follows its rules as they change, and leaves when its label goes.
    await kubectl(cfg, "patch", "clusterrole", "podtemplates-view", "--type=json",
                  "-p", '[{"op": "add", "path": "/rules/0/verbs/-", "value": "delete"}]')

    async def changed() -> bool:
        rules = (await get(cfg, "clusterrole", "view"))["rules"]
        return {**templates, "verbs": ["get", "list", "watch", "delete"]} in rules and templates not in rules

    await until(changed, "the changed rule in view")
    await kubectl(cfg, "label", "clusterrole", "podtemplates-view", "rbac.authorization.k8s.io/aggregate-to-view-")

    async def left() -> bool:
        rules = (await get(cfg, "clusterrole", "view"))["rules"]
        return all(r.get("resources") != ["podtemplates"] for r in rules)

    await until(left, "podtemplates-view gone from view")
    assert await can_i(cfg, "list", "podtemplates", "-n", "default", "--as=carol") == "no"
    # What a client writes into an aggregated role's rules is the controller's to overwrite.
    await kubectl(cfg, "patch", "clusterrole", "view", "--type=json", "-p", '[{"op": "remove", "path": "/rules/0"}]')

    async def restored() -> bool:
        return bool((await get(cfg, "clusterrole", "view"))["rules"] == view["rules"])

    await until(restored, "view's rules restored")


async def test_kubes_default_roles_and_bindings(srv: ApiServer, tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    srv.write_kubeconfig(cfg)
    names = (await kubectl(cfg, "get", "clusterroles", "-o", "name")).split()
    for name in ("system:auth-delegator", "system:aggregate-to-admin", "system:aggregate-to-edit",
                 "system:aggregate-to-view", "system:monitoring", "system:node", "system:node-proxier",
                 "system:node-bootstrapper", "system:kube-scheduler", "system:kube-controller-manager",
                 "system:volume-scheduler", "system:public-info-viewer", "system:service-account-issuer-discovery",
                 "system:controller:deployment-controller", "system:controller:clusterrole-aggregation-controller",
                 "system:controller:namespace-controller", "system:controller:generic-garbage-collector"):
        assert f"clusterrole.rbac.authorization.k8s.io/{name}" in names, name
    delegator = await get(cfg, "clusterrole", "system:auth-delegator")
    assert delegator["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]
    bindings = {b["metadata"]["name"]: b for b in (await get(cfg, "clusterrolebindings"))["items"]}
    assert bindings["system:monitoring"]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:monitoring"}]
    assert "subjects" not in bindings["system:node"]  # kube's, since the Node authorizer
    assert bindings["system:controller:deployment-controller"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "deployment-controller", "namespace": "kube-system"}]
    # Each controller's ServiceAccount may do what kube's controller does, and no more.
    dc = "--as=system:serviceaccount:kube-system:deployment-controller"
    assert await can_i(cfg, "update", "deployments.apps", "-A", dc) == "yes"
    assert await can_i(cfg, "create", "replicasets.apps", "-n", "default", dc) == "yes"
    assert await can_i(cfg, "create", "secrets", "-n", "default", dc) == "no"
    assert await can_i(cfg, "get", "/metrics", "--as=prometheus", "--as-group=system:monitoring") == "yes"
    assert await can_i(cfg, "get", "/metrics", "--as=prometheus") == "no"
    assert await can_i(cfg, "create", "tokenreviews.authentication.k8s.io", "--as=system:kube-scheduler") == "yes"
    # kube-system's authentication reader, and the ConfigMap it reads.
    reader = await get(cfg, "role", "extension-apiserver-authentication-reader", "-n", "kube-system")
    assert reader["rules"] == [{"apiGroups": [""], "resourceNames": ["extension-apiserver-authentication"],
                                "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    rb = await get(cfg, "rolebinding", "system::extension-apiserver-authentication-reader", "-n", "kube-system")
    assert [s["name"] for s in rb["subjects"]] == ["system:kube-controller-manager", "system:kube-scheduler"]
    cm = await get(cfg, "configmap", "extension-apiserver-authentication", "-n", "kube-system")
    assert srv.data_dir is not None
    assert cm["data"] == {"client-ca-file": (srv.data_dir / "tls" / "client-ca.crt").read_text()}
    assert await can_i(cfg, "get", "configmap/extension-apiserver-authentication", "-n", "kube-system",
                       "--as=system:kube-scheduler") == "yes"
    assert await can_i(cfg, "get", "configmap/other", "-n", "kube-system", "--as=system:kube-scheduler") == "no"


async def test_reconciled_at_start_unless_protected(srv: ApiServer, tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    srv.write_kubeconfig(cfg)
    await kubectl(cfg, "delete", "clusterrole", "system:monitoring")
    await kubectl(cfg, "patch", "clusterrolebinding", "system:kube-scheduler", "--type=json",
                  "-p", '[{"op": "remove", "path": "/subjects"}]')
    await kubectl(cfg, "annotate", "--overwrite", "clusterrole", "system:node-proxier",
                  "rbac.authorization.kubernetes.io/autoupdate=false")
    await kubectl(cfg, "patch", "clusterrole", "system:node-proxier", "--type=json",
                  "-p", '[{"op": "remove", "path": "/rules/0"}]')
    await kubectl(cfg, "delete", "role", "extension-apiserver-authentication-reader", "-n", "kube-system")
    proxier = (await get(cfg, "clusterrole", "system:node-proxier"))["rules"]
    await srv.stop()
    await srv.start()
    srv.write_kubeconfig(cfg)
    assert (await get(cfg, "clusterrole", "system:monitoring"))["rules"][0]["nonResourceURLs"][0] == "/healthz"
    assert [s["name"] for s in (await get(cfg, "clusterrolebinding", "system:kube-scheduler"))["subjects"]] == [
        "system:kube-scheduler"]
    assert (await get(cfg, "clusterrole", "system:node-proxier"))["rules"] == proxier  # protected: left alone
    await get(cfg, "role", "extension-apiserver-authentication-reader", "-n", "kube-system")


async def test_api_priority_and_fairness_defaults(srv: ApiServer, tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    srv.write_kubeconfig(cfg)
    levels = {p["metadata"]["name"]: p for p in (await get(cfg, "prioritylevelconfigurations"))["items"]}
    assert set(levels) == {"exempt", "catch-all", "system", "node-high", "leader-election", "workload-high",
                           "workload-low", "global-default"}
    assert levels["catch-all"]["spec"] == {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 5, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}
    assert levels["workload-low"]["spec"]["limited"]["nominalConcurrencyShares"] == 100
    schemas = {f["metadata"]["name"]: f for f in (await get(cfg, "flowschemas"))["items"]}
    assert {n: s["spec"]["matchingPrecedence"] for n, s in schemas.items()} == {
        "exempt": 1, "probes": 2, "system-leader-election": 100, "endpoint-controller": 150,
        "workload-leader-election": 200, "system-node-high": 400, "system-nodes": 500,
        "kube-controller-manager": 800, "kube-scheduler": 800, "kube-system-service-accounts": 900,
        "service-accounts": 9000, "global-default": 9900, "catch-all": 10000}
    for fs in schemas.values():
        assert fs["metadata"]["annotations"] == {"apf.kubernetes.io/autoupdate-spec": "true"}
        (dangling,) = fs["status"]["conditions"]
        assert {k: dangling[k] for k in ("type", "status", "reason")} == {
            "type": "Dangling", "status": "False", "reason": "Found"}
    assert schemas["exempt"]["spec"]["rules"][0]["subjects"] == [{"kind": "Group", "group": {"name": "system:masters"}}]
    # An autoupdated default gets its spec back at start; one an admin took over keeps the admin's.
    await kubectl(cfg, "patch", "flowschema", "service-accounts", "--type=merge", "-p",
                  '{"spec": {"matchingPrecedence": 7000}}')
    await kubectl(cfg, "annotate", "--overwrite", "flowschema", "global-default", "apf.kubernetes.io/autoupdate-spec=false")
    await kubectl(cfg, "patch", "flowschema", "global-default", "--type=merge", "-p",
                  '{"spec": {"matchingPrecedence": 9800}}')
    await srv.stop()
    await srv.start()
    srv.write_kubeconfig(cfg)
    assert (await get(cfg, "flowschema", "service-accounts"))["spec"]["matchingPrecedence"] == 9000
    assert (await get(cfg, "flowschema", "global-default"))["spec"]["matchingPrecedence"] == 9800


async def test_responses_name_the_flow_schema_and_priority_level(srv: ApiServer, tmp_path: Path) -> None:
    """kube's APF filter names what a request was classified into, 403s included."""
    assert srv.ca_pem is not None
    fs = {f["metadata"]["uid"]: f["metadata"]["name"] for f in srv.store.list("flowcontrol.apiserver.k8s.io/flowschemas")}
    pl = {p["metadata"]["uid"]: p["metadata"]["name"]
          for p in srv.store.list("flowcontrol.apiserver.k8s.io/prioritylevelconfigurations")}
    ctx = ssl.create_default_context(cadata=srv.ca_pem.decode())
    seen = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
        for path, headers in (
                ("/api/v1/namespaces", {}),
                ("/readyz", {"Impersonate-User": "bob"}),
                ("/api/v1/namespaces/default/pods", {"Impersonate-User": "bob"}),
                ("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
                 {"Impersonate-User": "system:kube-scheduler"}),
                ("/api/v1/namespaces/kube-system/configmaps",
                 {"Impersonate-User": "system:serviceaccount:kube-system:robot"}),
                ("/api/v1/namespaces/default/configmaps", {"Impersonate-User": "system:serviceaccount:default:robot"}),
                ("/api/v1/nodes/n1", {"Impersonate-User": "system:node:n1", "Impersonate-Group": "system:nodes"})):
            async with session.get(srv.url + path, headers=headers, ssl=ctx) as r:
                seen.append((r.status, fs.get(r.headers.get("X-Kubernetes-PF-FlowSchema-UID", "")),
                             pl.get(r.headers.get("X-Kubernetes-PF-PriorityLevel-UID", ""))))
    assert seen == [
        (200, "exempt", "exempt"),
        (200, "probes", "exempt"),
        (403, "global-default", "global-default"),
        (404, "system-leader-election", "leader-election"),
        (403, "kube-system-service-accounts", "workload-high"),
        (403, "service-accounts", "workload-low"),
        (403, "system-node-high", "node-high")]  # no Node authorizer here, and system:node binds nobody
