"""kube-lite as a node: its Node object and Lease, its kubelet endpoint, and the Pod subresources
the apiserver proxies to it (``kubectl logs`` / ``logs -f``; ``exec``, ``attach``,
``port-forward`` refused with a reason), through kubectl against an in-process apiserver.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from typing import Any

import aiohttp
import pytest
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from isthmus.local.kubelite import WORKLOAD_ANNOTATION
from isthmus.local.kubelite.kubelet import KubeletServer
from isthmus.local.kubelite.logs import PodLogs
from tests.harness.kubelite import NS, Lite, create, http_twice, kubectl
from tests.harness.polling import eventually

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
]


def echo_pod(name: str, containers: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "echo", "ports": [{"containerPort": 8080 + i}]}
                for i in range(containers)
            ]
        },
    }


async def running_ip(lite: Lite, name: str) -> str:
    async def ip() -> str | None:
        pod = (await lite.client.get(Pod, name, namespace=NS)).to_dict()
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
        )
        return (pod.get("status") or {}).get("podIP") if ready else None

    return str(await eventually(ip, what=f"pod {name} ready"))


async def test_node_registered_ready_with_kubelet_endpoint(apiserver: Any, lite: Lite) -> None:
    node = (await lite.client.get(Node, "c1-node")).to_dict()
    status = node["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert {"type": "Hostname", "address": "c1-node"} in status["addresses"]
    port = status["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    assert port > 0
    assert int(status["capacity"]["pods"]) > 0 and status["allocatable"]["cpu"]
    assert status["nodeInfo"]["kubeletVersion"].startswith("v1.32")
    assert node["spec"]["podCIDR"] == lite.pod_cidr
    lease = (await lite.client.get(Lease, "c1-node", namespace="kube-node-lease")).to_dict()
    assert lease["spec"]["holderIdentity"] == "c1-node" and lease["spec"]["renewTime"]
    # The endpoint is a kubelet's: it answers only the apiserver's credentials (here none are set,
    # so it is open), and serves health.
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/healthz") as r:
        assert r.status == 200
    code, out = await kubectl(
        apiserver.kubeconfig, "wait", "--for=condition=Ready", "node/c1-node", "--timeout=20s"
    )
    assert code == 0, out
    code, out = await kubectl(apiserver.kubeconfig, "get", "nodes", "-o", "wide", "--no-headers")
    assert code == 0 and out.split()[:3] == ["c1-node", "Ready", "control-plane"] and "127.0.0.1" in out, out


async def test_kubectl_logs_and_follow(apiserver: Any, lite: Lite) -> None:
    await create(lite.client, Pod, echo_pod("web"))
    ip = await running_ip(lite, "web")
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "pod/web")
    assert code == 0, out
    assert f"listening on {ip}:8080/TCP" in out
    await http_twice(ip, 8080)
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "web", "--tail=1", "--timestamps")
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == 1 and '"POST /second HTTP/1.1" 200' in lines[0], out
    assert lines[0][:4].isdigit() and "Z " in lines[0]  # an RFC 3339 timestamp prefix
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "web", "--limit-bytes=5")
    assert code == 0 and out == "echo ", out

    # -f: what is there, then each new request as it arrives; ended by us (kubectl waits forever).
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", apiserver.kubeconfig, "-n", NS, "logs", "-f", "web",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            first = await proc.stdout.readline()
            assert b"listening on" in first, first
            await asyncio.sleep(0.5)  # the stream is open: the next request is news to it
            async with aiohttp.ClientSession() as s, s.get(f"http://{ip}:8080/followed?x=1") as r:
                assert r.status == 200
            while b"/followed?x=1" not in (line := await proc.stdout.readline()):
                assert line, "the log stream ended"
        assert lite.lite is not None and lite.lite.kubelet.following == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    # The apiserver notices kubectl left and drops its stream from the node, which ends it too.
    await eventually(lambda: _true(lite.lite.kubelet.following == 0), what="follow stream closed")  # type: ignore[union-attr]

    # Errors as kube words them: options, containers, and a kubelet that has nothing to give.
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "web", "--previous")
    assert code != 0 and 'previous terminated container "c0" in pod "web" not found' in out, out
    raw = f"/api/v1/namespaces/{NS}/pods/web/log"
    code, out = await kubectl(apiserver.kubeconfig, "get", "--raw", f"{raw}?tailLines=-1")
    assert code != 0 and "tailLines: Invalid value: -1: must be greater than or equal to 0" in out, out
    code, out = await kubectl(apiserver.kubeconfig, "get", "--raw", f"{raw}?container=nope")
    assert code != 0 and "container nope is not valid for pod web" in out, out
    await create(lite.client, Pod, echo_pod("two", containers=2))
    await running_ip(lite, "two")
    code, out = await kubectl(
        apiserver.kubeconfig, "get", "--raw", f"/api/v1/namespaces/{NS}/pods/two/log"
    )
    assert code != 0 and "a container name must be specified for pod two, choose one of: [c0 c1]" in out, out
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "two", "-c", "c1")
    assert code == 0 and ":8081/TCP" in out and ":8080/" not in out, out
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "missing")
    assert code != 0 and 'pods "missing" not found' in out, out


async def _true(v: bool) -> bool:
    return v


async def test_exec_attach_port_forward_say_why(apiserver: Any, lite: Lite) -> None:
    await create(lite.client, Pod, echo_pod("box"))
    ip = await running_ip(lite, "box")
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "exec", "box", "--", "ls")
    assert code != 0, out
    assert "Error from server (BadRequest)" in out and "cannot exec into pod default/box" in out, out
    assert "not found" not in out
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "attach", "box")
    assert code != 0 and "cannot attach to pod default/box" in out, out
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", apiserver.kubeconfig, "-n", NS, "port-forward", "pod/box", ":8080",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(30):
            pf_out, _ = await proc.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    assert proc.returncode != 0
    assert "cannot forward ports of pod default/box" in pf_out.decode() and ip in pf_out.decode()
    # Without an upgrade request kube answers 400 before asking the node.
    code, out = await kubectl(
        apiserver.kubeconfig, "get", "--raw", f"/api/v1/namespaces/{NS}/pods/box/exec?command=ls"
    )
    assert code != 0 and "Upgrade request required" in out, out


async def test_pod_without_node(apiserver: Any) -> None:
    """No kube-lite: nothing binds the Pod to a node. kube's answers: an empty log, 400 for exec."""
    client = apiserver.client()
    await create(client, Pod, echo_pod("pending"))
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "pending")
    assert code == 0 and out == "", out
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "exec", "pending", "--", "ls")
    assert code != 0 and "pod pending does not have a host assigned" in out, out
    # Bound to a node nobody registered: the node lookup fails as kube's does.
    binding = json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": "ghost"}})
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(binding)
        f.flush()
        code, out = await kubectl(apiserver.kubeconfig, "create", "--raw",
                                  f"/api/v1/namespaces/{NS}/pods/pending/binding", "-f", f.name)
    assert code == 0, out  # as a scheduler binds (a Pod's nodeName is not otherwise writable)
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "pending")
    assert code != 0 and 'nodes "ghost" not found' in out, out
    # A registered node whose kubelet does not answer: kube's dial error, not "pod not found".
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "ghost"},
    }
    await client.create(Node.from_dict(node))
    await client.patch(
        Node.Status,
        "ghost",
        {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 1}}}},
    )
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "exec", "pending", "--", "ls")
    assert code != 0 and "error dialing backend: dial tcp 127.0.0.1:1: connect: connection refused" in out, out
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "pending")
    assert code != 0 and "connection refused" in out, out


async def test_kubelet_endpoint_answers_only_the_cluster_token() -> None:
    """With a token (as `isthmus up` runs it), the logs of Pods are not open to every local user."""
    pod = {"metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [{"name": "c"}]}}
    logs = PodLogs()
    logs.pod(f"{NS}/p", "u").container("c").write("secret line")
    kubelet = KubeletServer(logs, lambda ns, name: pod if name == "p" else None, node="n", token="s3cret")
    await kubelet.start()
    try:
        url = f"http://127.0.0.1:{kubelet.port}/containerLogs/{NS}/p/c"
        async with aiohttp.ClientSession() as s:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                async with s.get(url, headers=headers) as r:
                    assert r.status == 401 and "secret" not in await r.text()
            async with s.get(url, headers={"Authorization": "Bearer s3cret"}) as r:
                assert r.status == 200 and await r.text() == "secret line\n"
            async with s.get(url[: -len("/c")] + "/nope", headers={"Authorization": "Bearer s3cret"}) as r:
                assert r.status == 404 and await r.text() == 'container "nope" not found in pod "p"'
    finally:
        await kubelet.stop()
