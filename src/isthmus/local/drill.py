"""`isthmus demo --drill`: the operations drill — upgrades and drains under traffic, then uninstall.

What a cluster administrator does to a member in production, done to c1 of a local clusterset
while clients keep talking through every path Isthmus provides, each a bounded loop counting what
fails:

- ``dns``: A queries for the exported Service's clusterset name, to c1's DNS server (its NodePort);
- ``vip from c1`` / ``vip from the observer``: HTTP through the ClusterSet IP, from a node of c1
  and of the last cluster;
- ``lb``: HTTP through c1's HAProxy pool (a Service of type LoadBalancer);
- ``mcs-lb``: HTTP through the MultiClusterService load balancer in front of c1 and c2;
- ``egress``: new connections from a pod of c1 to an outside server through its ExternalService,
  each checked to arrive from the claimed source IP, and a few long-lived flows through it.

Then `kubectl rollout restart` of every Isthmus Deployment of c1, and `kubectl drain` of each of
c1's nodes in turn (uncordoned after). A request is one attempt as a client makes it (DNS: one
query, 1 s timeout, one retry as a stub resolver does; HTTP and egress: a fresh connection, 5 s
timeout, HAProxy's own `timeout connect`, long enough for one SYN the kernel sends again after 1 s),
never retried by the drill; the slowest request that succeeded is reported beside the failures, so
a stall shows even when nothing failed. The targets (issue 43): no failed DNS, VIP or LB request; for egress, flows on
a moved gateway may break (counted) and a new connection succeeds within 3 s of any failure.

Last, c1 and the broker are uninstalled as docs/deploy.md says, and the drill checks that another
project's CRD and its objects, the user's Services and Deployments, and the ServiceExports (a
CRD Isthmus does not own) are still there.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from isthmus.local import demo as tour
from isthmus.local.demo import (
    NAMESPACE,
    VANTAGE,
    Demo,
    Member,
    NotYet,
    Step,
    StepFailed,
    condition,
    loopback,
)

__all__ = ["Drill", "DrillResult", "PathResult", "run_drill"]

ZERO_FAILURE_PATHS = ("dns", "vip from c1", "vip from the observer", "lb", "mcs-lb")
"""The paths that must not lose one request (issue 43); the observer is the last cluster."""
EGRESS_RECOVERY = 3.0
"""A new egress connection must succeed within this long of a failed one."""
INTERVAL = 0.1
"""Pause between two requests of one probe: 10 per second per path, light on two cores."""
MAX_REQUESTS = 20_000
"""Every probe loop is bounded even if nobody stops it."""
TIMELINE = 100
"""Failures per path whose time is kept."""
REQUEST_TIMEOUT = 5.0
"""An HTTP or egress request's timeout: a client's patience, not a target (the slowest is reported)."""
FLOWS = 4
"""Long-lived egress flows opened before the disruptions and checked after."""
DRAIN_TIMEOUT = 240
ROLLOUT_TIMEOUT = 240
OUTSIDE_PORT = 7100
"""The drill's outside server (an echo server that first tells the peer address it saw)."""

OTHER_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  labels: {app.kubernetes.io/managed-by: another-project}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""
WIDGET = """\
apiVersion: example.com/v1
kind: Widget
metadata:
  name: keep-me
spec: {size: 3}
"""
PDB = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {app}
spec:
  minAvailable: 1
  selector:
    matchLabels: {{app: {app}}}
"""
LB_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: echo-public
  annotations:
    kubernetes.dcos.io/dklb-config: |
      size: {size}
      frontends:
      - port: 18082
        servicePort: 80
spec:
  type: LoadBalancer
  selector: {{app: echo}}
  ports:
    - {{name: http, port: 80, targetPort: http, protocol: TCP}}
"""
"""examples/lb/phase2-public-tcp.yaml with a pool instance per node (dklb's `size`), as a user who wants
the load balancer to survive a node's drain asks for."""
GRACEFUL = """\
[{"op": "add", "path": "/spec/template/spec/containers/0/lifecycle",
  "value": {"preStop": {"sleep": {"seconds": 3}}}},
 {"op": "add", "path": "/spec/template/spec/containers/0/readinessProbe",
  "value": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}}]
"""
"""The user's side of a graceful rollout, the usual practice: a new pod is ready once it answers (kube
marks a pod without a readiness probe ready when its process starts, before it listens), and a pod being
deleted keeps serving while every proxy (in every cluster) stops sending it new connections (kube's
preStop sleep)."""
EGRESS = """\
apiVersion: egress.isthmus.io/v1alpha1
kind: ExternalService
metadata:
  name: outside
spec:
  targetIP: {target}
  sources:
  - service: {{name: checkout}}
    sourceIPClaimName: checkout-ip
  ports:
  - {{name: tcp, protocol: TCP, port: {port}}}
"""


@dataclass
class PathResult:
    """What one probe saw."""

    name: str
    sent: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    longest_outage: float = 0.0
    """Seconds from the first failure of a run of failures to the next success."""
    last_ok: bool = False
    """The last request succeeded: the path serves again after every disruption."""
    failures: list[tuple[float, str]] = field(default_factory=list)
    """(seconds since the traffic started, error) of the first failures: where in the drill they fell."""
    slowest: float = 0.0
    """Seconds the slowest request that succeeded took."""

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "failed": self.failed, "longest_outage_s": round(self.longest_outage, 2),
                "last_ok": self.last_ok, "slowest_s": round(self.slowest, 2), "errors": dict(self.errors.most_common(5)),
                "failures": [[round(t, 2), e] for t, e in self.failures]}


@dataclass
class DrillResult:
    paths: dict[str, PathResult]
    flows_opened: int = 0
    flows_broken: int = 0
    uninstalled: bool = False
    """The uninstall after the traffic left everything that is not Isthmus's in place."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds each disruption took (rollout restart, each drain)."""
    events: list[tuple[float, str]] = field(default_factory=list)
    """(seconds since the traffic started, what the drill did): the timeline the failures fall in."""
    started: str = ""
    """When the traffic started (UTC, ISO 8601): where the timeline sits in the clusterset's logs."""

    def misses(self) -> list[str]:
        """Where the drill missed the targets, in words (empty: every target met)."""
        out = [f"{name}: {self.paths[name].failed} of {self.paths[name].sent} requests failed "
               f"({', '.join(self.paths[name].errors) or '?'})"
               for name in ZERO_FAILURE_PATHS if name in self.paths and self.paths[name].failed]
        egress = self.paths.get("egress")
        if egress is not None and egress.longest_outage > EGRESS_RECOVERY:
            out.append(f"egress: new connections failed for {egress.longest_outage:.1f}s "
                       f"(target: succeed within {EGRESS_RECOVERY:.0f}s)")
        for name, r in self.paths.items():
            if r.sent == 0:
                out.append(f"{name}: no request was sent")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"paths": {n: r.as_dict() for n, r in self.paths.items()}, "flows_opened": self.flows_opened,
                "flows_broken": self.flows_broken, "phases_s": {k: round(v, 1) for k, v in self.phases.items()},
                "misses": self.misses(), "uninstalled": self.uninstalled,
                "events": [[round(t, 2), e] for t, e in self.events], "started": self.started}


class Probe(threading.Thread):
    """One path's bounded request loop, on a thread of its own that lives in the namespace the
    requests start from (runc mode: a node's; process mode: this one)."""

    def __init__(self, name: str, via: str | None, request: Callable[[], None], stop: threading.Event,
                 t0: float) -> None:
        super().__init__(name=f"drill probe {name}", daemon=True)
        self.result = PathResult(name)
        self.via, self.request, self.stop, self.t0 = via, request, stop, t0
        self.lock = threading.Lock()

    def run(self) -> None:
        if self.via is not None:
            from isthmus.runtime.netns import setns

            setns(self.via)
        down_since: float | None = None
        r = self.result
        while not self.stop.is_set() and r.sent < MAX_REQUESTS:
            t = time.monotonic()
            try:
                self.request()
            except (NotYet, StepFailed, OSError) as err:
                with self.lock:
                    r.sent += 1
                    r.failed += 1
                    r.errors[str(err)[:120]] += 1
                    r.last_ok = False
                    if len(r.failures) < TIMELINE:
                        r.failures.append((t - self.t0, str(err)[:80]))
                if down_since is None:
                    down_since = t
            else:
                with self.lock:
                    r.sent += 1
                    r.last_ok = True
                    r.slowest = max(r.slowest, time.monotonic() - t)
                if down_since is not None:
                    r.longest_outage = max(r.longest_outage, time.monotonic() - down_since)
                    down_since = None
            self.stop.wait(INTERVAL)
        if down_since is not None:
            r.longest_outage = max(r.longest_outage, time.monotonic() - down_since)


class EchoOutside:
    """An outside server: each connection first gets the peer address it came from (a JSON line),
    then every line it sends is echoed until it closes (the long-lived flows)."""

    def __init__(self, address: str, port: int) -> None:
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 600

            def handle(self) -> None:
                outer.connections += 1
                with contextlib.suppress(OSError):  # a client that goes away (a probe, a broken flow) ends it
                    self.wfile.write(json.dumps({"peer": self.client_address[0]}).encode() + b"\n")
                    for _ in range(100_000):  # bounded: a flow sends one line a second
                        line = self.rfile.readline()
                        if not line:
                            return
                        self.wfile.write(line)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.connections = 0
        self.server = Server((loopback(address), port), Handler, bind_and_activate=False)
        if VANTAGE.via is not None:
            self.server.socket.close()
            self.server.socket = VANTAGE.socket_from(address)
        self.server.server_bind()
        self.server.server_activate()
        self.thread = threading.Thread(target=self.server.serve_forever, name="drill outside server", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Flow:
    """A long-lived egress connection that sends a line each second and expects it back."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")
        self.broken: str | None = None

    def ping(self, i: int) -> None:
        if self.broken is not None:
            return
        try:
            self.sock.sendall(f"ping {i}\n".encode())
            if self.file.readline() != f"ping {i}\n".encode():
                self.broken = "echo lost"
        except OSError as err:
            self.broken = err.strerror or type(err).__name__

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Drill(Demo):
    """The drill's steps on the demo's plumbing (kubectl, `isthmus`, the vantage, the probes)."""

    def __init__(self, console: Console, state_dir: Path, clusters: int, runtime: str, nodes: int,
                 settle: float) -> None:
        super().__init__(console, state_dir, clusters, runtime, nodes)
        self.settle = settle
        self.stop = threading.Event()
        self.probes: list[Probe] = []
        self.flows: list[Flow] = []
        self.outside_server: EchoOutside | None = None
        self.node_netns: dict[str, list[str]] = {}
        """runc mode: cluster → its nodes' namespace paths (where clients of that cluster run)."""
        self.result: DrillResult | None = None
        self.phases: dict[str, float] = {}
        self.t0 = time.monotonic()
        self.started = ""
        self.events: list[tuple[float, str]] = []
        self.egress_source = ""
        self.forwarder = ""
        self.mcs_address = ""
        self.lb: tuple[str, list[int]] = ("", [])

    @property
    def target(self) -> Member:
        """The member the administrator works on."""
        return self.members[0]

    def mark(self, what: str) -> None:
        """A point of the timeline the failures are read against."""
        self.events.append((time.monotonic() - self.t0, what))

    def steps(self) -> list[Step]:
        return [
            Step("start a local clusterset with several nodes per cluster", self.step_up, name="up"),
            Step("run echo in c1 and c2, spread over nodes, with a PodDisruptionBudget", self.step_workloads,
                 name="workloads"),
            Step("export echo-vip with a ClusterSet IP", self.step_export_vip, name="export"),
            Step("expose echo through a pool and a MultiClusterService load balancer", self.step_expose,
                 name="expose"),
            Step("egress: an ExternalService toward an outside server", self.step_egress_setup, name="egress"),
            Step("another project's CRD and objects, to be left alone", self.step_bystanders, name="bystanders"),
            Step("start traffic on every path", self.step_traffic_start, name="traffic"),
            Step("kubectl rollout restart every Isthmus Deployment of c1", self.step_restart, name="restart"),
            Step("kubectl drain each node of c1 in turn", self.step_drain, name="drain"),
            Step("stop traffic and count what failed", self.step_traffic_stop, name="count"),
            Step("uninstall c1 and the broker as docs/deploy.md says", self.step_uninstall, name="uninstall"),
        ]

    # -- set-up

    def step_up(self) -> None:
        runtime = ["--runtime", self.runtime] if self.runtime != "process" else []
        nodes = ["--nodes", str(self.nodes)] if self.nodes > 1 else []
        self.isthmus("up", "--clusters", str(self.n), "--state-dir", str(self.state_dir), "--detach",
                     *runtime, *nodes, timeout=tour.UP_TIMEOUT + 60 * self.nodes, output=False)
        status = self.status()
        if not status.get("ready"):
            raise StepFailed("`isthmus status` says the clusterset is not ready")
        self.env["KUBECONFIG"] = str(status["kubeconfig"])
        self.broker = dict(status.get("broker") or {})
        network = status.get("network")
        if network:  # runc mode: clients run in the clusters' node namespaces (addresses are checked after this)
            for c in status["clusters"]:
                self.node_netns[c["name"]] = [f"/run/netns/{n}" for n in _node_namespaces(network, c["name"])]
            VANTAGE.use_namespaces(self.node_netns[status["clusters"][-1]["name"]][0], {})
        self.members = [Member(c["name"], c["context"], tour.parse_hostport(c["dns"]), c) for c in status["clusters"]]
        self.kubectl("--context", self.target.context, "get", "nodes", "-o", "wide")

    def via(self, m: Member) -> str | None:
        """Where a client of cluster `m` runs (runc: its last node's namespace; process: here)."""
        ns = self.node_netns.get(m.name)
        return ns[-1] if ns else None

    def step_workloads(self) -> None:
        pdb = self.state_dir / "drill-pdb.yaml"
        pdb.write_text(PDB.format(app="echo"))
        for m in self.members:
            self.kubectl("--context", m.context, "create", "namespace", NAMESPACE, quiet=True)
        for m in self.exporters:
            self.kubectl("--context", m.context, "apply", "-n", NAMESPACE, "-f", self.example("echo-deployment.yaml"),
                         "-f", str(pdb), quiet=True)
            self.kubectl("--context", m.context, "patch", "-n", NAMESPACE, "deployment", "echo", "--type=json",
                         "-p", GRACEFUL, quiet=True)
        for m in self.exporters:
            self.kubectl("--context", m.context, "-n", NAMESPACE, "rollout", "status", "deployment/echo",
                         "--timeout=90s", quiet=True)
        self.kubectl("--context", self.target.context, "get", "pods", "-n", NAMESPACE, "-o", "wide")

    def step_export_vip(self) -> None:
        for m in self.exporters:
            self.kubectl("--context", m.context, "apply", "-n", NAMESPACE, "-f",
                         self.example("serviceexport-vip.yaml"), quiet=True)

        def imported() -> str:
            vips: set[str] = set()
            for m in self.members:
                found = {i["metadata"]["name"]: i for i in self.items(m, "serviceimports")}
                imp = found.get(tour.VIP_SVC)
                clusters = sorted(c.get("cluster", "") for c in ((imp or {}).get("status") or {}).get("clusters") or [])
                if clusters != sorted(e.name for e in self.exporters):
                    raise NotYet(f"ServiceImport {tour.VIP_SVC} in {m.name} lists {clusters}")
                vips.update((imp or {}).get("spec", {}).get("ips") or [])
            if len(vips) != 1:
                raise NotYet(f"VIPs {sorted(vips)}")
            return str(vips.pop())

        self.vip = loopback(self.wait("echo-vip imported everywhere with one VIP", imported))
        self.note(f"ClusterSet IP {self.vip}")

    def step_expose(self) -> None:
        c = self.target.context
        lb = self.state_dir / "drill-lb.yaml"
        lb.write_text(LB_SERVICE.format(size=min(self.nodes, 2)))
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", str(lb), quiet=True)
        self.lb = self.wait("echo-public's pool to serve", lambda: self.lb_addresses("service", "echo-public"))[0]
        self.lb = (self.lb[0], self.lb[1][:1])
        b = self.broker_context
        for m in self.exporters:
            self.kubectl("--context", m.context, "apply", "-n", NAMESPACE, "-f", self.example("mcsvc/services.yaml"),
                         quiet=True)
        self.kubectl("--context", b, "create", "namespace", NAMESPACE, quiet=True, check=False)
        self.kubectl("--context", b, "apply", "-n", NAMESPACE, "-f", self.example("mcsvc/loadbalancer.yaml"),
                     quiet=True)
        obj = self.wait("MultiClusterService cart's load balancer to be Ready", lambda: self._mcs_ready("cart"))
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [{}]
        self.mcs_address = loopback(str(ingress[0].get("ip") or ""))
        want = {m.name for m in self.exporters}

        def both() -> None:
            clusters: Counter[str] = Counter()
            for _ in range(tour.REQUESTS):
                clusters[str(VANTAGE.call(_http_get, self.mcs_address, tour.HTTP_PORT).get("cluster"))] += 1
            if set(clusters) != want:
                raise NotYet(f"answers came from {dict(clusters)}")

        self.wait(f"HTTP through {self.mcs_address}:{tour.HTTP_PORT} answered by c1 and c2", both)
        self.note(f"pool {self.lb[0]}:{self.lb[1][0]} (c1), MultiClusterService cart {self.mcs_address}:{tour.HTTP_PORT}")

    def step_egress_setup(self) -> None:
        m = self.target
        c = m.context
        self._outside_addresses()
        self.outside_server = EchoOutside(self.outside, OUTSIDE_PORT)
        pdb = self.state_dir / "drill-pdb-checkout.yaml"
        pdb.write_text(PDB.format(app="checkout"))
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self.example("egress/apps.yaml"),
                     "-f", self._claims(), "-f", str(pdb), quiet=True)
        # Two replicas under a budget, as echo: the egress client is an application that stays up through a drain.
        self.kubectl("--context", c, "patch", "-n", NAMESPACE, "deployment", "checkout", "--type=json",
                     "-p", GRACEFUL, quiet=True)
        self.kubectl("--context", c, "scale", "-n", NAMESPACE, "deployment", "checkout", "--replicas=2", quiet=True)
        self.kubectl("--context", c, "-n", NAMESPACE, "rollout", "status", "deployment/checkout", "--timeout=90s",
                     quiet=True)
        manifest = self.state_dir / "drill-egress.yaml"
        manifest.write_text(EGRESS.format(target=self.outside, port=OUTSIDE_PORT))
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", str(manifest), quiet=True)

        def ready() -> dict[str, Any]:
            obj = self.get_json(m, "externalservice", "outside", "-n", NAMESPACE)
            cond = condition(obj, "Ready")
            if cond.get("status") != "True":
                raise NotYet(f"Ready is {cond.get('status')}: {cond.get('message')}")
            return obj

        self.wait("ExternalService outside to be Ready", ready)
        claims = {i["metadata"]["name"]: (i.get("status") or {}).get("sourceIP") for i in self.items(m, "sourceipclaims")}
        self.egress_source = str(claims.get("checkout-ip") or "")
        self.forwarder = loopback(self.get_json(m, "service", "outside", "-n", "external-services")["spec"]["clusterIP"])
        self.wait("a connection from checkout to arrive from its claimed address", self.egress_once)
        self.note(f"checkout → outside.external-services:{OUTSIDE_PORT} arrives from {self.egress_source}")

    def step_bystanders(self) -> None:
        crd = self.state_dir / "drill-other-crd.yaml"
        crd.write_text(OTHER_CRD)
        widget = self.state_dir / "drill-widget.yaml"
        widget.write_text(WIDGET)
        for ctx in (self.target.context, self.broker_context):
            self.kubectl("--context", ctx, "apply", "-f", str(crd), quiet=True)
            self.kubectl("--context", ctx, "wait", "--for=condition=Established", "crd/widgets.example.com",
                         "--timeout=30s", quiet=True)
            self.kubectl("--context", ctx, "apply", "-n", "default", "-f", str(widget), quiet=True)

    # -- the clients

    def _checkout_pods(self) -> list[tuple[str, str, str]]:
        """(pod IP, uid, node) of checkout's ready pods in c1, as the API has them now."""
        out = []
        for pod in self.items(self.target, "pods"):
            meta = pod["metadata"]
            if (meta.get("labels") or {}).get("app") == "checkout" and not meta.get("deletionTimestamp") \
                    and condition(pod, "Ready").get("status") == "True" and (pod.get("status") or {}).get("podIP"):
                out.append((str(pod["status"]["podIP"]), str(meta["uid"]), str(pod["spec"].get("nodeName") or "")))
        return out

    def _egress_socket(self) -> socket.socket:
        """A connection from a ready checkout pod of c1 to the forwarder."""
        pods = self._checkout_pods()
        if not pods:
            raise NotYet("no ready checkout pod in c1")
        ip, uid, node = pods[0]
        if VANTAGE.via is not None:
            from isthmus.local.network.plan import clusterset_id, pod_netns_name

            netns = pod_netns_name(clusterset_id(self.state_dir), self.target.name, uid, node)
            VANTAGE.sources[ip] = f"/run/netns/{netns}"
        return tour._from(ip, self.forwarder, OUTSIDE_PORT)

    def egress_once(self) -> None:
        try:
            with self._egress_socket() as s:
                s.settimeout(REQUEST_TIMEOUT)
                data = s.makefile("rb").readline()
        except OSError as err:
            raise NotYet(f"egress: {err.strerror or type(err).__name__}") from None
        try:
            peer = str(json.loads(data)["peer"])
        except (ValueError, KeyError):
            raise NotYet(f"egress: the outside server's answer was {data[:60]!r}") from None
        if peer != self.egress_source:
            raise NotYet(f"egress arrived from {peer}, not {self.egress_source}")

    def step_traffic_start(self) -> None:
        dns_server = self.target.dns
        name = f"{tour.VIP_SVC}.{NAMESPACE}.{tour.ZONE}"
        vip = self.vip

        def dns() -> None:
            _dns_with_retry(dns_server, name, vip)

        def http(address: str, port: int) -> Callable[[], None]:
            def get() -> None:
                _http_get(address, port)

            return get

        requests: list[tuple[str, str | None, Callable[[], None]]] = [
            ("dns", self.via(self.observer), dns),
            ("vip from c1", self.via(self.target), http(vip, tour.HTTP_PORT)),
            ("vip from the observer", self.via(self.observer), http(vip, tour.HTTP_PORT)),
            ("lb", self.via(self.observer), http(self.lb[0], self.lb[1][0])),
            ("mcs-lb", self.via(self.observer), http(self.mcs_address, tour.HTTP_PORT)),
            ("egress", None, self.egress_once),
        ]
        self.t0 = time.monotonic()
        self.started = datetime.now(UTC).isoformat(timespec="milliseconds")
        for name_, via, fn in requests:
            probe = Probe(name_, via, fn, self.stop, self.t0)
            self.probes.append(probe)
            probe.start()
        for _ in range(FLOWS):
            sock = self._egress_socket()
            sock.settimeout(3.0)
            flow = Flow(sock)
            flow.file.readline()  # the peer line
            self.flows.append(flow)
        threading.Thread(target=self._ping_flows, name="drill flows", daemon=True).start()
        time.sleep(self.settle)
        self._show_counts("before any disruption")

    def _ping_flows(self) -> None:
        for i in range(MAX_REQUESTS):
            if self.stop.wait(1.0):
                return
            for f in self.flows:
                f.ping(i)

    def _show_counts(self, when: str) -> None:
        table = self.table("path", "requests", "failed", "longest outage", "slowest")
        for p in self.probes:
            with p.lock:
                r = p.result
                table.add_row(r.name, str(r.sent), str(r.failed), f"{r.longest_outage:.1f}s", f"{r.slowest:.2f}s")
        self.note(f"traffic {when}:")
        self.print_table(table)

    # -- the disruptions

    def _isthmus_deployments(self) -> list[tuple[str, str]]:
        data = self.get_json(self.target, "deployments", "-A", "-l", "app.kubernetes.io/part-of=isthmus")
        return sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in data.get("items") or [])

    def _all_available(self) -> None:
        """Every Deployment of c1 (Isthmus's and the user's) has all its replicas updated and available."""
        for d in self.get_json(self.target, "deployments", "-A").get("items") or []:
            spec, st = d.get("spec") or {}, d.get("status") or {}
            want = int(spec.get("replicas", 1))
            if (int(st.get("updatedReplicas") or 0) < want or int(st.get("availableReplicas") or 0) < want
                    or int(st.get("replicas") or 0) > want):
                raise NotYet(f"deployment {d['metadata']['namespace']}/{d['metadata']['name']}: "
                             f"{st.get('availableReplicas', 0)}/{want} available, {st.get('replicas', 0)} in all")

    def step_restart(self) -> None:
        c = self.target.context
        t0 = time.monotonic()
        deployments = self._isthmus_deployments()
        self.mark("rollout restart")
        for ns, name in deployments:
            self.kubectl("--context", c, "-n", ns, "rollout", "restart", f"deployment/{name}", quiet=True)
        for ns, name in deployments:
            self.kubectl("--context", c, "-n", ns, "rollout", "status", f"deployment/{name}",
                         f"--timeout={ROLLOUT_TIMEOUT}s", quiet=True, timeout=ROLLOUT_TIMEOUT + 10)
            self.mark(f"{ns}/{name} rolled out")
        self.wait("every Deployment of c1 to be available again", self._all_available, timeout=ROLLOUT_TIMEOUT)
        self.mark("every Deployment available")
        self.phases["rollout restart"] = time.monotonic() - t0
        self.note(f"restarted {len(deployments)} Deployments: " + ", ".join(f"{ns}/{n}" for ns, n in deployments))
        time.sleep(self.settle)
        self._show_counts("after the restarts")

    def step_drain(self) -> None:
        c = self.target.context
        nodes = [n["metadata"]["name"] for n in self.get_json(self.target, "nodes").get("items") or []]
        if len(nodes) < 2:
            raise StepFailed(f"c1 has {len(nodes)} node(s): a drain needs another node to move the pods to")
        for node in nodes:
            t0 = time.monotonic()
            self.mark(f"drain {node}")
            self.kubectl("--context", c, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                         f"--timeout={DRAIN_TIMEOUT}s", quiet=True, timeout=DRAIN_TIMEOUT + 10)
            # The maintenance would happen here. Pods that cannot run elsewhere (one pool manager per node:
            # host ports) stay Pending until the node is back, as on any cluster of two nodes.
            self.mark(f"{node} drained")
            self.kubectl("--context", c, "uncordon", node, quiet=True)
            self.wait(f"every Deployment of c1 to be available again after {node}'s drain", self._all_available,
                      timeout=DRAIN_TIMEOUT)
            self.mark("every Deployment available")
            self.phases[f"drain {node}"] = time.monotonic() - t0
            time.sleep(self.settle)
            self._show_counts(f"after draining {node}")
        self.kubectl("--context", c, "get", "pods", "-A", "-o", "wide")

    def step_traffic_stop(self) -> None:
        self.stop.set()
        for p in self.probes:
            p.join(timeout=10)
        result = DrillResult({p.result.name: p.result for p in self.probes}, phases=dict(self.phases),
                             events=list(self.events), started=self.started)
        result.flows_opened = len(self.flows)
        result.flows_broken = sum(1 for f in self.flows if f.broken is not None)
        for f in self.flows:
            f.close()
        self.result = result
        table = self.table("path", "requests", "failed", "longest outage", "slowest", "errors")
        for r in result.paths.values():
            table.add_row(r.name, str(r.sent), str(r.failed), f"{r.longest_outage:.1f}s", f"{r.slowest:.2f}s",
                          escape("; ".join(f"{e} x{n}" for e, n in r.errors.most_common(2))))
        self.print_table(table)
        self.note(f"long-lived egress flows: {result.flows_broken} of {result.flows_opened} broken "
                  "(a flow on a gateway that moves may break; userspace mode fails closed)")
        for k, v in result.phases.items():
            self.note(f"{k}: {v:.1f}s")
        for miss in result.misses():  # reported, and the drill's exit code says so; the uninstall still runs
            self.console.print(f"   [bold red]target missed:[/bold red] {escape(miss)}", highlight=False, soft_wrap=True)
        for r in result.paths.values():
            if r.sent == 0:
                raise StepFailed(f"{r.name}: no request was sent (the probe never ran)")

    # -- uninstall

    def step_uninstall(self) -> None:
        """docs/deploy.md's uninstall, for c1 then the broker, from the manifests `up` installed (the
        local overlays of deploy/member and deploy/broker/controllers, and deploy/broker itself)."""
        from isthmus.kube.manifests import deploy_dir

        c, b = self.target.context, self.broker_context
        manifests, deploy = self.state_dir / "manifests", deploy_dir()

        def delete(ctx: str, *what: str) -> None:
            self.kubectl("--context", ctx, "delete", *what, "--ignore-not-found", "--wait=true", "--timeout=120s",
                         quiet=True, timeout=150)

        # A member: its egress objects while the operator runs, leave, then its manifests (`up`'s overlay).
        delete(c, "externalservices,sourceipclaims", "--all", "-A")
        delete(c, "sourceipclasses", "--all")
        broker = ["--broker-kubeconfig", self.env["KUBECONFIG"], "--broker-context", b]  # the broker's admin
        self.isthmus("leave", "--context", c, *broker, "--yes", quiet=True)
        delete(c, "-k", str(manifests / self.target.name))
        delete(c, "namespace", "external-services")
        # The broker, once every member has left (the others leave; their components stay installed).
        for m in self.members[1:]:
            self.isthmus("leave", "--context", m.context, *broker, "--yes", quiet=True)
        delete(b, "multiclusterservices", "--all", "-A")
        delete(b, "-k", str(deploy / "broker" / "webhook"))
        delete(b, "-k", str(manifests / "broker"))
        delete(b, "-k", str(deploy / "broker"))
        left = self.get_json(self.target, "deployments", "-A", "-l", "app.kubernetes.io/part-of=isthmus")
        if left.get("items"):
            raise StepFailed("Isthmus Deployments left in c1 after the uninstall: "
                             + ", ".join(d["metadata"]["name"] for d in left["items"]))
        missing = []
        for ctx, who in ((c, self.target.name), (b, "broker")):
            for what in (("crd", "widgets.example.com"), ("widget", "keep-me", "-n", "default")):
                if self.kubectl("--context", ctx, "get", *what, quiet=True, check=False).returncode != 0:
                    missing.append(f"{who}: {' '.join(what)}")
        for what in (("crd", "serviceexports.multicluster.x-k8s.io"),
                     ("serviceexport", tour.VIP_SVC, "-n", NAMESPACE),
                     ("service", tour.VIP_SVC, "-n", NAMESPACE), ("service", "echo-public", "-n", NAMESPACE),
                     ("deployment", "echo", "-n", NAMESPACE), ("deployment", "checkout", "-n", NAMESPACE)):
            if self.kubectl("--context", c, "get", *what, quiet=True, check=False).returncode != 0:
                missing.append(f"{self.target.name}: {' '.join(what)}")
        if missing:
            raise StepFailed("the uninstall took what was not Isthmus's: " + ", ".join(missing))
        self.note("c1 and the broker uninstalled; another project's CRD and its Widget, the user's Services and "
                  "Deployments and the ServiceExports (a shared CRD) are all still there")
        if self.result is not None:
            self.result.uninstalled = True

    def down(self) -> None:
        self.stop.set()
        if self.outside_server is not None:
            self.outside_server.close()
        super().down()


def _node_namespaces(network: dict[str, Any], cluster: str) -> list[str]:
    """The node namespaces of one cluster, node 1 first, from `isthmus status -o json`'s network
    section (node 1 is listed under the cluster's name, node k under its Node's name)."""
    from isthmus.local.plan import node_name

    nodes = network.get("nodes") or {}
    out = [str(nodes[cluster]["netns"])] if cluster in nodes else []
    k = 2
    while node_name(cluster, k) in nodes:
        out.append(str(nodes[node_name(cluster, k)]["netns"]))
        k += 1
    return out


def _http_get(address: str, port: int) -> dict[str, Any]:
    tour.inside()
    status, answer = tour._http_host(address, port, f"{address}:{port}", "/isthmus-drill", REQUEST_TIMEOUT)
    if answer is None:
        raise NotYet(f"HTTP {address}:{port} answered {status}")
    return answer


def _dns_with_retry(server: tuple[str, int], name: str, want: str) -> None:
    """One lookup as a stub resolver makes it: a query, and one more after a 1 s timeout."""
    last: Exception | None = None
    for _ in range(2):
        try:
            rcode, answers = tour._dns_query(server, name, "A")
        except NotYet as err:
            last = err
            continue
        if rcode != "NOERROR" or answers != [want]:
            raise NotYet(f"DNS {name}: {rcode} {answers}")
        return
    raise NotYet(str(last))


def run_drill(console: Console | None = None, *, state_dir: Path | None = None, clusters: int = 3, nodes: int = 2,
              runtime: str = "runc", keep: bool = False, settle: float = 3.0,
              only: tuple[str, ...] = ()) -> tuple[int, DrillResult | None]:
    """Run the drill on a fresh clusterset (stopped at the end, whatever happens): (exit code as
    run_demo's, the counts once traffic stopped, None if it never got there). `only`: the names of
    the steps to run (`up` always runs), for tests that need a part."""
    made: list[Drill] = []

    def make(c: Console, d: Path) -> Drill:
        made.append(Drill(c, d, clusters, runtime, nodes, settle))
        return made[0]

    def edit(steps: list[Step]) -> list[Step]:
        return [s for s in steps if not only or s.name in only or s.name == "up"]

    code = tour.run_demo(console, state_dir=state_dir, clusters=clusters, keep=keep, edit_steps=edit,
                         runtime=runtime, nodes=nodes, tour=make, title="Isthmus drill")
    result = made[0].result if made else None
    if code == 0 and result is not None and result.misses():
        code = 1  # every step ran, and a target was missed: the figures above say which
    return code, result
