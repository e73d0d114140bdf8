"""`isthmus demo`: the scripted tour of a local clusterset — the main job of Isthmus.

The tour drives only what a user has: `isthmus up/status/export/show/unexport/down`, `kubectl`
with the manifests of `examples/`, a DNS client and plain sockets. So what passes here is what a
user gets, and a failure names the step a user would have seen break. Every wait is a bounded
poll (controllers are eventually consistent; a blind sleep is either flaky or slow), every
address touched is checked to be in 127.0.0.0/8, and `isthmus down` runs whatever happens, so
nothing is left running behind a failed or interrupted tour.

The tour is a list of named steps (`Demo.steps`: a `Step` has a short name, its title and its
body), run in order by `run_demo`; a test picks steps by name (`only("up", "export")`) or edits
the list (`edit_steps`). A step builds on the ones before it (`up` first: it learns the clusters).

Why one module of about 1,100 lines: it is one tour, read top to bottom as the user sees it: the
steps share one `Demo`'s state in order (contexts, DNS addresses, the VIP), and the helpers above
them (DNS, HTTP, UDP and source-address probes, the outside server) exist only for these steps.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

__all__ = ["Step", "StepFailed", "run_demo"]

T = TypeVar("T")

NAMESPACE = "demo"
VIP_SVC = "echo-vip"
PLAIN_SVC = "echo"
HTTP_PORT = 80
UDP_PORT = 9090
REQUESTS = 20
ZONE = "svc.clusterset.local"
USE_CLUSTERSET_IP = "lighthouse.submariner.io/use-clusterset-ip"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")

UP_TIMEOUT = 240.0
"""`up` starts 2N+2 processes on a small machine; generous, but bounded."""
DOWN_TIMEOUT = 90.0
CMD_TIMEOUT = 60.0
WAIT = 30.0
"""Bound of each convergence wait after `up`; they normally take well under a second."""
MAX_SHOWN_LINES = 14


class StepFailed(Exception):
    """A step saw something other than what it waited for; the message says what it saw."""


class NotYet(Exception):
    """A probe's "not there yet", with what it saw, for the timeout message."""


@dataclass(frozen=True)
class Step:
    """One numbered step of the tour: a title (what a failure is reported under), its body, and a
    short name tests pick it by (`only`; "" for a step a test made up)."""

    title: str
    run: Callable[[], None]
    name: str = ""


def only(*names: str) -> Callable[[list[Step]], list[Step]]:
    """An `edit_steps` for tests: the tour cut to the named steps, in the tour's order. A step builds
    on the ones before it: name `up` first, and the steps a later one needs (`export` before
    `imports`)."""

    def pick(steps: list[Step]) -> list[Step]:
        known = {step.name for step in steps}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(f"no demo step named {', '.join(unknown)} (the steps: {', '.join(s.name for s in steps)})")
        return [step for step in steps if step.name in names]

    return pick


@dataclass(frozen=True)
class Member:
    """One cluster as `isthmus status -o json` describes it."""

    name: str
    context: str
    dns: tuple[str, int]
    raw: dict[str, Any] = field(compare=False, repr=False)


def examples_dir() -> Path:
    """The repository's `examples/` (the demo applies the same files a user would)."""
    for base in (Path(__file__).resolve().parents[3], Path.cwd()):
        if (base / "examples" / "echo-deployment.yaml").is_file():
            return base / "examples"
    raise StepFailed("cannot find examples/echo-deployment.yaml (run the demo from the Isthmus repository)")


class Vantage:
    """Where the demo's own packets start. Process mode: this machine's loopback (every 127.x is
    local, so the demo may also speak from a pod's address). runc mode: inside the clusterset's
    namespaces, which nothing routes to from the host: as a hostNetwork pod of one node (`via`),
    from a pod's own namespace when it speaks as that pod, from the fabric as an outside server.
    Every address it touches is checked to be in the range it may use: 127.0.0.0/8, or (runc)
    10.0.0.0/8, which exists only inside those namespaces."""

    def __init__(self) -> None:
        self.allowed = LOOPBACK
        self.where = "127.0.0.0/8"
        self.via: str | None = None
        """runc mode: the node namespace (path) the demo's clients run in; None: this namespace."""
        self.sources: dict[str, str] = {}
        """runc mode: address → the namespace (path) where a socket bound to it must be made."""

    def use_namespaces(self, via: str, sources: dict[str, str]) -> None:
        self.allowed, self.where, self.via = RUNC_NETWORK, "10.0.0.0/8 (the clusterset's namespaces)", via
        self.sources = dict(sources)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a client (blocking sockets) where the demo's packets start."""
        if self.via is None:
            return fn(*args)
        from isthmus.runtime.netns import call_in

        return call_in(self.via, fn, *args)

    def socket_from(self, src: str) -> socket.socket:
        """A TCP socket that will speak from `src` (a pod's address, an outside server's)."""
        netns_path = self.sources.get(src)
        if self.via is None or netns_path is None:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if self.via is not None:  # runc mode: an address nobody registered is never made up
                s.close()
                raise StepFailed(f"the demo has no namespace for {src}")
            return s
        from isthmus.runtime.netns import socket_in

        return socket_in(netns_path)


RUNC_NETWORK = ipaddress.ip_network("10.0.0.0/8")
VANTAGE = Vantage()
_HOST_NETNS = os.readlink("/proc/self/ns/net") if os.path.exists("/proc/self/ns/net") else ""


def inside() -> None:
    """Every client calls this before it sends: under runc, a client still in the host's namespace
    would send the clusterset's 10.x addresses along the host's default route, off this machine."""
    if VANTAGE.via is not None and os.readlink("/proc/thread-self/ns/net") == _HOST_NETNS:
        raise StepFailed("a client of the demo runs in the host's network namespace, not the clusterset's (a bug)")


def loopback(address: str) -> str:
    """The address itself if it is in the range the demo may use (see Vantage); never anything else."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise StepFailed(f"{address!r} is not an IP address") from None
    if ip not in VANTAGE.allowed:
        raise StepFailed(f"{address} is outside {VANTAGE.where}: the local clusterset must stay there")
    return address


def parse_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise StepFailed(f"cannot parse the address {text!r} (want HOST:PORT)")
    return loopback(host.strip("[]")), int(port)


def fqdn(svc: str) -> str:
    return f"{svc}.{NAMESPACE}.{ZONE}"


def poll(what: str, probe: Callable[[], T], timeout: float = WAIT, interval: float = 0.15) -> T:
    """`probe()` until it returns instead of raising NotYet; StepFailed with the last sighting after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return probe()
        except NotYet as seen:
            if time.monotonic() >= deadline:
                raise StepFailed(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {seen}") from None
        time.sleep(interval)


# --- probes: DNS and traffic ------------------------------------------------------------------------


def dns_query(server: tuple[str, int], name: str, rdtype: str) -> tuple[str, list[str]]:
    """(rcode text, answer rdata texts) of one UDP query to `server`."""
    return VANTAGE.call(_dns_query, server, name, rdtype)


def _dns_query(server: tuple[str, int], name: str, rdtype: str) -> tuple[str, list[str]]:
    inside()
    import dns.exception
    import dns.message
    import dns.query
    import dns.rcode

    query = dns.message.make_query(name, rdtype)
    try:
        reply = dns.query.udp(query, server[0], port=server[1], timeout=1.0)
    except (dns.exception.Timeout, OSError) as err:
        raise NotYet(f"no answer from {server[0]}:{server[1]} ({type(err).__name__})") from None
    answers = sorted(rd.to_text() for rrset in reply.answer for rd in rrset)
    return dns.rcode.to_text(reply.rcode()), answers


def http_get(ip: str, port: int) -> dict[str, Any]:
    """One request on a fresh connection (each connection is balanced on its own)."""
    status, answer = http_host(ip, port, f"{ip}:{port}", "/isthmus-demo")
    if answer is None:
        raise NotYet(f"HTTP {ip}:{port} answered {status}")
    return answer


def udp_echo(ip: str, port: int, timeout: float = 1.0) -> dict[str, Any]:
    """One datagram from a fresh socket (a new source port, so a new balancing decision)."""
    return VANTAGE.call(_udp_echo, ip, port, timeout)


def _udp_echo(ip: str, port: int, timeout: float) -> dict[str, Any]:
    inside()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.connect((loopback(ip), port))
            s.send(b"hello from isthmus demo")
            data = s.recv(65535)
        except OSError as err:
            raise NotYet(f"UDP {ip}:{port}: {err.strerror or type(err).__name__}") from None
    return _json_answer(data, f"UDP {ip}:{port}")


def http_host(ip: str, port: int, host: str, path: str) -> tuple[int, dict[str, Any] | None]:
    """One request with a Host header on a fresh connection: (status, JSON answer or None)."""
    return VANTAGE.call(_http_host, ip, port, host, path)


def _http_host(ip: str, port: int, host: str, path: str, timeout: float = 2.0) -> tuple[int, dict[str, Any] | None]:
    inside()
    conn = http.client.HTTPConnection(loopback(ip), port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Host": host, "Connection": "close"})
        resp = conn.getresponse()
        body = resp.read()
    except OSError as err:
        raise NotYet(f"HTTP {ip}:{port}: {err.strerror or type(err).__name__}") from None
    finally:
        conn.close()
    if resp.status != 200:
        return resp.status, None
    return resp.status, _json_answer(body, f"HTTP {ip}:{port}")


def tcp_refused(ip: str, port: int) -> bool:
    """Whether nothing accepts TCP on ip:port any more (refused or silent)."""
    return VANTAGE.call(_tcp_refused, ip, port)


def _tcp_refused(ip: str, port: int) -> bool:
    inside()
    try:
        with socket.create_connection((loopback(ip), port), timeout=0.5):
            return False
    except OSError:
        return True


def _json_answer(data: bytes, where: str) -> dict[str, Any]:
    try:
        answer = json.loads(data)
    except ValueError:
        raise NotYet(f"{where} answered something that is not the echo JSON: {data[:80]!r}") from None
    if not isinstance(answer, dict) or "cluster" not in answer:
        raise NotYet(f"{where} answered JSON without a cluster field: {data[:80]!r}")
    return answer


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


OUTSIDE_ADDRESS = "127.33.0.1"
"""The demo's outside server (127.33.0.0/16 is the plan's range for them)."""
OUTSIDE_OTHER = "127.33.0.2"
KNOWN_GAP = ("non-root components with NET_BIND_SERVICE and allowPrivilegeEscalation false lose the capability at exec "
             "and cannot bind ports below 1024 on a real runtime (kubernetes/kubernetes#56374); the manifests are fixed "
             "by the production-fitness issue")
"""What runc mode shows that process pods hid, met by the tour's port-80 flows until the manifests change."""
RUNC_OUTSIDE_ADDRESS = "10.33.0.1"
"""runc mode: the outside servers are on the fabric (10.33.0.0/16, docs/network.md)."""
RUNC_OUTSIDE_OTHER = "10.33.0.2"
OUTSIDE_PORT = 7000
EGRESS_MANIFEST = """\
apiVersion: egress.isthmus.io/v1alpha1
kind: ExternalService
metadata:
  name: outside
spec:
  targetIP: {target}
  sources:
  - service: {{name: checkout}}
    sourceIPClaimName: checkout-ip
  - service: {{name: billing}}
    sourceIPClaimName: billing-ip
  ports:
  - {{name: tcp, protocol: TCP, port: {port}}}
"""


class OutsideServer:
    """A server outside the clusters that answers each TCP connection with the peer address it saw."""

    def __init__(self, address: str, port: int) -> None:
        import socketserver
        import threading

        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer.connections += 1
                self.request.sendall(json.dumps({"peer": self.client_address[0]}).encode() + b"\n")

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.connections = 0
        self.server = Server((loopback(address), port), Handler, bind_and_activate=False)
        if VANTAGE.via is not None:  # runc mode: the server lives on the fabric, outside every cluster
            self.server.socket.close()
            self.server.socket = VANTAGE.socket_from(address)
        self.server.server_bind()
        self.server.server_activate()
        self.thread = threading.Thread(target=self.server.serve_forever, name="outside server", daemon=True)

    def __enter__(self) -> OutsideServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _from(src: str, ip: str, port: int) -> socket.socket:
    """A connection from `src` (a pod's address: every 127.x is local here, so the demo can speak as
    that pod, which is what its traffic looks like to the network; under runc the socket is made in
    that pod's own namespace)."""
    s = VANTAGE.socket_from(loopback(src))
    s.settimeout(3.0)
    try:
        s.bind((src, 0))
        s.connect((loopback(ip), port))
    except BaseException:
        s.close()
        raise
    return s


def outside_peer(src: str, ip: str, port: int) -> str:
    try:
        with _from(src, ip, port) as s:
            data = s.recv(4096)
    except OSError as err:
        raise NotYet(f"{src} → {ip}:{port}: {err.strerror or type(err).__name__}") from None
    try:
        return str(json.loads(data)["peer"])
    except (ValueError, KeyError):
        raise NotYet(f"{ip}:{port} answered {data[:80]!r}") from None


def refused_from(src: str, ip: str, port: int) -> bool:
    """Whether a connection from `src` is refused (reset, or closed before any answer)."""
    try:
        with _from(src, ip, port) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return not s.recv(4096)
    except OSError:
        return True


def outside_http(src: str, ip: str, port: int) -> dict[str, Any]:
    """An HTTP request from the outside server's address to a source IP (the way back in)."""
    try:
        with _from(src, ip, port) as s:
            s.sendall(f"GET /isthmus-demo HTTP/1.0\r\nHost: {ip}\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError as err:
        raise StepFailed(f"{src} → {ip}:{port}: {err.strerror or type(err).__name__}") from None
    return _json_answer(data.partition(b"\r\n\r\n")[2], f"HTTP {ip}:{port}")


# --- the tour ---------------------------------------------------------------------------------------


class Demo:
    """The steps, sharing what earlier ones learned (contexts, DNS addresses, the VIP)."""

    def __init__(self, console: Console, state_dir: Path, clusters: int, runtime: str = "process",
                 nodes: int = 1) -> None:
        self.console = console
        self.state_dir = state_dir
        self.n = clusters
        self.runtime = runtime
        self.nodes = nodes
        self.outside, self.outside_other = ((RUNC_OUTSIDE_ADDRESS, RUNC_OUTSIDE_OTHER) if runtime == "runc"
                                            else (OUTSIDE_ADDRESS, OUTSIDE_OTHER))
        self.gaps: list[str] = []
        """Known gaps the tour met and showed (runc mode: ports below 1024, see KNOWN_GAP)."""
        self.shell = ""
        """What a user types before `curl`/`dig` to run them where the demo's clients run (runc mode)."""
        VANTAGE.__init__()  # type: ignore[misc]  # a fresh tour starts on this machine's loopback
        self.cache_dir = state_dir / ".demo-kubectl-cache"
        self.env = dict(os.environ)
        self.env.pop("KUBECONFIG", None)  # set from `isthmus status` once the clusterset is up
        self.members: list[Member] = []
        self.vip = ""
        self.cluster_ips: dict[str, str] = {}
        self.broker: dict[str, Any] = {}
        self._examples: Path | None = None
        self.discard_state = False
        """The state dir is a temporary one, removed after the tour (no --keep)."""

    # -- plumbing

    @property
    def exporters(self) -> list[Member]:
        return self.members[:2]

    @property
    def observer(self) -> Member:
        """The cluster that exports nothing and still sees everything (c3 by default)."""
        return self.members[-1]

    def example(self, name: str) -> str:
        if self._examples is None:
            self._examples = examples_dir()
        path = self._examples / name
        try:
            return os.path.relpath(path)
        except ValueError:
            return str(path)

    def gap(self, text: str) -> None:
        """A known gap, met and shown, never silently passed: printed, and listed at the end."""
        self.gaps.append(text)
        self.console.print(f"   [bold yellow]known gap:[/bold yellow] {escape(text)}", highlight=False, soft_wrap=True)

    def known_bind_gap(self, message: str) -> bool:
        """Whether `message` is the one failure runc mode is known to show (KNOWN_GAP)."""
        return self.runtime == "runc" and "Permission denied" in message and ":80" in message

    def note(self, text: str) -> None:
        self.console.print(f"   {text}", highlight=False)

    def wait(self, what: str, probe: Callable[[], T], timeout: float = WAIT) -> T:
        """`poll`, then say how long the system took to get there (the number a user cares about)."""
        t0 = time.monotonic()
        result = poll(what, probe, timeout)
        self.console.print(f"   [dim]waited {time.monotonic() - t0:.2f}s for {escape(what)}[/dim]", highlight=False)
        return result

    def show(self, text: str, limit: int = MAX_SHOWN_LINES) -> None:
        lines = text.rstrip().splitlines()
        for line in lines[:limit]:
            self.console.print(f"     [dim]{escape(line.rstrip())}[/dim]", highlight=False, soft_wrap=True)
        if len(lines) > limit:
            self.console.print(f"     [dim]… {len(lines) - limit} more lines[/dim]", highlight=False)

    def table(self, *columns: str) -> Table:
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, pad_edge=False)
        for col in columns:
            table.add_column(col)
        return table

    def print_table(self, table: Table) -> None:
        self.console.print(Padding(table, (0, 0, 0, 3), expand=False))

    def _exec(
        self, argv: list[str], shown: list[str], *, quiet: bool, check: bool, timeout: float, output: bool
    ) -> subprocess.CompletedProcess[str]:
        if not quiet:
            self.console.print(f"   [bold]$[/bold] {escape(shlex.join(shown))}", highlight=False, soft_wrap=True)
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise StepFailed(f"`{shlex.join(shown)}` did not finish within {timeout:.0f}s") from None
        if check and p.returncode != 0:
            detail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-6:]
            raise StepFailed(f"`{shlex.join(shown)}` exited {p.returncode}:\n" + "\n".join(detail))
        if output and not quiet:
            self.show(p.stdout if p.stdout.strip() else p.stderr)
        return p

    def kubectl(self, *args: str, quiet: bool = False, check: bool = True, output: bool = True,
                timeout: float = CMD_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """kubectl as a user types it (KUBECONFIG is the merged one); a private cache keeps $HOME clean."""
        return self._exec(["kubectl", f"--cache-dir={self.cache_dir}", *args], ["kubectl", *args],
                          quiet=quiet, check=check, timeout=timeout, output=output)

    def isthmus(self, *args: str, quiet: bool = False, check: bool = True, output: bool = True,
                timeout: float = CMD_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """The CLI through this interpreter, so the demo tests the isthmus it ships with."""
        return self._exec([sys.executable, "-m", "isthmus", *args], ["isthmus", *args],
                          quiet=quiet, check=check, timeout=timeout, output=output)

    def get_json(self, member: Member, *args: str) -> dict[str, Any]:
        p = self.kubectl("--context", member.context, "get", *args, "-o", "json", quiet=True, check=False)
        if p.returncode != 0:
            raise NotYet(f"kubectl get {' '.join(args)} in {member.name}: {p.stderr.strip()[:200]}")
        data: dict[str, Any] = json.loads(p.stdout)
        return data

    def items(self, member: Member, resource: str) -> list[dict[str, Any]]:
        return list(self.get_json(member, resource, "-n", NAMESPACE).get("items") or [])

    # -- steps

    def steps(self) -> list[Step]:
        """The tour, in order; `name` is what tests pick a step by (`only`)."""
        return [
            Step("start a local clusterset (isthmus up)", self.step_up, name="up"),
            Step("run echo workloads in two clusters", self.step_workloads, name="workloads"),
            Step("export echo-vip with a ClusterSet IP and echo without", self.step_export, name="export"),
            Step("see the ServiceImports in every cluster", self.step_imports, name="imports"),
            Step("resolve the names through each cluster's DNS server", self.step_dns, name="dns"),
            Step("send traffic through the VIP: answers from both clusters", self.step_traffic, name="traffic"),
            Step("provoke conflicts: a port and the VIP setting", self.step_conflict, name="conflict"),
            Step("resolve the conflicts", self.step_resolve, name="resolve"),
            Step("MultiClusterService CrossCluster: c1 and c2 provide shop, only c3 consumes", self.step_mcs_cross, name="mcs-cross"),
            Step("MultiClusterService LoadBalancer: one address in front of c1 and c2", self.step_mcs_lb, name="mcs-lb"),
            Step("expose echo through an HAProxy pool: a Service of type LoadBalancer", self.step_lb_service, name="lb-service"),
            Step("route an Ingress (class edgelb) by host and path", self.step_lb_ingress, name="lb-ingress"),
            Step("share one pool between two Services", self.step_lb_shared, name="lb-shared"),
            Step("reload a pool under traffic: no failed request", self.step_lb_reload, name="lb-reload"),
            Step("egress: static source IPs toward an outside server (ExternalService)", self.step_egress, name="egress"),
            Step("unexport and see it all go", self.step_unexport, name="unexport"),
        ]

    def step_up(self) -> None:
        runtime = ["--runtime", self.runtime] if self.runtime != "process" else []
        nodes = ["--nodes", str(self.nodes)] if self.nodes > 1 else []
        p = self.isthmus("up", "--clusters", str(self.n), "--state-dir", str(self.state_dir), "--detach", *runtime,
                         *nodes, timeout=UP_TIMEOUT * self.nodes, output=False)
        lines = p.stdout.strip().splitlines()
        self.show("\n".join([ln for ln in lines if " ready in " in ln] or lines[-3:]))
        status = self.status()
        if not status.get("ready"):
            sick = [f"{c.get('name')}: {part}={state}" for c in status.get("clusters") or []
                    for part, state in (c.get("parts") or {}).items() if state != "ready"]
            raise StepFailed("`isthmus status` says the clusterset is not ready: " + (", ".join(sick) or "?"))
        self.env["KUBECONFIG"] = str(status["kubeconfig"])
        network = status.get("network")
        if network:  # runc mode: the demo's clients run inside the clusterset, as a host-network pod of the last cluster
            nodes = network["nodes"]
            last = status["clusters"][-1]["name"]
            VANTAGE.use_namespaces(f"/run/netns/{nodes[last]['netns']}", {})
            self.shell = f"isthmus shell --state-dir {self.state_dir} --node {last} -- "
        self.broker = dict(status.get("broker") or {})
        self.members = [Member(c["name"], c["context"], parse_hostport(c["dns"]), c) for c in status["clusters"]]
        if len(self.members) != self.n:
            raise StepFailed(f"asked for {self.n} clusters, `isthmus status` lists {len(self.members)}")
        broker = status.get("broker") or {}
        plan = self.table("cluster", "API server", "DNS", "pod CIDR", "service CIDR", "ClusterSet IP CIDR")
        plan.add_row(str(broker.get("name", "broker")), str(broker.get("server", "-")), "-", "-", "-",
                     f"{broker.get('clustersetIPCIDRRange', '-')} (range)")
        for m in self.members:
            plan.add_row(m.name, str(m.raw.get("server", "-")), f"{m.dns[0]}:{m.dns[1]}", str(m.raw.get("podCIDR")),
                         str(m.raw.get("serviceCIDR")), str(m.raw.get("clustersetIPCIDR")))
        self.note(f"address plan ([bold]isthmus status[/bold]): everything on {VANTAGE.where}")
        self.print_table(plan)
        self.note(f"kubectl: [bold]export KUBECONFIG={escape(str(status['kubeconfig']))}[/bold]")

    def status(self) -> dict[str, Any]:
        p = self.isthmus("status", "--state-dir", str(self.state_dir), "-o", "json", quiet=True)
        try:
            data: dict[str, Any] = json.loads(p.stdout)
        except ValueError:
            raise StepFailed(f"`isthmus status -o json` printed no JSON: {p.stdout[:200]!r}") from None
        return data

    def step_workloads(self) -> None:
        for m in self.members:
            self.kubectl("--context", m.context, "create", "namespace", NAMESPACE)
        manifest = self.example("echo-deployment.yaml")
        for m in self.exporters:
            self.kubectl("--context", m.context, "apply", "-n", NAMESPACE, "-f", manifest)
        for m in self.exporters:
            self.kubectl("--context", m.context, "-n", NAMESPACE, "rollout", "status", "deployment/echo",
                         "--timeout=60s")
        pods = self.table("cluster", "pod", "pod IP", "ready")
        for m in self.exporters:
            for pod in self.items(m, "pods"):
                ready = condition(pod, "Ready").get("status", "-")
                pods.add_row(m.name, pod["metadata"]["name"], (pod.get("status") or {}).get("podIP", "-"), ready)
            self.cluster_ips[m.name] = str(
                self.get_json(m, "service", PLAIN_SVC, "-n", NAMESPACE)["spec"].get("clusterIP"))
        self.note("echo pods answer HTTP on :8080 and UDP on :9090 with JSON naming their cluster")
        self.print_table(pods)

    def step_export(self) -> None:
        for m in self.exporters:
            self.kubectl("--context", m.context, "apply", "-n", NAMESPACE, "-f", self.example("serviceexport-vip.yaml"))
        for m in self.exporters:
            self.isthmus("export", PLAIN_SVC, "-n", NAMESPACE, "--context", m.context)
        self.note(f"[dim](`isthmus export {PLAIN_SVC}` = kubectl apply -f {self.example('serviceexport.yaml')})[/dim]")

        def exported() -> None:
            for m in self.exporters:
                found = {e["metadata"]["name"]: e for e in self.items(m, "serviceexports")}
                for svc in (VIP_SVC, PLAIN_SVC):
                    ready = condition(found.get(svc, {}), "Ready")
                    if ready.get("status") != "True":
                        raise NotYet(f"{m.name} {svc} Ready={ready.get('status')} {ready.get('reason', '')}")

        self.wait("both ServiceExports to be Ready in both clusters", exported)
        self.isthmus("show", "exports", "-n", NAMESPACE, "--context", self.exporters[0].context)

    def step_imports(self) -> None:
        want = sorted(m.name for m in self.exporters)

        def imported() -> str:
            vip = ""
            for m in self.members:
                found = {i["metadata"]["name"]: i for i in self.items(m, "serviceimports")}
                for svc in (VIP_SVC, PLAIN_SVC):
                    imp = found.get(svc)
                    if imp is None:
                        raise NotYet(f"no ServiceImport {svc} in {m.name}")
                    clusters = sorted(c.get("cluster", "") for c in (imp.get("status") or {}).get("clusters") or [])
                    if clusters != want:
                        raise NotYet(f"ServiceImport {svc} in {m.name} lists clusters {clusters}")
                    ips = list((imp.get("spec") or {}).get("ips") or [])
                    if svc == PLAIN_SVC and ips:
                        raise StepFailed(f"ServiceImport {svc} in {m.name} has a VIP {ips}; it was exported without")
                    if svc == VIP_SVC:
                        if not ips:
                            raise NotYet(f"ServiceImport {svc} in {m.name} has no VIP yet")
                        if vip and ips[0] != vip:
                            raise NotYet(f"ServiceImport {svc} has VIP {ips[0]} in {m.name} but {vip} elsewhere")
                        vip = ips[0]
            return vip

        self.vip = loopback(self.wait("the ServiceImports in every cluster, listing both exporters", imported))
        ctx = self.observer.context
        self.kubectl("--context", ctx, "get", "serviceimports", "-A")
        self.isthmus("show", "imports", "-n", NAMESPACE, "--context", ctx)
        where = ", ".join(m.name for m in self.members)
        self.note(f"imported in {where}; VIP of {VIP_SVC}: [bold]{self.vip}[/bold]")

    def step_dns(self) -> None:
        owner = {ip: name for name, ip in self.cluster_ips.items()}
        srv_name = f"_http._tcp.{fqdn(VIP_SVC)}"
        want_srv = f"{HTTP_PORT} {fqdn(VIP_SVC)}."
        table = self.table("DNS server", "query", "answer", "")

        def resolved() -> list[tuple[str, str, str, str]]:
            rows = []
            for m in self.members:
                rcode, vip_a = dns_query(m.dns, fqdn(VIP_SVC), "A")
                if vip_a != [self.vip]:
                    raise NotYet(f"{m.name}: A {fqdn(VIP_SVC)} → {rcode} {vip_a}")
                rcode, plain_a = dns_query(m.dns, fqdn(PLAIN_SVC), "A")
                if len(plain_a) != 1 or plain_a[0] not in owner:
                    raise NotYet(f"{m.name}: A {fqdn(PLAIN_SVC)} → {rcode} {plain_a}")
                rcode, srv = dns_query(m.dns, srv_name, "SRV")
                if not srv or not srv[0].endswith(want_srv):
                    raise NotYet(f"{m.name}: SRV {srv_name} → {rcode} {srv}")
                where = f"{m.name} {m.dns[0]}:{m.dns[1]}"
                rows += [
                    (where, f"{fqdn(VIP_SVC)} A", vip_a[0], "the VIP"),
                    ("", f"{fqdn(PLAIN_SVC)} A", plain_a[0], f"ClusterIP of {owner[plain_a[0]]}"),
                    ("", f"{srv_name} SRV", srv[0], ""),
                ]
            return rows

        for row in self.wait("the answers of every cluster's DNS server", resolved):
            table.add_row(*row)
        self.print_table(table)
        d = self.observer.dns
        self.note(f"[dim]try it: {escape(self.shell)}dig @{d[0]} -p {d[1]} {fqdn(VIP_SVC)}[/dim]")

    def _batch(self, send: Callable[[], dict[str, Any]]) -> tuple[Counter[str], Counter[str], dict[str, Any]]:
        clusters: Counter[str] = Counter()
        pods: Counter[str] = Counter()
        sample: dict[str, Any] = {}
        for _ in range(REQUESTS):
            answer = send()
            clusters[str(answer["cluster"])] += 1
            pods[str(answer.get("pod"))] += 1
            sample = answer
        return clusters, pods, sample

    def step_traffic(self) -> None:
        want = {m.name for m in self.exporters}
        results: list[tuple[str, str, Counter[str], Counter[str], dict[str, Any]]] = []
        for proto, port, send in (("HTTP/TCP", HTTP_PORT, lambda: http_get(self.vip, HTTP_PORT)),
                                  ("UDP", UDP_PORT, lambda: udp_echo(self.vip, UDP_PORT))):

            def split(send: Callable[[], dict[str, Any]] = send) -> tuple[Counter[str], Counter[str], dict[str, Any]]:
                clusters, pods, sample = self._batch(send)
                if set(clusters) != want:
                    raise NotYet(f"{REQUESTS} answers came from {dict(clusters)}")
                return clusters, pods, sample

            clusters, pods, sample = self.wait(f"{proto} answers through {self.vip}:{port} from both clusters", split)
            results.append((proto, f"{self.vip}:{port}", clusters, pods, sample))
        names = sorted(want)
        table = self.table("traffic", "to", *(f"from {n}" for n in names), "pods that answered")
        for proto, target, clusters, pods, _ in results:
            table.add_row(f"{REQUESTS} {proto}", target, *(str(clusters[n]) for n in names), str(len(pods)))
        self.print_table(table)
        sample = results[0][4]
        shown = {k: sample.get(k) for k in ("pod", "namespace", "cluster", "client", "method", "path")}
        self.note(f"one HTTP answer: [dim]{escape(json.dumps(shown))}[/dim]")
        self.note(f"[dim]try it: {escape(self.shell)}curl http://{self.vip}:{HTTP_PORT}/[/dim]")

    def _conflicts(self) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for m in self.exporters:
            for e in self.items(m, "serviceexports"):
                out[(m.name, e["metadata"]["name"])] = condition(e, "Conflict")
        return out

    def step_conflict(self) -> None:
        second = self.exporters[1]
        port_patch = json.dumps([{"op": "replace", "path": "/spec/ports/0/port", "value": 8080}])
        self.kubectl("--context", second.context, "-n", NAMESPACE, "patch", "service", PLAIN_SVC,
                     "--type=json", "-p", port_patch)
        self.isthmus("export", VIP_SVC, "-n", NAMESPACE, "--use-clusterset-ip=false", "--context", second.context)
        expect = {PLAIN_SVC: "PortConflict", VIP_SVC: "ClusterSetIPEnablementConflict"}

        def conflicted() -> None:
            seen = self._conflicts()
            for m in self.exporters:
                for svc, reason in expect.items():
                    cond = seen.get((m.name, svc), {})
                    if cond.get("status") != "True" or reason not in str(cond.get("reason", "")):
                        raise NotYet(f"{m.name} {svc} Conflict={cond.get('status')} {cond.get('reason', '')}")

        self.wait("the Conflict condition on both clusters' ServiceExports", conflicted)
        self.note(f"{second.name}'s http port is now 8080 and its {VIP_SVC} export says no VIP; "
                  "every exporter is told (the oldest export wins, nothing else changes):")
        for m in self.exporters:
            self.isthmus("show", "exports", "-n", NAMESPACE, "--context", m.context)

    def step_resolve(self) -> None:
        second = self.exporters[1]
        port_patch = json.dumps([{"op": "replace", "path": "/spec/ports/0/port", "value": HTTP_PORT}])
        self.kubectl("--context", second.context, "-n", NAMESPACE, "patch", "service", PLAIN_SVC,
                     "--type=json", "-p", port_patch)
        self.isthmus("export", VIP_SVC, "-n", NAMESPACE, "--use-clusterset-ip=true", "--context", second.context)

        def cleared() -> None:
            for (name, svc), cond in self._conflicts().items():
                if cond.get("status") != "False":
                    raise NotYet(f"{name} {svc} Conflict={cond.get('status')} {cond.get('reason', '')}")

        self.wait("every Conflict condition to clear", cleared)
        self.isthmus("show", "exports", "-n", NAMESPACE, "--context", second.context)

    def step_unexport(self) -> None:
        for svc in (VIP_SVC, PLAIN_SVC):
            for m in self.exporters:
                self.isthmus("unexport", svc, "-n", NAMESPACE, "--context", m.context)
        t0 = time.monotonic()
        seen: list[tuple[str, str, float]] = []

        def no_imports() -> None:
            for m in self.members:
                left = [i["metadata"]["name"] for i in self.items(m, "serviceimports")]
                if left:
                    raise NotYet(f"ServiceImports {left} still in {m.name}")

        everywhere = ", ".join(m.name for m in self.members)
        poll("the ServiceImports to go from every cluster", no_imports)
        seen.append(("ServiceImports echo, echo-vip", everywhere, time.monotonic() - t0))

        def nxdomain() -> None:
            for m in self.members:
                for svc in (VIP_SVC, PLAIN_SVC):
                    rcode, answers = dns_query(m.dns, fqdn(svc), "A")
                    if rcode != "NXDOMAIN":
                        raise NotYet(f"{m.name}: A {fqdn(svc)} → {rcode} {answers}")

        poll("NXDOMAIN from every cluster's DNS server", nxdomain)
        seen.append(("DNS names (now NXDOMAIN)", everywhere, time.monotonic() - t0))

        def vip_silent() -> None:
            if not tcp_refused(self.vip, HTTP_PORT):
                raise NotYet(f"{self.vip}:{HTTP_PORT} still accepts TCP")
            try:
                answer = udp_echo(self.vip, UDP_PORT, timeout=0.3)
            except NotYet:
                return
            raise NotYet(f"{self.vip}:{UDP_PORT} still answers UDP (from {answer.get('cluster')})")

        poll(f"the VIP {self.vip} to stop answering", vip_silent)
        seen.append((f"VIP {self.vip} (TCP :{HTTP_PORT}, UDP :{UDP_PORT})", "-", time.monotonic() - t0))
        self.kubectl("--context", self.observer.context, "get", "serviceimports", "-A")
        table = self.table("gone", "from", "after the last unexport")
        for what, where, after in seen:
            table.add_row(what, where, f"{after:.2f}s")
        self.print_table(table)

    # -- exposure (Karmada's MultiClusterService on the broker)

    @property
    def broker_context(self) -> str:
        return str(self.broker.get("context") or "broker")

    def mcs(self, name: str) -> dict[str, Any]:
        p = self.kubectl("--context", self.broker_context, "get", "mcs", name, "-n", NAMESPACE, "-o", "json",
                         quiet=True, check=False)
        if p.returncode != 0:
            raise NotYet(f"MultiClusterService {name}: {p.stderr.strip()[:200]}")
        data: dict[str, Any] = json.loads(p.stdout)
        return data

    def _mcs_ready(self, name: str) -> dict[str, Any]:
        obj = self.mcs(name)
        ready = condition(obj, "Ready")
        if ready.get("status") != "True":
            raise NotYet(f"MultiClusterService {name} Ready={ready.get('status')}: {ready.get('message', '')}")
        return obj

    def step_mcs_cross(self) -> None:
        b = self.broker_context
        for m in self.exporters:
            self.kubectl("--context", m.context, "apply", "-n", NAMESPACE, "-f", self.example("mcsvc/services.yaml"))
        self.kubectl("--context", b, "create", "namespace", NAMESPACE, quiet=True, check=False)
        self.kubectl("--context", b, "apply", "-n", NAMESPACE, "-f", self.example("mcsvc/crosscluster.yaml"))
        self.wait("MultiClusterService shop to be Ready", lambda: self._mcs_ready("shop"))
        self.kubectl("--context", b, "get", "mcs", "-n", NAMESPACE)
        consumer = self.observer

        def placed() -> str:
            for m in self.members:
                names = {i["metadata"]["name"]: i for i in self.items(m, "serviceimports")}
                if (m is consumer) != ("shop" in names):
                    raise NotYet(f"{m.name} {'lacks' if m is consumer else 'has'} ServiceImport shop")
            imp = {i["metadata"]["name"]: i for i in self.items(consumer, "serviceimports")}["shop"]
            ips = (imp.get("spec") or {}).get("ips") or []
            ports = [p.get("port") for p in (imp.get("spec") or {}).get("ports") or []]
            if not ips or ports != [HTTP_PORT]:
                raise NotYet(f"ServiceImport shop in {consumer.name}: ips {ips}, ports {ports}")
            return str(ips[0])

        vip = loopback(self.wait(f"shop imported in {consumer.name} only, port {HTTP_PORT} only", placed))
        table = self.table("cluster", "role", "ServiceImport shop", "DNS A shop.demo", "")

        def answers() -> list[tuple[str, str, str, str, str]]:
            rows = []
            for m in self.members:
                rcode, a = dns_query(m.dns, fqdn("shop"), "A")
                want = (["NOERROR"], [vip]) if m is consumer else (["NXDOMAIN"], [])
                if ([rcode], a) != want:
                    raise NotYet(f"{m.name}: A {fqdn('shop')} → {rcode} {a}")
                role = "consumer" if m is consumer else "provider"
                rows.append((m.name, role, "yes" if m is consumer else "no", a[0] if a else rcode, ""))
            return rows

        for row in self.wait("each cluster's DNS server to answer as its role says", answers):
            table.add_row(*row)
        self.print_table(table)
        want = {m.name for m in self.exporters}

        def both() -> Counter[str]:
            clusters, _, _ = self._batch(lambda: http_get(vip, HTTP_PORT))
            if set(clusters) != want:
                raise NotYet(f"{REQUESTS} answers came from {dict(clusters)}")
            return clusters

        clusters = self.wait(f"HTTP through {vip}:{HTTP_PORT} from {consumer.name}'s proxy, answered by c1 and c2",
                             both)
        self.note(f"{REQUESTS} requests to {vip}:{HTTP_PORT}: " + ", ".join(f"{n} from {c}" for c, n in
                                                                              sorted(clusters.items())))
        self.isthmus("show", "mcs", "-n", NAMESPACE, "--context", b)

    def step_mcs_lb(self) -> None:
        b = self.broker_context
        self.kubectl("--context", b, "apply", "-n", NAMESPACE, "-f", self.example("mcsvc/loadbalancer.yaml"))
        # Port 80 under runc too: the broker's pool manager runs HAProxy as 65532 with the image's file
        # capability (issue 43, defect 2; docs/lb.md#ports-below-1024), no longer a known gap.
        obj = self.wait("MultiClusterService cart's load balancer to be Ready", lambda: self._mcs_ready("cart"))
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [{}]
        address = loopback(str(ingress[0].get("ip") or ""))
        self.kubectl("--context", b, "get", "mcs", "cart", "-n", NAMESPACE)
        want = {m.name for m in self.exporters}

        def both() -> tuple[Counter[str], Counter[str], dict[str, Any]]:
            clusters, pods, sample = self._batch(lambda: http_get(address, HTTP_PORT))
            if set(clusters) != want:
                raise NotYet(f"{REQUESTS} answers came from {dict(clusters)}")
            return clusters, pods, sample

        clusters, pods, _ = self.wait(f"HTTP through {address}:{HTTP_PORT}, answered by pods of c1 and c2", both)
        table = self.table("traffic", "to", *(f"from {n}" for n in sorted(want)), "pods that answered")
        table.add_row(f"{REQUESTS} HTTP", f"{address}:{HTTP_PORT}", *(str(clusters[n]) for n in sorted(want)),
                      str(len(pods)))
        self.print_table(table)
        self.note(f"the broker's HAProxy pool {obj['metadata']['namespace']}/cart → LoadBalancerPool "
                  f"mcs--{NAMESPACE}--cart; its backends are the pod IPs of both clusters")
        self.note(f"[dim]try it: {escape(self.shell)}curl http://{address}/[/dim]")
        self.kubectl("--context", b, "delete", "mcs", "shop", "cart", "-n", NAMESPACE)

        def cleaned() -> None:
            if any(i["metadata"]["name"] == "shop" for i in self.items(self.observer, "serviceimports")):
                raise NotYet(f"ServiceImport shop still in {self.observer.name}")
            for m in self.exporters:
                if any(e["metadata"]["name"] == "shop" for e in self.items(m, "serviceexports")):
                    raise NotYet(f"ServiceExport shop still in {m.name}")
            if not tcp_refused(address, HTTP_PORT):
                raise NotYet(f"{address}:{HTTP_PORT} still accepts TCP")

        self.wait("what both objects made to go (exports, import, load balancer)", cleaned)

    # -- egress (ExternalService)

    def _claims(self) -> str:
        """The examples' claims; under runc the pinned address moves with the plan (127.32.i.x → 10.32.i.x)."""
        if self.runtime != "runc":
            return self.example("egress/claims.yaml")
        path = self.state_dir / "demo-claims.yaml"
        path.write_text((examples_dir() / "egress" / "claims.yaml").read_text().replace("sourceIP: 127.32.", "sourceIP: 10.32."))
        return str(path)

    def _outside_addresses(self) -> None:
        """runc mode: the outside server's addresses are the fabric's (outside every cluster)."""
        if VANTAGE.via is None:
            return
        from isthmus.local.network import fabric
        from isthmus.local.network.plan import fabric_plan

        fp = fabric_plan(self.state_dir, self.n)
        for address in (self.outside, self.outside_other):
            fabric.add_outside_address(fp, address)
            VANTAGE.sources[address] = fp.netns_path

    def _pod_sources(self, m: Member, apps: tuple[str, ...]) -> None:
        """runc mode: speaking as a pod means a socket in that pod's own namespace."""
        if VANTAGE.via is None:
            return
        from isthmus.local.network.plan import clusterset_id, pod_netns_name

        cs = clusterset_id(self.state_dir)
        for pod in self.items(m, "pods"):
            meta, ip = pod["metadata"], (pod.get("status") or {}).get("podIP")
            if ip and (meta.get("labels") or {}).get("app") in apps:
                netns = pod_netns_name(cs, m.name, meta["uid"], (pod.get("spec") or {}).get("nodeName"))
                VANTAGE.sources[ip] = f"/run/netns/{netns}"

    def _egress_manifest(self) -> str:
        """The demo's ExternalService: the examples' sources, toward the demo's own outside server."""
        path = self.state_dir / "demo-egress.yaml"
        path.write_text(EGRESS_MANIFEST.format(target=self.outside, port=OUTSIDE_PORT))
        return str(path)

    def step_egress(self) -> None:
        m = self.lb_cluster
        c = m.context
        self._outside_addresses()
        with OutsideServer(self.outside, OUTSIDE_PORT) as outside:
            self.note(f"an outside server on {self.outside}:{OUTSIDE_PORT} answers each connection with the "
                      "address it came from")
            self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self.example("egress/apps.yaml"),
                         "-f", self._claims(), quiet=True)
            for d in ("checkout", "billing", "other"):
                self.kubectl("--context", c, "-n", NAMESPACE, "rollout", "status", f"deployment/{d}",
                             "--timeout=60s", quiet=True)
            self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self._egress_manifest())

            def ready() -> dict[str, Any]:
                obj = self.get_json(m, "externalservice", "outside", "-n", NAMESPACE)
                cond = condition(obj, "Ready")
                if cond.get("status") != "True" and not self.known_bind_gap(str(cond.get("message"))):
                    raise NotYet(f"Ready is {cond.get('status')}: {cond.get('message')}")
                return obj

            obj = self.wait("ExternalService outside to be Ready", ready)
            ingress_gap = condition(obj, "Ready").get("status") != "True"
            if ingress_gap:
                self.gap(f"ExternalService outside is not Ready: {condition(obj, 'Ready').get('message')} — "
                         f"{KNOWN_GAP}; the way out is shown, the way back (sourceIP:{HTTP_PORT}) is not")
            self.kubectl("--context", c, "get", "sourceipclaims,externalservices", "-n", NAMESPACE)
            claims = {i["metadata"]["name"]: (i.get("status") or {}).get("sourceIP")
                      for i in self.items(m, "sourceipclaims")}
            forwarder = self.get_json(m, "service", "outside", "-n", "external-services")["spec"]["clusterIP"]
            pods = {i["metadata"]["labels"]["app"]: i["status"]["podIP"] for i in self.items(m, "pods")
                    if (i["metadata"].get("labels") or {}).get("app") in ("checkout", "billing", "other")
                    and (i.get("status") or {}).get("podIP")}
            self._pod_sources(m, ("checkout", "billing", "other"))
            table = self.table("from pod of", "pod address", "to", "the outside server saw")
            for app, claim in (("checkout", "checkout-ip"), ("billing", "billing-ip")):
                want = claims.get(claim)

                def seen(src: str = pods[app], want: str | None = want) -> str:
                    peer = outside_peer(src, forwarder, OUTSIDE_PORT)
                    if peer != want:
                        raise NotYet(f"the outside server saw {peer}, not the claimed {want}")
                    return peer

                table.add_row(app, pods[app], f"outside.external-services:{OUTSIDE_PORT}",
                              self.wait(f"{app}'s connection to arrive from {want}", seen))
            if not refused_from(pods["other"], forwarder, OUTSIDE_PORT):
                raise StepFailed("a pod of `other` (not a source) was let through the forwarder")
            table.add_row("other", pods["other"], f"outside.external-services:{OUTSIDE_PORT}", "(refused)")
            self.print_table(table)
            if ingress_gap:
                self.note(f"{outside.connections} connections reached the outside server, each from a claimed address")
                return self._egress_cleanup(m, c)
            back = outside_http(self.outside, str(claims["checkout-ip"]), HTTP_PORT)
            if not str(back.get("pod", "")).startswith("checkout"):
                raise StepFailed(f"{claims['checkout-ip']}:{HTTP_PORT} was answered by {back.get('pod')}, not checkout")
            if not refused_from(self.outside_other, str(claims["checkout-ip"]), HTTP_PORT):
                raise StepFailed(f"{self.outside_other} (not the target) reached {claims['checkout-ip']}:{HTTP_PORT}")
            self.note(f"back: the outside server reached {claims['checkout-ip']}:{HTTP_PORT} → pod {back.get('pod')}; "
                      f"{self.outside_other} was refused (only targetIP may connect back)")
            self.note(f"{outside.connections} connections reached the outside server, each from a claimed address")
        self._egress_cleanup(m, c)

    def _egress_cleanup(self, m: Member, c: str) -> None:
        self.kubectl("--context", c, "delete", "-n", NAMESPACE, "externalservice", "outside", quiet=True)
        self.kubectl("--context", c, "delete", "-n", NAMESPACE, "sourceipclaims", "--all", quiet=True)

        def freed() -> None:
            left = [i["metadata"]["name"] for i in self.get_json(m, "sourceips").get("items") or []]
            if left:
                raise NotYet(f"SourceIPs {', '.join(left)} still exist")

        self.wait("the claims' addresses to return to the class", freed)

    # -- load balancing (dklb on HAProxy pools)

    @property
    def lb_cluster(self) -> Member:
        return self.members[0]

    def lb_addresses(self, kind: str, name: str) -> list[tuple[str, list[int]]]:
        """(address, ports) of `status.loadBalancer.ingress`, once set (NotYet before)."""
        obj = self.get_json(self.lb_cluster, kind, name, "-n", NAMESPACE)
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        if not ingress:
            raise NotYet(f"{kind} {name} has no load-balancer address yet")
        return [(loopback(e.get("ip") or ""), [int(p["port"]) for p in e.get("ports") or [] if not p.get("error")])
                for e in ingress]

    def _get(self, address: str, port: int) -> dict[str, Any]:
        return self.wait(f"HTTP through {address}:{port}", lambda: http_get(address, port))

    def _served(self, service: str) -> None:
        address, ports = self.wait(f"{service} to be served", lambda: self.lb_addresses("service", service))[0]
        self._get(address, ports[0])

    def step_lb_service(self) -> None:
        c = self.lb_cluster.context
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self.example("lb/phase2-public-tcp.yaml"))
        found = self.wait("echo-public's pool to serve", lambda: self.lb_addresses("service", "echo-public"))
        self.kubectl("--context", c, "get", "service", "echo-public", "-n", NAMESPACE)
        table = self.table("address", "port", "answered by pod")
        for address, ports in found:
            for port in ports:
                table.add_row(address, str(port), str(self._get(address, port).get("pod")))
        self.note("the pool listens on the cluster's edge addresses (private, then public); its backends are the "
                  "node at the Service's NodePort")
        self.print_table(table)
        self.isthmus("show", "pools", "--context", c)

    def step_lb_ingress(self) -> None:
        c = self.lb_cluster.context
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self.example("lb/web.yaml"))
        for d in ("web-a", "web-b"):
            self.kubectl("--context", c, "-n", NAMESPACE, "rollout", "status", f"deployment/{d}", "--timeout=60s",
                         quiet=True)
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self.example("lb/phase4-public-http.yaml"))
        address, ports = self.wait("the site Ingress to be served", lambda: self.lb_addresses("ingress", "site"))[0]
        port = ports[0]
        cases = [("a.example.com", "/", "web-a"), ("b.example.com", "/v2/x", "web-b"),
                 ("b.example.com", "/v2x", "web-a"), ("b.example.com", "/healthz", "web-b"),
                 ("other.example", "/", "web-a")]  # fmt: skip
        table = self.table("host", "path", "answered by", "expected")
        for host, path, want in cases:
            def routed(h: str = host, p: str = path, w: str = want) -> str:
                status, answer = http_host(address, port, h, p)
                pod = str((answer or {}).get("pod", f"HTTP {status}"))
                if not pod.startswith(w):
                    raise NotYet(f"{h}{p} answered by {pod}, not {w}")
                return pod

            table.add_row(host, path, self.wait(f"{host}{path} → {want}", routed), want)
        self.note(f"one HTTP frontend on {address}:{port}; host first, longer paths first, Prefix on path segments")
        self.print_table(table)

    def step_lb_shared(self) -> None:
        c = self.lb_cluster.context
        self.kubectl("--context", c, "apply", "-n", NAMESPACE, "-f", self.example("lb/shared-pool.yaml"))
        for name in ("shared-one", "shared-two"):
            self._served(name)

        def one_pool() -> list[str]:
            pool = self.get_json(self.lb_cluster, "loadbalancerpool", "demo-shared")
            names = sorted(f["name"] for f in pool["spec"]["haproxy"]["frontends"])
            if len(names) != 2:
                raise NotYet(f"pool demo-shared has frontends {names}")
            return names

        names = self.wait("both frontends in pool demo-shared", one_pool)
        self.note(f"pool demo-shared holds {', '.join(names)}: each Service owns only its own parts")
        self.isthmus("show", "loadbalancers", "-n", NAMESPACE, "--context", c)

    def step_lb_reload(self) -> None:
        import threading

        c = self.lb_cluster.context
        address, ports = self.lb_addresses("ingress", "site")[0]
        stats = {"ok": 0, "failed": 0}
        errors: list[str] = []
        stop = threading.Event()

        def load() -> None:  # keep-alive requests on one connection, bounded
            inside()
            conn = http.client.HTTPConnection(loopback(address), ports[0], timeout=5.0)
            for _ in range(200_000):
                if stop.is_set():
                    break
                try:
                    conn.request("GET", "/", headers={"Host": "a.example.com"})
                    resp = conn.getresponse()
                    resp.read()
                    stats["ok" if resp.status == 200 else "failed"] += 1
                    if resp.status != 200:
                        errors.append(f"HTTP {resp.status}")
                except (OSError, http.client.HTTPException) as e:
                    stats["failed"] += 1
                    errors.append(type(e).__name__)
                    conn.close()
            conn.close()

        thread = threading.Thread(target=VANTAGE.call, args=(load,), daemon=True)  # where the demo's clients run
        thread.start()
        edits = 5
        try:
            for i in range(edits):
                patch = json.dumps([{"op": "add", "path": "/spec/rules/0/http/paths/-", "value": {
                    "path": f"/edit-{i}", "pathType": "Exact",
                    "backend": {"service": {"name": "web-b", "port": {"number": 80}}}}}])
                self.kubectl("--context", c, "-n", NAMESPACE, "patch", "ingress", "site", "--type=json",
                             "-p", patch, quiet=True)

                def serving(p: str = f"/edit-{i}") -> None:
                    status, answer = http_host(address, ports[0], "a.example.com", p)
                    if status != 200 or not str((answer or {}).get("pod", "")).startswith("web-b"):
                        raise NotYet(f"{p} answered {status}")

                self.wait(f"the new rule /edit-{i} to serve", serving)
        finally:
            stop.set()
            thread.join(10)
        self.note(f"{edits} Ingress edits, each a checked hitless HAProxy reload; meanwhile {stats['ok']} keep-alive "
                  f"requests answered, {stats['failed']} failed")
        if stats["failed"] or stats["ok"] == 0:
            raise StepFailed(f"{stats['failed']} requests failed during reloads ({', '.join(errors[:5])}); "
                             f"{stats['ok']} answered")

    def down(self) -> None:
        # A temporary state dir is removed right after: `down`'s "state kept" line would be untrue.
        self.isthmus("down", "--state-dir", str(self.state_dir), timeout=DOWN_TIMEOUT, output=not self.discard_state)
        if self.discard_state:
            self.show("Stopped the local clusterset; its temporary state dir is removed now (--keep keeps it).")


def _prerequisites(console: Console) -> bool:
    if shutil.which("kubectl") is None:
        console.print("[red]kubectl is required for the demo (it is the client users have)[/red]")
        return False
    try:
        import dns.message  # noqa: F401
    except ImportError:
        console.print("[red]the demo needs dnspython (`pip install dnspython`, or `make demo`)[/red]")
        return False
    return True


def run_demo(
    console: Console | None = None,
    *,
    state_dir: Path | None = None,
    clusters: int = 3,
    keep: bool = False,
    edit_steps: Callable[[list[Step]], Iterable[Step]] | None = None,
    runtime: str = "process",
    nodes: int = 1,
    tour: Callable[[Console, Path], Demo] | None = None,
    title: str = "Isthmus demo",
) -> int:
    """Run every step; 0 when all pass, 1 naming the failed step (130 on Ctrl-C), 2 for unusable arguments.

    `state_dir` None means a fresh temporary directory, removed at the end unless `keep`.
    `edit_steps` is the tests' seam: it gets the step list and returns the one to run (`only`
    picks steps by name).
    `isthmus down` always runs last, also after a failure or Ctrl-C.
    `tour` makes the Demo whose steps run (another tour on the same plumbing: the drill), given the
    console and the state dir; default the demo itself.
    """
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and CI: wide enough that tables never wrap
            console = Console(width=140)
    if clusters < 2:
        console.print("[red]the demo needs at least 2 clusters (two export, the last one watches)[/red]")
        return 2
    temporary = state_dir is None
    if state_dir is None:
        state_dir = Path(tempfile.mkdtemp(prefix="isthmus-demo-"))
    elif state_dir.exists() and (not state_dir.is_dir() or any(state_dir.iterdir())):
        console.print(f"[red]the demo needs a fresh state dir; {state_dir} is not empty "
                      "(pass another --state-dir, or leave it out for a temporary one)[/red]")
        return 2
    if not _prerequisites(console):
        return 1
    os.umask(0o077)  # kubectl's cache and everything else the demo writes in the state dir stay private

    demo = (tour or (lambda c, d: Demo(c, d, clusters, runtime, nodes)))(console, state_dir.resolve())
    demo.discard_state = temporary and not keep
    steps = list(edit_steps(demo.steps()) if edit_steps else demo.steps())
    total = len(steps) + 1  # + isthmus down
    per_node = f" of {nodes} nodes each" if nodes > 1 else ""
    console.rule(f"[bold]{title}[/bold] — a local clusterset of {clusters} clusters{per_node} and a broker")
    failed: tuple[int, str, str] | None = None
    started = time.monotonic()
    ready_at: float | None = None
    interrupted: list[int] = []

    def run_step(i: int, title: str, body: Callable[[], None]) -> str | None:
        console.print(f"\n[bold cyan]{i}/{total}[/bold cyan] [bold]{escape(title)}[/bold]")
        t0 = time.monotonic()
        try:
            body()
        except StepFailed as err:
            reason = str(err)
        except KeyboardInterrupt:
            interrupted.append(i)
            reason = "interrupted (Ctrl-C)"
        except Exception as err:  # a bug or a surprise is still this step's failure, and down must run
            reason = f"unexpected {type(err).__name__}: {err}"
        else:
            console.print(f"   [green]✓[/green] [dim]{time.monotonic() - t0:.2f}s[/dim]")
            return None
        console.print(f"   [bold red]✗ step {i} failed: {escape(title)}[/bold red] [dim]{time.monotonic() - t0:.2f}s[/dim]")
        for line in reason.splitlines():
            console.print(f"     {escape(line)}", highlight=False, soft_wrap=True)
        return reason

    try:
        for i, step in enumerate(steps, 1):
            reason = run_step(i, step.title, step.run)
            if reason is not None:
                failed = (i, step.title, reason)
                break
            if i == 1:
                ready_at = time.monotonic()
    finally:
        down_title = "stop the clusterset (isthmus down)"
        reason = run_step(total, down_title, demo.down)
        if reason is not None and failed is None:
            failed = (total, down_title, reason)
        if temporary and not keep:
            shutil.rmtree(state_dir, ignore_errors=True)
        elif temporary:
            console.print(f"\n   state dir kept: {state_dir}")

    elapsed = time.monotonic() - started
    after_up = f", {time.monotonic() - ready_at:.1f}s after up" if ready_at is not None else ""
    if failed is not None:
        i, title, _ = failed
        if interrupted:
            console.rule(f"[bold red]interrupted at step {i}: {escape(title)}[/bold red]")
            return 130
        console.rule(f"[bold red]step {i} failed: {escape(title)}[/bold red]")
        return 1
    gaps = f", with {len(demo.gaps)} known gap{'s' if len(demo.gaps) != 1 else ''} shown" if demo.gaps else ""
    console.rule(f"[green]all steps passed[/green] in {elapsed:.1f}s{after_up}{gaps}")
    for text in demo.gaps:
        console.print(f"  [yellow]known gap:[/yellow] {escape(text)}", highlight=False, soft_wrap=True)
    return 0
