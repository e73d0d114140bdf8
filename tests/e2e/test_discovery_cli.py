"""The discovery commands as a user runs them: `isthmus deploy-broker/join/export/show/leave` in
subprocesses against `isthmus apiserver` processes (broker with TLS and a token, two members)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service

from isthmus.api.base import ObjectMeta as Meta
from isthmus.api.mcs import (
    ConflictReason,
    ServiceExport,
    ServiceImport,
    ServiceImportSpec,
    conflict_condition,
)
from isthmus.clusterset.brokerinfo import BrokerInfo
from isthmus.kube.client import make_client
from isthmus.kube.helpers import get, patch_status
from isthmus.kube.resources import to_lightkube

pytestmark = pytest.mark.e2e

ISTHMUS = [sys.executable, "-m", "isthmus"]
ENV = {"PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}  # run the tree under test


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    kubeconfig: Path


def _start(data: Path, *extra: str) -> Server:
    proc = subprocess.Popen(
        [sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--data-dir", str(data), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    url = ""
    while time.monotonic() < deadline and not url:
        line = proc.stdout.readline()
        if not line:
            break
        if "listening on" in line:
            url = line.strip().split()[-1]
    assert url.startswith(("http://127.0.0.1:", "https://127.0.0.1:")), "apiserver did not start"
    kc = data / "kubeconfig"
    for _ in range(200):
        if kc.exists():
            break
        time.sleep(0.05)
    return Server(proc, url, kc)


def _stop(s: Server) -> None:
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            s.proc.kill()


@dataclass
class Clusterset:
    tmp: Path
    broker: Server
    c1: Server
    c2: Server

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([*ISTHMUS, *args], capture_output=True, text=True, timeout=60, cwd=self.tmp,
                           env={**ENV, "HOME": str(self.tmp)})
        if ok:
            assert p.returncode == 0, f"isthmus {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
        return p

    def error(self, *args: str) -> str:
        """Run a command that must fail as a user error: exit 2, one `error:` line, no traceback."""
        p = self.run(*args, ok=False)
        assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
        return lines[0].removeprefix("error: ")

    def answer(self, reply: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a command on a terminal (a pty as stdin) and type `reply` to its question."""
        master, slave = pty.openpty()
        try:
            proc = subprocess.Popen([*ISTHMUS, *args], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, cwd=self.tmp, env={**ENV, "HOME": str(self.tmp)})
            os.close(slave)
            os.write(master, reply.encode() + b"\n")
            out, err = proc.communicate(timeout=60)
        finally:
            os.close(master)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    @property
    def bk(self) -> str:
        """The broker's admin kubeconfig: join and leave use it, never store it."""
        return str(self.broker.kubeconfig)

    def client(self, server: Server) -> AsyncClient:
        return make_client(server.kubeconfig, field_manager="e2e")


@pytest.fixture(scope="module")
def cs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusterset]:
    tmp = tmp_path_factory.mktemp("discovery")
    servers: list[Server] = []
    try:
        servers.append(_start(tmp / "broker", "--tls", "--token-file", str(tmp / "broker-token")))
        servers.append(_start(tmp / "c1"))
        servers.append(_start(tmp / "c2"))
        yield Clusterset(tmp, *servers)
    finally:
        for s in servers:
            _stop(s)


def test_1_deploy_broker(cs: Clusterset) -> None:
    bk = str(cs.broker.kubeconfig)
    assert cs.error("deploy-broker", "--kubeconfig", bk, "--globalnet").startswith("Globalnet is not supported")
    assert cs.error("deploy-broker", "--kubeconfig", bk, "--clusterset-ip-cidr-range", "243.0.0.0/8,243.1.0.0/16") == (
        "clusterset IP CIDR ranges 243.0.0.0/8 and 243.1.0.0/16 overlap"
    )
    out = cs.run("deploy-broker", "--kubeconfig", bk).stdout
    assert "broker ready in namespace isthmus-broker" in out and "range 243.0.0.0/8" in out
    info = BrokerInfo.decode((cs.tmp / "broker-info.subm").read_text())
    # No credentials in it: join gives each cluster its own broker token.
    assert info.server == cs.broker.url and info.ca_pem and info.token is None
    assert "no credentials in it" in out
    cs.run("deploy-broker", "--kubeconfig", bk, "--broker-info", "again.subm")  # idempotent
    assert BrokerInfo.decode((cs.tmp / "again.subm").read_text()) == info
    old = cs.run("deploy-broker", "--kubeconfig", bk, "-o", "old.subm")  # the spelling of before: still works
    assert BrokerInfo.decode((cs.tmp / "old.subm").read_text()) == info
    assert old.stderr.strip() == "warning: deploy-broker --output/-o is deprecated: use --broker-info"
    # Members that reach the broker elsewhere than the admin does (runc mode: through the fabric's
    # relay). Only written into broker-info here: nothing is dialled.
    cs.run("deploy-broker", "--kubeconfig", bk, "--server-url", "https://127.9.9.9:6443/", "--broker-info", "in.subm")
    inside = BrokerInfo.decode((cs.tmp / "in.subm").read_text())
    assert inside.server == "https://127.9.9.9:6443" and inside.ca_pem == info.ca_pem
    assert cs.error("deploy-broker", "--kubeconfig", bk, "--server-url", "127.9.9.9:6443") == (
        "--server-url '127.9.9.9:6443' is not an https:// URL")
    assert cs.error("deploy-broker", "--kubeconfig", bk, "--enable-clusterset-ip", "--broker-info", "x.subm").startswith(
        "the broker in namespace isthmus-broker is already deployed with clustersetIPEnabled=false, "
        "clustersetIPCIDRRange=243.0.0.0/8"
    )


def test_2_join(cs: Clusterset) -> None:
    k1, k2 = str(cs.c1.kubeconfig), str(cs.c2.kubeconfig)
    out = cs.run("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k1, "--cluster-id", "c1").stdout
    assert "cluster c1 joined" in out and "243.0.0.0/16" in out and "off (broker's setting)" in out
    assert "broker credentials: ServiceAccount isthmus-broker/cluster-c1" in out
    # No Service isthmus-system/isthmus-dns (deploy/member not applied): CoreDNS is left alone, with a note.
    assert "CoreDNS not configured: no Service isthmus-system/isthmus-dns" in out
    assert cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2",
                    "--clusterset-ip-cidr", "243.0.4.0/24") == (
        "clusterset IP CIDR 243.0.4.0/24 overlaps 243.0.0.0/16, the clusterset IP CIDR of cluster c1"
    )
    assert cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2",
                    "--clusterset-ip-cidr", "10.0.0.0/16") == (
        "clusterset IP CIDR 10.0.0.0/16 is not inside the clusterset IP CIDR range 243.0.0.0/8"
    )
    assert "host bits set" in cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2",
                                       "--clusterset-ip-cidr", "243.9.0.1/16")
    assert "only lower-case letters" in cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "C2")
    assert cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c1").startswith(
        "cluster ID 'c1' is already taken by another cluster"
    )
    assert cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2", "--globalnet").startswith(
        "Globalnet is not supported"
    )
    (cs.tmp / "bad.subm").write_text("not a broker info\n")
    assert "expected base64-encoded JSON" in cs.error("join", "bad.subm", "--kubeconfig", k2, "--cluster-id", "c2")
    assert "cannot read broker-info" in cs.error("join", "missing.subm", "--kubeconfig", k2, "--cluster-id", "c2")
    assert cs.error("join", "broker-info.subm", "--kubeconfig", k2, "--cluster-id", "c2") == (
        "broker-info.subm carries no broker credentials: pass the broker's admin kubeconfig as --broker-kubeconfig, "
        "so join can give this cluster its own")
    assert cs.error("join", "broker-info.subm", "--bogus") == "no such option: --bogus (see isthmus join --help)"

    out = cs.run("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2", "--enable-clusterset-ip",
                 "--clusterset-ip-cidr", "243.7.0.0/20").stdout
    assert "243.7.0.0/20" in out and "on (this cluster's setting)" in out
    # Re-running join renews; -o json prints the cluster's Cluster on the broker instead of the report.
    doc = json.loads(cs.run("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k1, "--cluster-id", "c1",
                            "-o", "json").stdout)
    assert doc["kind"] == "Cluster" and doc["metadata"]["name"] == "c1" and "243.0.0.0/16" in json.dumps(doc["spec"])
    # Re-join is idempotent; changing the CIDR needs --force.
    cs.run("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2", "--enable-clusterset-ip")
    assert "pass --force" in cs.error("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k2, "--cluster-id", "c2",
                                      "--enable-clusterset-ip", "--clusterset-ip-cidr", "243.8.0.0/20")


def test_3_show_clusters(cs: Clusterset) -> None:
    data = json.loads(cs.run("show", "clusters", "--kubeconfig", str(cs.c1.kubeconfig), "-o", "json").stdout)
    rows = {r["clusterID"]: r for r in data["items"]}
    assert rows["c1"]["clustersetIPCIDR"] == ["243.0.0.0/16"] and rows["c1"]["clustersetIPEnabledSource"] == "broker"
    assert rows["c2"]["clustersetIPCIDR"] == ["243.7.0.0/20"] and rows["c2"]["clustersetIPEnabled"] is True
    assert rows["c1"]["heartbeat"] is None and rows["c1"]["joinedAt"]
    table = cs.run("show", "clusters", "--kubeconfig", str(cs.c2.kubeconfig)).stdout.splitlines()
    assert table[0].split() == ["CLUSTER", "CIDR", "VIP", "DEFAULT", "JOINED", "HEARTBEAT", "READY"]
    assert table[1].split()[:4] == ["c1", "243.0.0.0/16", "off", "(broker)"] and "never" in table[1]
    assert table[2].split()[:4] == ["c2", "243.7.0.0/20", "on", "(cluster)"]
    assert cs.error("show", "nodes", "--kubeconfig", str(cs.c1.kubeconfig)) == (
        "cannot show 'nodes': choose one of clusters, exports, imports, egress, pools, loadbalancers, mcs"
    )


def test_4_export_show_unexport(cs: Clusterset) -> None:
    k1 = str(cs.c1.kubeconfig)
    assert cs.error("export", "web", "-n", "shop", "--kubeconfig", k1) == "namespace 'shop' does not exist"
    cs.run("join", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--kubeconfig", k1, "--cluster-id", "c1")  # still joined: no-op
    # Namespaces and Services are the user's; create them through the library the CLI uses.

    async def mkns() -> None:
        c = cs.client(cs.c1)
        try:
            await c.create(Namespace(metadata=ObjectMeta(name="shop")))
        finally:
            await c.close()

    asyncio.run(mkns())
    # As subctl does: no export of a Service that does not exist, unless asked for.
    assert cs.error("export", "web", "-n", "shop", "--kubeconfig", k1) == (
        "service shop/web not found (use --allow-missing to export it before it exists)"
    )
    assert cs.run("export", "web", "-n", "shop", "--kubeconfig", k1, "--allow-missing").stdout.strip() == (
        "serviceexport shop/web created"
    )
    cs.run("unexport", "web", "-n", "shop", "--kubeconfig", k1)

    async def mksvc() -> None:
        c = cs.client(cs.c1)
        try:
            await c.create(Service(metadata=ObjectMeta(name="web", namespace="shop"),
                                   spec=ServiceSpec(ports=[ServicePort(port=80)])))
        finally:
            await c.close()

    asyncio.run(mksvc())
    assert cs.run("export", "web", "-n", "shop", "--kubeconfig", k1).stdout.strip() == "serviceexport shop/web created"
    assert cs.run("export", "web", "-n", "shop", "--kubeconfig", k1).stdout.strip() == "serviceexport shop/web unchanged"
    assert cs.run("export", "web", "-n", "shop", "--use-clusterset-ip=true", "--kubeconfig", k1).stdout.strip() == (
        "serviceexport shop/web configured"
    )
    assert cs.error("export", "web", "-n", "shop", "--use-clusterset-ip=yes", "--kubeconfig", k1) == (
        "--use-clusterset-ip must be true or false, not 'yes'"
    )
    data = json.loads(cs.run("show", "exports", "-A", "-o", "json", "--kubeconfig", k1).stdout)
    assert data == {"kind": "List", "items": [{
        "namespace": "shop", "name": "web", "useClustersetIP": "true", "clusterClustersetIPEnabled": False,
        "serviceIPs": None, "valid": None, "ready": None, "conflict": None,
        "creationTimestamp": data["items"][0]["creationTimestamp"],
    }]}
    table = cs.run("show", "exports", "-n", "shop", "--kubeconfig", k1).stdout.splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "VIP", "WANTS", "VIP", "VALID", "READY", "CONFLICT", "AGE", "MESSAGE"]
    assert table[1].split()[:4] == ["shop", "web", "-", "true"]  # no VIP known yet: not imported
    assert json.loads(cs.run("show", "imports", "-A", "-o", "json", "--kubeconfig", k1).stdout) == {"kind": "List", "items": []}
    assert cs.error("show", "exports", "-n", "shop", "-A", "--kubeconfig", k1) == "use either --namespace or --all-namespaces"
    assert yaml.safe_load(cs.run("show", "exports", "-A", "-o", "yaml", "--kubeconfig", k1).stdout) == data
    wide = cs.run("show", "exports", "-n", "shop", "-o", "wide", "--kubeconfig", k1).stdout.splitlines()
    assert wide[0].split()[-2:] == ["SERVICE", "IPS"] and wide[1].split()[-1] == "-"  # the Service has no IPs yet
    assert cs.error("show", "exports", "-o", "xml", "--kubeconfig", k1) == (
        "--output must be table, wide, json or yaml, not 'xml'")
    assert cs.run("unexport", "web", "-n", "shop", "--kubeconfig", k1).stdout.strip() == "serviceexport shop/web deleted"
    assert cs.error("unexport", "web", "-n", "shop", "--kubeconfig", k1) == "serviceexport shop/web not found"


def test_4b_show_conflicts_one_per_line_and_the_vip(cs: Clusterset) -> None:
    """What an agent writes for a service in conflict, as `show` prints it."""
    k1 = str(cs.c1.kubeconfig)
    cs.run("export", "web", "-n", "shop", "--kubeconfig", k1)
    ports = "port http is 80/TCP in cluster c0 but 8080/TCP in cluster c1"
    labels = 'label "tier" is "web" in cluster c0 but "api" in cluster c1'

    async def as_the_agent() -> None:
        c = cs.client(cs.c1)
        try:
            export = await get(c, ServiceExport, "web", namespace="shop")
            export.status.conditions = [
                conflict_condition([(ConflictReason.PORT, ports), (ConflictReason.LABELS, labels)])
            ]
            await patch_status(c, export, field_manager="e2e")
            await c.create(to_lightkube(ServiceImport(
                metadata=Meta(name="web", namespace="shop"),
                spec=ServiceImportSpec(type="ClusterSetIP", ips=["243.0.0.7"]),
            )))
        finally:
            await c.close()

    asyncio.run(as_the_agent())
    lines = cs.run("show", "exports", "-n", "shop", "--kubeconfig", k1).stdout.splitlines()
    assert lines[1].split()[:4] == ["shop", "web", "243.0.0.7", "false"]  # the VIP; this cluster's default: off
    assert lines[1].split()[4:8] == ["(default)", "-", "-", "True"]
    assert lines[1].rstrip().endswith(f"Conflict: {ports}") and "PortConflict" in lines[1]
    assert lines[2].split()[0] == "LabelsConflict" and lines[2].rstrip().endswith(f"Conflict: {labels}")
    assert len(lines) == 3
    imports = cs.run("show", "imports", "-n", "shop", "--kubeconfig", k1).stdout.splitlines()
    assert imports[0].split() == ["NAMESPACE", "NAME", "TYPE", "VIP", "CLUSTERS", "PORTS", "READY", "CONFLICT", "AGE"]
    # READY "-": no agent wrote the import's Ready condition here
    assert imports[1].split()[:8] == ["shop", "web", "ClusterSetIP", "243.0.0.7", "-", "-", "-", "PortConflict"]
    assert imports[2].split() == ["LabelsConflict"]
    wide = cs.run("show", "imports", "-n", "shop", "-o", "wide", "--kubeconfig", k1).stdout.splitlines()
    assert wide[0].split()[-6:] == ["AGE", "IP", "FAMILIES", "AFFINITY", "DNS", "NAME"]
    assert wide[1].split()[-2:] == ["None", "web.shop.svc.clusterset.local"]
    doc = json.loads(cs.run("show", "imports", "-n", "shop", "-o", "json", "--kubeconfig", k1).stdout)
    assert doc["items"][0]["dnsName"] == "web.shop.svc.clusterset.local" and doc["items"][0]["creationTimestamp"]
    cs.run("unexport", "web", "-n", "shop", "--kubeconfig", k1)


def test_5_unreachable_and_bad_credentials(cs: Clusterset) -> None:
    dead = cs.tmp / "dead.kubeconfig"
    dead.write_text(cs.c1.kubeconfig.read_text().replace(cs.c1.url, "http://127.0.0.1:1"))
    assert cs.error("show", "exports", "--kubeconfig", str(dead)).startswith(
        "cannot reach the API server at http://127.0.0.1:1"
    )
    info = BrokerInfo.decode((cs.tmp / "broker-info.subm").read_text())
    (cs.tmp / "badtoken.subm").write_text(dataclasses.replace(info, token="wrong").encode())
    assert "rejected the credentials (401 Unauthorized)" in cs.error(
        "show", "clusters", "--broker-info", "badtoken.subm"
    )


def test_5b_join_a_silent_broker(cs: Clusterset) -> None:
    """A broker that accepts and never answers: join gives up within seconds and says why."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        info = BrokerInfo.decode((cs.tmp / "broker-info.subm").read_text())
        (cs.tmp / "silent.subm").write_text(dataclasses.replace(info, server=url, ca_pem=None, token="t").encode())
        assert cs.error("join", "silent.subm", "--kubeconfig", str(cs.c1.kubeconfig), "--cluster-id", "c1") == (
            f"the API server at {url} did not answer in time (ReadTimeout)"
        )


def test_6_leave(cs: Clusterset) -> None:
    k2 = str(cs.c2.kubeconfig)
    assert cs.error("leave", "--kubeconfig", k2) == (
        "leave would remove this cluster from its clusterset: pass --yes to confirm (there is no terminal to ask on)"
    )
    declined = cs.answer("n", "leave", "--kubeconfig", k2)
    assert declined.returncode == 1 and declined.stderr.strip() == "nothing changed", declined
    assert f"Remove cluster c2 from the clusterset (broker {cs.broker.url}, namespace isthmus-broker)" in declined.stdout
    clusters = json.loads(cs.run("show", "clusters", "--broker-info", "broker-info.subm", "--broker-kubeconfig",
                                 cs.bk, "-o", "json").stdout)
    assert [r["clusterID"] for r in clusters["items"]] == ["c1", "c2"]
    # The cluster's own broker token may not deregister it.
    assert "pass the broker's admin kubeconfig as --broker-kubeconfig" in cs.error("leave", "--kubeconfig", k2, "--yes")

    accepted = cs.answer("y", "leave", "--kubeconfig", k2, "--broker-kubeconfig", cs.bk)
    assert accepted.returncode == 0, accepted
    assert "cluster c2 left the clusterset: removed from the broker; its broker credentials revoked" in accepted.stdout
    assert "has not joined a clusterset" in cs.error("leave", "--kubeconfig", k2, "--yes")
    _stop(cs.c1)  # c1 dies: clean it off the broker with the broker-info alone
    assert cs.error("leave", "--broker-info", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--cluster-id", "nope",
                    "--yes") == (
        "cluster 'nope' is not registered on the broker (members: c1)"
    )
    out = cs.run("leave", "--broker-info", "broker-info.subm", "--broker-kubeconfig", cs.bk, "--cluster-id", "c1",
                 "-y").stdout
    assert "cluster c1 removed from the broker" in out
    data = json.loads(cs.run("show", "clusters", "--broker-info", "broker-info.subm", "--broker-kubeconfig", cs.bk,
                             "-o", "json").stdout)
    assert data == {"kind": "List", "items": []}
