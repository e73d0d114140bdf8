"""deploy/: the renderer equals `kubectl kustomize`, the manifests install on the embedded apiserver
(with kubectl and with `isthmus.kube.manifests.apply`), and every workload is shaped as the house
rules say (probes, securityContext, requests, its own ServiceAccount)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.generic_resource import get_generic_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Service, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole, RoleBinding

from isthmus.api.image import IMAGE, IMAGE_REPOSITORY, IMAGE_TAG
from isthmus.api.mcs import AGENT_NAMESPACE
from isthmus.kube.manifests import ManifestError, apply, deploy_dir, render
from tests.harness.apiserver import RunningApiServer
from tests.harness.lb import lb_overlay

DEPLOY = deploy_dir()
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


def kustomizations() -> list[Path]:
    """Every kustomization (not Component) under deploy/."""
    out = []
    for f in sorted(DEPLOY.rglob("kustomization.yaml")):
        if (yaml.safe_load(f.read_text()) or {}).get("kind", "Kustomization") == "Kustomization":
            out.append(f.parent)
    return out


def kubectl_kustomize(path: Path) -> list[dict[str, Any]]:
    p = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def test_deploy_dir_is_the_checkout_deploy() -> None:
    assert (DEPLOY / "member" / "kustomization.yaml").is_file()
    assert (DEPLOY / "crds" / "shared").is_dir()


def test_every_base_is_found() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in kustomizations()}
    assert {"member", "member/agent", "member/dns", "crds/isthmus", "crds/shared"} <= names
    assert "crds" not in names  # one kustomization for both would let `delete -k` take other projects' CRDs


@needs_kubectl
@pytest.mark.parametrize("path", kustomizations(), ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_render_equals_kubectl_kustomize(path: Path) -> None:
    assert render(path) == kubectl_kustomize(path)


@needs_kubectl
def test_namespace_override_equals_an_overlay_setting_it(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(DEPLOY / "member", overlay)], "namespace": "elsewhere"}))
    got = render(DEPLOY / "member", namespace="elsewhere")
    assert got == kubectl_kustomize(overlay)
    bindings = [o for o in got if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings and all(s["namespace"] == "elsewhere" for b in bindings for s in b["subjects"])
    assert not any((o["metadata"].get("namespace") == AGENT_NAMESPACE) for o in got)


@needs_kubectl
def test_json6902_patches_equal_kubectl_kustomize(tmp_path: Path) -> None:
    """The local clusterset's overlay shape: a NodePort DNS Service and an extra argument."""
    overlay = tmp_path / "local"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "member", overlay)],
        "patches": [
            {"target": {"kind": "Deployment", "name": "isthmus-dns"},
             "patch": yaml.safe_dump([{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                                       "value": "--local-zone=cluster.local"}])},
            {"target": {"kind": "Service", "name": "isthmus-dns"},
             "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/type", "value": "NodePort"},
                                      {"op": "add", "path": "/spec/ports/0/nodePort", "value": 30053},
                                      {"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1part-of"}])},
        ],
    }))
    got = render(overlay)
    assert got == kubectl_kustomize(overlay)
    svc = next(o for o in got if o["kind"] == "Service")
    assert svc["spec"]["type"] == "NodePort" and svc["spec"]["ports"][0]["nodePort"] == 30053


def test_unsupported_kustomize_features_are_refused(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("configMapGenerator:\n- name: x\n")
    with pytest.raises(ManifestError, match="unsupported kustomize field"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["missing.yaml"]}))
    with pytest.raises(ManifestError, match="not found"):
        render(tmp_path)
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["a.yaml"],
        "patches": [{"target": {"kind": "ConfigMap"}, "patch": "metadata:\n  labels: {a: b}\n"}]}))
    with pytest.raises(ManifestError, match="JSON 6902"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["a.yaml"],
        "patches": [{"target": {"kind": "ConfigMap"}, "patch": "- {op: remove, path: /data/x}\n"}]}))
    with pytest.raises(ManifestError, match="no such path"):
        render(tmp_path)


# --- the member base, as the house rules want it --------------------------------------------------


def member() -> list[dict[str, Any]]:
    return render(DEPLOY / "member")


def test_image_component_is_api_image() -> None:
    component = yaml.safe_load((DEPLOY / "components" / "image" / "kustomization.yaml").read_text())
    assert component["images"] == [{"name": "isthmus", "newName": IMAGE_REPOSITORY, "newTag": IMAGE_TAG}]
    containers = [c for o in member() if o["kind"] == "Deployment"
                  for c in o["spec"]["template"]["spec"]["containers"]]
    assert containers and all(c["image"] == IMAGE for c in containers)


def test_every_deployment_is_hardened_probed_and_has_its_own_account(tmp_path: Path) -> None:
    objs = render(lb_overlay(tmp_path))  # the base with load balancing opted in: every Deployment
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    components = {"isthmus-agent", "isthmus-dns", "isthmus-controller-manager", "isthmus-pools", "isthmus-webhook",
                  "isthmus-egress-gateway"}
    assert {d["metadata"]["name"] for d in deployments} == components
    seen_accounts = set()
    for d in deployments:
        name = d["metadata"]["name"]
        pod = d["spec"]["template"]
        spec = pod["spec"]
        assert spec["serviceAccountName"] in accounts, name
        seen_accounts.add(spec["serviceAccountName"])
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 65532
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        annotations = pod["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
        for c in spec["containers"]:
            sc = c["securityContext"]
            # Only the pool manager escalates: its HAProxy gains NET_BIND_SERVICE from a file capability
            # at exec (kubernetes/kubernetes#56374; deploy/member/pools/deployment.yaml says why).
            assert sc["allowPrivilegeEscalation"] is (name == "isthmus-pools") and sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"], name
            # Only the pool manager and the egress gateway add one: HAProxy binds ports below 1024 (an
            # Ingress's 80), the gateway a source service's ports on its source IPs, both as non-root.
            binds_low = name in ("isthmus-pools", "isthmus-egress-gateway")
            assert sc["capabilities"].get("add", []) == (["NET_BIND_SERVICE"] if binds_low else []), name
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert {"cpu", "memory"} <= set(c["resources"]["requests"])
            env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
            assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace",
                           "POD_IP": "status.podIP"}
            metrics_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
            assert annotations["prometheus.io/port"] == str(metrics_port)
            # Never a fixed port on every interface: pods share one loopback host locally.
            assert f"--metrics-addr=$(POD_IP):{metrics_port}" in c["args"]
            assert not any(a.startswith("--cluster-id") for a in c["args"])
    assert seen_accounts == components
    # The controllers inside the manager run as accounts of their own, which no pod mounts: the
    # manager's own account may only ask for their tokens.
    controllers = ["isthmus-lb", "isthmus-mcsvc", "isthmus-egress-operator"]
    assert set(controllers) <= accounts
    manager_rules = [r for o in objs if o["kind"] in ("Role", "ClusterRole")
                     and o["metadata"]["name"] == "isthmus-controller-manager" for r in o["rules"]]
    assert manager_rules == [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                              "resourceNames": controllers, "verbs": ["create"]}]
    manager = next(d for d in deployments if d["metadata"]["name"] == "isthmus-controller-manager")
    assert "--use-service-account-credentials" in manager["spec"]["template"]["spec"]["containers"][0]["args"]


def test_roles_are_bound_to_their_own_account_only() -> None:
    objs = member()
    for b in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": b["roleRef"]["name"],
                                  "namespace": AGENT_NAMESPACE}]
        assert any(o["kind"] == b["roleRef"]["kind"] and o["metadata"]["name"] == b["roleRef"]["name"]
                   for o in objs)
    rules = [r for o in objs if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in rules)
    secrets = [r for r in rules if "secrets" in r["resources"]]
    assert secrets == [  # the agent's and mcsvc's broker credentials; the webhook's own certificate
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["isthmus-broker"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["isthmus-broker"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["isthmus-lb-webhook-tls"],
         "verbs": ["get", "update"]},
    ]


def test_dns_service_maps_53_to_the_pods_5353() -> None:
    objs = member()
    svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == "isthmus-dns")
    dns = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "isthmus-dns")
    container = dns["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: (p["containerPort"], p["protocol"]) for p in container["ports"]}
    assert [(p["port"], p["protocol"], ports[p["targetPort"]]) for p in svc["spec"]["ports"]] == [
        (53, "UDP", (5353, "UDP")), (53, "TCP", (5353, "TCP"))]
    assert svc["spec"]["selector"].items() <= dns["spec"]["template"]["metadata"]["labels"].items()
    assert "--listen=$(POD_IP):5353" in container["args"]


# --- installing ------------------------------------------------------------------------------------


async def kubectl(server: RunningApiServer, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={server.kubeconfig}", f"--cache-dir={server.data_dir / 'kubectl-cache'}",
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return proc.returncode or 0, out.decode()


@needs_kubectl
async def test_kubectl_apply_k_member_installs(apiserver: RunningApiServer) -> None:
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "member"))
    assert code == 0, out
    assert "deployment.apps/isthmus-agent created" in out
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "member"))
    assert code == 0, out
    assert "deployment.apps/isthmus-dns unchanged" in out
    client = apiserver.client()
    dep = await client.get(Deployment, "isthmus-dns", namespace=AGENT_NAMESPACE)
    assert dep.spec.template.spec.containers[0].image == IMAGE


@needs_kubectl
async def test_kubectl_apply_k_broker_installs(apiserver: RunningApiServer) -> None:
    if not (DEPLOY / "broker" / "kustomization.yaml").is_file():
        pytest.skip("deploy/broker is not on this branch yet")
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "broker"))
    assert code == 0, out


async def test_apply_installs_in_dependency_order_and_is_idempotent(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    objs = render(DEPLOY / "member", namespace="isthmus-test")
    # Reversed: apply must still put the Namespace and CRDs first and wait until the CRDs are served.
    await asyncio.wait_for(apply(client, list(reversed(objs)), field_manager="isthmus-test"), 60)
    await asyncio.wait_for(apply(client, objs, field_manager="isthmus-test"), 60)
    assert (await client.get(Namespace, "isthmus-test")).metadata.name == "isthmus-test"
    await client.get(ServiceAccount, "isthmus-agent", namespace="isthmus-test")
    await client.get(ClusterRole, "isthmus-dns")
    rb = await client.get(RoleBinding, "isthmus-agent", namespace="isthmus-test")
    assert rb.subjects[0].namespace == "isthmus-test"
    svc = await client.get(Service, "isthmus-dns", namespace="isthmus-test")
    assert [p.port for p in svc.spec.ports] == [53, 53]
    dep = await client.get(Deployment, "isthmus-agent", namespace="isthmus-test")
    assert dep.spec.template.spec.containers[0].image == IMAGE
    managers = {m.manager for m in dep.metadata.managedFields or []}
    assert "isthmus-test" in managers


WIDGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.h5.example.com"},
    "spec": {
        "group": "h5.example.com",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


async def test_apply_custom_objects_after_their_crd_and_cluster_scoped_without_namespace(
    apiserver: RunningApiServer,
) -> None:
    client = apiserver.client()
    objs = [
        {"apiVersion": "h5.example.com/v1", "kind": "Gadget", "metadata": {"name": "g", "namespace": "h5"},
         "spec": {"size": 3}},
        # What kustomize's namespace transformer does to kinds newer than its schema.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "h5-reader", "namespace": "h5"}, "rules": []},
        WIDGETS_CRD,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "h5"}},
    ]
    await asyncio.wait_for(apply(client, objs, field_manager="isthmus-test"), 60)
    cr = await client.get(ClusterRole, "h5-reader")
    assert cr.metadata.namespace is None
    gadget = get_generic_resource("h5.example.com/v1", "Gadget")
    assert gadget is not None
    assert (await client.get(gadget, "g", namespace="h5"))["spec"] == {"size": 3}


async def test_apply_refuses_kinds_nobody_defines(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    with pytest.raises(ManifestError, match="neither a built-in kind nor defined"):
        await apply(client, [{"apiVersion": "nowhere.example.com/v1", "kind": "Ghost", "metadata": {"name": "x"}}],
                    field_manager="isthmus-test")


@needs_kubectl
def test_components_transform_the_including_kustomization_once(tmp_path: Path) -> None:
    """A Component's resources join the includer's, and its patches and images act on all of them,
    once; a nested kustomization's own namespace stays unless the outer one sets another."""
    (tmp_path / "comp").mkdir()
    (tmp_path / "inner").mkdir()
    (tmp_path / "top").mkdir()
    (tmp_path / "inner" / "d.yaml").write_text(yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "isthmus:old", "args": ["a"]}]}}}}))
    (tmp_path / "inner" / "kustomization.yaml").write_text(yaml.safe_dump({
        "namespace": "inner-ns", "resources": ["d.yaml"]}))
    (tmp_path / "comp" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-component}\n")
    (tmp_path / "comp" / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component", "resources": ["cm.yaml"],
        "images": [{"name": "isthmus", "newName": "registry.example/isthmus", "newTag": "1"}],
        "patches": [{"target": {"kind": "Deployment"}, "patch": yaml.safe_dump(
            [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "b"}])}]}))
    (tmp_path / "top" / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["../inner"], "components": ["../comp"]}))
    got = render(tmp_path / "top")
    assert got == kubectl_kustomize(tmp_path / "top")
    d = next(o for o in got if o["kind"] == "Deployment")
    assert d["metadata"]["namespace"] == "inner-ns"
    assert d["spec"]["template"]["spec"]["containers"][0]["args"] == ["a", "b"]
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/isthmus:1"


@needs_kubectl
def test_output_order_and_namespacing_equal_kubectl_kustomize(tmp_path: Path) -> None:
    kinds = [
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"), ("apps/v1", "Deployment"),
        ("coordination.k8s.io/v1", "Lease"), ("example.com/v1", "Widget"), ("v1", "Service"), ("v1", "Secret"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("v1", "ServiceAccount"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"), ("policy/v1", "PodDisruptionBudget"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"), ("v1", "Namespace"), ("v1", "ConfigMap"),
        ("networking.k8s.io/v1", "IngressClass"), ("apps/v1", "DaemonSet"),
    ]
    docs = [{"apiVersion": v, "kind": k, "metadata": {"name": f"{n}-{k.lower()}"}}
            for v, k in kinds for n in (("b", "a") if k != "Namespace" else ("a",))]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"namespace": "x", "resources": ["all.yaml"]}))
    assert render(tmp_path) == kubectl_kustomize(tmp_path)


def test_namespace_that_merges_two_objects_is_refused(tmp_path: Path) -> None:
    """kubectl kustomize refuses it too ("namespace transformation produces ID conflict")."""
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n"
                                      "apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"namespace": "x", "resources": ["ns.yaml"]}))
    with pytest.raises(ManifestError, match="makes two objects Namespace x"):
        render(tmp_path)
