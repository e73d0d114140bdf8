"""The local clusterset's kube-lite as a user meets it through kubectl: its Node, pod logs (and
`logs -f`), exec refused with a reason, Endpoints, and Deployment rollouts through ReplicaSets
(status, history, undo). One 1-cluster clusterset for the module; always brought down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.local import Clusterset, wait_for

# clusterset: one local clusterset at a time (they share one 127.x plan); run serially.
pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(240)]

WEB = """
apiVersion: v1
kind: Namespace
metadata: {name: kl}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: kl}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {isthmus.io/workload: echo}
    spec:
      containers:
      - name: echo
        image: echo:v1
        ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: kl}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""


@pytest.fixture(scope="module")
def cs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusterset]:
    cs = Clusterset(tmp_path_factory.mktemp("local-node") / "state")
    try:
        cs.up("--clusters", "1")
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), check=False, timeout=60)
        left = cs.our_processes()
        for line in left:  # never leave a clusterset behind, even when `down` is broken
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        assert not left, f"processes survived `isthmus down`: {left}"


def revisions(cs: Clusterset) -> list[str]:
    out = cs.kubectl("c1", "-n", "kl", "rollout", "history", "deploy/web")
    return [line.split()[0] for line in out.splitlines()[2:] if line.strip()]


def test_node_is_ready_and_publishes_the_kubelet_port_status_shows(cs: Clusterset) -> None:
    cs.kubectl("c1", "wait", "--for=condition=Ready", "node/c1-node", "--timeout=30s")
    node = json.loads(cs.kubectl("c1", "get", "node", "c1-node", "-o", "json"))
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    (cluster,) = cs.status()["clusters"]
    assert cluster["kubelet"] == f"127.0.0.1:{port}"
    assert cs.kubectl("c1", "get", "nodes", "--no-headers").split()[:2] == ["c1-node", "Ready"]


def test_logs_exec_endpoints_and_rollouts(cs: Clusterset) -> None:
    cs.kubectl("c1", "apply", "-f", "-", stdin=WEB)
    out = cs.kubectl("c1", "-n", "kl", "rollout", "status", "deploy/web", "--timeout=60s")
    assert "successfully rolled out" in out

    # Endpoints beside the EndpointSlices.
    pods = json.loads(cs.kubectl("c1", "-n", "kl", "get", "pods", "-l", "app=web", "-o", "json"))["items"]
    ips = sorted(p["status"]["podIP"] for p in pods)
    wait_for(
        "endpoints",
        lambda: sorted(
            cs.kubectl("c1", "-n", "kl", "get", "endpoints", "web", "-o",
                       "jsonpath={.subsets[*].addresses[*].ip}").split()
        ) == ips,
    )

    # Logs: the workload's startup line, then the request we make.
    pod = pods[0]["metadata"]["name"]
    ip = pods[0]["status"]["podIP"]
    assert f"listening on {ip}:8080/TCP" in cs.kubectl("c1", "-n", "kl", "logs", f"pod/{pod}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    follow = subprocess.Popen(
        ["kubectl", "--context", "c1", "-n", "kl", "logs", "-f", pod],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cs.env,
    )
    try:
        assert follow.stdout is not None
        assert "listening on" in follow.stdout.readline()
        time.sleep(0.5)  # the stream is open: the next request is news to it
        with opener.open(f"http://{ip}:8080/e2e-followed", timeout=5) as r:
            assert r.status == 200
        deadline = time.monotonic() + 30
        while "/e2e-followed" not in (line := follow.stdout.readline()):
            assert line and time.monotonic() < deadline, "the followed log ended without the request"
    finally:
        follow.kill()
        follow.wait(timeout=10)

    # exec: refused by the node with a reason, not a "pod not found".
    p = subprocess.run(["kubectl", "--context", "c1", "-n", "kl", "exec", pod, "--", "ls"],
                       capture_output=True, text=True, timeout=60, env=cs.env)
    assert p.returncode != 0 and "cannot exec into pod kl/" in p.stderr, p.stderr

    # A new template: a second ReplicaSet and revision; undo brings the first back as revision 3.
    cs.kubectl("c1", "-n", "kl", "set", "image", "deploy/web", "echo=echo:v2")
    cs.kubectl("c1", "-n", "kl", "rollout", "status", "deploy/web", "--timeout=60s")
    assert revisions(cs) == ["1", "2"]
    sets = cs.kubectl("c1", "-n", "kl", "get", "rs", "-o",
                      "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}={.spec.replicas} {end}")
    assert sorted(sets.split()) == ["echo:v1=0", "echo:v2=2"]
    cs.kubectl("c1", "-n", "kl", "rollout", "undo", "deploy/web")
    cs.kubectl("c1", "-n", "kl", "rollout", "status", "deploy/web", "--timeout=60s")
    assert revisions(cs) == ["2", "3"]
    image = cs.kubectl("c1", "-n", "kl", "get", "deploy", "web", "-o",
                       "jsonpath={.spec.template.spec.containers[0].image}")
    assert image == "echo:v1"


def test_status_table_names_the_kubelet(cs: Clusterset) -> None:
    table = cs.isthmus("status", "--state-dir", str(cs.root)).stdout
    assert "KUBELET" in table
    assert Path(cs.root / "state.json").exists()
