"""The local clusterset as a user runs it: `isthmus up --detach`, `status -o json`, kubectl, DNS
and real TCP/UDP traffic through a ClusterSet IP, crash recovery, `down`, and resume.

One clusterset (3 clusters) is shared by the tests of this module, in file order; the fixture
always runs `isthmus down` and checks that no process naming the state dir survives.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rdatatype
import pytest

from isthmus.local import plan
from tests.harness.local import Clusterset, wait_for

# clusterset: one local clusterset at a time (they share one 127.x plan); `make test` runs these serially.
pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(240)]


ECHO = """
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata:
      labels: {app: echo}
      annotations: {isthmus.io/workload: echo}
    spec:
      containers:
      - name: echo
        image: echo
        ports: [{containerPort: 8080, protocol: TCP}, {containerPort: 8081, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo}
spec:
  selector: {app: echo}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
"""

EXPORT = """
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata:
  name: {name}
  namespace: demo
  annotations: {{lighthouse.submariner.io/use-clusterset-ip: "true"}}
"""

SECOND = """
apiVersion: v1
kind: Service
metadata: {name: echo2, namespace: demo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 8000, targetPort: 8080, protocol: TCP}]
"""


@pytest.fixture(scope="module")
def cs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusterset]:
    cs = Clusterset(tmp_path_factory.mktemp("local") / "state")
    try:
        started = time.monotonic()
        out = cs.up("--clusters", "3", "--enable-clusterset-ip")
        print(f"isthmus up --clusters 3 --detach: ready in {time.monotonic() - started:.1f}s")
        assert "export KUBECONFIG=" in out.stdout
        assert "/  # the live web view" in out.stdout or "Web view: http://127.0.0.1:" in out.stdout
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), check=False, timeout=60)
        left = cs.our_processes()
        for line in left:  # never leave a clusterset behind, even when `down` is broken
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        assert not left, f"processes survived `isthmus down`: {left}"


def _http_clusters(url: str, n: int) -> collections.Counter[str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(n):
        with opener.open(url, timeout=3) as r:
            seen[json.loads(r.read())["cluster"]] += 1
    return seen


def _udp_clusters(ip: str, port: int, n: int) -> collections.Counter[str]:
    seen: collections.Counter[str] = collections.Counter()
    for i in range(n):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.sendto(f"ping {i}".encode(), (ip, port))
            seen[json.loads(s.recvfrom(65535)[0])["cluster"]] += 1
    return seen


def _from_both(answers: Callable[[], collections.Counter[str]]) -> Callable[[], collections.Counter[str] | None]:
    """A probe that succeeds once pods of both c1 and c2 answered."""
    def probe() -> collections.Counter[str] | None:
        seen = answers()
        return seen if set(seen) == {"c1", "c2"} else None
    return probe


def _resolve(dns_addr: str, name: str) -> list[str]:
    host, _, port = dns_addr.rpartition(":")
    reply = dns.query.udp(dns.message.make_query(name, "A"), host, port=int(port), timeout=2)
    return sorted(r.to_text() for rrset in reply.answer if rrset.rdtype == dns.rdatatype.A for r in rrset)


def _vip(cs: Clusterset, context: str, name: str) -> str | None:
    out = cs.kubectl(context, "-n", "demo", "get", "serviceimport", name, "-o", "json", check=False)
    if not out:
        return None
    ips = json.loads(out)["spec"].get("ips") or []
    return str(ips[0]) if ips else None


def test_up_reports_every_part_ready(cs: Clusterset) -> None:
    doc = cs.status()
    assert doc["ready"] is True and doc["stateDir"] == str(cs.root)
    assert doc["kubeconfig"] == str(cs.root / "kubeconfig")
    assert doc["broker"]["context"] == "broker" and doc["broker"]["clustersetIPCIDRRange"] == "127.240.0.0/12"
    assert [c["name"] for c in doc["clusters"]] == ["c1", "c2", "c3"]
    for i, c in enumerate(doc["clusters"], start=1):
        assert c["ready"] is True
        assert c["parts"] == {k: "ready" for k in ("apiserver", "kube-lite", "agent", "dns", "controller-manager",
                                                   "pools", "webhook", "egress-gateway")}
        assert c["podCIDR"] == f"127.{100 + i}.0.0/16" and c["serviceCIDR"] == f"127.{200 + i}.0.0/16"
        assert c["egressSourceIPs"] == f"127.32.{i}.1-127.32.{i}.254"
        assert c["clustersetIPCIDR"] == f"127.{239 + i}.0.0/16"
        assert c["server"].startswith("https://127.0.0.1:") and c["dns"].startswith("127.0.0.1:")
        assert Path(c["kubeconfig"]).exists()
    for c in doc["clusters"]:  # membership and heartbeats as the broker has them
        assert c["joined"] is True and 0 <= c["heartbeatAge"] <= 30 and c["problems"] == []
        assert c["restarts"] == 0
    assert doc["broker"]["reachable"] is True and doc["problems"] == []
    # The web view starts on first use: on standby until then (ready: the first request starts it).
    assert doc["broker"]["parts"] == {**{k: "ready" for k in ("apiserver", "kube-lite", "mcsvc-broker", "pools")},
                                      "ui": "standby"}
    assert doc["ui"]["ready"] is True and doc["ui"]["standby"] is True
    assert doc["ui"]["url"].startswith("http://127.0.0.1:")
    assert "(starts on first use)" in cs.isthmus("status", "--state-dir", str(cs.root)).stdout
    with urllib.request.urlopen(doc["ui"]["url"], timeout=30) as page:  # the first request starts it
        assert page.status == 200 and b"<html" in page.read().lower()
    after = cs.status()
    assert after["broker"]["parts"]["ui"] == "ready" and after["ui"]["standby"] is False, after["ui"]
    assert after["broker"]["processes"]["ui"]["pid"]
    assert (doc["broker"]["podCIDR"], doc["broker"]["poolPublicAddress"]) == ("127.100.0.0/16", "127.30.0.1")
    table = cs.isthmus("status", "--state-dir", str(cs.root)).stdout
    assert "ready" in table and "127.102.0.0/16" in table and "JOINED / HEARTBEAT" in table
    assert "127.32.2.1-254" in table
    assert cs.isthmus("status", "--state-dir", str(cs.root), "--wait", "--timeout", "5").returncode == 0
    again = cs.up()  # already running: says so, exits 0
    assert "already running" in again.stdout


def _forbidden(cs: Clusterset, context: str, token: str, *args: str) -> str:
    """kubectl as the holder of `token`: must be refused with kube's 403; returns the message."""
    p = subprocess.run(["kubectl", "--context", context, f"--cache-dir={cs.root / 'kubectl-cache'}",
                        "--token", token, *args], capture_output=True, text=True, timeout=60, env=cs.env)
    assert p.returncode != 0 and "Forbidden" in p.stderr, (args, p.stdout, p.stderr)
    return p.stderr


def test_components_run_from_the_manifests_under_their_own_service_accounts(cs: Clusterset) -> None:
    from isthmus.api.image import IMAGE

    deployments = json.loads(cs.kubectl("c1", "-n", "isthmus-system", "get", "deployments", "-o", "json"))["items"]
    by_name = {d["metadata"]["name"]: d for d in deployments}
    assert {"isthmus-agent", "isthmus-dns"} <= set(by_name)
    pods = json.loads(cs.kubectl("c1", "-n", "isthmus-system", "get", "pods", "-o", "json"))["items"]
    for name in ("isthmus-agent", "isthmus-dns"):
        template = by_name[name]["spec"]["template"]["spec"]
        sa = template["serviceAccountName"]
        mine = [p for p in pods if p["metadata"]["name"].startswith(name + "-")]
        assert mine and all(p["spec"]["serviceAccountName"] == sa for p in mine)
        assert all(c["image"] == IMAGE for p in mine for c in p["spec"]["containers"])
        assert any(c.get("ready") for p in mine for c in p["status"].get("containerStatuses") or [])
    # Each component's own account may not step outside its role.
    agent_sa = by_name["isthmus-agent"]["spec"]["template"]["spec"]["serviceAccountName"]
    dns_sa = by_name["isthmus-dns"]["spec"]["template"]["spec"]["serviceAccountName"]
    agent_token = cs.kubectl("c1", "-n", "isthmus-system", "create", "token", agent_sa).strip()
    dns_token = cs.kubectl("c1", "-n", "isthmus-system", "create", "token", dns_sa).strip()
    said = _forbidden(cs, "c1", agent_token, "-n", "kube-system", "get", "secrets")
    assert (f'secrets is forbidden: User "system:serviceaccount:isthmus-system:{agent_sa}" cannot list '
            'resource "secrets" in API group "" in the namespace "kube-system"') in said
    _forbidden(cs, "c1", dns_token, "-n", "isthmus-system", "delete", "serviceimports.multicluster.x-k8s.io", "any")
    _forbidden(cs, "c1", dns_token, "-n", "isthmus-system", "get", "secret", "isthmus-broker")


def test_a_member_broker_token_writes_only_its_own_objects(cs: Clusterset) -> None:
    import base64

    from isthmus.clusterset.brokerinfo import BrokerInfo

    secret = json.loads(cs.kubectl("c1", "-n", "isthmus-system", "get", "secret", "isthmus-broker", "-o", "json"))
    info = BrokerInfo.decode(base64.b64decode(secret["data"]["broker-info"]))
    assert info.token
    assert "token" not in json.loads(base64.b64decode((cs.root / "broker-info.subm").read_text()))
    ns = info.namespace
    _forbidden(cs, "broker", info.token, "-n", ns, "get", "secrets")
    _forbidden(cs, "broker", info.token, "-n", ns, "delete", "clusters.isthmus.io", "c2")
    _forbidden(cs, "broker", info.token, "-n", ns, "annotate", "clusters.isthmus.io", "c2", "x=y")
    _forbidden(cs, "broker", info.token, "-n", "kube-system", "get", "configmaps")
    # Broker tenancy (docs/discovery.md): nothing shared is writable by a member: no MultiClusterService
    # status (issue 40's reproduction), no ServiceImport on the broker.
    _forbidden(cs, "broker", info.token, "-n", "shop", "patch", "mcs", "cart", "--subresource=status", "--type=merge",
               "-p", '{"status":{"address":"127.33.6.6","loadBalancer":{"ingress":[{"ip":"127.33.6.6"}]}}}')
    _forbidden(cs, "broker", info.token, "-n", ns, "delete", "serviceimports.multicluster.x-k8s.io", "--all")
    # Its own Cluster it may annotate (the agent's heartbeat does), and read everyone's.
    ok = subprocess.run(["kubectl", "--context", "broker", "--token", info.token, "-n", ns, "annotate",
                         "--overwrite", "clusters.isthmus.io", "c1", "example.com/checked=yes"],
                        capture_output=True, text=True, timeout=60, env=cs.env)
    assert ok.returncode == 0, ok.stderr
    listed = subprocess.run(["kubectl", "--context", "broker", "--token", info.token, "-n", ns, "get",
                             "clusters.isthmus.io", "-o", "name"], capture_output=True, text=True, timeout=60,
                            env=cs.env)
    assert listed.returncode == 0 and "c2" in listed.stdout, listed.stderr


def test_everything_in_the_state_dir_is_private(cs: Clusterset) -> None:
    """It holds tokens (kubeconfigs, broker-info, Secrets in every state.db): dirs 0700, files 0600."""
    loose = []
    for path in [cs.root, *cs.root.rglob("*")]:
        if "kubectl-cache" in path.parts or path.is_symlink():
            continue  # kubectl's own cache, written by this test's kubectl
        try:
            st = path.stat()
        except FileNotFoundError:
            continue  # rotated away while we walked (the journal's state.db-log.old): nothing left to read
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if stat.S_IMODE(st.st_mode) != want:
            loose.append(f"{oct(stat.S_IMODE(st.st_mode))} {path.relative_to(cs.root)}")
    assert not loose, loose


def test_kubectl_reaches_every_cluster_through_the_merged_kubeconfig(cs: Clusterset) -> None:
    assert "kube-system" in cs.kubectl("c2", "get", "ns")
    assert "isthmus-broker" in cs.kubectl("broker", "get", "ns")


def test_a_second_clusterset_is_refused_while_one_runs(cs: Clusterset, tmp_path: Path) -> None:
    """Clustersets share the 127.x address plan: a second one must fail clearly, not half-start."""
    other = Clusterset(tmp_path / "other")
    p = other.isthmus("up", "--detach", "--clusters", "2", "--state-dir", str(other.root), check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"another local clusterset is running from {cs.root}" in p.stderr
    assert not other.our_processes()
    assert cs.status()["ready"]


def test_exported_service_gets_a_vip_dns_name_and_traffic_from_both_clusters(cs: Clusterset) -> None:
    for ctx in ("c1", "c2"):
        cs.kubectl(ctx, "apply", "-f", "-", stdin=ECHO)
    cs.kubectl("c3", "create", "namespace", "demo")
    cs.isthmus("export", "echo", "-n", "demo", "--context", "c1")
    cs.kubectl("c2", "apply", "-f", "-", stdin=EXPORT.format(name="echo"))
    vips = {ctx: wait_for(f"ServiceImport VIP in {ctx}", functools.partial(_vip, cs, ctx, "echo"))
            for ctx in ("c1", "c2", "c3")}
    vip = vips["c1"]
    assert set(vips.values()) == {vip} and vip.startswith("127.24")
    doc = cs.status()
    for c in doc["clusters"]:
        assert wait_for(f"DNS answer from {c['name']}",
                        functools.partial(_resolve, c["dns"], "echo.demo.svc.clusterset.local")) == [vip]
    # Both clusters' pods are endpoints once every agent imported both slices.
    tcp = wait_for("TCP answers from both clusters", _from_both(lambda: _http_clusters(f"http://{vip}:80/hello", 16)))
    assert sum(tcp.values()) == 16
    udp = wait_for("UDP answers from both clusters", _from_both(lambda: _udp_clusters(vip, 81, 16)))
    assert sum(udp.values()) == 16
    cluster_ip = cs.kubectl("c1", "-n", "demo", "get", "svc", "echo", "-o", "jsonpath={.spec.clusterIP}")
    assert cluster_ip.startswith("127.201.")
    assert set(_http_clusters(f"http://{cluster_ip}:80/", 6)) == {"c1"}
    assert _resolve(doc["clusters"][0]["dns"], "echo.demo.svc.cluster.local") == [cluster_ip]


LB_SERVICE = """
apiVersion: v1
kind: Service
metadata:
  name: echo-lb
  namespace: demo
  annotations:
    kubernetes.dcos.io/dklb-config: |
      frontends:
      - port: 18201
        servicePort: 80
spec:
  type: LoadBalancer
  selector: {app: echo}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
"""


def _lb_ips(cs: Clusterset) -> list[str] | None:
    out = cs.kubectl("c2", "-n", "demo", "get", "svc", "echo-lb", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}")
    return out.split() or None


def _pool(cs: Clusterset) -> dict[str, Any] | None:
    out = cs.kubectl("c2", "get", "lbp", "c2--demo--echo-lb", "-o", "json", check=False)
    return json.loads(out) if out.strip() else None


def test_load_balancers_through_kubectl_with_their_failure_scenarios(cs: Clusterset) -> None:
    cs.kubectl("c2", "apply", "-f", "-", stdin=LB_SERVICE)
    ips = wait_for("echo-lb's load-balancer addresses", lambda: _lb_ips(cs))
    assert ips == ["127.31.2.1", "127.30.2.1"]  # c2's private, then public edge address
    for ip in ips:
        assert set(wait_for(f"HTTP through {ip}", lambda ip=ip: _http_clusters(f"http://{ip}:18201/", 4) or None)) \
            == {"c2"}
    # A config the admission refuses, as kubectl shows it.
    bad = LB_SERVICE.replace("echo-lb", "echo-bad").replace("servicePort: 80", "servicePort: 81")
    p = subprocess.run(["kubectl", "--context", "c2", "apply", "-f", "-"], input=bad, capture_output=True, text=True,
                       timeout=60, env=cs.env)
    assert p.returncode != 0 and "81 is not a port of this Service (ports: 80)" in p.stderr
    # Scenario 7: the instance dies; the pool manager restarts it and traffic comes back.
    pool = wait_for("the pool's status", lambda: _pool(cs))
    old = pool["status"]["instances"][0]["pid"]
    os.kill(old, signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        got = _pool(cs)
        inst = (got or {}).get("status", {}).get("instances", [{}])[0]
        return got if inst.get("state") == "Running" and inst.get("pid") not in (None, 0, old) \
            and inst.get("restarts") == 1 else None

    wait_for("the instance restarted", restarted)
    assert set(wait_for("HTTP after the restart", lambda: _http_clusters("http://127.30.2.1:18201/", 4) or None)) \
        == {"c2"}
    # Scenario 6: the pool deleted out of band is re-created (strategy IfNotPresent), with an Event.
    cs.kubectl("c2", "delete", "lbp", "c2--demo--echo-lb", "--wait=false")
    wait_for("the pool re-created", lambda: _pool(cs) if (_pool(cs) or {}).get("status", {}).get("ready") == "1/1"
             else None)
    events = cs.kubectl("c2", "-n", "demo", "get", "events", "--field-selector", "involvedObject.name=echo-lb",
                        "-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
    assert "PoolMissing" in events.split() and "Exposed" in events.split()
    assert set(wait_for("HTTP after the re-creation",
                        lambda: _http_clusters("http://127.31.2.1:18201/", 4) or None)) == {"c2"}
    shown = json.loads(cs.isthmus("show", "loadbalancers", "-n", "demo", "--context", "c2", "-o", "json").stdout)
    (item,) = [i for i in shown["items"] if i["name"] == "echo-lb"]
    assert item["pool"] == "c2--demo--echo-lb" and item["healthy"] is True
    assert item["addresses"] == ["127.31.2.1:18201", "127.30.2.1:18201"]


MCS_WEB = """
apiVersion: v1
kind: Service
metadata: {name: mcs-web, namespace: demo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
"""

MCS_BAD = """
apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterService
metadata: {name: mcs-bad, namespace: demo}
spec:
  types: [Bogus]
  ports: [{name: http, port: 0}, {name: http, port: 80}]
  providerClusters: [{name: "No_Such"}]
"""


def _mcs(cs: Clusterset, name: str) -> dict[str, Any] | None:
    out = cs.kubectl("broker", "-n", "demo", "get", "mcs", name, "-o", "json", check=False)
    return json.loads(out) if out else None


def _has(cs: Clusterset, context: str, kind: str, name: str) -> bool:
    return bool(cs.kubectl(context, "-n", "demo", "get", kind, name, "-o", "name", check=False).strip())


def test_multicluster_services_through_kubectl_with_their_failure_scenarios(cs: Clusterset) -> None:
    import http.client

    cs.kubectl("broker", "create", "namespace", "demo")
    # Bad input: refused with the fields named, nothing stored.
    p = subprocess.run(["kubectl", "--context", "broker", "apply", "-f", "-"], input=MCS_BAD, capture_output=True,
                       text=True, timeout=60, env=cs.env)
    assert p.returncode != 0
    for said in ("spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                 'spec.ports[1].name: Duplicate value: "http"', 'spec.types[0]: Unsupported value: "Bogus"',
                 'spec.providerClusters[0].name: Invalid value: "No_Such"'):
        assert said in p.stderr, p.stderr
    assert _mcs(cs, "mcs-bad") is None
    # CrossCluster with the CLI: c1 and c2 provide, only c3 consumes.
    for c in ("c1", "c2"):
        cs.kubectl(c, "apply", "-f", "-", stdin=MCS_WEB)
    out = cs.isthmus("expose", "mcs-web", "-n", "demo", "--type", "CrossCluster", "--providers", "c1,c2",
                     "--consumers", "c3", "--ports", "80", "--context", "broker").stdout
    assert out.strip() == "multiclusterservice demo/mcs-web created"
    cs.kubectl("broker", "-n", "demo", "wait", "--for=condition=Ready", "mcs/mcs-web", "--timeout=60s")
    vip = wait_for("mcs-web's VIP in c3", lambda: _vip(cs, "c3", "mcs-web"))
    assert not _has(cs, "c1", "serviceimport", "mcs-web") and not _has(cs, "c2", "serviceimport", "mcs-web")
    wait_for("HTTP through the VIP from both providers", _from_both(lambda: _http_clusters(f"http://{vip}:80/", 8)))
    table = cs.kubectl("broker", "-n", "demo", "get", "mcs", "mcs-web")
    assert "c1,c2" in table.splitlines()[1] and "c3" in table.splitlines()[1] and "True" in table.splitlines()[1]
    # A consumer removed while it has a connection open: that connection keeps its backend until it
    # ends (as kube-proxy's established flows do), while c3 stops importing and resolving the name.
    # (New connections cannot be shown refused here: c2 now imports the same VIP, and every cluster's
    # proxy shares this machine's loopback.)
    conn = http.client.HTTPConnection(vip, 80, timeout=5)
    conn.request("GET", "/")
    assert json.loads(conn.getresponse().read())["cluster"] in ("c1", "c2")
    cs.isthmus("expose", "mcs-web", "-n", "demo", "--type", "CrossCluster", "--providers", "c1,c2",
               "--consumers", "c2", "--ports", "80", "--context", "broker")
    wait_for("the import to leave c3", lambda: not _has(cs, "c3", "serviceimport", "mcs-web"))
    wait_for("the import in c2", lambda: _has(cs, "c2", "serviceimport", "mcs-web"))
    dns_of = {c["name"]: c["dns"] for c in cs.status()["clusters"]}
    wait_for("c3's DNS to forget mcs-web", lambda: _resolve(dns_of["c3"], "mcs-web.demo.svc.clusterset.local") == [])
    assert wait_for("c2's DNS to answer", lambda: _resolve(dns_of["c2"], "mcs-web.demo.svc.clusterset.local")) == [vip]
    for _ in range(3):
        conn.request("GET", "/")
        assert json.loads(conn.getresponse().read())["cluster"] in ("c1", "c2")
    conn.close()
    # The same Service exported by a user and by a MultiClusterService: the user's export is used as
    # it is, and outlives the object.
    assert _has(cs, "c1", "serviceexport", "echo")  # the user's, from the discovery test above
    cs.isthmus("expose", "echo", "-n", "demo", "--type", "CrossCluster", "--context", "broker")

    def user_owned() -> list[str]:
        reports = ((_mcs(cs, "echo") or {}).get("status") or {}).get("clusters") or []
        owners = sorted(f"{r['name']}={r.get('export')}" for r in reports if r.get("provider") and r.get("export"))
        return owners if "c1=User" in owners else []

    wait_for("c1's export reported as the user's", user_owned)
    cs.kubectl("broker", "-n", "demo", "delete", "mcs", "echo", "mcs-web", "--timeout=60s")
    assert _has(cs, "c1", "serviceexport", "echo")
    wait_for("mcs-web's exports gone", lambda: not _has(cs, "c1", "serviceexport", "mcs-web")
             and not _has(cs, "c2", "serviceexport", "mcs-web"))
    assert _mcs(cs, "mcs-web") is None


EGRESS_BAD = """
apiVersion: egress.isthmus.io/v1alpha1
kind: ExternalService
metadata: {name: bad-out, namespace: demo}
spec:
  targetIP: not-an-ip
  sources:
  - service: {name: echo}
    sourceIP: 127.32.2.9
  - service: {name: echo}
    sourceIPClaimName: team-x/their-claim
  ports: [{port: 7100}, {port: 7100}]
"""

EGRESS = """
apiVersion: egress.isthmus.io/v1alpha1
kind: SourceIPClaim
metadata: {name: e2e-ip, namespace: demo}
spec: {sourceIPClassName: isthmus-local}
---
apiVersion: egress.isthmus.io/v1alpha1
kind: ExternalService
metadata: {name: e2e-out, namespace: demo}
spec:
  targetIP: 127.33.0.5
  sources:
  - service: {name: echo}
    sourceIPClaimName: e2e-ip
  ports: [{name: tcp, port: 7100}]
"""


class _PeerServer:
    """An outside server recording the address of every connection (and answering it)."""

    def __init__(self, address: str, port: int) -> None:
        self.peers: list[str] = []
        self.sock = socket.create_server((address, port))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            self.peers.append(peer[0])
            # A flow the gateway aborts (failover fails closed) may be reset before the answer:
            # that must not end the server, or every later connection waits in its backlog.
            with conn, contextlib.suppress(OSError):
                conn.sendall(peer[0].encode() + b"\n")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _through(src: str, ip: str, port: int) -> str | None:
    with socket.socket() as s:
        s.settimeout(3)
        s.bind((src, 0))
        s.connect((ip, port))
        return s.recv(100).decode().strip() or None


def _egress_state(cs: Clusterset, ns: str, forwarder: str) -> str:
    """The egress parts' recent logs and the objects failover goes through, for a failure message."""
    out = []
    for what in (["get", "pods,endpointslices,leases", "-n", "isthmus-system", "-o", "wide"],
                 ["get", "forwarders.egress.isthmus.io", "-A", "-o", "yaml"],
                 ["logs", "--tail=30", "--prefix", "-n", "isthmus-system", "-l", "app.kubernetes.io/name=isthmus-egress-gateway"],
                 ["logs", "--tail=30", "--prefix", "-n", "isthmus-system", "-l", "app.kubernetes.io/name=isthmus-controller-manager"],
                 ["logs", "--tail=30", "--prefix", "-n", ns, "-l", f"egress.isthmus.io/forwarder={forwarder}"]):
        try:
            out.append(f"$ kubectl {' '.join(what)}\n{cs.kubectl('c2', *what)}")
        except (AssertionError, subprocess.TimeoutExpired) as e:
            out.append(f"$ kubectl {' '.join(what)}: {e}")
    return "\n".join(out)


def test_egress_through_kubectl_with_its_failure_scenarios(cs: Clusterset) -> None:
    cs.kubectl("c2", "apply", "-f", "-", stdin=ECHO)  # as the discovery test left it (idempotent)
    cs.kubectl("c2", "-n", "demo", "rollout", "status", "deployment/echo", "--timeout=60s")
    # Bad input: refused with the fields named, nothing stored.
    p = subprocess.run(["kubectl", "--context", "c2", "apply", "-f", "-"], input=EGRESS_BAD, capture_output=True,
                       text=True, timeout=60, env=cs.env)
    assert p.returncode != 0
    for said in ('spec.targetIP: Invalid value: "not-an-ip"', "spec.sources[0].sourceIP: Forbidden",
                 "name a SourceIPClaim of namespace demo", "spec.ports[1]: Duplicate value: TCP/7100"):
        assert said in p.stderr, p.stderr
    assert not _has(cs, "c2", "externalservice", "bad-out")
    cs.kubectl("c2", "create", "namespace", "elsewhere")
    p = subprocess.run(["kubectl", "--context", "c2", "apply", "-f", "-"], capture_output=True, text=True,
                       timeout=60, env=cs.env, input=EGRESS.split("---")[0].replace("namespace: demo",
                                                                                   "namespace: elsewhere"))
    assert "does not allow namespace 'elsewhere'" in p.stderr, p.stderr
    # A claim and an ExternalService: the echo pods of c2 reach the outside server from the claimed address.
    outside = _PeerServer("127.33.0.5", 7100)
    try:
        cs.kubectl("c2", "apply", "-f", "-", stdin=EGRESS)
        cs.kubectl("c2", "-n", "demo", "wait", "--for=condition=Ready", "externalservice/e2e-out", "--timeout=60s")
        claim = json.loads(cs.kubectl("c2", "-n", "demo", "get", "sipclaim", "e2e-ip", "-o", "json"))
        address = claim["status"]["sourceIP"]
        assert address.startswith("127.32.2.")
        forwarder = json.loads(cs.kubectl("c2", "-n", "external-services", "get", "svc", "e2e-out", "-o", "json"))
        fip = forwarder["spec"]["clusterIP"]
        workload = json.loads(cs.kubectl("c2", "-n", "demo", "get", "extsvc", "e2e-out", "-o", "json"))["status"][
            "forwarder"]
        pods = json.loads(cs.kubectl("c2", "-n", "demo", "get", "pods", "-l", "app=echo", "-o", "json"))["items"]
        src = pods[0]["status"]["podIP"]
        assert wait_for("a connection through the forwarder", lambda: _through(src, fip, 7100)) == address
        # The forwarder runs as a pod of the Isthmus image, under its own ServiceAccount.
        ns, name = workload.split("/")
        fwd_pods = json.loads(cs.kubectl("c2", "-n", ns, "get", "pods", "-l", f"egress.isthmus.io/forwarder={name}",
                                         "-o", "json"))["items"]
        assert [p["spec"]["serviceAccountName"] for p in fwd_pods] == ["isthmus-egress-forwarder"]
        shown = cs.isthmus("show", "egress", "-n", "demo", "--context", "c2").stdout
        assert "e2e-out" in shown and address in shown and "demo/echo" in shown and "Bound" in shown
        # Another address (not a source pod) is refused.
        try:
            refused = _through("127.102.250.250", fip, 7100) is None
        except OSError:
            refused = True
        assert refused
        # The gateway pod is killed: a new one takes the lease; traffic resumes from the same address.
        cs.kubectl("c2", "-n", "isthmus-system", "delete", "pod", "-l", "app.kubernetes.io/name=isthmus-egress-gateway",
                   "--wait=false")
        try:
            wait_for("traffic after the gateway's restart", lambda: _through(src, fip, 7100) == address, timeout=60)
        except AssertionError as e:  # rare (twice so far): keep what the next occurrence needs to be understood
            raise AssertionError(f"{e}\n{_egress_state(cs, ns, name)}") from None
        assert set(outside.peers) == {address}  # nothing ever left from another address
        # Deleting the ExternalService removes its forwarder; the claim then goes and frees the address.
        cs.kubectl("c2", "-n", "demo", "delete", "externalservice", "e2e-out", "--timeout=60s")
        wait_for("the forwarder to go", lambda: json.loads(cs.kubectl(
            "c2", "-n", "external-services", "get", "svc,endpointslices", "-o", "json"))["items"] == [])
        assert json.loads(cs.kubectl("c2", "-n", ns, "get", "deploy,svc", "-l",
                                     "egress.isthmus.io/external-service=e2e-out", "-o", "json"))["items"] == []
        cs.kubectl("c2", "-n", "demo", "delete", "sipclaim", "e2e-ip", "--timeout=60s")
        wait_for("the address to return to the class", lambda: json.loads(cs.kubectl(
            "c2", "get", "sourceips", "-o", "json"))["items"] == [])
    finally:
        outside.close()


def test_killed_parts_are_restarted_and_converge(cs: Clusterset) -> None:
    before = cs.status()
    agent = before["clusters"][0]["processes"]["agent"]["pid"]
    apiserver = before["clusters"][1]["processes"]["apiserver"]["pid"]
    os.kill(agent, signal.SIGKILL)
    os.kill(apiserver, signal.SIGKILL)

    def recovered() -> dict[str, Any] | None:
        doc = cs.status()
        new_agent = doc["clusters"][0]["processes"]["agent"]["pid"]
        new_api = doc["clusters"][1]["processes"]["apiserver"]["pid"]
        return doc if doc["ready"] and new_agent not in (None, agent) and new_api not in (None, apiserver) else None

    doc = wait_for("killed parts restarted and ready", recovered, timeout=60, every=1)
    assert doc["clusters"][0]["processes"]["agent"]["restarts"] >= 1
    assert doc["clusters"][0]["processes"]["agent"]["lastExit"] == 137  # a pod: kube's 128 + SIGKILL
    assert doc["clusters"][0]["restarts"] >= 1
    assert "agent ↻" in cs.isthmus("status", "--state-dir", str(cs.root)).stdout  # restarts in the table
    # A new export from c2 (whose apiserver restarted) reaches c1 (whose agent restarted).
    cs.kubectl("c2", "apply", "-f", "-", stdin=SECOND)
    cs.isthmus("export", "echo2", "-n", "demo", "--context", "c2", "--use-clusterset-ip", "true")
    vip2 = wait_for("echo2 imported into c1", lambda: _vip(cs, "c1", "echo2"), timeout=30)
    assert wait_for("echo2 in c1's DNS",
                    lambda: _resolve(doc["clusters"][0]["dns"], "echo2.demo.svc.clusterset.local")) == [vip2]
    assert set(wait_for("echo2 traffic", lambda: _http_clusters(f"http://{vip2}:8000/", 4))) == {"c2"}


def test_a_killed_zygote_takes_the_pods_down_and_their_kube_lites_start_them_again(cs: Clusterset) -> None:
    """Every process of the clusterset is forked from the supervisor's zygote (the pods through
    their kube-lite's connection to it). Killed, it takes the pods with it (no orphans), and each
    kube-lite starts them again from a zygote of its own; the parts run on untouched."""
    before = wait_for("ready", lambda: (d := cs.status())["ready"] and d)
    zygotes = [int(line.split(":")[0]) for line in cs.our_processes()
               if "isthmus.procs.zygote" in line and "--for supervisor" in line]
    assert len(zygotes) == 1, cs.our_processes()  # one zygote for the whole clusterset
    pods = {(c["name"], k): p["pid"] for c in before["clusters"] for k, p in c["processes"].items() if "pod" in p}
    parts = {(c["name"], k): p["pid"] for c in before["clusters"] for k, p in c["processes"].items() if "pod" not in p}
    os.kill(zygotes[0], signal.SIGKILL)
    wait_for("the pods gone with their zygote", lambda: not any(_alive(pid) for pid in pods.values()), timeout=15)

    def restarted() -> dict[str, Any] | None:
        doc = cs.status()
        now = {(c["name"], k): p["pid"] for c in doc["clusters"] for k, p in c["processes"].items() if "pod" in p}
        return doc if doc["ready"] and all(now[k] not in (None, pid) for k, pid in pods.items()) else None

    doc = wait_for("every pod started again", restarted, timeout=60, every=0.5)
    assert {(c["name"], k): p["pid"] for c in doc["clusters"] for k, p in c["processes"].items()
            if "pod" not in p} == parts
    vip = _vip(cs, "c1", "echo")
    assert vip is not None
    assert wait_for("echo in c1's DNS", lambda: _resolve(doc["clusters"][0]["dns"], "echo.demo.svc.clusterset.local")) == [vip]


class TrafficLoop:
    """DNS queries and HTTP requests through the VIP in a loop on a thread, counting failures."""

    MAX_ROUNDS = 3000  # bounded even if `stop()` is never reached

    def __init__(self, dns_addr: str, name: str, url: str) -> None:
        self.dns_addr, self.name, self.url = dns_addr, name, url
        self.ok = collections.Counter[str]()
        self.failed = collections.Counter[str]()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(self.MAX_ROUNDS):
            if self._stop.is_set():
                return
            try:
                assert _resolve(self.dns_addr, self.name), "no A record"
                self.ok["dns"] += 1
            except Exception as e:
                self.failed["dns"] += 1
                self.errors.append(f"dns: {e!r}")
            try:
                with opener.open(self.url, timeout=3) as r:
                    json.loads(r.read())
                self.ok["http"] += 1
            except Exception as e:
                self.failed["http"] += 1
                self.errors.append(f"http: {e!r}")
            time.sleep(0.02)

    def __enter__(self) -> TrafficLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _pids(doc: dict[str, Any]) -> dict[str, int]:
    out = {"broker-apiserver": doc["broker"]["processes"]["apiserver"]["pid"]}
    for c in doc["clusters"]:
        out.update({f"{c['name']}-{k}": p["pid"] for k, p in c["processes"].items()})
    return out


def _alive(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def test_up_after_a_supervisor_crash_adopts_healthy_parts_without_an_outage(cs: Clusterset) -> None:
    before = wait_for("ready", lambda: (d := cs.status())["ready"] and d)
    pids = _pids(before)
    supervisor = before["supervisor"]["pid"]
    dns_addr = before["clusters"][0]["dns"]
    vip = _vip(cs, "c1", "echo")
    assert vip is not None
    with TrafficLoop(dns_addr, "echo.demo.svc.clusterset.local", f"http://{vip}:80/") as loop:
        wait_for("traffic flowing", lambda: loop.ok["http"] >= 5 and loop.ok["dns"] >= 5)
        os.kill(supervisor, signal.SIGKILL)
        wait_for("the supervisor gone", lambda: not _alive(supervisor))
        assert cs.status()["phase"] == "unsupervised"
        started = time.monotonic()
        cs.up()
        print(f"`isthmus up` after the supervisor crash: {time.monotonic() - started:.1f}s")
        after = cs.status()
        settled = loop.ok["http"] + 20
        wait_for("traffic after `up`", lambda: loop.ok["http"] >= settled)
    print(f"during re-up: ok {dict(loop.ok)}, failed {dict(loop.failed)}")
    assert after["ready"] is True and after["supervisor"]["pid"] not in (None, supervisor), json.dumps(after)[:3000]
    assert _pids(after) == pids  # every part adopted, none restarted
    assert sum(loop.failed.values()) == 0, loop.errors[:10]

    # The new supervisor watches what it adopted: a killed adopted part is restarted.
    os.kill(pids["c3-dns"], signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        doc = cs.status()
        dns = doc["clusters"][2]["processes"]["dns"]
        return doc if doc["ready"] and dns["restarts"] > after["clusters"][2]["processes"]["dns"]["restarts"] else None

    # c3's DNS server is a pod of the adopted kube-lite, which restarts its killed container.
    doc = wait_for("c3-dns restarted by its adopted kube-lite", restarted, timeout=60, every=0.5)
    assert doc["clusters"][2]["processes"]["dns"]["restarts"] == after["clusters"][2]["processes"]["dns"]["restarts"] + 1
    assert doc["clusters"][2]["processes"]["dns"]["lastExit"] == 137


def test_down_stops_everything_and_up_resumes_with_objects_intact(cs: Clusterset) -> None:
    before = cs.status()
    pods = [p["pid"] for c in before["clusters"] for k, p in c["processes"].items() if "pod" in p]
    assert len(pods) == len(plan.POD_KINDS) * len(before["clusters"]) and all(pods)
    out = cs.isthmus("down", "--state-dir", str(cs.root), timeout=60)
    assert "Stopped" in out.stdout
    assert cs.our_processes() == []
    assert [pid for pid in pods if _alive(pid)] == []  # kube-lite stopped its pods' processes too
    assert cs.isthmus("down", "--state-dir", str(cs.root)).stdout.startswith("Nothing is running")
    stopped = cs.status()
    assert stopped["ready"] is False and stopped["clusters"][0]["parts"]["agent"] == "down"

    cs.up()
    doc = cs.status()
    assert doc["ready"] is True
    assert [c["server"] for c in doc["clusters"]] == [c["server"] for c in before["clusters"]]  # same ports
    assert cs.kubectl("c1", "-n", "demo", "get", "deployment", "echo", "-o", "name") == "deployment.apps/echo\n"
    vip = _vip(cs, "c3", "echo")
    assert vip is not None and vip.startswith("127.24")
    assert set(wait_for("traffic after resume", _from_both(lambda: _http_clusters(f"http://{vip}:80/", 12)))) == {"c1", "c2"}


def test_status_reads_membership_from_the_broker(cs: Clusterset) -> None:
    """A cluster that left the broker is not ready, whatever its processes say."""
    wait_for("ready", lambda: cs.status()["ready"])
    out = cs.isthmus("leave", "--yes", "--kubeconfig", str(cs.root / "kubeconfigs" / "c3.yaml"),
                     "--broker-kubeconfig", str(cs.root / "kubeconfigs" / "broker.yaml"))
    assert "c3" in out.stdout
    doc = cs.status()
    c3 = doc["clusters"][2]
    assert doc["ready"] is False and c3["ready"] is False and c3["joined"] is False
    assert "c3 left the clusterset (not registered on the broker)" in c3["problems"]
    assert doc["clusters"][0]["joined"] is True
    p = cs.isthmus("status", "--state-dir", str(cs.root), "--wait", "--timeout", "2", check=False)
    assert p.returncode == 1 and "c3 left the clusterset" in p.stderr and p.stderr.startswith("error: not ready")
