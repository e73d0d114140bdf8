"""kube-lite against a real embedded apiserver: allocation, slices, workloads, echo traffic, restarts.

Pod IPs are drawn from a random 127.x.y.0/24 per test, so echo servers of concurrent test runs
never collide; every address used is loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import shutil
from collections.abc import Awaitable
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Event, Pod, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.local.kubelite import KUBE_ENDPOINTSLICE_MANAGER, WORKLOAD_ANNOTATION
from tests.harness.kubelite import NODE_PORTS, NS, Lite, create, echo_deployment, http_twice, kubectl, pods_of
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(120)


async def get_svc(client: AsyncClient, name: str) -> dict[str, Any]:
    return (await client.get(Service, name, namespace=NS)).to_dict()


async def slices_of(client: AsyncClient, svc: str) -> list[dict[str, Any]]:
    return [
        s.to_dict()
        async for s in client.list(EndpointSlice, namespace=NS, labels={"kubernetes.io/service-name": svc})
    ]


async def udp_ask(ip: str, port: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()

    class Proto(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: Any) -> None:
            if not answer.done():
                answer.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Proto, remote_addr=(ip, port))
    try:
        transport.sendto(b"hello")
        async with asyncio.timeout(3):
            return dict(json.loads(await answer))
    finally:
        transport.close()


async def deployment_done(client: AsyncClient, name: str, replicas: int) -> bool:
    d = (await client.get(Deployment, name, namespace=NS)).to_dict()
    st = d.get("status") or {}
    available = any(c["type"] == "Available" and c["status"] == "True" for c in st.get("conditions") or [])
    return bool(
        available
        and st.get("observedGeneration") == d["metadata"]["generation"]
        and st.get("replicas") == replicas
        and st.get("updatedReplicas") == replicas
        and st.get("readyReplicas") == replicas
        and st.get("availableReplicas") == replicas
    )


# ------------------------------------------------------------------------------------- services


async def test_services_get_cluster_ips_and_node_ports(lite: Lite) -> None:
    c = lite.client
    net = ipaddress.ip_network(lite.service_cidr)
    port = {"port": 80, "targetPort": 8080}
    await create(
        c, Service, {"metadata": {"name": "plain"}, "spec": {"selector": {"app": "x"}, "ports": [port]}}
    )
    await create(
        c,
        Service,
        {
            "metadata": {"name": "np"},
            "spec": {"type": "NodePort", "ports": [{**port, "name": "a"}, {"name": "b", "port": 81}]},
        },
    )
    await create(c, Service, {"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": [port]}})
    await create(
        c, Service, {"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "ports": [port]}}
    )
    await create(
        c,
        Service,
        {"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.org"}},
    )

    async def allocated() -> bool:
        return all([(await get_svc(c, n))["spec"].get("clusterIP") for n in ("plain", "np", "lb")])

    await eventually(allocated, what="cluster IPs")
    ips = set()
    for n in ("plain", "np", "lb"):
        spec = (await get_svc(c, n))["spec"]
        assert ipaddress.ip_address(spec["clusterIP"]) in net
        assert spec["clusterIPs"] == [spec["clusterIP"]]
        assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
        ips.add(spec["clusterIP"])
    assert len(ips) == 3

    async def node_ports() -> list[int]:
        ports = [p.get("nodePort") for n in ("np", "lb") for p in (await get_svc(c, n))["spec"]["ports"]]
        return ports if all(ports) else []

    nps = await eventually(node_ports, what="node ports")
    assert len(set(nps)) == 3 and all(NODE_PORTS[0] <= p <= NODE_PORTS[1] for p in nps)
    assert "status" not in (await get_svc(c, "lb")) or not (await get_svc(c, "lb"))["status"].get(
        "loadBalancer", {}
    ).get("ingress")
    assert (await get_svc(c, "headless"))["spec"]["clusterIP"] == "None"
    assert not (await get_svc(c, "ext"))["spec"].get("clusterIP")

    # A user-chosen address: outside the CIDR, and one already taken.
    await create(
        c, Service, {"metadata": {"name": "outside"}, "spec": {"clusterIP": "127.0.0.99", "ports": [port]}}
    )
    taken = (await get_svc(c, "plain"))["spec"]["clusterIP"]
    await create(c, Service, {"metadata": {"name": "dup"}, "spec": {"clusterIP": taken, "ports": [port]}})
    await create(
        c,
        Service,
        {
            "metadata": {"name": "dupnp"},
            "spec": {"type": "NodePort", "ports": [{**port, "nodePort": nps[0]}]},
        },
    )

    async def warnings() -> dict[str, str]:
        found = {}
        async for ev in c.list(Event, namespace=NS):
            if ev.type == "Warning" and ev.involvedObject.kind == "Service":
                found[f"{ev.involvedObject.name}/{ev.reason}"] = ev.message or ""
        ok = {
            "outside/ClusterIPNotAllocated",
            "dup/ClusterIPNotAllocated",
            "dupnp/NodePortNotAllocated",
        } <= set(found)
        return found if ok else {}

    found = await eventually(warnings, what="warning events")
    assert "outside the service CIDR" in found["outside/ClusterIPNotAllocated"]
    assert "already allocated to Service default/plain" in found["dup/ClusterIPNotAllocated"]
    assert "already allocated to Service default/np" in found["dupnp/NodePortNotAllocated"] or (
        "default/lb" in found["dupnp/NodePortNotAllocated"]
    )
    assert (await get_svc(c, "outside"))["spec"]["clusterIP"] == "127.0.0.99"
    assert (await get_svc(c, "dup"))["spec"]["clusterIP"] == taken

    # Type change NodePort → ClusterIP drops and releases the node ports; a new Service may take them.
    np_svc = await c.get(Service, "np", namespace=NS)
    data = np_svc.to_dict()
    data["spec"]["type"] = "ClusterIP"
    await c.replace(Service.from_dict(data))

    async def dropped() -> bool:
        return all("nodePort" not in p for p in (await get_svc(c, "np"))["spec"]["ports"])

    await eventually(dropped, what="node ports dropped")
    # Deleting a Service releases its address: nothing else of ours holds it afterwards.
    await c.delete(Service, "plain", namespace=NS)
    assert lite.lite is not None
    await eventually(
        lambda: _true(lite.lite.service_ips.ips.owner_of(taken) in (None, "default/dup")),  # type: ignore[union-attr]
        what="address released",
    )


async def _true(v: bool) -> bool:
    return v


# ------------------------------------------------------------------------------------- workloads


async def test_echo_deployment_serves_and_scales(lite: Lite) -> None:
    c = lite.client
    pod_net = ipaddress.ip_network(lite.pod_cidr)
    await create(c, Deployment, echo_deployment("echo", 2))
    await create(
        c,
        Service,
        {
            "metadata": {"name": "echo"},
            "spec": {
                "selector": {"app": "echo"},
                "ports": [
                    {"name": "web", "port": 80, "targetPort": "http"},
                    {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"},
                ],
            },
        },
    )
    await eventually(lambda: deployment_done(c, "echo", 2), what="deployment available")
    pods = await pods_of(c, {"app": "echo"})
    assert len(pods) == 2
    for p in pods:
        st, meta = p["status"], p["metadata"]
        assert ipaddress.ip_address(st["podIP"]) in pod_net
        assert (
            st["phase"] == "Running" and st["podIPs"] == [{"ip": st["podIP"]}] and st["hostIP"] == "127.0.0.1"
        )
        assert {cd["type"] for cd in st["conditions"] if cd["status"] == "True"} >= {
            "PodScheduled",
            "Initialized",
            "ContainersReady",
            "Ready",
        }
        assert (
            st["containerStatuses"][0]["ready"]
            and st["containerStatuses"][0]["state"]["running"]["startedAt"]
        )
        assert p["spec"]["nodeName"] == "c1-node"
        assert meta["name"].startswith(f"echo-{meta['labels']['pod-template-hash']}-")
        owner = meta["ownerReferences"][0]  # Deployment → ReplicaSet → Pod, as in kube
        assert owner["kind"] == "ReplicaSet" and owner["controller"] is True
        assert owner["name"] == f"echo-{meta['labels']['pod-template-hash']}"
        answers = await http_twice(st["podIP"], 8080)
        first, second, local = answers
        assert first["pod"] == meta["name"] and first["namespace"] == NS and first["cluster"] == "c1"
        assert first["method"] == "POST" and first["path"] == "/first?x=1" and second["path"] == "/second"
        assert first["headers"]["X-Test"] == "yes"
        assert first["client"] == second["client"] == local["local"]  # one kept-alive connection
        udp = await udp_ask(st["podIP"], 5353)
        assert udp["pod"] == meta["name"] and udp["cluster"] == "c1" and "method" not in udp
        assert udp["client"].startswith("127.")

    async def slice_ready(n: int) -> list[dict[str, Any]] | None:
        slices = await slices_of(c, "echo")
        eps = [e for s in slices for e in s.get("endpoints") or []]
        if len(eps) != n or not all(e["conditions"]["ready"] for e in eps):
            return None
        return slices

    slices = await eventually(lambda: slice_ready(2), what="2 ready endpoints")
    assert len(slices) == 1
    s = slices[0]
    assert s["metadata"]["name"].startswith("echo-") and len(s["metadata"]["name"]) == len("echo-") + 5
    assert s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == KUBE_ENDPOINTSLICE_MANAGER
    assert s["metadata"]["ownerReferences"][0]["kind"] == "Service"
    assert s["addressType"] == "IPv4"
    assert sorted((p["name"], p["port"], p["protocol"]) for p in s["ports"]) == [
        ("dns", 5353, "UDP"),
        ("web", 8080, "TCP"),
    ]
    ep = s["endpoints"][0]
    assert ep["targetRef"]["kind"] == "Pod" and ep["targetRef"]["uid"] and ep["nodeName"] == "c1-node"
    assert sorted(e["addresses"][0] for e in s["endpoints"]) == sorted(p["status"]["podIP"] for p in pods)

    # Scale up, then down.
    await c.patch(Deployment, "echo", {"spec": {"replicas": 3}}, namespace=NS, patch_type=PatchType.MERGE)
    await eventually(lambda: deployment_done(c, "echo", 3), what="scaled to 3")
    await eventually(lambda: slice_ready(3), what="3 endpoints")
    ips = {p["status"]["podIP"] for p in await pods_of(c, {"app": "echo"})}
    assert len(ips) == 3
    await c.patch(Deployment, "echo", {"spec": {"replicas": 1}}, namespace=NS, patch_type=PatchType.MERGE)
    await eventually(lambda: deployment_done(c, "echo", 1), what="scaled to 1")
    await eventually(lambda: slice_ready(1), what="1 endpoint")
    remaining = await pods_of(c, {"app": "echo"})
    gone = ips - {p["status"]["podIP"] for p in remaining}
    assert len(gone) == 2
    for ip in gone:  # the deleted Pods' servers are stopped

        async def refused(ip: str = ip) -> bool:
            try:
                _, w = await asyncio.open_connection(ip, 8080)
            except OSError:
                return True
            w.close()
            return False

        await eventually(refused, what=f"echo on {ip} stopped")

    # A template change replaces the Pods.
    old_names = {p["metadata"]["name"] for p in remaining}
    new_tmpl = echo_deployment("echo", 1, "v2")["spec"]["template"]
    await c.patch(
        Deployment, "echo", {"spec": {"template": new_tmpl}}, namespace=NS, patch_type=PatchType.MERGE
    )

    async def rolled() -> bool:
        names = {p["metadata"]["name"] for p in await pods_of(c, {"app": "echo"})}
        return bool(names) and not names & old_names and await deployment_done(c, "echo", 1)

    await eventually(rolled, what="rollout")
    pod = (await pods_of(c, {"app": "echo"}))[0]
    assert pod["metadata"]["annotations"]["v"] == "v2"
    assert (await http_twice(pod["status"]["podIP"], 8080))[0]["pod"] == pod["metadata"]["name"]

    # Deleting the Deployment deletes its Pods (garbage collector), then the slice empties.
    await c.delete(Deployment, "echo", namespace=NS)
    await eventually(lambda: _none(pods_of(c, {"app": "echo"})), what="pods garbage-collected")
    await eventually(lambda: slice_ready(0), what="slice emptied")


async def _none(coro: Awaitable[list[Any]]) -> bool:
    return not await coro


async def test_headless_statefulset_slices_have_hostnames(lite: Lite) -> None:
    c = lite.client
    await create(
        c,
        Service,
        {
            "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]},
        },
    )
    await create(
        c,
        StatefulSet,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 3,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
                    "spec": {
                        "containers": [{"name": "db", "image": "db", "ports": [{"containerPort": 5432}]}]
                    },
                },
            },
        },
    )

    async def sts_ready(n: int) -> bool:
        st = (await c.get(StatefulSet, "db", namespace=NS)).to_dict().get("status") or {}
        return bool(
            st.get("readyReplicas") == n
            and st.get("replicas") == n
            and st.get("updatedReplicas") == n
            and st.get("currentRevision") == st.get("updateRevision")
        )

    await eventually(lambda: sts_ready(3), what="statefulset ready")
    pods = sorted(await pods_of(c, {"app": "db"}), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in pods] == ["db-0", "db-1", "db-2"]
    created = [p["metadata"]["creationTimestamp"] for p in pods]
    assert created == sorted(created)  # in order
    for p in pods:
        assert p["spec"]["hostname"] == p["metadata"]["name"] and p["spec"]["subdomain"] == "db"
        assert p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == p["metadata"]["name"]

    async def hostnames() -> list[str]:
        eps = [e for s in await slices_of(c, "db") for e in s.get("endpoints") or []]
        return sorted(e.get("hostname", "") for e in eps if e["conditions"]["ready"])

    assert await eventually(lambda: _eq(hostnames(), ["db-0", "db-1", "db-2"]), what="hostnames")
    slices = await slices_of(c, "db")
    assert slices[0]["metadata"]["labels"].get("service.kubernetes.io/headless") == ""

    await c.patch(StatefulSet, "db", {"spec": {"replicas": 1}}, namespace=NS, patch_type=PatchType.MERGE)
    await eventually(lambda: sts_ready(1), what="scaled down")
    assert [p["metadata"]["name"] for p in await pods_of(c, {"app": "db"})] == ["db-0"]
    await eventually(lambda: _eq(hostnames(), ["db-0"]), what="one hostname")

    await c.delete(StatefulSet, "db", namespace=NS)
    await eventually(lambda: _none(pods_of(c, {"app": "db"})), what="pods garbage-collected")


async def _eq(coro: Awaitable[Any], want: Any) -> bool:
    return bool(await coro == want)


# ------------------------------------------------------------------------------------- restart


async def test_restart_keeps_allocations(lite: Lite) -> None:
    c = lite.client
    for i in range(3):
        await create(
            c, Service, {"metadata": {"name": f"s{i}"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
        )
    await create(c, Deployment, echo_deployment("web", 2))
    await eventually(lambda: deployment_done(c, "web", 2), what="deployment")

    async def svc_state() -> dict[str, tuple[str, int]]:
        out = {}
        async for s in c.list(Service, namespace=NS):
            d = s.to_dict()
            if d["metadata"]["name"] == "kubernetes":
                continue
            spec = d["spec"]
            if spec.get("clusterIP") and all(p.get("nodePort") for p in spec["ports"]):
                out[d["metadata"]["name"]] = (spec["clusterIP"], spec["ports"][0]["nodePort"])
        return out

    before = await eventually(lambda: _sized(svc_state(), 3), what="allocated")
    pods_before = {p["metadata"]["name"]: p["status"]["podIP"] for p in await pods_of(c, {"app": "web"})}

    await lite.stop()
    for ip in pods_before.values():  # the servers went with kube-lite
        with pytest.raises(OSError):
            await asyncio.open_connection(ip, 8080)
    await lite.start()

    for i in range(3, 6):
        await create(
            c, Service, {"metadata": {"name": f"s{i}"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
        )
    await create(c, Deployment, echo_deployment("more", 3))
    await eventually(lambda: deployment_done(c, "more", 3), what="second deployment")
    after = await eventually(lambda: _sized(svc_state(), 6), what="allocated after restart")
    assert {k: after[k] for k in before} == before
    assert len({ip for ip, _ in after.values()}) == 6 and len({np for _, np in after.values()}) == 6

    all_pods = await pods_of(c, {})
    ips = [p["status"]["podIP"] for p in all_pods if p["metadata"]["labels"].get("app") in ("web", "more")]
    assert len(ips) == 5 and len(set(ips)) == 5
    for name, ip in pods_before.items():  # same address, serving again
        answer = await eventually(lambda ip=ip: http_twice(ip, 8080), what="echo back")
        assert answer[0]["pod"] == name


async def test_the_temporary_pod_root_goes_with_kube_lite(lite: Lite) -> None:
    """Without a state dir, a node's process pods live under a fresh temporary dir; it is never
    found again once kube-lite stops, so kube-lite removes it rather than leave one per start in /tmp."""
    assert lite.lite is not None
    root = lite.lite.pods.process_options.root_dir  # what the node's first process pod makes
    (root / "pods" / "some-uid").mkdir(parents=True)
    assert root.is_dir() and root.name.startswith("isthmus-kube-lite-c1-")
    await lite.stop()
    assert not root.exists()


async def _sized(coro: Awaitable[dict[str, Any]], n: int) -> dict[str, Any] | None:
    d = await coro
    return d if len(d) >= n else None


# ------------------------------------------------------------------------------------- kubectl


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_rollout_status_and_wait(apiserver: Any, lite: Lite) -> None:
    c = lite.client
    await create(c, Deployment, echo_deployment("roll", 2))
    code, out = await kubectl(
        apiserver.kubeconfig, "-n", NS, "rollout", "status", "deployment/roll", "--timeout=30s"
    )
    assert code == 0, out
    assert "successfully rolled out" in out
    code, out = await kubectl(
        apiserver.kubeconfig,
        "-n",
        NS,
        "wait",
        "--for=condition=Available",
        "deployment/roll",
        "--timeout=30s",
    )
    assert code == 0, out
    await create(
        c,
        StatefulSet,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
                    "spec": {"containers": [{"name": "w", "image": "w"}]},
                },
            },
        },
    )
    code, out = await kubectl(
        apiserver.kubeconfig, "-n", NS, "rollout", "status", "statefulset/web", "--timeout=30s"
    )
    assert code == 0, out
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "get", "pods", "-o", "wide")
    assert code == 0 and "Running" in out and "c1-node" in out, out


async def _answers(ip: str, port: int) -> bool:
    try:
        async with asyncio.timeout(2):
            return bool(await http_twice(ip, port))
    except (OSError, TimeoutError, AssertionError, asyncio.IncompleteReadError):
        return False


async def test_a_deleted_pods_endpoint_is_withdrawn_before_it_stops_serving(lite: Lite) -> None:
    """The kubelet's order: the Pod's endpoint turns ready false / terminating true while it still
    serves (here through its preStop sleep), then it drains and stops, then the object goes."""
    c = lite.client
    await create(c, Pod, {
        "metadata": {"name": "leaving", "labels": {"app": "leaving"}, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
        "spec": {"terminationGracePeriodSeconds": 20, "containers": [{
            "name": "echo", "image": "echo", "ports": [{"name": "http", "containerPort": 8080}],
            "lifecycle": {"preStop": {"sleep": {"seconds": 3}}}}]},
    })
    await create(c, Service, {"metadata": {"name": "leaving"},
                              "spec": {"selector": {"app": "leaving"}, "ports": [{"port": 80, "targetPort": 8080}]}})

    async def endpoint() -> dict[str, Any] | None:
        eps = [e for s in await slices_of(c, "leaving") for e in s.get("endpoints") or []]
        return eps[0] if eps else None

    first = await eventually(endpoint, what="an endpoint")
    assert first["conditions"] == {"ready": True, "serving": True, "terminating": False}
    ip = first["addresses"][0]
    assert await _answers(ip, 8080)
    await c.delete(Pod, "leaving", namespace=NS)

    async def withdrawn() -> dict[str, Any] | None:
        ep = await endpoint()
        return ep if ep is not None and ep["conditions"]["terminating"] else None

    ep = await eventually(withdrawn, within=5, what="the endpoint marked terminating")
    assert ep["conditions"] == {"ready": False, "serving": True, "terminating": True}
    assert await _answers(ip, 8080)  # still serving: nobody is sent to it any more, it finishes
    assert (await c.get(Pod, "leaving", namespace=NS)).metadata.deletionTimestamp is not None

    async def pod_gone() -> bool:
        return not [p async for p in c.list(Pod, namespace=NS, labels={"app": "leaving"})]

    await eventually(pod_gone, within=15, what="the Pod removed once its servers stopped")
    assert not await _answers(ip, 8080)

    async def no_endpoint() -> bool:  # the EndpointSlice controller sees the deletion on its own watch
        return await endpoint() is None

    await eventually(no_endpoint, within=5, what="the endpoint gone with its Pod")
