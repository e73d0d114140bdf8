"""metadata.generation only where kube-apiserver v1.32 keeps one: the kinds whose strategies split
spec from status (Deployments, PDBs, webhook configurations, CRDs, custom resources...), not
ConfigMaps, Secrets, Pods, Services, Namespaces, RBAC objects or Events."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.apiserverproc import Server

Obj = dict[str, Any]
NS = "gen"


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    with tempfile.TemporaryDirectory() as d:
        s = Server(Path(d))
        try:
            s.kubectl("create", "namespace", NS)
            yield s
        finally:
            s.stop()


def _create(srv: Server, path: str, body: Obj) -> Obj:
    r = srv.http.post(path, body)
    assert r.status_code == 201, r.text
    out: Obj = r.json()
    return out


def _patch(srv: Server, path: str, body: Obj) -> Obj:
    r = srv.http.patch(path, body)
    assert r.status_code == 200, r.text
    out: Obj = r.json()
    return out


POD_SPEC = {"containers": [{"name": "c", "image": "busybox"}]}


def test_kinds_without_a_spec_status_split_carry_no_generation(srv: Server) -> None:
    made = [
        _create(srv, f"/api/v1/namespaces/{NS}/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}),
        _create(srv, f"/api/v1/namespaces/{NS}/secrets",
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "1"}}),
        _create(srv, f"/api/v1/namespaces/{NS}/pods",
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": POD_SPEC}),
        _create(srv, f"/api/v1/namespaces/{NS}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
            "spec": {"ports": [{"port": 80}], "selector": {"a": "b"}}}),
        _create(srv, "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "gen-role"},
            "rules": []}),
        srv.get(f"/api/v1/namespaces/{NS}"),
    ]
    for obj in made:
        assert "generation" not in obj["metadata"], obj["kind"]
    cm = _patch(srv, f"/api/v1/namespaces/{NS}/configmaps/c", {"data": {"a": "2"}})
    assert "generation" not in cm["metadata"]
    pod = _patch(srv, f"/api/v1/namespaces/{NS}/pods/p", {"metadata": {"labels": {"x": "y"}}})
    assert "generation" not in pod["metadata"]


def test_workloads_count_their_spec_changes(srv: Server) -> None:
    path = f"/apis/apps/v1/namespaces/{NS}/deployments"
    d = _create(srv, path, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC}}})
    assert d["metadata"]["generation"] == 1
    assert _patch(srv, f"{path}/web", {"spec": {"replicas": 2}})["metadata"]["generation"] == 2
    assert _patch(srv, f"{path}/web", {"metadata": {"labels": {"x": "y"}}})["metadata"]["generation"] == 2
    # a Deployment's annotations go to its ReplicaSets: they count as a change too
    assert _patch(srv, f"{path}/web", {"metadata": {"annotations": {"a": "b"}}})["metadata"]["generation"] == 3
    assert _patch(srv, f"{path}/web/status", {"status": {"replicas": 1}})["metadata"]["generation"] == 3
    pdb = _create(srv, f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    assert pdb["metadata"]["generation"] == 1
    rs = _create(srv, f"/apis/apps/v1/namespaces/{NS}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC}}})
    assert rs["metadata"]["generation"] == 1
    assert _patch(srv, f"/apis/apps/v1/namespaces/{NS}/replicasets/web-1",
                  {"metadata": {"annotations": {"a": "b"}}})["metadata"]["generation"] == 1


def test_a_graceful_deletion_bumps_only_a_generation_there_is(srv: Server) -> None:
    cm = _create(srv, f"/api/v1/namespaces/{NS}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["test/hold"]}})
    assert "generation" not in cm["metadata"]
    r = srv.http.delete(f"/api/v1/namespaces/{NS}/configmaps/held")
    assert r.status_code == 200 and "generation" not in r.json()["metadata"]
    _patch(srv, f"/api/v1/namespaces/{NS}/configmaps/held", {"metadata": {"finalizers": None}})
    d = _create(srv, f"/apis/apps/v1/namespaces/{NS}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "held", "finalizers": ["test/hold"]},
        "spec": {"selector": {"matchLabels": {"app": "h"}},
                 "template": {"metadata": {"labels": {"app": "h"}}, "spec": POD_SPEC}}})
    r = srv.http.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/held")
    assert r.status_code == 200 and r.json()["metadata"]["generation"] == d["metadata"]["generation"] + 1
    _patch(srv, f"/apis/apps/v1/namespaces/{NS}/deployments/held", {"metadata": {"finalizers": None}})


def test_custom_resources_always_carry_one(srv: Server) -> None:
    crd = _create(srv, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    assert crd["metadata"]["generation"] == 1
    path = f"/apis/example.com/v1/namespaces/{NS}/gizmos"
    for _ in range(50):  # the CRD controller serves it within moments
        r = srv.http.post(path, {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "g"},
                                 "spec": {"a": 1}})
        if r.status_code == 201:
            break
        time.sleep(0.1)
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["generation"] == 1
