"""`isthmus version` against a real embedded apiserver: the server's /version and the Isthmus
components found in isthmus-system (their kind, image, version and readiness), as JSON and as a
table, beside a context whose server does not answer."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import yaml
from lightkube.models.apps_v1 import DaemonSetSpec, DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Namespace

from isthmus.api.image import IMAGE, IMAGE_TAG, NAMESPACE
from tests.harness.apiserver import RunningApiServer

ROOT = Path(__file__).resolve().parents[2]


def _template(app: str, image: str) -> PodTemplateSpec:
    return PodTemplateSpec(metadata=ObjectMeta(labels={"app": app}),
                           spec=PodSpec(containers=[Container(name=app, image=image)]))


async def _seed(srv: RunningApiServer) -> None:
    client = srv.client()
    await client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
    await client.create(Deployment(
        metadata=ObjectMeta(name="isthmus-agent", namespace=NAMESPACE),
        spec=DeploymentSpec(replicas=2, selector=LabelSelector(matchLabels={"app": "agent"}),
                            template=_template("agent", IMAGE))))
    await client.create(DaemonSet(
        metadata=ObjectMeta(name="isthmus-proxy", namespace=NAMESPACE),
        spec=DaemonSetSpec(selector=LabelSelector(matchLabels={"app": "proxy"}),
                           template=_template("proxy", "registry.example/own-proxy:7"))))


async def _isthmus(*args: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "isthmus", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def _with_a_dead_context(srv: RunningApiServer, path: Path) -> Path:
    doc = yaml.safe_load(Path(srv.kubeconfig).read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    doc["clusters"].append({"name": "dead", "cluster": {"server": dead}})
    doc["contexts"].append({"name": "dead", "context": {"cluster": "dead"}})
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_version_reads_every_cluster(apiserver: RunningApiServer, tmp_path: Path) -> None:
    await _seed(apiserver)
    kc = _with_a_dead_context(apiserver, tmp_path / "kubeconfig")
    live = yaml.safe_load(kc.read_text())["current-context"]
    rc, out, err = await _isthmus("version", "--kubeconfig", str(kc), "-o", "json")
    assert rc == 1, err  # a cluster could not be read
    rows = {r["context"]: r for r in json.loads(out)["clusters"]}
    assert set(rows) == {live, "dead"}
    mine = rows[live]
    assert mine["error"] is None and mine["serverVersion"].startswith("v1.")
    assert [(c["name"], c["kind"], c["version"], c["ready"]) for c in mine["components"]] == [
        ("agent", "Deployment", IMAGE_TAG, "0/2"),  # no kubelet here: nothing ready
        ("proxy", "DaemonSet", "registry.example/own-proxy:7", "0/0"),  # not our image: shown whole
    ]
    assert rows["dead"]["error"].startswith("cannot reach the API server at http://127.0.0.1:")

    rc, out, err = await _isthmus("version", "--kubeconfig", str(kc), "--context", live, "-o", "wide")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Client Version: ")
    assert lines[1].split() == ["CLUSTER", "COMPONENT", "VERSION", "READY", "KIND", "IMAGE", "SERVER"]
    assert lines[2].split()[:2] == [live, "kubernetes"] and lines[2].split()[-1] == apiserver.url
    assert lines[3].split() == [live, "agent", IMAGE_TAG, "0/2", "Deployment", IMAGE]
