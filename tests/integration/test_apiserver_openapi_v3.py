"""The OpenAPI v3 documents as kubectl v1.32 reads them: named, referenced components for the
built-in kinds (`kubectl explain` prints kube's type names), inline schemas for custom resources,
and kubectl apply's strategic merge and strict validation still working through the references."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.apiserverproc import Server

NS = "oa"


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    with tempfile.TemporaryDirectory() as d:
        s = Server(Path(d))
        try:
            s.kubectl("create", "namespace", NS)
            yield s
        finally:
            s.stop()


def _field_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("FIELD:"))


def test_kubectl_explain_prints_kubes_type_names(srv: Server) -> None:
    out = srv.kubectl("explain", "deployment.spec").stdout
    assert _field_line(out) == "FIELD: spec <DeploymentSpec>"
    assert "  strategy\t<DeploymentStrategy>" in out.splitlines()
    assert "  template\t<PodTemplateSpec> -required-" in out.splitlines()
    out = srv.kubectl("explain", "deployment.spec.strategy.rollingUpdate.maxSurge").stdout
    assert _field_line(out) == "FIELD: maxSurge <IntOrString>"
    out = srv.kubectl("explain", "pod.metadata").stdout
    assert _field_line(out) == "FIELD: metadata <ObjectMeta>"
    assert "  ownerReferences\t<[]OwnerReference>" in out.splitlines()
    out = srv.kubectl("explain", "pod.spec.containers.resources.limits").stdout
    assert _field_line(out) == "FIELD: limits <map[string]Quantity>"
    for path in ("node.status.capacity", "resourcequota.spec.hard", "limitrange.spec.limits.max"):
        assert _field_line(srv.kubectl("explain", path).stdout).endswith("<map[string]Quantity>"), path


def test_custom_resources_stay_inline_with_metadata_by_reference(srv: Server) -> None:
    srv.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "description": "What it does.",
                                                               "properties": {"size": {"type": "integer"}}}}}}}]}}))
    out = ""
    for _ in range(50):  # discovery picks the CRD up within moments
        p = srv.kubectl("explain", "gadget.spec", check=False)
        if p.returncode == 0:
            out = p.stdout
            break
        time.sleep(0.2)
    assert _field_line(out) == "FIELD: spec <Object>"
    assert "  size\t<integer>" in out.splitlines()
    doc = srv.get("/openapi/v3/apis/example.com/v1")
    gadget = doc["components"]["schemas"]["com.example.v1.Gadget"]
    assert gadget["properties"]["spec"]["properties"]["size"] == {"type": "integer"}
    assert gadget["properties"]["metadata"]["$ref"] == \
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
    "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "a", "image": "busybox:1", "env": [{"name": "X", "value": "1"}]},
                                {"name": "b", "image": "busybox:1"}]}}},
}


def test_kubectl_apply_merges_lists_by_their_keys_through_the_references(srv: Server) -> None:
    """Client-side apply computes a strategic merge patch from the v3 document's patch metadata,
    which now sits in referenced components (PodSpec.containers: merge on name)."""
    srv.kubectl("apply", "-f", "-", stdin=json.dumps(DEPLOYMENT))
    # someone else adds an env var to container a; the next apply changes b's image only
    srv.kubectl("patch", "deployment", "web", "-n", NS, "--type=strategic", "-p", json.dumps(
        {"spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}]}}}}))
    changed = json.loads(json.dumps(DEPLOYMENT))
    changed["spec"]["template"]["spec"]["containers"][1]["image"] = "busybox:2"
    srv.kubectl("apply", "-f", "-", stdin=json.dumps(changed))
    got = json.loads(srv.kubectl("get", "deployment", "web", "-n", NS, "-o", "json").stdout)
    containers = {c["name"]: c for c in got["spec"]["template"]["spec"]["containers"]}
    assert containers["b"]["image"] == "busybox:2"
    assert {e["name"] for e in containers["a"]["env"]} == {"X", "Y"}  # merged by key, not replaced


def test_kubectl_apply_strict_validation_still_names_unknown_fields(srv: Server) -> None:
    bad = json.loads(json.dumps(DEPLOYMENT))
    bad["metadata"]["name"] = "strict"
    bad["spec"]["template"]["spec"]["containers"][0]["imagee"] = "typo"
    p = srv.kubectl("apply", "--validate=strict", "-f", "-", stdin=json.dumps(bad), check=False)
    assert p.returncode == 1
    assert 'unknown field "spec.template.spec.containers[0].imagee"' in p.stderr


def test_the_documents_are_cached(srv: Server) -> None:
    first = srv.http.get("/openapi/v3/apis/apps/v1")
    second = srv.http.get("/openapi/v3/apis/apps/v1")
    assert first.status_code == second.status_code == 200 and first.text == second.text
    index = srv.get("/openapi/v3")
    assert index["paths"]["apis/apps/v1"]["serverRelativeURL"].startswith("/openapi/v3/apis/apps/v1?hash=")
