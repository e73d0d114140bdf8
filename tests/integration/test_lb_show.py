"""What a user reads about load balancing, against a real embedded apiserver: `kubectl get
loadbalancerpools` printer columns and `kubectl wait` on the Ready condition, `isthmus show
pools|loadbalancers` (table and JSON) over pools, Services, Ingresses and Events written by hand, and
every examples/lb manifest accepted by the server (`kubectl apply --dry-run=server`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Event, Namespace, Service
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import PatchType

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, INGRESS_CLASS_ANNOTATION, LoadBalancerPool
from isthmus.kube.helpers import install_crds
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "lb"
Pool = resource_for(LoadBalancerPool)


async def run(*cmd: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env)  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def kubectl(srv: RunningApiServer, *args: str) -> tuple[int, str, str]:
    return await run("kubectl", "--kubeconfig", srv.kubeconfig, *args)


async def isthmus(srv: RunningApiServer, *args: str) -> tuple[int, str, str]:
    return await run(sys.executable, "-m", "isthmus", *args, "--kubeconfig", srv.kubeconfig)


def pool(name: str, frontends: list[dict[str, Any]], backends: list[dict[str, Any]]) -> Any:
    return Pool.from_dict({"apiVersion": "isthmus.io/v1alpha1", "kind": "LoadBalancerPool",
                           "metadata": {"name": name, "labels": {"isthmus.io/lb-cluster": "a"}},
                           "spec": {"role": "*", "count": 1,
                                    "haproxy": {"frontends": frontends, "backends": backends}}})  # fmt: skip


async def set_ready(srv: RunningApiServer, name: str, ready: bool, addresses: str = "127.0.0.1") -> None:
    client = srv.client()
    status = {"ready": "1/1" if ready else "0/1", "readyInstances": 1 if ready else 0,
              "addresses": addresses if ready else "",
              "instances": [{"slot": 0, "state": "Running" if ready else "Failed", "statsPort": 19090,
                             "message": "" if ready else "haproxy -c: bad config"}],
              "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                              "reason": "InstancesReady" if ready else "NoInstanceReady",
                              "message": "1 of 1 instances serve generation 1" if ready else "slot 0: haproxy -c: bad config",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}  # fmt: skip
    await client.patch(Pool.Status, name, {"status": status}, patch_type=PatchType.MERGE)


async def test_kubectl_shows_pool_printer_columns_and_waits_for_ready(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(pool("a--default--echo", [], []))
    rc, out, err = await kubectl(apiserver, "get", "loadbalancerpools")
    assert rc == 0, err
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "ROLE", "READY", "ADDRESSES", "AGE"]
    assert row.split()[:2] == ["a--default--echo", "*"]
    # No status yet: the condition is absent, so the wait fails (and says so).
    rc, out, err = await kubectl(apiserver, "wait", "--for=condition=Ready", "loadbalancerpool/a--default--echo",
                                 "--timeout=1s")  # fmt: skip
    assert rc != 0
    await set_ready(apiserver, "a--default--echo", True, "127.0.0.1,127.0.0.2")
    rc, out, err = await kubectl(apiserver, "get", "loadbalancerpools")
    assert out.splitlines()[1].split()[:4] == ["a--default--echo", "*", "1/1", "127.0.0.1,127.0.0.2"]
    rc, out, err = await kubectl(apiserver, "wait", "--for=condition=Ready", "loadbalancerpool/a--default--echo",
                                 "--timeout=5s")  # fmt: skip
    assert rc == 0, err
    assert "condition met" in out


async def seed(srv: RunningApiServer) -> None:
    """Two pools (one healthy holding Service default/echo, one failing holding Ingress shop/site), a
    Service with a config that does not parse, an Ingress of another class, and a Warning event."""
    client = srv.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(
        pool(
            "a--default--echo",
            [
                {
                    "name": "a:default:echo:80",
                    "bindPort": 18081,
                    "linkBackend": {"defaultBackend": "a:default:echo:80"},
                }
            ],
            [{"name": "a:default:echo:80", "servers": [{"address": "127.0.0.1", "port": 30080}]}],
        )
    )
    await client.create(pool("a--shop--site",
                             [{"name": "a:shop:site", "bindPort": 18090, "protocol": "HTTP",
                               "linkBackend": {"map": [{"backend": "a:shop:site:web:80", "hostEq": "x.example"}]}}],
                             [{"name": "a:shop:site:web:80", "protocol": "HTTP"}]))  # fmt: skip
    await set_ready(srv, "a--default--echo", True)
    await set_ready(srv, "a--shop--site", False)
    await client.create(Namespace.from_dict({"metadata": {"name": "shop"}}))
    lb_ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
    await client.create(
        Service.from_dict(
            {
                "metadata": {
                    "name": "echo",
                    "namespace": "default",
                    "annotations": {DKLB_CONFIG_ANNOTATION: 'role: "*"\n'},
                },
                "spec": {"type": "LoadBalancer", "ports": lb_ports},
            }
        )
    )
    await client.patch(Service.Status, "echo", {"status": {"loadBalancer": {"ingress": [
        {"ip": "127.0.0.1", "ports": [{"port": 18081, "protocol": "TCP"}]}]}}}, namespace="default",
        patch_type=PatchType.MERGE)  # fmt: skip
    await client.create(
        Service.from_dict(
            {
                "metadata": {
                    "name": "bad",
                    "namespace": "shop",
                    "annotations": {DKLB_CONFIG_ANNOTATION: "size: two\n"},
                },
                "spec": {"type": "LoadBalancer", "ports": lb_ports},
            }
        )
    )
    await client.create(
        Service.from_dict({"metadata": {"name": "plain", "namespace": "shop"}, "spec": {"ports": lb_ports}})
    )
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    for name, cls in (("site", "edgelb"), ("other", "nginx")):
        await client.create(Ingress.from_dict({
            "metadata": {"name": name, "namespace": "shop", "annotations": {INGRESS_CLASS_ANNOTATION: cls}},
            "spec": {"rules": [{"host": "x.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend}]}}]}}))  # fmt: skip
    await client.create(Event.from_dict({
        "metadata": {"name": "site.1", "namespace": "shop"},
        "involvedObject": {"kind": "Ingress", "namespace": "shop", "name": "site", "apiVersion": "networking.k8s.io/v1"},
        "reason": "PoolNotProvisioned", "message": "pool a--shop--site has no serving instance", "type": "Warning",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1}))  # fmt: skip


async def test_show_loadbalancers_json_and_table(apiserver: RunningApiServer) -> None:
    await seed(apiserver)
    rc, out, err = await isthmus(apiserver, "show", "loadbalancers", "-A", "-o", "json")
    assert rc == 0, err
    items = {(i["kind"], i["namespace"], i["name"]): i for i in json.loads(out)["items"]}
    # The plain ClusterIP Service and the nginx Ingress are not ours.
    assert set(items) == {
        ("Service", "default", "echo"),
        ("Service", "shop", "bad"),
        ("Ingress", "shop", "site"),
    }
    echo = items[("Service", "default", "echo")]
    assert (echo["pool"], echo["poolReady"], echo["healthy"], echo["addresses"]) == (
        "a--default--echo",
        "1/1",
        True,
        ["127.0.0.1:18081"],
    )
    site = items[("Ingress", "shop", "site")]
    assert (site["pool"], site["healthy"]) == ("a--shop--site", False)
    assert site["lastWarning"] == "PoolNotProvisioned: pool a--shop--site has no serving instance"
    assert "size" in items[("Service", "shop", "bad")]["problem"]

    rc, out, err = await isthmus(apiserver, "show", "loadbalancers", "-n", "shop")
    assert rc == 0, err
    lines = {line.split()[2]: line for line in out.splitlines()[1:] if line.strip()}
    assert set(lines) == {"bad", "site"}
    assert "PoolNotProvisioned" in lines["site"] and "<pending>" in lines["site"]


async def test_show_pools_table_and_json(apiserver: RunningApiServer) -> None:
    await seed(apiserver)
    rc, out, err = await isthmus(apiserver, "show", "pools", "-o", "json")
    assert rc == 0, err
    pools = {p["name"]: p for p in json.loads(out)["items"]}
    assert set(pools) == {"a--default--echo", "a--shop--site"}
    assert pools["a--default--echo"]["statsPorts"] == [19090]
    assert pools["a--shop--site"]["frontends"][0]["owner"] == "Ingress/shop/site"

    rc, out, err = await isthmus(apiserver, "show", "pools", "-n", "shop")
    assert rc == 0, err
    assert out.splitlines()[0].split()[:5] == ["POOL", "ROLE", "READY", "ADDRESSES", "STATS"]
    assert "AGE" in out.splitlines()[0]
    assert "a--shop--site" in out and "a--default--echo" not in out
    assert "frontend a:shop:site" in out and "Ingress/shop/site" in out
    assert "slot 0: haproxy -c: bad config" in out  # why it is not Ready
    assert "none (503)" in out  # the backend has no server


async def test_every_example_is_accepted_by_the_server(apiserver: RunningApiServer) -> None:
    async with asyncio.timeout(30):
        await install_crds(apiserver.client())
    rc, out, err = await kubectl(apiserver, "apply", "--dry-run=server", "-f", str(EXAMPLES))
    assert rc == 0, err
    assert "service/echo-internal created (server dry run)" in out
    assert "ingress.networking.k8s.io/site created (server dry run)" in out
