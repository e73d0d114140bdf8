"""kube-lite in runc mode: every Pod a runc container in a network namespace of its own.

An embedded apiserver and a KubeLite with `RuncNode` run in this event loop; the node's network is
a fabric this module creates with a unique id (`isthmus-t-<pid>-k...`) and removes at the end; the
image is a tiny busybox one made here (umoci + Debian's busybox-static) and loaded into the node's
store (pull policy Never: nothing is pulled from anywhere). What is checked is what a user sees:
the Pod's status and Events, its logs, its IP answering from the node's namespace, exec.

Needs root, runc, umoci, skopeo, busybox-static and the CNI plugins (the Makefile installs them);
fails, never skips, without them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from lightkube import AsyncClient
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod, Secret, Service, ServiceAccount

from isthmus.local.kubelite import KubeLite
from isthmus.local.kubelite.images import ImageStore
from isthmus.local.kubelite.processes import ProcessOptions
from isthmus.local.kubelite.runc import RuncNode, RuncPod, RuncRuntime, seccomp_supported
from isthmus.local.network import cni, fabric
from isthmus.local.network.plan import FabricPlan, NodeNet, fabric_plan
from isthmus.runtime import netns
from tests.harness.apiserver import RunningApiServer
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

BUSYBOX = Path("/bin/busybox")
IMAGE = "busybox:runc-test"
APPLETS = ("sh", "echo", "cat", "sleep", "hostname", "httpd", "ls", "env", "id", "true", "false", "head", "tty", "stty")
NS = "default"


def _need() -> None:
    missing = [what for what, ok in (
        ("root", os.geteuid() == 0),
        *((tool, shutil.which(tool) is not None) for tool in ("runc", "umoci", "skopeo", "ip")),
        ("/bin/busybox (busybox-static)", BUSYBOX.exists()),
        ("the CNI plugins in /usr/lib/cni", all((cni.CNI_BIN / p).exists() for p in ("bridge", "host-local", "loopback"))),
    ) if not ok]
    if missing:
        pytest.fail("the runc-mode kube-lite test needs " + ", ".join(missing) + " (`make install` installs them)")


def _run(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True, capture_output=True)


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docker.io/library/busybox:runc-test as an oci-archive: busybox and a few applets, CMD sh."""
    _need()
    work = tmp_path_factory.mktemp("image")
    layout, bundle = work / "layout", work / "bundle"
    _run("umoci", "init", "--layout", layout)
    _run("umoci", "new", "--image", f"{layout}:t")
    _run("umoci", "unpack", "--image", f"{layout}:t", bundle)
    rootfs = bundle / "rootfs"
    for d in ("bin", "etc", "tmp", "www"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    _run("umoci", "repack", "--image", f"{layout}:t", bundle)
    _run("umoci", "config", "--image", f"{layout}:t", "--config.cmd", "sh", "--config.env", "PATH=/bin",
         "--config.workingdir", "/")
    out = work / "busybox.tar"
    _run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:t",
         f"oci-archive:{out}:docker.io/library/{IMAGE}")
    return out


@pytest.fixture(scope="module")
def fab() -> Iterator[FabricPlan]:
    _need()
    plan = fabric_plan("/unused", 1, cs=f"isthmus-t-{os.getpid()}-k")
    try:
        fabric.ensure(plan)
        yield plan
    finally:
        fabric.teardown(plan)


@dataclass
class Cluster:
    client: AsyncClient
    node: NodeNet
    root: Path
    kubeconfig: str
    runc: RuncNode
    options: ProcessOptions
    lite: KubeLite | None = None
    task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """A KubeLite of this node (a new one each time: as after a restart)."""
        network = cni.PodNetwork(self.node.netns, self.node.pod_cidr, self.node.pod_gateway, self.root / "cni")
        self.lite = KubeLite(self.client, cluster="c1", pod_cidr=self.node.pod_cidr,
                             service_cidr=self.node.service_cidr, node_ports=(30000, 30099), processes=self.options,
                             runc=self.runc, network=network)
        ready = asyncio.Event()
        self.task = asyncio.create_task(self.lite.run(ready))
        async with asyncio.timeout(20):
            await ready.wait()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                async with asyncio.timeout(30):
                    await self.task
            self.task = None

    @property
    def kubelet_port(self) -> int:
        assert self.lite is not None
        return self.lite.kubelet.port


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(fab: FabricPlan, archive: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    tmp = tmp_path_factory.mktemp("runc")
    srv = RunningApiServer(tmp / "apiserver", bookmark_interval=1.0)
    await srv.start()
    client = srv.client()
    root = tmp / "kubelet"
    node = fab.node("c1")
    images = ImageStore(root, netns=node.netns)
    assert await images.load_archive(archive) == [f"docker.io/library/{IMAGE}"]
    options = ProcessOptions(root_dir=root, backoff_base=0.5, backoff_max=2.0, stop_grace_cap=3.0)
    runc = RuncNode(
        runtime=RuncRuntime(root, node="c1-node"), images=images, node_netns=node.netns_path,
        node_address=node.address, api_host="10.255.0.1", api_port=srv.server.port, cluster="c1",
        node_name="c1-node", client=client, seccomp=seccomp_supported(), allocatable=options.allocatable,
    )
    c = Cluster(client, node, root, srv.kubeconfig, runc, options)
    try:
        await c.start()
        yield c
    finally:
        await c.stop()
        await asyncio.to_thread(_clean_up, root)
        await srv.close()


def _runc_ids(root: Path) -> list[str]:
    out = subprocess.run(["runc", "--root", str(root / "runc"), "list", "--format", "json"], capture_output=True,
                         text=True, check=False).stdout
    return [str(c["id"]) for c in json.loads(out or "null") or []]


def _clean_up(root: Path) -> None:
    """Whatever a failed test left: never a container or a mount outliving the module."""
    for cid in _runc_ids(root):
        subprocess.run(["runc", "--root", str(root / "runc"), "delete", "--force", cid], check=False)
    subprocess.run(["sh", "-c", f"grep -o ' {root}[^ ]*rootfs' /proc/mounts | xargs -r -n1 umount -l"], check=False)


# ---- helpers ----------------------------------------------------------------------------------------


async def make_pod(c: Cluster, name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    spec.setdefault("automountServiceAccountToken", False)
    spec.setdefault("terminationGracePeriodSeconds", 2)
    for ctr in containers:
        ctr.setdefault("image", IMAGE)
        ctr.setdefault("imagePullPolicy", "Never")
    body = {"metadata": {"name": name, "namespace": NS}, "spec": {"containers": list(containers), **spec}}
    return (await c.client.create(Pod.from_dict(body))).to_dict()


async def get_pod(c: Cluster, name: str) -> dict[str, Any]:
    return (await c.client.get(Pod, name, namespace=NS)).to_dict()


def cstatus(p: dict[str, Any]) -> dict[str, Any]:
    return ((p.get("status") or {}).get("containerStatuses") or [{}])[0]


async def status_where(c: Cluster, name: str, check: Any, within: float = 20.0) -> dict[str, Any]:
    async def ready() -> dict[str, Any]:
        s = cstatus(await get_pod(c, name))
        assert check(s), s
        return s
    return await eventually(ready, within=within)


async def events(c: Cluster, name: str) -> list[tuple[str, str]]:
    return [(e.reason or "", e.message or "") async for e in c.client.list(Event, namespace=NS)
            if e.involvedObject.name == name]


async def kubelet_logs(c: Cluster, pod: str, container: str, **query: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{c.kubelet_port}/containerLogs/{NS}/{pod}/{container}"
    async with aiohttp.ClientSession() as s, s.get(url, params=query) as r:
        return r.status, await r.text()


async def delete_and_wait(c: Cluster, name: str) -> None:
    await c.client.delete(Pod, name, namespace=NS)

    async def gone() -> bool:
        return not [p async for p in c.client.list(Pod, namespace=NS) if p.metadata.name == name]
    await eventually(gone, timeout=20)


async def kubectl(c: Cluster, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is missing: this test (like the e2e tests) runs it")
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", c.kubeconfig, "--namespace", NS, *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(30):
        out, _ = await proc.communicate(stdin)
    return proc.returncode or 0, out.decode()


async def kubelet_exec(c: Cluster, pod: str, container: str, command: list[str], stdin: bytes | None = None,
                       size: tuple[int, int] | None = None) -> tuple[dict[int, bytes], dict[str, Any]]:
    """What kubectl exec does at the kubelet (v5.channel.k8s.io): output per channel, and the Status.
    size: with a terminal of (width, height)."""
    query = [("command", a) for a in command] + [("stdout", "true"), ("stderr", "true" if size is None else "false")]
    if stdin is not None:
        query.append(("stdin", "true"))
    if size is not None:
        query.append(("tty", "true"))
    url = f"http://127.0.0.1:{c.kubelet_port}/exec/{NS}/{pod}/{container}"
    out: dict[int, bytes] = {}
    status: dict[str, Any] = {}
    async with aiohttp.ClientSession() as s, s.ws_connect(url, params=query, protocols=("v5.channel.k8s.io",)) as ws:
        assert ws.protocol == "v5.channel.k8s.io"
        if size is not None:
            await ws.send_bytes(b"\x04" + json.dumps({"Width": size[0], "Height": size[1]}).encode())
        if stdin is not None:
            await ws.send_bytes(b"\x00" + stdin)
            await ws.send_bytes(b"\xff\x00")  # v5: stdin is done
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            if msg.data[0] == 3:
                status = json.loads(msg.data[1:])
            elif len(msg.data) > 1:
                out[msg.data[0]] = out.get(msg.data[0], b"") + msg.data[1:]
    return out, status


async def kubectl_port_forward(c: Cluster, pod: str, port: int, request: bytes, times: int) -> list[bytes]:
    """`kubectl port-forward pod :port`, then `times` connections through it (on this host's loopback)."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", c.kubeconfig, "--namespace", NS, "port-forward", f"pod/{pod}", f":{port}",
        "--address", "127.0.0.1", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
        assert found and int(found.group(2)) == port, line
        out = []
        for _ in range(times):
            reader, writer = await asyncio.open_connection("127.0.0.1", int(found.group(1)))
            writer.write(request)
            await writer.drain()
            out.append(await asyncio.wait_for(reader.read(), 10))
            writer.close()
        return out
    finally:
        proc.terminate()
        await proc.wait()


async def kubelet_port_forward(c: Cluster, pod: str, port: int, request: bytes) -> bytes:
    url = f"http://127.0.0.1:{c.kubelet_port}/portForward/{NS}/{pod}"
    got = b""
    async with aiohttp.ClientSession() as s, s.ws_connect(url, params={"ports": str(port)},
                                                          protocols=("v4.channel.k8s.io",)) as ws:
        first = [await ws.receive_bytes(), await ws.receive_bytes()]
        assert sorted(first) == [b"\x00" + port.to_bytes(2, "little"), b"\x01" + port.to_bytes(2, "little")]
        await ws.send_bytes(b"\x00" + request)
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            assert msg.data[0] == 0, msg.data
            got += msg.data[1:]
    return got


async def http_get_in(netns_path: str, ip: str, port: int, path: str) -> tuple[str, str]:
    reader, writer = await netns.open_connection_in(netns_path, ip, port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return head.splitlines()[0], body


# ---- tests ------------------------------------------------------------------------------------------


async def test_a_pod_runs_in_its_own_namespace_and_its_output_is_its_log(cluster: Cluster) -> None:
    c = cluster
    await make_pod(c, "hello", {"name": "main", "command": [
        "sh", "-c", "echo hello from $(hostname) as $(id -u); echo last words > /dev/termination-log; exit 3"]},
        restartPolicy="Never")
    s = await status_where(c, "hello", lambda s: "terminated" in (s.get("state") or {}))
    term = s["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (3, "Error", "last words\n")
    assert re.fullmatch(r"runc://[0-9a-f]{64}", s["containerID"]), s["containerID"]
    assert s["image"] == IMAGE
    assert re.fullmatch(r"docker.io/library/busybox@sha256:[0-9a-f]{64}", s["imageID"]), s["imageID"]
    p = await get_pod(c, "hello")
    assert p["status"]["phase"] == "Failed"
    assert ipaddress.ip_address(p["status"]["podIP"]) in ipaddress.ip_network(c.node.pod_cidr)
    assert p["status"]["hostIP"] == c.node.address
    code, text = await kubelet_logs(c, "hello", "main")
    assert (code, text) == (200, "hello from hello as 0\n")
    assert await kubectl(c, "logs", "hello") == (0, "hello from hello as 0\n")
    evs = await events(c, "hello")
    reasons = [r for r, _ in evs if r not in ("MissingClusterDNS", "Scheduled")]  # the scheduler's, then the kubelet's
    assert reasons[:3] == ["Pulled", "Created", "Started"], evs
    await delete_and_wait(c, "hello")


async def test_restarts_back_off_and_keep_the_previous_log(cluster: Cluster) -> None:
    c = cluster
    await make_pod(c, "crash", {"name": "main", "command": ["sh", "-c", "echo run; exit 1"],
                                "terminationMessagePolicy": "FallbackToLogsOnError"})
    s = await status_where(c, "crash", lambda s: s.get("restartCount", 0) >= 2, within=30)
    assert (s["lastState"]["terminated"]["exitCode"], s["lastState"]["terminated"]["message"]) == (1, "run\n")
    seen = await status_where(c, "crash", lambda s: "CrashLoopBackOff" in json.dumps(s.get("state")), within=30)
    assert "back-off" in seen["state"]["waiting"]["message"]
    code, text = await kubelet_logs(c, "crash", "main", previous="true")
    assert (code, text) == (200, "run\n")
    await delete_and_wait(c, "crash")


async def test_a_container_over_its_memory_limit_is_oom_killed(cluster: Cluster) -> None:
    c = cluster
    await make_pod(c, "hog", {"name": "main", "command": ["sh", "-c", "x=aaaaaaaa; while true; do x=$x$x; done"],
                              "resources": {"limits": {"memory": "16Mi"}}}, restartPolicy="Never")
    s = await status_where(c, "hog", lambda s: "terminated" in (s.get("state") or {}), within=30)
    assert (s["state"]["terminated"]["reason"], s["state"]["terminated"]["exitCode"]) == ("OOMKilled", 137)
    await delete_and_wait(c, "hog")


async def test_run_as_non_root_refused_with_kubes_message(cluster: Cluster) -> None:
    c = cluster
    p = await make_pod(c, "rooty", {"name": "main", "command": ["sleep", "60"],
                                    "securityContext": {"runAsNonRoot": True}})
    s = await status_where(c, "rooty", lambda s: "CreateContainerConfigError" in json.dumps(s.get("state")))
    uid = p["metadata"]["uid"]
    assert s["state"]["waiting"]["message"] == (
        f"container has runAsNonRoot and image will run as root (pod: \"rooty_{NS}({uid})\", container: main)")
    assert ("Failed", f"Error: {s['state']['waiting']['message']}") in await events(c, "rooty")
    code, text = await kubectl(c, "exec", "rooty", "--", "true")
    assert code != 0 and 'container "main" in pod "rooty" is not running' in text, text
    await delete_and_wait(c, "rooty")


async def test_an_executable_missing_from_the_image_is_a_start_error(cluster: Cluster) -> None:
    c = cluster
    await make_pod(c, "nocmd", {"name": "main", "command": ["nosuch"]}, restartPolicy="Never")
    s = await status_where(c, "nocmd", lambda s: "terminated" in (s.get("state") or {}))
    term = s["state"]["terminated"]
    assert (term["reason"], term["exitCode"]) == ("StartError", 128)
    assert 'exec: "nosuch": executable file not found in $PATH' in term["message"], term["message"]
    assert term["message"].startswith("failed to create containerd task: failed to create shim task: OCI runtime")
    await delete_and_wait(c, "nocmd")


async def test_http_readiness_probe_volume_exec_and_cleanup(cluster: Cluster) -> None:
    """busybox httpd serving a configMap volume: Ready through an httpGet probe from the node's
    namespace, the page answers there too, exec runs in the container; deleting the Pod removes its
    namespace, cgroup and bundle."""
    c = cluster
    await c.client.create(ConfigMap.from_dict({"metadata": {"name": "www", "namespace": NS},
                                               "data": {"index.html": "served from a configMap\n"}}))
    p = await make_pod(c, "web", {
        "name": "httpd", "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
        "ports": [{"containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1},
        "volumeMounts": [{"name": "www", "mountPath": "/www"}],
    }, volumes=[{"name": "www", "configMap": {"name": "www"}}])
    uid = p["metadata"]["uid"]
    await status_where(c, "web", lambda s: s.get("ready") is True, within=30)
    ip = (await get_pod(c, "web"))["status"]["podIP"]
    first, body = await http_get_in(c.node.netns_path, ip, 8080, "/index.html")
    assert " 200 " in first and body == "served from a configMap\n"

    # kubectl exec's protocol at the kubelet endpoint: stdin in, stdout/stderr out, the exit code
    out, status = await kubelet_exec(c, "web", "httpd", ["cat", "/www/index.html"])
    assert (out, status) == ({1: b"served from a configMap\n"}, {"metadata": {}, "status": "Success"})
    out, status = await kubelet_exec(c, "web", "httpd", ["cat"], stdin=b"typed in\n")
    assert out == {1: b"typed in\n"} and status["status"] == "Success"
    out, status = await kubelet_exec(c, "web", "httpd", ["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert out == {1: b"out\n", 2: b"err\n"}
    assert (status["reason"], status["details"]["causes"]) == ("NonZeroExitCode", [{"reason": "ExitCode", "message": "7"}])
    out, status = await kubelet_exec(c, "web", "httpd", ["sh", "-c", "sleep 0.5; tty; stty size"], size=(100, 30))
    assert (out, status["status"]) == ({1: b"/dev/pts/0\r\n30 100\r\n"}, "Success"), out
    # the same through the apiserver, as a user types it (kubectl speaks v5.channel.k8s.io)
    assert await kubectl(c, "exec", "web", "--", "cat", "/www/index.html") == (0, "served from a configMap\n")
    assert await kubectl(c, "exec", "-i", "web", "--", "cat", stdin=b"piped\n") == (0, "piped\n")
    code, text = await kubectl(c, "exec", "web", "--", "sh", "-c", "exit 5")
    assert code == 5, text
    # port-forward's: the page through a connection made inside the Pod's namespace (its localhost)
    page = await kubelet_port_forward(c, "web", 8080, b"GET /index.html HTTP/1.0\r\n\r\n")
    assert page.startswith(b"HTTP/1.1 200 OK") and page.endswith(b"served from a configMap\n"), page
    # kubectl port-forward (SPDY in the WebSocket), twice on one tunnel
    pages = await kubectl_port_forward(c, "web", 8080, b"GET /index.html HTTP/1.0\r\n\r\n", times=2)
    for page in pages:
        assert page.startswith(b"HTTP/1.1 200 OK") and page.endswith(b"served from a configMap\n"), page

    pod_netns = f"{c.node.netns}-{uid.replace('-', '')[:12]}"
    assert netns.exists(pod_netns)
    cgroup = Path(f"/sys/fs/cgroup/memory/isthmus/c1-node/pod{uid}")
    assert await asyncio.to_thread(cgroup.is_dir)
    await delete_and_wait(c, "web")

    def cleaned() -> bool:
        assert not netns.exists(pod_netns)
        assert not cgroup.exists()
        assert not (c.root / "pods" / uid).exists()
        return _runc_ids(c.root) == []
    await eventually(cleaned, within=10)



async def test_a_restarted_kube_lite_stops_what_it_finds_and_starts_the_pod_again(cluster: Cluster) -> None:
    """kube-lite restarts: the Pod keeps its IP, its container starts again (restartCount + 1, the
    lost instance ContainerStatusUnknown as the kubelet reports it), and a container a killed
    kube-lite left behind (in runc's state, under the Pod's dir) is stopped and removed first."""
    c = cluster
    p = await make_pod(c, "survivor", {"name": "main", "command": ["sh", "-c", "while true; do echo tick; sleep 0.2; done"]})
    uid = p["metadata"]["uid"]
    await status_where(c, "survivor", lambda s: "running" in (s.get("state") or {}))
    # attach: what it prints from now on
    url = f"http://127.0.0.1:{c.kubelet_port}/attach/{NS}/survivor/main"
    async with aiohttp.ClientSession() as s, s.ws_connect(url, params={"stdout": "true"},
                                                          protocols=("v5.channel.k8s.io",)) as ws:
        assert await asyncio.wait_for(ws.receive_bytes(), 10) == b"\x01tick\n"
    ip = (await get_pod(c, "survivor"))["status"]["podIP"]
    spec = json.loads(await asyncio.to_thread((c.root / "pods" / uid / "containers" / "main" / "0" / "config.json").read_text))
    await c.stop()
    # What a SIGKILLed kube-lite leaves: a container of the Pod still running under runc.
    image = await c.runc.images.ensure(IMAGE, "Never")
    bundle = c.root / "pods" / uid / "containers" / "main" / "9"
    await asyncio.to_thread(c.runc.runtime.prepare, bundle, image.rootfs, spec)
    orphan = await c.runc.runtime.run("leftover" + "0" * 56, bundle, spec["linux"]["cgroupsPath"])
    await orphan.started()
    assert "leftover" + "0" * 56 in await asyncio.to_thread(_runc_ids, c.root)

    await c.start()
    s = await status_where(c, "survivor", lambda s: s.get("restartCount") == 1 and "running" in (s.get("state") or {}))
    assert s["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert (await get_pod(c, "survivor"))["status"]["podIP"] == ip
    assert "leftover" + "0" * 56 not in await asyncio.to_thread(_runc_ids, c.root)
    assert orphan.returncode is not None or await asyncio.wait_for(orphan.proc.wait(), 10) is not None
    await delete_and_wait(c, "survivor")


async def test_bad_input_gets_the_kubelets_status_and_an_event(cluster: Cluster) -> None:
    """An image the node lacks under policy Never, a volume type kube-lite has no plugin for:
    never a silent start, always the kubelet's waiting reason and an Event saying why."""
    c = cluster
    await make_pod(c, "noimage", {"name": "main", "image": "example.com/missing:1", "command": ["true"]})
    s = await status_where(c, "noimage", lambda s: "ErrImageNeverPull" in json.dumps(s.get("state")))
    message = 'Container image "example.com/missing:1" is not present with pull policy of Never'
    assert s["state"]["waiting"]["message"] == message
    assert ("ErrImageNeverPull", message) in await events(c, "noimage")

    await make_pod(c, "novolume", {"name": "main", "command": ["true"], "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
                   volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}])

    async def failed_mount() -> list[str]:
        found = [m for r, m in await events(c, "novolume") if r == "FailedMount"]
        assert found
        return found
    found = await eventually(failed_mount, within=20)
    assert found[0] == ('MountVolume.SetUp failed for volume "v" : persistentVolumeClaim volumes are not supported '
                        "by kube-lite (no volume plugin matched)"), found
    s = cstatus(await get_pod(c, "novolume"))
    assert s["state"] == {"waiting": {"reason": "ContainerCreating"}} and "containerID" not in s
    await make_pod(c, "nosysctl", {"name": "main", "command": ["true"]},
                   securityContext={"sysctls": [{"name": "kernel.hostname", "value": "x"}]})

    async def rejected() -> dict[str, Any]:
        status = (await get_pod(c, "nosysctl"))["status"]
        assert status.get("phase") == "Failed", status
        return status
    status = await eventually(rejected, within=20)
    assert (status["reason"], status["message"]) == (
        "SysctlForbidden", 'Pod was rejected: forbidden sysctl: "kernel.hostname" not allowlisted')
    assert not status.get("containerStatuses") and not netns.exists(
        f"{c.node.netns}-{(await get_pod(c, 'nosysctl'))['metadata']['uid'].replace('-', '')[:12]}")
    for name in ("noimage", "novolume", "nosysctl"):
        await delete_and_wait(c, name)


async def test_an_echo_pod_is_told_who_it_is(cluster: Cluster) -> None:
    """The echo annotation's promise in runc mode: POD_NAME, POD_NAMESPACE, ISTHMUS_CLUSTER."""
    c = cluster
    body = {"metadata": {"name": "echoer", "namespace": NS, "annotations": {"isthmus.io/workload": "echo"}},
            "spec": {"automountServiceAccountToken": False, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", "echo $POD_NAME $POD_NAMESPACE $ISTHMUS_CLUSTER"]}]}}
    await c.client.create(Pod.from_dict(body))
    await status_where(c, "echoer", lambda s: "terminated" in (s.get("state") or {}))
    assert await kubelet_logs(c, "echoer", "main") == (200, f"echoer {NS} c1\n")
    await delete_and_wait(c, "echoer")


async def test_the_admitted_token_volume_gives_the_container_its_service_account(cluster: Cluster) -> None:
    """ServiceAccount admission adds kube-api-access-<random>; runc mode fills that volume and mounts
    it where the container's volumeMount says: a token the apiserver authenticates as the Pod's
    ServiceAccount, and the namespace."""
    c = cluster
    # This apiserver serves plain HTTP: no CA, so no root CA publisher; give the volume its ConfigMap.
    await c.client.create(ConfigMap.from_dict({"metadata": {"name": "kube-root-ca.crt", "namespace": NS},
                                               "data": {"ca.crt": "not a CA: the apiserver serves HTTP\n"}}))
    p = await make_pod(c, "sa", {"name": "main", "command": [
        "sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; "
        "cat /var/run/secrets/kubernetes.io/serviceaccount/token"]},
        restartPolicy="Never", automountServiceAccountToken=True)
    (vol,) = [v["name"] for v in p["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    assert p["spec"]["containers"][0]["volumeMounts"] == [
        {"name": vol, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    await status_where(c, "sa", lambda s: "terminated" in (s.get("state") or {}))
    code, text = await kubelet_logs(c, "sa", "main")
    assert code == 200
    namespace, token = text.split("\n", 1)
    assert namespace == NS
    review = await c.client.create(TokenReview.from_dict({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token.strip()}}))
    status = review.to_dict()["status"]
    assert status["authenticated"] is True, status
    assert status["user"]["username"] == f"system:serviceaccount:{NS}:default"
    await delete_and_wait(c, "sa")
    await c.client.delete(ConfigMap, "kube-root-ca.crt", namespace=NS)


async def test_runc_mode_is_refused_without_runc() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "kube-lite", "--kubeconfig", "/nonexistent", "--cluster-name", "c1",
        "--pod-cidr", "10.101.0.0/16", "--service-cidr", "10.201.0.0/16", "--runtime", "runc",
        "--runc", "/nonexistent/runc", "--netns", "x", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 2, err
    assert "--runtime runc: '/nonexistent/runc' not found (Debian: apt-get install runc)" in err.decode()


async def test_the_command_runs_a_node_with_its_service_proxy(fab: FabricPlan, archive: Path, tmp_path: Path) -> None:
    """`isthmus kube-lite --runtime runc --proxy` as `up` starts it (on the fabric's broker node, with an
    apiserver of its own): a Pod behind a Service answers on the ClusterIP from the node's namespace
    (the proxy's nftables there), and a hostNetwork Pod listens on the node's address."""
    node = fab.node("broker")
    srv = RunningApiServer(tmp_path / "apiserver", bookmark_interval=1.0)
    await srv.start()
    client = srv.client()
    root = tmp_path / "kubelet"
    await ImageStore(root, netns=node.netns).load_archive(archive)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "kube-lite", "--kubeconfig", srv.kubeconfig, "--cluster-name", "broker",
        "--pod-cidr", node.pod_cidr, "--service-cidr", node.service_cidr, "--root-dir", str(root),
        "--runtime", "runc", "--netns", node.netns, "--node-address", node.address, "--proxy",
        "--api-address-in-pods", f"10.255.0.1:{srv.server.port}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    try:
        for name, extra in (("web", {}), ("hostweb", {"hostNetwork": True})):
            port = 8080 if name == "web" else 18080
            await client.create(Pod.from_dict({
                "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
                "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1, **extra,
                         "containers": [{"name": "httpd", "image": IMAGE, "imagePullPolicy": "Never",
                                         "command": ["sh", "-c", f"echo up > /www/index.html; httpd -f -p {port} -h /www"],
                                         "ports": [{"containerPort": port}],
                                         "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}}]}}))
        await client.create(Service.from_dict({
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}))

        async def ready(name: str) -> dict[str, Any]:
            p = (await client.get(Pod, name, namespace=NS)).to_dict()
            assert cstatus(p).get("ready") is True, p.get("status")
            return p
        host = await eventually(lambda: ready("hostweb"), within=30)
        assert host["status"]["podIP"] == node.address
        assert (await http_get_in(node.netns_path, node.address, 18080, "/index.html"))[1] == "up\n"
        kubectl = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", srv.kubeconfig, "--namespace", NS, "exec", "hostweb", "--", "hostname",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        assert (await kubectl.communicate())[0] == b"broker-node\n"  # the node's name, as on a kubelet
        await eventually(lambda: ready("web"), within=30)
        cluster_ip = (await client.get(Service, "web", namespace=NS)).to_dict()["spec"]["clusterIP"]
        assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(node.service_cidr)

        async def through_the_service() -> bool:
            return (await http_get_in(node.netns_path, cluster_ip, 80, "/index.html"))[1] == "up\n"
        assert await eventually(through_the_service, within=20)
        node_obj = (await client.get(Node, "broker-node")).to_dict()
        assert node_obj["status"]["addresses"][0] == {"type": "InternalIP", "address": node.address}
    finally:
        proc.terminate()
        async with asyncio.timeout(30):
            await proc.wait()
        for name in ("web", "hostweb"):
            with contextlib.suppress(Exception):
                await client.delete(Pod, name, namespace=NS, grace_period=0)
        await asyncio.to_thread(_clean_up, root)
        netns_left = [n for n in netns.names() if n.startswith(f"{node.netns}-")]
        for n in netns_left:
            netns.delete(n)
        await srv.close()


async def test_a_prestop_exec_hook_runs_in_the_container(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    await make_pod(c, "hooked", {
        "name": "main", "command": ["sleep", "300"], "volumeMounts": [{"name": "out", "mountPath": "/out"}],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo bye from $(hostname) > /out/stopped"]}}},
    }, volumes=[{"name": "out", "hostPath": {"path": str(tmp_path), "type": "Directory"}}])
    await status_where(c, "hooked", lambda s: "running" in (s.get("state") or {}))
    await delete_and_wait(c, "hooked")
    assert await asyncio.to_thread((tmp_path / "stopped").read_text) == "bye from hooked\n"


async def test_pull_credentials_are_the_pods_then_its_service_accounts(cluster: Cluster) -> None:
    """What a pull of a Pod's image is given: its imagePullSecrets, then its ServiceAccount's, a
    missing one skipped (the kubelet's keyring)."""
    c = cluster

    def docker_secret(name: str, registry: str, user: str) -> Secret:
        config = {"auths": {registry: {"auth": base64.b64encode(f"{user}:pw".encode()).decode()}}}
        return Secret.from_dict({"metadata": {"name": name, "namespace": NS}, "type": "kubernetes.io/dockerconfigjson",
                                 "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}})
    await c.client.create(docker_secret("mine", "registry.example", "alice"))
    await c.client.create(docker_secret("sas", "other.example", "bob"))
    await c.client.create(ServiceAccount.from_dict({"metadata": {"name": "puller", "namespace": NS},
                                                    "imagePullSecrets": [{"name": "sas"}]}))
    pod = {"metadata": {"name": "p", "namespace": NS, "uid": "u"},
           "spec": {"serviceAccountName": "puller", "imagePullSecrets": [{"name": "mine"}, {"name": "absent"}]}}
    runc_pod = RuncPod(c.runc, None, pod, c.root / "unused", netns_path="", lookup=None)  # type: ignore[arg-type]
    auths = await runc_pod._auths()
    assert [(a.registry, a.username, a.password) for a in auths] == [
        ("registry.example", "alice", "pw"), ("other.example", "bob", "pw")]
