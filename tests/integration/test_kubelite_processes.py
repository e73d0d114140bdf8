"""kube-lite as a kubelet for the Isthmus image: Pods whose containers run as real processes.

Each test runs real ``isthmus`` commands (the image's entrypoint) as Pods against an embedded
apiserver and looks at what a user sees: the Pod's status, Events, EndpointSlices, ``kubectl
logs``, and the process itself (its pid, what it serves). Back-off is shortened to keep tests quick.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.exception
import dns.message
import dns.rcode
import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Service, ServiceAccount
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding
from lightkube.types import PatchType

from isthmus.api.image import IMAGE, IMAGE_REPOSITORY
from isthmus.kube.helpers import install_crds
from isthmus.kube.manifests import apply, deploy_dir, render
from isthmus.local.kubelite.processes import ProcessOptions
from tests.harness.apiserver import RunningApiServer
from tests.harness.kubelite import NS, Lite, kubectl
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(120)

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


class ProcLite(Lite):
    """A KubeLite whose process pods live under ``root``; restartable on the same CIDRs."""

    stop_timeout = 20.0  # process pods get their graceful stop first

    def __init__(self, client: AsyncClient, root: Path, api_port: int) -> None:
        self.options = ProcessOptions(root_dir=root, api_port=api_port, backoff_base=0.5, backoff_max=2.0,
                                      stop_grace_cap=5.0)
        super().__init__(client, processes=self.options)


@pytest.fixture
async def lite(apiserver: Any, tmp_path: Path) -> AsyncIterator[ProcLite]:
    client = apiserver.client()
    await install_crds(client)  # `isthmus dns` reads ServiceImports
    running = ProcLite(client, tmp_path / "kubelet", apiserver.server.port)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def dns_container(apiserver: Any, *, listen: str = "$(POD_IP):5353", **extra: Any) -> dict[str, Any]:
    """`isthmus dns` of this pod, reaching the test apiserver through KUBECONFIG (no token needed)."""
    return {
        "name": "dns",
        "image": IMAGE,
        "command": ["isthmus", "dns"],
        "args": ["--cluster-id", "c1", "--listen", listen, "--metrics-addr", "$(POD_IP):9090"],
        "env": [
            {"name": "KUBECONFIG", "value": apiserver.kubeconfig},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": 9090}, {"name": "dns", "containerPort": 5353,
                                                                "protocol": "UDP"}],
        **extra,
    }


def pod(name: str, *containers: dict[str, Any], labels: dict[str, str] | None = None,
        **spec: Any) -> Pod:
    """No ServiceAccount token unless asked (``automountServiceAccountToken=None``): the test
    apiserver is plain HTTP, where the processes use KUBECONFIG."""
    spec.setdefault("automountServiceAccountToken", False)
    if spec["automountServiceAccountToken"] is None:
        del spec["automountServiceAccountToken"]
    return Pod.from_dict({
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"containers": list(containers), **spec},
    })


async def get_pod(client: AsyncClient, name: str) -> dict[str, Any]:
    return (await client.get(Pod, name, namespace=NS)).to_dict()


def cstatus(p: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    statuses = (p.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if name is None or s["name"] == name), {})


def condition(p: dict[str, Any], ctype: str) -> str | None:
    return next((c["status"] for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def pid_of(p: dict[str, Any]) -> int:
    cid = cstatus(p).get("containerID") or ""
    assert cid.startswith("isthmus://c1-node/"), cid
    return int(cid.rsplit("/", 1)[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


async def events_of(client: AsyncClient, name: str) -> list[tuple[str, str]]:
    return [
        (e.reason or "", e.message or "")
        async for e in client.list(Event, namespace=NS, fields={"involvedObject.name": name})
    ]


async def test_isthmus_pod_runs_with_downward_api_readiness_and_logs(apiserver: Any, lite: ProcLite) -> None:
    client = lite.client
    await client.create(ConfigMap.from_dict({"metadata": {"name": "dns-conf", "namespace": NS},
                                              "data": {"port": "5354"}}))
    c = dns_container(apiserver, listen="$(POD_IP):$(DNS_PORT)")
    c["env"].append({"name": "DNS_PORT", "valueFrom": {"configMapKeyRef": {"name": "dns-conf", "key": "port"}}})
    c["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 1}
    await client.create(Service.from_dict({
        "metadata": {"name": "dns", "namespace": NS},
        "spec": {"selector": {"app": "dns"}, "ports": [{"port": 53, "targetPort": 5354, "protocol": "UDP"}]},
    }))
    await client.create(pod("dns-0", c, labels={"app": "dns"}))

    async def ready() -> dict[str, Any] | None:
        p = await get_pod(client, "dns-0")
        return p if condition(p, "Ready") == "True" else None

    try:
        p = await eventually(ready, within=30, what="pod Ready through its readiness probe")
    except AssertionError:
        print((await get_pod(client, "dns-0"))["status"], await events_of(client, "dns-0"))
        for f in lite.options.root_dir.rglob("*.log"):
            print(f, f.read_text())
        raise
    ip = p["status"]["podIP"]
    s = cstatus(p)
    assert p["status"]["phase"] == "Running" and s["started"] and s["ready"] and s["restartCount"] == 0
    assert "running" in s["state"] and s["image"] == IMAGE and s["imageID"].startswith(IMAGE_REPOSITORY + "@sha256:")
    pid = pid_of(p)
    assert alive(pid)

    # The process listens where $(POD_IP):$(DNS_PORT) said, and answers as the DNS server.
    query = dns.message.make_query("nothing.default.svc.clusterset.local", "A")
    answer = await dns.asyncquery.udp(query, ip, port=5354, timeout=3)
    assert answer.rcode() == dns.rcode.NXDOMAIN

    async def endpoint_ready() -> bool:
        slices = [s.to_dict() async for s in client.list(
            EndpointSlice, namespace=NS, labels={"kubernetes.io/service-name": "dns"})]
        eps = [e for s in slices for e in s.get("endpoints") or []]
        return bool(eps) and all(e["conditions"]["ready"] for e in eps) and eps[0]["addresses"] == [ip]

    await eventually(endpoint_ready, what="ready endpoint in the Service's EndpointSlice")

    events = await events_of(client, "dns-0")
    assert ("Created", "Created container: dns") in events and ("Started", "Started container dns") in events

    if shutil.which("kubectl"):
        async def logged() -> str | None:
            code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "dns-0", "-c", "dns")
            return out if code == 0 and ip in out else None

        out = await eventually(logged, what="kubectl logs shows the process's output")
        assert "5354" in out
        code, tail = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "dns-0", "--tail=1")
        assert code == 0 and tail.count("\n") == 1 and tail.strip() == out.strip().splitlines()[-1]
        code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "get", "pod", "dns-0", "--no-headers")
        assert code == 0 and out.split()[1:4] == ["1/1", "Running", "0"], out
        # -f follows until the container stops (here: the Pod is deleted).
        follow = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", apiserver.kubeconfig, "-n", NS, "logs", "-f", "dns-0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        assert lite.lite is not None
        kubelet = lite.lite.kubelet
        await eventually(lambda: _async(kubelet.following == 1), what="kubectl logs -f connected")

    # Deleting the Pod stops the process.
    await client.delete(Pod, "dns-0", namespace=NS)
    await eventually(lambda: _async(not alive(pid)), what="process gone after the pod was deleted")
    if shutil.which("kubectl"):
        async with asyncio.timeout(15):
            followed, _ = await follow.communicate()
        assert ip.encode() in followed


async def _async(value: Any) -> Any:
    return value


async def test_readiness_failure_keeps_pod_unready(apiserver: Any, lite: ProcLite) -> None:
    c = dns_container(apiserver)
    c["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": 9999}, "periodSeconds": 1}
    await lite.client.create(pod("unready", c))

    async def running() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "unready")
        return p if "running" in (cstatus(p).get("state") or {}) else None

    await eventually(running, within=30, what="container running")
    await asyncio.sleep(3)
    p = await get_pod(lite.client, "unready")
    assert condition(p, "Ready") == "False" and condition(p, "ContainersReady") == "False"
    ready_cond = next(c for c in p["status"]["conditions"] if c["type"] == "Ready")
    assert ready_cond["reason"] == "ContainersNotReady"
    assert ready_cond["message"] == "containers with unready status: [dns]"
    assert cstatus(p)["ready"] is False and cstatus(p)["restartCount"] == 0
    events = await events_of(lite.client, "unready")
    assert any(r == "Unhealthy" and m.startswith("Readiness probe failed: ") for r, m in events), events


async def test_liveness_failure_restarts_the_container(apiserver: Any, lite: ProcLite) -> None:
    c = dns_container(apiserver)
    c["args"] += ["--shutdown-delay", "0"]  # its lame duck (5 s) would outlast the 2 s grace: SIGKILL, 137
    c["livenessProbe"] = {"tcpSocket": {"port": 9998}, "periodSeconds": 1, "failureThreshold": 2}
    await lite.client.create(pod("sick", c, terminationGracePeriodSeconds=2))

    async def restarted() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "sick")
        return p if cstatus(p).get("restartCount", 0) >= 1 else None

    p = await eventually(restarted, within=40, what="restart after liveness failures")
    last = cstatus(p)["lastState"]["terminated"]
    # SIGTERM: `isthmus` shuts down cleanly (exit 0, which kube reports as Completed), or, when it
    # arrives before its handler is installed (a slow start), dies of it (143, Error).
    assert (last["exitCode"], last["reason"]) in ((0, "Completed"), (143, "Error")), last
    events = await events_of(lite.client, "sick")
    assert ("Killing", "Container dns failed liveness probe, will be restarted") in events
    assert any(r == "Unhealthy" and m.startswith("Liveness probe failed: dial tcp") for r, m in events), events


@needs_kubectl
async def test_crashing_command_goes_crash_loop_back_off(apiserver: Any, lite: ProcLite) -> None:
    await lite.client.create(pod("crash", dns_container(apiserver, listen="not-an-address")))

    async def backing_off() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "crash")
        s = cstatus(p)
        waiting = (s.get("state") or {}).get("waiting") or {}
        return p if waiting.get("reason") == "CrashLoopBackOff" and s.get("restartCount", 0) >= 1 else None

    p = await eventually(backing_off, within=30, what="CrashLoopBackOff")
    s = cstatus(p)
    assert s["lastState"]["terminated"]["exitCode"] == 2 and s["lastState"]["terminated"]["reason"] == "Error"
    assert s["state"]["waiting"]["message"].startswith("back-off ")
    assert p["status"]["phase"] == "Running" and condition(p, "Ready") == "False"
    events = await events_of(lite.client, "crash")
    assert any(r == "BackOff" and m.startswith("Back-off restarting failed container dns in pod crash_default(")
               for r, m in events), events
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "crash", "--previous")
    assert code == 0 and "not-an-address" in out, out


async def test_never_restart_policy_fails_the_pod(apiserver: Any, lite: ProcLite) -> None:
    await lite.client.create(pod("once", dns_container(apiserver, listen="bad"), restartPolicy="Never"))

    async def failed() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "once")
        return p if p["status"].get("phase") == "Failed" else None

    p = await eventually(failed, within=30, what="phase Failed")
    term = cstatus(p)["state"]["terminated"]
    assert term["exitCode"] == 2 and term["reason"] == "Error" and cstatus(p)["restartCount"] == 0
    ready = next(c for c in p["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"


async def test_missing_config_map_is_create_container_config_error(apiserver: Any, lite: ProcLite) -> None:
    c = dns_container(apiserver)
    c["envFrom"] = [{"configMapRef": {"name": "later"}}]
    await lite.client.create(pod("waits", c))

    async def config_error() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "waits")
        waiting = (cstatus(p).get("state") or {}).get("waiting") or {}
        return p if waiting.get("reason") == "CreateContainerConfigError" else None

    p = await eventually(config_error, what="CreateContainerConfigError")
    assert cstatus(p)["state"]["waiting"]["message"] == 'configmap "later" not found'
    assert p["status"]["phase"] == "Pending"
    if shutil.which("kubectl"):
        code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "waits")
        assert code != 0 and 'container "dns" in pod "waits" is waiting to start: CreateContainerConfigError' in out
    await lite.client.create(ConfigMap.from_dict({"metadata": {"name": "later", "namespace": NS},
                                                   "data": {"X": "1"}}))

    async def running() -> bool:
        return "running" in (cstatus(await get_pod(lite.client, "waits")).get("state") or {})

    await eventually(running, within=20, what="started once the ConfigMap exists")


async def test_other_images_are_not_pulled(lite: ProcLite) -> None:
    await lite.client.create(pod("nginx", {"name": "web", "image": "nginx:1.27"}))

    async def waiting() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "nginx")
        w = (cstatus(p).get("state") or {}).get("waiting") or {}
        return p if w.get("reason") == "ImagePullBackOff" else None

    p = await eventually(waiting, what="ImagePullBackOff")
    assert p["status"]["phase"] == "Pending"
    assert "kube-lite runs only the Isthmus image" in cstatus(p)["state"]["waiting"]["message"]


async def test_kube_lite_restart_stops_and_reruns_processes(apiserver: Any, lite: ProcLite) -> None:
    await lite.client.create(pod("survivor", dns_container(apiserver)))

    async def running() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "survivor")
        return p if "running" in (cstatus(p).get("state") or {}) else None

    first = await eventually(running, within=30, what="running")
    pid = pid_of(first)
    await lite.stop()
    assert not alive(pid)
    orphan = lite.options.root_dir / "pods" / "uid-of-a-pod-deleted-meanwhile"
    (orphan / "tmp").mkdir(parents=True)
    await lite.start()
    assert not orphan.exists()  # the kubelet's cleanup of orphaned pod dirs
    assert (lite.options.root_dir / "pods" / first["metadata"]["uid"]).is_dir()

    async def rerun() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "survivor")
        s = cstatus(p)
        return p if "running" in (s.get("state") or {}) and s.get("restartCount") == 1 else None

    p = await eventually(rerun, within=30, what="process started again after kube-lite restarted")
    assert pid_of(p) != pid and alive(pid_of(p))
    assert cstatus(p)["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"


async def test_process_talks_to_its_apiserver_as_its_service_account(tmp_path: Path) -> None:
    """No kubeconfig: the process finds the apiserver and its token as a real Pod does, and the
    token kube-lite wrote is the Pod's ServiceAccount's, bound to the Pod."""
    run = RunningApiServer(tmp_path / "apiserver", token="admin-token", tls=True, bookmark_interval=1.0)
    await run.start()
    client = run.client()
    await install_crds(client)
    # RBAC is on: the Pod's account (default/default) may read what the DNS server reads.
    await client.create(ClusterRoleBinding.from_dict({
        "metadata": {"name": "dns-sa-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}],
    }))
    lite = ProcLite(client, tmp_path / "kubelet", run.server.port)
    await lite.start()
    try:
        c = dns_container(run)
        c["env"] = [e for e in c["env"] if e["name"] != "KUBECONFIG"]
        c["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 1}
        await client.create(pod("dns-sa", c, automountServiceAccountToken=None))

        async def ready() -> dict[str, Any] | None:
            p = await get_pod(client, "dns-sa")
            return p if condition(p, "Ready") == "True" else None

        p = await eventually(ready, within=30, what="pod Ready: its informers synced with the SA token")
        sa_dir = lite.options.root_dir / "pods" / p["metadata"]["uid"] / "serviceaccount"
        assert (sa_dir / "namespace").read_text() == NS
        assert run.server.ca_pem is not None and (sa_dir / "ca.crt").read_bytes().strip() == run.server.ca_pem.strip()
        assert (sa_dir / "token").stat().st_mode & 0o777 == 0o600
        review = await client.create(TokenReview.from_dict({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": (sa_dir / "token").read_text()},
        }))
        status = review.to_dict()["status"]
        assert status["authenticated"] is True
        assert status["user"]["username"] == "system:serviceaccount:default:default"
        assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["dns-sa"]
        assert status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [p["metadata"]["uid"]]
        log_text = "".join(f.read_text() for f in (sa_dir.parent / "logs").rglob("*.log"))
        assert "401" not in log_text and "Unauthorized" not in log_text, log_text
    finally:
        await lite.stop()
        await run.close()


async def test_missing_service_account_is_failed_mount(apiserver: Any, lite: ProcLite) -> None:
    # Admission refuses a Pod whose ServiceAccount is missing; one deleted after the Pod was admitted
    # is what the kubelet meets. A scheduling gate holds the Pod off the node until then.
    c = dns_container(apiserver)
    await lite.client.create(ServiceAccount.from_dict({"metadata": {"name": "ghost", "namespace": NS}}))
    created = await lite.client.create(pod("no-sa", c, automountServiceAccountToken=None, serviceAccountName="ghost",
                                           schedulingGates=[{"name": "test/hold"}]))
    await lite.client.delete(ServiceAccount, "ghost", namespace=NS)
    await lite.client.patch(Pod, "no-sa", [{"op": "remove", "path": "/spec/schedulingGates"}], namespace=NS,
                            patch_type=PatchType.JSON)
    assert created.spec is not None and created.spec.volumes is not None
    volume = next(v.name for v in created.spec.volumes if v.name.startswith("kube-api-access-"))

    async def failed_mount() -> list[tuple[str, str]] | None:
        events = await events_of(lite.client, "no-sa")
        return events if any(r == "FailedMount" for r, _ in events) else None

    events = await eventually(failed_mount, what="FailedMount event")
    message = next(m for r, m in events if r == "FailedMount")
    assert message.startswith(f'MountVolume.SetUp failed for volume "{volume}" : failed to fetch token: ')
    assert 'serviceaccounts "ghost" not found' in message
    p = await get_pod(lite.client, "no-sa")
    assert cstatus(p)["state"] == {"waiting": {"reason": "ContainerCreating"}} and p["status"]["phase"] == "Pending"


@needs_kubectl
async def test_deployment_of_the_image_rolls_out(apiserver: Any, lite: ProcLite) -> None:
    """As `isthmus up` will install components: a Deployment whose Pods are processes, gated by readiness."""
    c = dns_container(apiserver)
    c["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 1}
    await lite.client.create(Deployment.from_dict({
        "metadata": {"name": "dns", "namespace": NS},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "dns"}}, "template": {
            "metadata": {"labels": {"app": "dns"}},
            "spec": {"automountServiceAccountToken": False, "containers": [c]}}},
    }))
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "rollout", "status", "deploy/dns", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out
    pods = [p.to_dict() async for p in lite.client.list(Pod, namespace=NS, labels={"app": "dns"})]
    pids = {pid_of(p) for p in pods}
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "scale", "deploy/dns", "--replicas=1")
    assert code == 0, out

    async def one_left() -> bool:
        return sum(alive(pid) for pid in pids) == 1

    await eventually(one_left, within=30, what="the scaled-down Pod's process stopped")


async def test_host_network_pod_gets_the_node_address(apiserver: Any, lite: ProcLite) -> None:
    port = random.randint(20000, 29999)
    c = dns_container(apiserver, listen=f"$(POD_IP):{port}")
    c["args"] = c["args"][:-2]  # no metrics server on the node's address
    await lite.client.create(pod("on-host", c, hostNetwork=True))

    async def running() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "on-host")
        return p if "running" in (cstatus(p).get("state") or {}) else None

    p = await eventually(running, within=30, what="running")
    assert p["status"]["podIP"] == "127.0.0.1" == p["status"]["hostIP"]

    async def answers() -> bool:
        query = dns.message.make_query("x.default.svc.clusterset.local", "A")
        try:
            answer = await dns.asyncquery.udp(query, "127.0.0.1", port=port, timeout=1)
        except dns.exception.Timeout:  # not listening yet
            return False
        return answer.rcode() == dns.rcode.NXDOMAIN

    await eventually(answers, what="DNS on the node's address")


async def test_init_containers_run_to_completion_first(apiserver: Any, lite: ProcLite) -> None:
    init = {"name": "print-crds", "image": IMAGE, "args": ["crds"]}
    await lite.client.create(pod("inits", dns_container(apiserver), initContainers=[init]))

    async def running() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "inits")
        return p if "running" in (cstatus(p).get("state") or {}) else None

    p = await eventually(running, within=30, what="app container running after the init container")
    done = p["status"]["initContainerStatuses"][0]
    assert done["state"]["terminated"]["exitCode"] == 0 and done["state"]["terminated"]["reason"] == "Completed"
    assert condition(p, "Initialized") == "True"
    if shutil.which("kubectl"):
        code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "logs", "inits", "-c", "print-crds")
        assert code == 0 and "kind: CustomResourceDefinition" in out, out

    failing = {"name": "fails", "image": IMAGE, "args": ["dns", "--cluster-id", "c1", "--listen", "bad"]}
    await lite.client.create(pod("bad-init", dns_container(apiserver), initContainers=[failing],
                                 restartPolicy="Never"))

    async def failed() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "bad-init")
        return p if p["status"].get("phase") == "Failed" else None

    p = await eventually(failed, within=30, what="Pod Failed: its init container failed under Never")
    assert p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert cstatus(p)["state"] == {"waiting": {"reason": "PodInitializing"}}
    init_cond = next(c for c in p["status"]["conditions"] if c["type"] == "Initialized")
    assert init_cond["status"] == "False"


async def test_deletion_kills_after_the_grace_period(lite: ProcLite) -> None:
    """SIGTERM first; a process that ignores it is SIGKILLed once terminationGracePeriodSeconds pass."""
    stubborn = {"name": "stubborn", "image": IMAGE, "command": ["sh", "-c", "trap '' TERM; echo up; sleep 60 & wait"]}
    await lite.client.create(pod("stubborn", stubborn, terminationGracePeriodSeconds=2))

    async def running() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "stubborn")
        return p if "running" in (cstatus(p).get("state") or {}) else None

    pid = pid_of(await eventually(running, within=30, what="running"))
    await asyncio.sleep(0.5)  # the trap is set
    await lite.client.delete(Pod, "stubborn", namespace=NS)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(1.0)
    assert alive(pid)  # SIGTERM ignored: still there within the grace period
    await eventually(lambda: _async(not alive(pid)), within=10, what="SIGKILL after the grace period")
    assert loop.time() - start >= 1.5
    events = await events_of(lite.client, "stubborn")
    assert ("Killing", "Stopping container stubborn") in events


async def test_member_manifests_run_as_their_service_accounts(tmp_path: Path) -> None:
    """deploy/member applied as `kubectl apply -k` would: kube-lite runs each component's Pods as
    processes of the image, each with a token of its own ServiceAccount (whether the component then
    gets Ready is the manifests' and the component's business, checked where those are tested)."""
    run = RunningApiServer(tmp_path / "apiserver", token="admin-token", tls=True, bookmark_interval=1.0)
    await run.start()
    client = run.client()
    lite = ProcLite(client, tmp_path / "kubelet", run.server.port)
    await lite.start()
    try:
        async with asyncio.timeout(60):
            await install_crds(client)  # deploy/crds/*: deploy/member carries none
            await apply(client, render(deploy_dir() / "member"), field_manager="isthmus-test")
        ns = "isthmus-system"

        async def started() -> list[dict[str, Any]] | None:
            pods = [p.to_dict() async for p in client.list(Pod, namespace=ns)]
            ran = [p for p in pods if all(s.get("containerID") for s in p["status"].get("containerStatuses") or [{}])]
            return pods if pods and len(ran) == len(pods) else None

        pods = await eventually(started, within=40, what="every component Pod started as a process")
        accounts = set()
        for p in pods:
            sa_dir = lite.options.root_dir / "pods" / p["metadata"]["uid"] / "serviceaccount"
            review = await client.create(TokenReview.from_dict({
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": (sa_dir / "token").read_text()},
            }))
            user = review.to_dict()["status"]["user"]
            assert user["username"] == f"system:serviceaccount:{ns}:{p['spec']['serviceAccountName']}"
            accounts.add(p["spec"]["serviceAccountName"])
        # No pool manager: load balancing is the opt-in deploy/components/lb (its own namespace too).
        assert accounts == {"isthmus-agent", "isthmus-dns", "isthmus-controller-manager",
                            "isthmus-webhook", "isthmus-egress-gateway"}
    finally:
        await lite.stop()
        await run.close()


async def test_a_hung_dns_server_fails_its_liveness_probe_and_is_restarted(apiserver: Any, lite: ProcLite) -> None:
    """SIGSTOP: the process is there and its port accepts connections (the kernel's backlog), but
    nothing answers. With the member manifest's liveness probe (only its period shortened) and the
    pod's default 30 s grace period, the container is killed and runs again well within 30 s."""
    manifest = yaml.safe_load((deploy_dir() / "member" / "dns" / "deployment.yaml").read_text())
    liveness = dict(manifest["spec"]["template"]["spec"]["containers"][0]["livenessProbe"])
    liveness.update(periodSeconds=1, port="metrics")
    c = dns_container(apiserver)
    c["livenessProbe"] = liveness
    c["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 1}
    await lite.client.create(pod("hung", c))

    async def ready() -> dict[str, Any] | None:
        p = await get_pod(lite.client, "hung")
        return p if condition(p, "Ready") == "True" else None

    pid = pid_of(await eventually(ready, within=30, what="ready"))
    os.kill(pid, signal.SIGSTOP)
    try:
        async def restarted() -> dict[str, Any] | None:
            p = await get_pod(lite.client, "hung")
            return p if cstatus(p).get("restartCount", 0) >= 1 and condition(p, "Ready") == "True" else None

        p = await eventually(restarted, within=25, what="a restart after the process hung")
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert pid_of(p) != pid
    events = await events_of(lite.client, "hung")
    assert ("Killing", "Container dns failed liveness probe, will be restarted") in events
    assert any(r == "Unhealthy" and m.startswith("Liveness probe failed: Get ") and "deadline exceeded" in m
               for r, m in events), events
