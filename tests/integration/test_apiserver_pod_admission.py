"""Pod admission as kube-apiserver v1.32 does it, seen by kubectl and API clients: Pod Security
Admission (enforce, warn, namespace labels), ServiceAccount admission and Priority admission."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import ReplicaSet
from lightkube.resources.core_v1 import Namespace, Pod

from isthmus.apiserver.server import ApiServer
from tests.harness.polling import eventually

TOKEN = "admin-token"
KUBECTL = "/usr/bin/kubectl"
PSA = "pod-security.kubernetes.io/"


@dataclass
class Env:
    srv: ApiServer
    ctx: ssl.SSLContext
    kubeconfig: Path
    tmp: Path

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, list[str]]:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as s, s.request(method, self.srv.url + path, headers=headers,
                                                           data=json.dumps(body) if body is not None else None,
                                                           ssl=self.ctx) as r:
            return r.status, await r.json(), r.headers.getall("Warning", [])

    async def kubectl(self, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        if not os.path.exists(KUBECTL):  # noqa: ASYNC240 (one stat, before the subprocess)
            pytest.fail(f"{KUBECTL} is missing: install kubectl (the Makefile's test dependencies)")
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, f"--kubeconfig={self.kubeconfig}", *args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
        return proc.returncode or 0, out.decode(), err.decode()

    async def namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        code, out, _ = await self.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
        assert code == 201, out

        async def has_default_sa() -> bool:
            code, _, _ = await self.call("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return code == 200

        await eventually(has_default_sa)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    srv = ApiServer(data_dir=tmp_path / "data", token=TOKEN, tls=True)
    await srv.start()
    assert srv.ca_pem is not None
    kubeconfig = tmp_path / "kubeconfig"
    srv.write_kubeconfig(kubeconfig)
    try:
        yield Env(srv, ssl.create_default_context(cadata=srv.ca_pem.decode()), kubeconfig, tmp_path)
    finally:
        await srv.stop()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


RESTRICTED_CONTAINER = {"name": "c", "image": "busybox", "securityContext": {
    "allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"}}}


# ---------------------------------------------------------------- Pod Security Admission

async def test_kubectl_apply_of_a_pod_violating_restricted_prints_kubes_message(env: Env) -> None:
    await env.namespace("locked", {PSA + "enforce": "restricted"})
    code, out, err = await env.kubectl("apply", "-n", "locked", "-f", "-", stdin=json.dumps(pod("x")))
    assert code == 1, out
    assert ('pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
            '(container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
            '(container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or '
            'container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must '
            'set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")') in err
    ok = {**pod("y"), "spec": {"containers": [RESTRICTED_CONTAINER]}}
    code, out, err = await env.kubectl("apply", "-n", "locked", "-f", "-", stdin=json.dumps(ok))
    assert code == 0, err
    assert "pod/y created" in out


async def test_baseline_refuses_host_namespaces_and_a_direct_post_is_403(env: Env) -> None:
    await env.namespace("base", {PSA + "enforce": "baseline", PSA + "enforce-version": "v1.32"})
    code, out, _ = await env.call("POST", "/api/v1/namespaces/base/pods",
                                  pod("h", hostNetwork=True, volumes=[{"name": "v", "hostPath": {"path": "/"}}]))
    assert code == 403
    assert out["reason"] == "Forbidden" and out["details"] == {"name": "h", "kind": "pods"}
    assert out["message"] == ('pods "h" is forbidden: violates PodSecurity "baseline:v1.32": host namespaces '
                              '(hostNetwork=true), hostPath volumes (volume "v")')
    # the safe sysctl the egress gateway uses passes baseline
    code, out, _ = await env.call("POST", "/api/v1/namespaces/base/pods", pod("s", securityContext={
        "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]}))
    assert code == 201, out


async def test_warn_level_warns_on_pods_and_workload_templates_without_refusing(env: Env) -> None:
    await env.namespace("warned", {PSA + "warn": "baseline"})
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {
            "hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}}}}
    code, _, err = await env.kubectl("apply", "-n", "warned", "-f", "-", stdin=json.dumps(deployment))
    assert code == 0, err
    assert 'Warning: would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true)' in err
    code, _, warnings = await env.call("POST", "/api/v1/namespaces/warned/pods", pod("p", hostPID=True))
    assert code == 201
    assert warnings == ['299 - "would violate PodSecurity \\"baseline:latest\\": host namespaces (hostPID=true)"']


async def test_enforce_never_applies_to_templates_and_unlabelled_namespaces_are_privileged(env: Env) -> None:
    await env.namespace("strict", {PSA + "enforce": "restricted"})
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r"}, "spec": {
        "replicas": 0, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    code, out, warnings = await env.call("POST", "/apis/apps/v1/namespaces/strict/replicasets", rs)
    assert code == 201, out
    # enforce=restricted also warns (warn defaults to a stricter enforce level)
    assert any("would violate PodSecurity" in w for w in warnings), warnings
    code, out, warnings = await env.call("POST", "/api/v1/namespaces/kube-system/pods",
                                         pod("priv", hostNetwork=True, containers=[
                                             {"name": "c", "image": "i", "securityContext": {"privileged": True}}]))
    assert code == 201, out
    assert not [w for w in warnings if "PodSecurity" in w]


async def test_invalid_namespace_labels_are_refused(env: Env) -> None:
    code, out, _ = await env.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": "bad", "labels": {
                                                                      PSA + "enforce": "strict",
                                                                      PSA + "warn-version": "1.30"}}})
    assert code == 422
    assert out["message"] == (
        'Namespace "bad" is invalid: [metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": '
        'must be one of privileged, baseline, restricted, metadata.labels[pod-security.kubernetes.io/warn-version]: '
        'Invalid value: "1.30": must be "latest" or "v1.x"]')
    code, _, err = await env.kubectl("label", "ns", "default", f"{PSA}audit=none")
    assert code == 1
    assert ('The Namespace "default" is invalid: metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: '
            '"none": must be one of privileged, baseline, restricted') in err


async def test_stricter_enforce_label_warns_about_existing_pods(env: Env) -> None:
    await env.namespace("app")
    for name in ("a", "b"):
        code, out, _ = await env.call("POST", "/api/v1/namespaces/app/pods", pod(name, hostNetwork=True))
        assert code == 201, out
    code, out, err = await env.kubectl("label", "ns", "app", f"{PSA}enforce=baseline")
    assert code == 0, err
    assert 'Warning: existing pods in namespace "app" violate the new PodSecurity enforce level "baseline:latest"' in err
    assert "Warning: a (and 1 other pod): host namespaces" in err
    assert "namespace/app labeled" in out
    # a relaxation checks nothing
    code, out, err = await env.kubectl("label", "--overwrite", "ns", "app", f"{PSA}enforce=privileged")
    assert code == 0 and "Warning" not in err


async def test_an_update_that_only_changes_labels_is_not_rechecked(env: Env) -> None:
    await env.namespace("later")
    code, _, _ = await env.call("POST", "/api/v1/namespaces/later/pods", pod("p", hostIPC=True))
    assert code == 201
    code, out, _ = await env.kubectl("label", "ns", "later", f"{PSA}enforce=baseline")
    assert code == 0, out
    code, out, err = await env.kubectl("label", "-n", "later", "pod", "p", "x=y")
    assert code == 0, err


# ---------------------------------------------------------------- ServiceAccount admission

async def test_pods_get_the_default_service_account_and_its_token_volume(env: Env) -> None:
    await env.namespace("sa")
    spec = {"initContainers": [{"name": "i", "image": "busybox"}],
            "containers": [{"name": "c", "image": "busybox"}]}
    code, out, _ = await env.call("POST", "/api/v1/namespaces/sa/pods", pod("p", **spec))
    assert code == 201, out
    s = out["spec"]
    assert s["serviceAccountName"] == "default" and s["serviceAccount"] == "default"
    (vol,) = [v for v in s["volumes"] if v["name"].startswith("kube-api-access-")]
    assert len(vol["name"]) == len("kube-api-access-") + 5
    assert vol["projected"] == {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}
    mount = {"name": vol["name"], "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    assert s["containers"][0]["volumeMounts"] == [mount] and s["initContainers"][0]["volumeMounts"] == [mount]
    # kube-root-ca.crt, which the volume projects, is published in the namespace
    code, cm, _ = await env.call("GET", "/api/v1/namespaces/sa/configmaps/kube-root-ca.crt")
    assert code == 200 and "ca.crt" in cm["data"]


async def test_a_missing_service_account_refuses_the_pod_and_automount_false_mounts_nothing(env: Env) -> None:
    await env.namespace("sa2")
    code, out, _ = await env.call("POST", "/api/v1/namespaces/sa2/pods", pod("p", serviceAccountName="ghost"))
    assert code == 403
    assert out["message"] == ('pods "p" is forbidden: error looking up service account sa2/ghost: '
                              'serviceaccount "ghost" not found')
    code, out, _ = await env.call("POST", "/api/v1/namespaces/sa2/pods", pod("q", automountServiceAccountToken=False))
    assert code == 201 and "volumes" not in out["spec"], out["spec"]
    code, out, _ = await env.call("POST", "/api/v1/namespaces/sa2/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
        "automountServiceAccountToken": False, "imagePullSecrets": [{"name": "reg"}]})
    assert code == 201
    code, out, _ = await env.call("POST", "/api/v1/namespaces/sa2/pods", pod("r", serviceAccountName="quiet"))
    assert code == 201, out
    assert "volumes" not in out["spec"] and out["spec"]["imagePullSecrets"] == [{"name": "reg"}]


# ---------------------------------------------------------------- Priority admission

async def test_system_priority_classes_exist_and_cannot_be_deleted(env: Env) -> None:
    code, out, _ = await env.call("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical")
    assert code == 200 and out["value"] == 2000001000 and out["preemptionPolicy"] == "PreemptLowerPriority"
    code, out, _ = await env.call("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/system-cluster-critical")
    assert code == 200 and out["value"] == 2000000000
    code, out, err = await env.kubectl("delete", "priorityclass", "system-cluster-critical")
    assert code == 1
    assert ('priorityclasses.scheduling.k8s.io "system-cluster-critical" is forbidden: this is a system priority '
            'class and cannot be deleted') in err


async def test_pods_get_priority_from_their_class_and_unknown_classes_are_refused(env: Env) -> None:
    await env.namespace("prio")
    code, out, _ = await env.call("POST", "/api/v1/namespaces/prio/pods", pod("plain"))
    assert code == 201 and out["spec"]["priority"] == 0 and out["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert "priorityClassName" not in out["spec"]
    code, out, _ = await env.call("POST", "/api/v1/namespaces/prio/pods",
                                  pod("crit", priorityClassName="system-node-critical"))
    assert code == 201 and out["spec"]["priority"] == 2000001000
    code, out, err = await env.kubectl("run", "-n", "prio", "foo", "--image=busybox",
                                       '--overrides={"spec":{"priorityClassName":"foo"}}')
    assert code == 1 and 'pods "foo" is forbidden: no PriorityClass with name foo was found' in err
    code, out, _ = await env.call("POST", "/api/v1/namespaces/prio/pods",
                                  pod("liar", priorityClassName="system-node-critical", priority=5))
    assert code == 403
    assert out["message"] == ('pods "liar" is forbidden: the integer value of priority (5) must not be provided in '
                              'pod spec; priority admission controller computed 2000001000 from the given '
                              'PriorityClass name')
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "batch"},
          "value": 100, "globalDefault": True, "preemptionPolicy": "Never"}
    code, out, _ = await env.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", pc)
    assert code == 201, out
    code, out, _ = await env.call("POST", "/api/v1/namespaces/prio/pods", pod("defaulted"))
    assert code == 201
    assert (out["spec"]["priorityClassName"], out["spec"]["priority"], out["spec"]["preemptionPolicy"]) == \
        ("batch", 100, "Never")
    code, out, _ = await env.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                                  {**pc, "metadata": {"name": "other"}})
    assert code == 403
    assert out["message"] == ('priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass batch is already '
                              'marked as default. Only one default can exist')


async def test_priority_class_validation(env: Env) -> None:
    base = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    code, out, _ = await env.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                                  {**base, "metadata": {"name": "huge"}, "value": 1000000001})
    assert code == 422
    assert out["message"] == ('PriorityClass.scheduling.k8s.io "huge" is invalid: value: Forbidden: maximum allowed '
                              'value of a user defined priority is 1000000000')
    code, out, _ = await env.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                                  {**base, "metadata": {"name": "system-mine"}, "value": 1})
    assert code == 422
    assert out["message"] == ('PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: '
                              "priority class names with 'system-' prefix are reserved for system use only. error: "
                              "system-mine is not a known system priority class")
    code, out, _ = await env.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                                  {**base, "metadata": {"name": "low"}, "value": 1})
    assert code == 201
    code, out, err = await env.kubectl("patch", "priorityclass", "low", "-p", '{"value": 2}')
    assert code == 1 and "value: Forbidden: may not be changed in an update." in err


# ---------------------------------------------------------------- with kube-lite's controllers

async def test_a_replicaset_refused_by_podsecurity_reports_it_and_priority_reaches_its_pods(
        apiserver: Any, lite: Any) -> None:
    """kube's ReplicaSet controller meets admission like any client: a template enforce refuses is a
    ReplicaFailure condition with kube's message; an admitted template's Pods carry their priority."""
    client: AsyncClient = lite.client
    await client.create(Namespace.from_dict({"metadata": {"name": "tight", "labels": {PSA + "enforce": "baseline"}}}))

    def rs(name: str, **spec: Any) -> ReplicaSet:
        return ReplicaSet.from_dict({"metadata": {"name": name, "namespace": "tight"}, "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "c", "image": "busybox"}], **spec}}}})

    await client.create(rs("hostnet", hostNetwork=True))

    async def failure() -> dict[str, Any] | None:
        got = (await client.get(ReplicaSet, "hostnet", namespace="tight")).to_dict()
        return next((c for c in got.get("status", {}).get("conditions") or [] if c["type"] == "ReplicaFailure"), None)

    cond = await eventually(failure, within=20, what="ReplicaFailure on the ReplicaSet")
    assert cond["reason"] == "FailedCreate"
    assert cond["message"].startswith('pods "hostnet-')
    assert cond["message"].endswith('" is forbidden: violates PodSecurity "baseline:latest": host namespaces '
                                    '(hostNetwork=true)')

    await client.create(rs("crit", priorityClassName="system-cluster-critical"))

    async def pods() -> list[dict[str, Any]] | None:
        found = [p.to_dict() async for p in client.list(Pod, namespace="tight", labels={"app": "crit"})]
        return found or None

    (p,) = await eventually(pods, within=20, what="the ReplicaSet's Pod")
    assert p["spec"]["priority"] == 2000000000 and p["spec"]["serviceAccountName"] == "default"
