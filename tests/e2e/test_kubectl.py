"""kubectl v1.32 as a black-box client of `isthmus apiserver` (a real process, TLS and a bearer token)."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 100}
              color: {type: string, enum: [red, green, blue], default: red}
              tags: {type: array, items: {type: string}}
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"""


class Kubectl:
    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.kubeconfig = kubeconfig
        self.cache = cache

    def argv(self, *args: str) -> list[str]:
        return ["kubectl", f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}", *args]

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def json(self, *args: str) -> dict:  # type: ignore[type-arg]
        return json.loads(self.run(*args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kubectl, Path]]:
    data = tmp_path_factory.mktemp("apiserver")
    proc = subprocess.Popen(
        [sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--data-dir", str(data), "--tls",
         "--token-file", str(data / "token")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        url = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                url = line.strip().split()[-1]
                break
        assert url and url.startswith("https://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        kc = data / "kubeconfig"
        for _ in range(100):
            if kc.exists():
                break
            time.sleep(0.05)
        yield Kubectl(kc, data / "kubectl-cache"), data
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=10) == 0, "apiserver did not shut down cleanly on SIGTERM"
        finally:
            if proc.poll() is None:
                proc.kill()


def test_kubeconfig_carries_ca_and_token(server: tuple[Kubectl, Path]) -> None:
    k, data = server
    cfg = yaml.safe_load(k.kubeconfig.read_text())
    assert cfg["clusters"][0]["cluster"]["certificate-authority-data"]
    assert cfg["users"][0]["user"]["token"] == (data / "token").read_text().strip()
    assert "v1.32" in k.run("version", "-o", "json").stdout


def test_builtin_configmap_lifecycle(server: tuple[Kubectl, Path]) -> None:
    k, _ = server
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  a: '1'\n"
    assert "configmap/app created" in k.run("apply", "-f", "-", stdin=manifest).stdout
    assert "configmap/app unchanged" in k.run("apply", "-f", "-", stdin=manifest).stdout
    out = k.run("get", "configmap", "app").stdout
    assert out.splitlines()[0].split() == ["NAME", "DATA", "AGE"] and out.splitlines()[1].split()[:2] == ["app", "1"]
    y = yaml.safe_load(k.run("get", "cm", "app", "-o", "yaml").stdout)
    assert y["data"] == {"a": "1"} and y["metadata"]["uid"] and y["metadata"]["resourceVersion"]
    k.run("label", "cm", "app", "tier=web")
    k.run("annotate", "cm", "app", "note=hello")
    k.run("patch", "cm", "app", "-p", '{"data":{"b":"2"}}')  # strategic (the default)
    k.run("patch", "cm", "app", "--type=merge", "-p", '{"data":{"c":"3"}}')
    k.run("patch", "cm", "app", "--type=json", "-p", '[{"op":"remove","path":"/data/a"}]')
    cm = k.json("get", "cm", "app")
    assert cm["data"] == {"b": "2", "c": "3"}
    assert cm["metadata"]["labels"] == {"tier": "web"} and cm["metadata"]["annotations"]["note"] == "hello"
    assert k.run("get", "cm", "-l", "tier=web", "-o", "name").stdout.strip() == "configmap/app"
    # As in any cluster, kube-root-ca.crt (the root CA publisher's) is the other ConfigMap here.
    assert k.run("get", "cm", "-l", "tier!=web", "-o", "name").stdout.strip() == "configmap/kube-root-ca.crt"
    # edit-style replace: get, change, replace (carries resourceVersion → optimistic concurrency)
    cm["data"]["d"] = "4"
    k.run("replace", "-f", "-", stdin=json.dumps(cm))
    stale = dict(cm, data={"x": "stale"})
    p = k.run("replace", "-f", "-", stdin=json.dumps(stale), check=False)
    assert p.returncode != 0 and "the object has been modified" in p.stderr
    assert k.json("get", "cm", "app")["data"]["d"] == "4"
    assert 'configmap "app" deleted' in k.run("delete", "cm", "app").stdout
    p = k.run("get", "cm", "app", check=False)
    assert p.returncode != 0 and 'configmaps "app" not found' in p.stderr


def test_deployment_strategic_merge_by_key(server: tuple[Kubectl, Path]) -> None:
    k, _ = server
    dep = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "a", "image": "echo:1"},
                                                      {"name": "b", "image": "echo:1"}]}}},
    }
    k.run("apply", "-f", "-", stdin=json.dumps(dep))
    k.run("patch", "deploy", "web", "-p", '{"spec":{"template":{"spec":{"containers":[{"name":"b","image":"echo:2"}]}}}}')
    got = k.json("get", "deploy", "web")
    assert [(c["name"], c["image"]) for c in got["spec"]["template"]["spec"]["containers"]] == [("a", "echo:1"), ("b", "echo:2")]
    assert got["spec"]["replicas"] == 1  # defaulted like kube
    assert got["metadata"]["generation"] == 2
    # kubectl apply after a change merges containers by name and bumps generation once more
    dep["spec"]["replicas"] = 3
    k.run("apply", "-f", "-", stdin=json.dumps(dep))
    got = k.json("get", "deploy", "web")
    assert got["spec"]["replicas"] == 3 and got["metadata"]["generation"] == 3
    k.run("delete", "deploy", "web")


def test_crd_at_runtime_printer_columns_and_lifecycle(server: tuple[Kubectl, Path]) -> None:
    k, _ = server
    k.run("apply", "-f", "-", stdin=WIDGET_CRD)
    k.run("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s")
    k.run("apply", "-f", "-", stdin="apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n")
    lines = k.run("get", "widgets").stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "COLOR", "AGE"]
    assert lines[1].split()[:3] == ["w1", "3", "red"]  # color defaulted by the schema
    assert k.run("get", "wd", "w1", "-o", "name").stdout.strip() == "widget.example.com/w1"
    k.run("label", "widget", "w1", "team=blue")
    k.run("annotate", "widget", "w1", "owner=me")
    k.run("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":5}}')
    k.run("patch", "widget", "w1", "--type=json", "-p", '[{"op":"add","path":"/spec/tags","value":["x"]}]')
    p = k.run("patch", "widget", "w1", "-p", '{"spec":{"size":6}}', check=False)  # strategic: not for CRDs
    assert p.returncode != 0 and "merge" in (p.stderr + p.stdout).lower()
    w = k.json("get", "widget", "w1")
    assert w["spec"] == {"size": 5, "color": "red", "tags": ["x"]}
    assert w["metadata"]["labels"] == {"team": "blue"} and w["metadata"]["generation"] == 3
    # status through the subresource; kubectl wait sees it
    waiter = subprocess.Popen(k.argv("wait", "--for=condition=Ready", "widget/w1", "--timeout=20s"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    k.run("patch", "widget", "w1", "--subresource=status", "--type=merge",
          "-p", '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}')
    out, err = waiter.communicate(timeout=25)
    assert waiter.returncode == 0, err
    assert "condition met" in out
    assert k.json("get", "widget", "w1")["metadata"]["generation"] == 3  # status does not bump generation
    # validation errors come back readable, nothing stored
    bad = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 500\n  color: pink\n"
    p = k.run("apply", "-f", "-", stdin=bad, check=False)
    assert p.returncode != 0
    assert 'The Widget "w1" is invalid' in p.stderr
    assert "spec.size" in p.stderr and "spec.color" in p.stderr and 'Unsupported value: "pink"' in p.stderr
    assert k.json("get", "widget", "w1")["spec"]["size"] == 5
    p = k.run("apply", "-f", "-", check=False,
              stdin="apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  size: 1\n  bogus: 1\n")
    assert p.returncode != 0 and 'unknown field "spec.bogus"' in p.stderr
    assert k.run("get", "widget", "w2", check=False).returncode != 0


def test_server_side_apply_and_conflicts(server: tuple[Kubectl, Path]) -> None:
    k, _ = server
    k.run("apply", "-f", "-", stdin=WIDGET_CRD)
    k.run("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s")
    doc = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: ssa\nspec:\n  size: 2\n"
    k.run("apply", "--server-side", "-f", "-", stdin=doc)
    w = k.json("get", "widget", "ssa", "--show-managed-fields")
    assert any(m["manager"] == "kubectl" and m["operation"] == "Apply" for m in w["metadata"]["managedFields"])
    p = k.run("apply", "--server-side", "--field-manager=other", "-f", "-", stdin=doc.replace("size: 2", "size: 9"),
              check=False)
    assert p.returncode != 0 and "conflict" in p.stderr.lower() and ".spec.size" in p.stderr
    k.run("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-",
          stdin=doc.replace("size: 2", "size: 9"))
    assert k.json("get", "widget", "ssa")["spec"]["size"] == 9
    k.run("delete", "widget", "ssa")


def test_get_watch_streams_changes(server: tuple[Kubectl, Path]) -> None:
    k, _ = server
    k.run("create", "namespace", "watched")
    watcher = subprocess.Popen(k.argv("get", "configmaps", "-n", "watched", "-w", "--output-watch-events"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        k.run("create", "configmap", "one", "-n", "watched", "--from-literal=k=v")
        k.run("label", "cm", "one", "-n", "watched", "x=y")
        k.run("delete", "cm", "one", "-n", "watched")
        assert watcher.stdout is not None
        seen: list[list[str]] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(r and r[0] == "DELETED" for r in seen):
            line = watcher.stdout.readline()
            if not line:
                break
            seen.append(line.split())
        events = [r[0] for r in seen if r and r[0] in ("ADDED", "MODIFIED", "DELETED") and r[1] == "one"]
        assert events[:1] == ["ADDED"] and "MODIFIED" in events and events[-1] == "DELETED", seen
        # kube-root-ca.crt, published into the new namespace, may be listed first (as in any cluster).
        assert all(r[1] == "one" for r in seen if r and r[0] in ("ADDED", "MODIFIED", "DELETED")
                   and r[1] != "kube-root-ca.crt")
    finally:
        watcher.kill()
        watcher.wait()
    k.run("delete", "namespace", "watched", "--timeout=20s")
    assert k.run("get", "ns", "watched", check=False).returncode != 0


def test_namespaces_and_crd_deletion_cascade(server: tuple[Kubectl, Path]) -> None:
    k, _ = server
    names = k.run("get", "ns", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(names)
    p = k.run("create", "configmap", "x", "-n", "nowhere", check=False)
    assert p.returncode != 0 and 'namespaces "nowhere" not found' in p.stderr
    k.run("apply", "-f", "-", stdin=WIDGET_CRD)
    k.run("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s")
    k.run("apply", "-f", "-", stdin="apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: doomed\nspec:\n  size: 1\n")
    k.run("delete", "crd", "widgets.example.com", "--timeout=20s")
    assert k.run("get", "crd", "widgets.example.com", check=False).returncode != 0


def test_bad_token_is_rejected(server: tuple[Kubectl, Path], tmp_path: Path) -> None:
    k, _ = server
    cfg = yaml.safe_load(k.kubeconfig.read_text())
    cfg["users"][0]["user"]["token"] = "wrong"
    bad = tmp_path / "bad-kubeconfig"
    bad.write_text(yaml.safe_dump(cfg))
    p = subprocess.run(["kubectl", f"--kubeconfig={bad}", f"--cache-dir={tmp_path}/c", "get", "ns"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and ("Unauthorized" in p.stderr or "must be logged in" in p.stderr)


def test_imperative_create_commands(server: tuple[Kubectl, Path]) -> None:
    """kubectl's typed generators send protobuf bodies; they must work like on a real cluster."""
    k, _ = server
    k.run("create", "namespace", "imperative")
    k.run("create", "configmap", "cfg", "-n", "imperative", "--from-literal=a=1")
    k.run("create", "secret", "generic", "sec", "-n", "imperative", "--from-literal=pw=s3cret")
    k.run("create", "deployment", "web", "-n", "imperative", "--image=echo:1", "--replicas=0", "--port=8080")
    k.run("create", "service", "clusterip", "web", "-n", "imperative", "--tcp=80:8080")
    assert k.json("get", "cm", "cfg", "-n", "imperative")["data"] == {"a": "1"}
    assert base64.b64decode(k.json("get", "secret", "sec", "-n", "imperative")["data"]["pw"]) == b"s3cret"
    dep = k.json("get", "deploy", "web", "-n", "imperative")
    assert dep["spec"]["replicas"] == 0  # an explicit zero survives (pointer field), not defaulted to 1
    assert dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 8080
    svc = k.json("get", "svc", "web", "-n", "imperative")
    assert svc["spec"]["ports"][0]["port"] == 80 and svc["spec"]["ports"][0]["targetPort"] == 8080
    k.run("delete", "namespace", "imperative", "--timeout=20s")
