"""`isthmus diagnose` and `gather` against a real clusterset in this process: a broker and two
members (embedded apiservers), real discovery agents, a real DNS server per member behind its
isthmus-dns Service. Healthy, every check passes; each breakage fails the right check with its
reason; the CLI's exit codes and JSON; the gather archive's content, without Secret data.

Every address contacted is on 127.0.0.0/8 (ClusterSet IPs come from 127.236.0.0/14)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import socket
import sys
import tarfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment, DeploymentStatus
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from isthmus.api.about import CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, ClusterProperty
from isthmus.api.base import format_time, now
from isthmus.api.egress import SourceIPClaim
from isthmus.api.lb import LoadBalancerPool
from isthmus.api.mcs import AGENT_NAMESPACE, DNS_SERVICE_NAME, HEARTBEAT_ANNOTATION
from isthmus.api.mcsvc import MultiClusterService
from isthmus.diagnose.gather import gather
from isthmus.diagnose.model import Diagnosis, Status
from isthmus.diagnose.run import diagnose as run_diagnose
from isthmus.diagnose.run import select_contexts
from isthmus.dns.service import DnsConfig, DnsService
from isthmus.kube.helpers import get_or_none, install_crds
from isthmus.kube.resources import resource_for
from tests.harness.clusterset import BROKER_NS, CLUSTER, ClusterSet, as_dict, service
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]

CIDR_RANGE = "127.236.0.0/14"
CP = resource_for(ClusterProperty)
SECRET_VALUE = "diag-secret-value-7f3a"


class Env:
    def __init__(self, cs: ClusterSet, kubeconfig: Path) -> None:
        self.cs = cs
        self.kubeconfig = kubeconfig

    async def diagnose(self, *contexts: str) -> Diagnosis:
        refs = select_contexts(str(self.kubeconfig), list(contexts) or None)
        return await run_diagnose(refs, kubeconfig=str(self.kubeconfig), explicit=bool(contexts))

    async def cli(self, *args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", *args, "--kubeconfig", str(self.kubeconfig),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": ""})
        out, err = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


def check(d: Diagnosis, target: str, name: str) -> Any:
    for t in d.targets:
        if t.title == target:
            for c in t.checks:
                if c.name == name:
                    return c
    raise AssertionError(f"no check {target}/{name} in {[(t.title, [c.name for c in t.checks]) for t in d.targets]}")


def failures(d: Diagnosis) -> list[str]:
    return [f"{t.title}/{c.name}: {c.message} {c.details}" for t, c in d.failures()]


def _merged_kubeconfig(path: Path, servers: dict[str, Any]) -> None:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [],
                           "current-context": "c1"}
    for name, srv in servers.items():
        one = srv.server.kubeconfig(name)
        for section in ("clusters", "users", "contexts"):
            for entry in one[section]:
                entry["name"] = name
                if section == "contexts":
                    entry["context"]["cluster"] = entry["context"]["user"] = name
                doc[section].append(entry)
    path.write_text(yaml.safe_dump(doc))


async def _install_member_parts(cs: ClusterSet, i: int, dns: DnsService) -> None:
    """What `kubectl apply -k deploy/member` and the kubelet would leave: the agent's Deployment
    (ready: the agent runs in this process) and the isthmus-dns Service in front of the DNS server."""
    host, port = dns.bound[0]
    await cs.ensure_namespace(i, AGENT_NAMESPACE)
    svc = service(DNS_SERVICE_NAME, AGENT_NAMESPACE, cluster_ip=host,
                  ports=[{"name": "dns", "port": port, "protocol": "UDP"}])
    await cs.put(i, svc)
    deployment = Deployment.from_dict({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "isthmus-agent", "namespace": AGENT_NAMESPACE},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "isthmus-agent"}},
                 "template": {"metadata": {"labels": {"app": "isthmus-agent"}},
                              "spec": {"containers": [{"name": "agent", "image": "isthmus"}]}}},
    })
    await cs.put(i, deployment)
    await cs.c(i).patch(DeploymentStatus, "isthmus-agent", {"status": {"replicas": 1, "readyReplicas": 1}},
                        namespace=AGENT_NAMESPACE, patch_type=PatchType.MERGE)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("diagnose")
    async with ClusterSet(tmp, n=2, cidr_range=[CIDR_RANGE]) as cs:
        services: list[DnsService] = []
        try:
            for i in range(2):
                # Each member's DNS on its own loopback address, as a ClusterIP would be.
                dns = DnsService(cs.c(i), DnsConfig(cluster_id=cs.clusters[i].id, listen=[(f"127.10.9.{i + 1}", 0)]))
                await dns.start()
                services.append(dns)
                assert await dns.wait_ready(20)
                await _install_member_parts(cs, i, dns)
            kubeconfig = tmp / "kubeconfig"
            assert cs.broker is not None
            _merged_kubeconfig(kubeconfig, {"broker": cs.broker, "c1": cs.clusters[0].server,
                                            "c2": cs.clusters[1].server})
            yield Env(cs, kubeconfig)
        finally:
            for dns in services:
                await dns.stop()


async def test_healthy_clusterset_passes_every_check(env: Env) -> None:
    d = await eventually(lambda: _ok(env), timeout=20, what="a healthy diagnosis")
    roles = {t.title: t.roles for t in d.targets}
    assert roles == {"broker": ["broker"], "c1": ["member"], "c2": ["member"], "clusterset": []}
    for target in ("c1", "c2"):
        for name in ("api", "clock", "crds", "join", "about", "heartbeat", "agent", "dns", "vips", "exports", "pools",
                     "multiclusterservices", "egress"):
            assert check(d, target, name).status is Status.PASS, (target, name, check(d, target, name))
    assert "answers clusterset.local SOA" in check(d, "c1", "dns").message
    assert check(d, "broker", "broker").status is Status.PASS
    assert check(d, "clusterset", "members").message == "2 clusters joined, all checked"
    assert check(d, "clusterset", "cidrs").status is Status.PASS


async def _ok(env: Env) -> Diagnosis:
    d = await env.diagnose()
    assert d.ok, failures(d)
    return d


async def test_cli_exit_code_and_json_shape(env: Env) -> None:
    await eventually(lambda: _ok(env), timeout=20)
    code, out, err = await env.cli("diagnose", "-o", "json")
    assert code == 0, (out, err)
    doc = json.loads(out)
    assert doc["apiVersion"] == "diagnose.isthmus.io/v1alpha1" and doc["kind"] == "Diagnosis"
    assert doc["ok"] is True and doc["summary"]["fail"] == 0
    assert set(doc) == {"apiVersion", "kind", "time", "ok", "summary", "targets"}
    assert [t["name"] for t in doc["targets"]] == ["broker", "c1", "c2", "clusterset"]
    for t in doc["targets"]:
        assert set(t) == {"name", "context", "server", "roles", "clusterID", "checks"}
        for c in t["checks"]:
            assert set(c) == {"name", "status", "message", "next", "details"}
            assert c["status"] in ("pass", "warn", "fail", "skip")
    code, out, _ = await env.cli("diagnose", "--context", "c1")
    assert code == 0 and "  ✔ heartbeat" in out
    headers = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert headers[:2] == ["c1 (member)", "clusterset"] and headers[2].endswith("0 failed")
    assert "⚠ members" in out and "no context checked here for c2" in out
    code, out, _ = await env.cli("diagnose", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["kind"] == "Diagnosis"
    code, _, err = await env.cli("diagnose", "-o", "wide")
    assert code == 2 and err.startswith("error: ") and "wide" in err
    code, _, err = await env.cli("diagnose", "--context", "nope")
    assert code == 2 and "context 'nope' not found" in err


async def test_conflict_fails_exports_with_its_message(env: Env) -> None:
    cs, ns = env.cs, "diag-conflict"
    await cs.export(0, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))
    await cs.export(1, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 8080}]))
    try:
        async def conflicted() -> Diagnosis:
            d = await env.diagnose()
            assert check(d, "c2", "exports").status is Status.FAIL
            return d

        d = await eventually(conflicted, timeout=20)
        c = check(d, "c2", "exports")
        assert "in conflict" in c.message
        assert any(line.startswith(f"{ns}/web: Conflict: ") and "8080" in line for line in c.details), c.details
        assert c.next == f"isthmus show exports -A --context c2 --kubeconfig {env.kubeconfig}"
        code, out, _ = await env.cli("diagnose")
        assert code == 1 and "✘ exports" in out
    finally:
        await cs.unexport(0, "web", ns)
        await cs.unexport(1, "web", ns)


async def test_vip_answers_only_when_something_listens(env: Env) -> None:
    cs, ns = env.cs, "diag-vip"
    await cs.ensure_namespace(1, ns)  # services are imported into namespaces that exist
    await cs.export(0, "api", ns, svc=service("api", ns, ports=[{"name": "http", "port": 8443}]),
                    use_clusterset_ip="true")
    try:
        vip = await cs.vip_of("api", ns, within=20)
        assert vip.startswith("127.23"), vip

        async def refused() -> Diagnosis:
            d = await env.diagnose("c2")
            assert check(d, "c2", "vips").status is Status.FAIL
            return d

        d = await eventually(refused, timeout=20)
        assert check(d, "c2", "vips").details == [f"{ns}/api {vip}:8443: connection refused"]
        # The DNS check now asks for this import's name and checks the VIP it answers.
        assert check(d, "c2", "dns").message.endswith(f"answers api.{ns}.svc.clusterset.local A -> {vip}")
        server = await asyncio.start_server(lambda r, w: w.close(), vip, 8443)
        try:
            d = await env.diagnose("c2")
            assert check(d, "c2", "vips").status is Status.PASS, check(d, "c2", "vips")
        finally:
            server.close()
            await server.wait_closed()
    finally:
        await cs.unexport(0, "api", ns)


async def test_cidr_overlap_fails_the_clusterset_and_its_next_step_runs_as_written(env: Env) -> None:
    cs = env.cs
    c1_cidr = cs.clusters[0].cidr
    c2_cidr = cs.clusters[1].cidr
    # The local clusterset keeps broker-info.subm beside its kubeconfig: diagnose names it there.
    (env.kubeconfig.parent / "broker-info.subm").write_text(cs.info.encode() + "\n")
    body = {"spec": {"clustersetIPCIDR": [c1_cidr]}}
    await cs.broker_client.patch(CLUSTER, "c2", body, namespace=BROKER_NS, patch_type=PatchType.MERGE)
    try:
        d = await env.diagnose()
        c = check(d, "clusterset", "cidrs")
        assert c.status is Status.FAIL
        assert c.message == "1 overlap between address ranges"
        assert c.details == [f"c1 clusterset-ip {c1_cidr} overlaps c2 clusterset-ip {c1_cidr}"]
        # c2 joined last, so c2 moves: to the first /16 of the range nobody holds, which is its old one.
        kc = str(env.kubeconfig)
        assert shlex.split(c.next) == [
            "isthmus", "join", str(env.kubeconfig.parent / "broker-info.subm"), "--cluster-id", "c2",
            "--clusterset-ip-cidr", c2_cidr, "--force", "--broker-kubeconfig", kc, "--broker-context", "broker",
            "--context", "c2", "--kubeconfig", kc]
        # As written: the user copies it and the overlap is gone.
        argv = shlex.split(c.next)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", *argv[1:], stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "KUBECONFIG": ""})
        out, err = await proc.communicate()
        assert proc.returncode == 0, (out.decode(), err.decode())
        assert f"clusterset IP CIDR: {c2_cidr}" in out.decode()
        after = check(await env.diagnose(), "clusterset", "cidrs")
        assert after.status is Status.PASS, after
    finally:
        await cs.broker_client.patch(CLUSTER, "c2", {"spec": {"clustersetIPCIDR": [c2_cidr]}}, namespace=BROKER_NS,
                                     patch_type=PatchType.MERGE)


async def test_missing_crd_fails_crds(env: Env) -> None:
    client = env.cs.c(1)
    name = "multiclusterservices.networking.karmada.io"
    await client.delete(CustomResourceDefinition, name)
    try:
        async def missing() -> Diagnosis:
            d = await env.diagnose("c2")
            assert check(d, "c2", "crds").status is Status.FAIL
            return d

        c = check(await eventually(missing, timeout=10), "c2", "crds")
        assert c.details[0] == f"{name}: not installed (expected v1alpha1)"
        assert "serviceexports.multicluster.x-k8s.io: installed by Isthmus" in c.details
        assert c.next is not None and "isthmus crds --only shared | kubectl" in c.next
    finally:
        await install_crds(client, field_manager="test")


async def test_unreachable_and_silent_api_fail_quickly(env: Env, tmp_path: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()  # accepts (backlog) and never answers: a hung apiserver
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        doc = yaml.safe_load(env.kubeconfig.read_text())
        for name, port in (("gone", closed_port), ("hung", silent.getsockname()[1])):
            doc["clusters"].append({"name": name, "cluster": {"server": f"https://127.0.0.1:{port}",
                                                              "insecure-skip-tls-verify": True}})
            doc["users"].append({"name": name, "user": {"token": "x"}})
            doc["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        refs = select_contexts(str(path), ["c1", "gone", "hung"])
        async with asyncio.timeout(20):  # probes and checks are bounded: seconds, not minutes
            d = await run_diagnose(refs, kubeconfig=str(path), explicit=True)
        gone = check(d, "gone", "api")
        assert gone.status is Status.FAIL and "cannot reach the API server" in gone.message
        assert "refused" in gone.message.lower()
        hung = check(d, "hung", "api")
        assert hung.status is Status.FAIL and "cannot reach the API server" in hung.message
        assert check(d, "hung", "others").status is Status.SKIP
        assert check(d, "c1", "heartbeat").status is Status.PASS
        assert not d.ok
    finally:
        silent.close()


async def test_not_joined_context_fails_join_when_named(env: Env, tmp_path: Path) -> None:
    srv, _ = await env.cs.spare_server("lonely")
    doc = yaml.safe_load(env.kubeconfig.read_text())
    one = srv.server.kubeconfig("lonely")
    for section in ("clusters", "users", "contexts"):
        doc[section] += one[section]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    named = await run_diagnose(select_contexts(str(path), ["lonely"]), kubeconfig=None, explicit=True)
    join = check(named, "lonely", "join")
    assert join.status is Status.FAIL and join.message.startswith("not part of a clusterset")
    assert join.next is not None and join.next.startswith("isthmus join ")
    everyone = await run_diagnose(select_contexts(str(path), None), kubeconfig=None, explicit=False)
    assert check(everyone, "lonely", "clusterset").status is Status.SKIP  # an unrelated context is not a failure
    assert check(everyone, "c1", "join").status is Status.PASS


async def test_gather_archive_has_objects_and_no_secret_data(env: Env, tmp_path: Path) -> None:
    cs, ns = env.cs, "diag-gather"
    await cs.export(0, "shop", ns)
    await cs.put(0, Secret.from_dict({"metadata": {"name": "diag-secret", "namespace": AGENT_NAMESPACE},
                                      "stringData": {"password": SECRET_VALUE}}))
    try:
        await cs.wait_exported(0, "shop", ns)
        refs = select_contexts(str(env.kubeconfig), None)
        d = await run_diagnose(refs, kubeconfig=None, explicit=False)
        archive = tmp_path / "out.tar.gz"
        arch = await gather(refs, archive, d.to_dict())
        assert arch.errors == []
        with tarfile.open(archive) as tar:
            files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
        assert {"README.md", "manifest.json", "diagnose.json"} <= set(files)
        manifest = json.loads(files["manifest.json"])
        assert manifest["contexts"] == ["c1", "broker", "c2"] and sorted(manifest["files"]) == sorted(files)
        assert json.loads(files["diagnose.json"])["kind"] == "Diagnosis"
        exports = list(yaml.safe_load_all(files["c1/objects/serviceexports.multicluster.x-k8s.io.yaml"]))
        assert [(e["metadata"]["namespace"], e["metadata"]["name"]) for e in exports] == [(ns, "shop")]
        assert all("managedFields" not in e["metadata"] for e in exports)
        clusters = list(yaml.safe_load_all(files["broker/objects/clusters.isthmus.io.yaml"]))
        assert sorted(c["metadata"]["name"] for c in clusters) == ["c1", "c2"]
        shop = list(yaml.safe_load_all(files[f"c1/services/{ns}/shop.yaml"]))
        assert [o["kind"] for o in shop][:1] == ["Service"] and "EndpointSlice" in [o["kind"] for o in shop]
        assert f"{AGENT_NAMESPACE}/diag-secret\tOpaque" in files["c1/isthmus-system/secrets.txt"].decode()
        assert "c1/isthmus-system/services.yaml" in files and "c1/events/isthmus-system.yaml" in files
        encoded = base64.b64encode(SECRET_VALUE.encode())
        for name, data in files.items():
            assert SECRET_VALUE.encode() not in data and encoded not in data, name
    finally:
        await cs.c(0).delete(Secret, "diag-secret", namespace=AGENT_NAMESPACE)
        await cs.unexport(0, "shop", ns)


async def test_about_api_properties_disagreeing_with_the_join_fail_about(env: Env) -> None:
    """c2's cluster.clusterset.k8s.io rewritten to another ID, then its clusterset.k8s.io to another
    clusterset, then removed: about fails naming both values, then warns with join as the next step."""
    client = env.cs.c(1)
    saved = {n: as_dict(await client.get(CP, n)) for n in (CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY)}
    clusterset = saved[CLUSTERSET_PROPERTY]["spec"]["value"]

    async def set_value(name: str, value: str) -> None:
        await client.patch(CP, name, {"spec": {"value": value}}, patch_type=PatchType.MERGE)

    try:
        assert check(await env.diagnose(), "c2", "about").message == \
            f"ClusterProperty {CLUSTER_ID_PROPERTY} = c2, {CLUSTERSET_PROPERTY} = {clusterset} (this broker's)"
        await set_value(CLUSTER_ID_PROPERTY, "c9")
        d = await env.diagnose()
        c = check(d, "c2", "about")
        assert c.status is Status.FAIL and c.message.startswith(
            f"this cluster's ClusterProperty {CLUSTER_ID_PROPERTY} says its ID is 'c9', but it joined the "
            f"clusterset as 'c2'"), c
        assert c.next == f"kubectl --kubeconfig {env.kubeconfig} --context c2 get clusterproperties"
        assert check(d, "c1", "about").status is Status.PASS
        await set_value(CLUSTER_ID_PROPERTY, "c2")
        await set_value(CLUSTERSET_PROPERTY, "another-clusterset")
        c = check(await env.diagnose(), "c2", "about")
        assert (c.status, c.message) == (Status.FAIL, (
            f"ClusterProperty {CLUSTERSET_PROPERTY} is 'another-clusterset', but the broker this cluster joined is "
            f"clusterset {clusterset!r}: other tools place it in another clusterset")), c
        assert c.next is not None and c.next.startswith("isthmus join ") and "--cluster-id c2 --force" in c.next, c
        await client.delete(CP, CLUSTERSET_PROPERTY)
        c = check(await env.diagnose(), "c2", "about")
        assert c.status is Status.WARN and c.message.startswith(f"no ClusterProperty {CLUSTERSET_PROPERTY}: "), c
        assert c.next is not None and "--cluster-id c2" in c.next, c
        _, out, _ = await env.cli("diagnose", "--context", "c2")
        assert "⚠ about" in out, out
    finally:
        for name, prop in saved.items():
            if await get_or_none(client, ClusterProperty, name) is None:
                meta = {k: prop["metadata"][k] for k in ("name", "labels", "annotations") if k in prop["metadata"]}
                await client.create(CP.from_dict({**prop, "metadata": meta}))
            else:
                await set_value(name, prop["spec"]["value"])
    await eventually(lambda: _ok(env), timeout=20, what="c2's About API restored")


async def test_stopped_agent_makes_heartbeat_stale(env: Env) -> None:
    """The agent of c2 is stopped, then its last heartbeat aged as the minutes without one
    would (the check reads the broker's annotation), and started again at the end."""
    cs = env.cs
    await cs.stop_agent(1)
    try:
        old = format_time(now() - timedelta(seconds=120))
        await cs.broker_client.patch(CLUSTER, "c2", {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: old}}},
                                     namespace=BROKER_NS, patch_type=PatchType.MERGE)
        d = await env.diagnose()
        c = check(d, "c2", "heartbeat")
        assert c.status is Status.FAIL
        assert c.message.startswith("last heartbeat 12") and "stale after 30s" in c.message
        assert c.next == f"kubectl --kubeconfig {env.kubeconfig} --context c2 -n isthmus-system logs deploy/isthmus-agent"
        assert check(d, "c1", "heartbeat").status is Status.PASS
        code, out, _ = await env.cli("diagnose", "--context", "c2", "--wait", "--timeout", "3")
        assert code == 1 and "✘ heartbeat" in out
    finally:
        await cs.start_agent(1)
    await eventually(lambda: _ok(env), timeout=30, what="c2's agent heartbeats again")


async def test_capability_checks_name_what_is_broken(env: Env) -> None:
    """A pool with a failed HAProxy instance (status as its pool manager writes it), a
    MultiClusterService no controller made Ready, a Bound claim whose address has no SourceIP."""
    client = env.cs.c(0)
    pool_res, mcs_res, claim_res = resource_for(LoadBalancerPool), resource_for(MultiClusterService), \
        resource_for(SourceIPClaim)
    ns = "diag-caps"
    await env.cs.ensure_namespace(0, ns)
    await client.create(pool_res.from_dict({"apiVersion": "isthmus.io/v1alpha1", "kind": "LoadBalancerPool",
                                            "metadata": {"name": "diag-pool"}, "spec": {"count": 2}}))
    await client.patch(pool_res.Status, "diag-pool", {"status": {
        "readyInstances": 1, "ready": "1/2",
        "instances": [{"slot": 0, "state": "Running", "holder": "edge-a"},
                      {"slot": 1, "state": "Failed", "holder": "edge-b", "message": "haproxy exited 1"}]}},
        patch_type=PatchType.MERGE)
    await client.create(mcs_res.from_dict({"apiVersion": "networking.karmada.io/v1alpha1",
                                           "kind": "MultiClusterService",
                                           "metadata": {"name": "shop", "namespace": ns},
                                           "spec": {"types": ["CrossCluster"]}}))
    await client.create(claim_res.from_dict({"apiVersion": "egress.isthmus.io/v1alpha1", "kind": "SourceIPClaim",
                                             "metadata": {"name": "db", "namespace": ns},
                                             "spec": {"sourceIPClassName": "none"}}))
    await client.patch(claim_res.Status, "db", {"status": {"phase": "Bound", "sourceIP": "127.32.9.9"}},
                       namespace=ns, patch_type=PatchType.MERGE)
    try:
        d = await env.diagnose("c1")
        pools = check(d, "c1", "pools")
        assert pools.status is Status.FAIL and pools.message == "1 of 1 LoadBalancerPool not fully ready"
        assert pools.details == ["diag-pool: 1/2 HAProxy instances ready", "  slot 1 on edge-b: Failed: haproxy exited 1"]
        mcs = check(d, "c1", "multiclusterservices")
        assert mcs.status is Status.FAIL and mcs.details == [f"{ns}/shop: no Ready condition yet"]
        egress = check(d, "c1", "egress")
        assert egress.status is Status.FAIL and egress.details == [f"claim {ns}/db: 127.32.9.9 has no SourceIP bound to it"]
    finally:
        await client.delete(pool_res, "diag-pool")
        await client.delete(mcs_res, "shop", namespace=ns)
        await client.delete(claim_res, "db", namespace=ns)
