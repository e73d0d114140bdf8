"""`isthmus kube-lite` as a process: serves /readyz, allocates, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube.resources.core_v1 import Service

from tests.harness.ports import free_port

pytestmark = pytest.mark.timeout(60)

# The command registers on import; run it the way cli/main.py will once it imports the module.
LAUNCH = "from isthmus.cli import kubelite; from isthmus.cli.main import app; app()"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _dns_pod_process(client: Any, kubeconfig: str) -> int:
    """Run `isthmus dns` as a process pod; its pid once it runs."""
    from lightkube.resources.core_v1 import Pod

    from isthmus.api.image import IMAGE

    await client.create(Pod.from_dict({
        "metadata": {"name": "dns", "namespace": "default"},
        "spec": {"automountServiceAccountToken": False, "containers": [{
            "name": "dns", "image": IMAGE, "args": ["dns", "--cluster-id", "c9", "--listen", "$(IP):5353"],
            "env": [{"name": "KUBECONFIG", "value": kubeconfig},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        }]},
    }))
    async with asyncio.timeout(30):
        while True:
            pod = (await client.get(Pod, "dns", namespace="default")).to_dict()
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if statuses and "running" in statuses[0]["state"]:
                return int(statuses[0]["containerID"].rsplit("/", 1)[1])
            await asyncio.sleep(0.2)


async def _start(apiserver: Any, tmp_path: Path, *extra: str) -> tuple[asyncio.subprocess.Process, int, int]:
    """`isthmus kube-lite` for cluster c9 as a process, once its /readyz says 200: (process, the
    second octet of its random pod and service CIDRs, its metrics port)."""
    a = random.randint(100, 199)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCH, "kube-lite",
        "--kubeconfig", apiserver.kubeconfig, "--cluster-name", "c9",
        "--pod-cidr", f"127.{a}.7.0/24", "--service-cidr", f"127.{a}.8.0/24",
        "--node-port-range", "30000-30010", "--metrics-addr", f"127.0.0.1:{port}",
        "--root-dir", str(tmp_path / "kubelet"), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with httpx2.AsyncClient(trust_env=False) as http, asyncio.timeout(30):
            while True:
                try:
                    r = await http.get(f"http://127.0.0.1:{port}/readyz")
                    if r.status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                await asyncio.sleep(0.2)
    except TimeoutError:  # never ready: stopped here, its output in the failure
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(f"kube-lite never ready: {out.decode()[-2000:]}") from None
    return proc, a, port


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(15):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()


async def test_kube_lite_process(apiserver: Any, tmp_path: Path) -> None:
    proc, a, _ = await _start(apiserver, tmp_path)
    try:
        client = apiserver.client()
        await client.create(
            Service.from_dict(
                {"metadata": {"name": "s", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}}
            )
        )
        async with asyncio.timeout(15):
            while True:
                svc = await client.get(Service, "s", namespace="default")
                if svc.spec and svc.spec.clusterIP:
                    break
                await asyncio.sleep(0.1)
        assert svc.spec.clusterIP.startswith(f"127.{a}.8.")
    finally:
        await _stop(proc)


async def test_process_pods_die_with_a_killed_kube_lite(apiserver: Any, tmp_path: Path) -> None:
    """kube-lite SIGKILLed (no chance to stop them): its process pods get SIGTERM, no orphans."""
    from isthmus.kube.helpers import install_crds

    a = random.randint(100, 199)
    client = apiserver.client()
    await install_crds(client)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCH, "kube-lite",
        "--kubeconfig", apiserver.kubeconfig, "--cluster-name", "c9",
        "--pod-cidr", f"127.{a}.7.0/24", "--service-cidr", f"127.{a}.8.0/24",
        "--node-port-range", "30000-30010", "--root-dir", str(tmp_path / "kubelet"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        child = await _dns_pod_process(client, apiserver.kubeconfig)
        proc.kill()
        await proc.wait()
        async with asyncio.timeout(10):
            while True:
                if not _alive(child):
                    break
                await asyncio.sleep(0.1)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_kube_lite_forks_its_pods_from_the_zygote_that_forked_it(apiserver: Any, tmp_path: Path) -> None:
    """Started by a zygote with a connection of its own (as the local clusterset's supervisor starts
    it), kube-lite forks its process pods there too: no zygote of its own. Killed, it takes its pods
    along, and the zygote goes on serving its first caller."""
    import os

    from isthmus.kube.helpers import install_crds
    from isthmus.local.kubelite.processes import ENTRY
    from isthmus.procs.zygote import Zygote

    a = random.randint(100, 199)
    client = apiserver.client()
    await install_crds(client)
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "LANG") if k in os.environ}
    zygote = Zygote(["isthmus.cli.main"], ENTRY, title=["--for", "test"])
    lite = await zygote.spawn(
        [sys.executable, "-m", "isthmus", "kube-lite",
         "--kubeconfig", apiserver.kubeconfig, "--cluster-name", "c9",
         "--pod-cidr", f"127.{a}.7.0/24", "--service-cidr", f"127.{a}.8.0/24",
         "--node-port-range", "30000-30010", "--root-dir", str(tmp_path / "kubelet")],
        env={**env, "HOME": str(tmp_path)}, stdout=2, client=True,
    )  # fmt: skip
    try:
        child = await _dns_pod_process(client, apiserver.kubeconfig)

        def parent(pid: int) -> int:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])

        assert parent(child) == parent(lite.pid) == zygote.pid  # one zygote: no zygote of kube-lite's own
        lite.kill()
        assert await asyncio.wait_for(lite.wait(), 10) == -signal.SIGKILL
        async with asyncio.timeout(10):
            while True:  # its connection closed: the zygote stopped its pods
                if not _alive(child):
                    break
                await asyncio.sleep(0.1)
        assert _alive(zygote.pid or 0)
        helped = await zygote.spawn([sys.executable, "-m", "isthmus", "--help"], env=env, pipe_stdout=True)
        assert await asyncio.wait_for(helped.wait(), 30) == 0
    finally:
        if lite.returncode is None:
            lite.kill()
        await zygote.close()


async def test_kube_lite_with_proxy_serves_cluster_ips_and_node_ports(apiserver: Any, tmp_path: Path) -> None:
    """`kube-lite --proxy` is the node's service proxy too (as k3s's agent runs kube-proxy): a
    Service's ClusterIP and NodePort reach its echo pod; the readiness waits for the proxy."""
    import json

    from lightkube.resources.core_v1 import Pod

    from isthmus.kube.helpers import install_crds
    from isthmus.local.kubelite import WORKLOAD_ANNOTATION

    node_port = 30000 + random.randint(0, 10)
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)  # the proxy serves VIPs too: it lists ServiceImports
    proc, _, port = await _start(apiserver, tmp_path, "--proxy", "--node-address", "127.0.0.1")
    try:
        async with httpx2.AsyncClient(trust_env=False) as http:
            metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            assert "isthmus_proxy_" in metrics  # one process, one /metrics: the proxy's figures are there
        await client.create(Pod.from_dict({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                         "annotations": {WORKLOAD_ANNOTATION: "echo"}},
            "spec": {"containers": [{"name": "echo", "image": "echo", "ports": [{"containerPort": 8080}]}]},
        }))
        await client.create(Service.from_dict({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 8080, "nodePort": node_port}]},
        }))

        async def ask(host: str, to: int) -> dict[str, Any]:
            reader, writer = await asyncio.open_connection(host, to)
            try:
                writer.write(b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
                raw = await reader.read()
            finally:
                writer.close()
            return dict(json.loads(raw.split(b"\r\n\r\n", 1)[1]))

        async with asyncio.timeout(30):
            while True:  # kube-lite allocates the ClusterIP, then the proxy listens on it
                svc = await client.get(Service, "web", namespace="default")
                try:
                    assert svc.spec is not None and svc.spec.clusterIP
                    answer = await ask(svc.spec.clusterIP, 80)
                    break
                except (AssertionError, OSError, ValueError, IndexError):
                    await asyncio.sleep(0.2)
        assert answer["pod"] == "web" and answer["cluster"] == "c9"
        assert (await ask("127.0.0.1", node_port))["pod"] == "web"
    finally:
        await _stop(proc)


HOLDER = """
import os, signal, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["POD_IP"], 8080))
s.listen()
def term(*_):
    time.sleep(3)  # a pod that takes its time to stop, its port held meanwhile
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("listening", flush=True)
while True:
    time.sleep(1)
"""


async def test_a_restarted_kube_lite_waits_for_its_predecessors_pods_to_free_their_ports(
    apiserver: Any, tmp_path: Path
) -> None:
    """kube-lite killed: its pods got SIGTERM and are still stopping. The next kube-lite starts each
    Pod's successor once its predecessor is gone, as a kubelet never starts a container on a port
    the previous one still holds: one restart, no crash loop on "address already in use"."""
    from lightkube.resources.core_v1 import Pod

    from isthmus.api.image import IMAGE

    a = random.randint(100, 199)

    def launch() -> Any:
        return asyncio.create_subprocess_exec(
            sys.executable, "-c", LAUNCH, "kube-lite",
            "--kubeconfig", apiserver.kubeconfig, "--cluster-name", "c9",
            "--pod-cidr", f"127.{a}.7.0/24", "--service-cidr", f"127.{a}.8.0/24",
            "--node-port-range", "30000-30010", "--root-dir", str(tmp_path / "kubelet"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    client = apiserver.client()

    async def container() -> dict[str, Any]:
        pod = (await client.get(Pod, "holder", namespace="default")).to_dict()
        return dict(((pod.get("status") or {}).get("containerStatuses") or [{}])[0])

    async def until(check: Any, within: float) -> dict[str, Any]:
        async with asyncio.timeout(within):
            while True:
                c = await container()
                if check(c):
                    return c
                await asyncio.sleep(0.2)

    first = await launch()
    second = None
    try:
        await client.create(Pod.from_dict({
            "metadata": {"name": "holder", "namespace": "default"},
            "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 10, "containers": [{
                "name": "holder", "image": IMAGE, "command": [sys.executable, "-c", HOLDER],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            }]},
        }))
        c = await until(lambda c: "running" in (c.get("state") or {}), 30)
        old = int(c["containerID"].rsplit("/", 1)[1])
        first.kill()
        await first.wait()
        second = await launch()
        c = await until(lambda c: c.get("restartCount", 0) >= 1 and "running" in (c.get("state") or {})
                        and int(c["containerID"].rsplit("/", 1)[1]) != old, 30)
        await asyncio.sleep(1.0)  # long enough for a successor that failed to bind to have exited
        c = await container()
        assert c["restartCount"] == 1 and "running" in c["state"], c
        assert not _alive(old)
    finally:
        for p in (first, second):
            if p is not None and p.returncode is None:
                p.send_signal(signal.SIGTERM)
                async with asyncio.timeout(20):
                    await p.wait()
