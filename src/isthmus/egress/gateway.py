"""`isthmus egress-gateway`: the gateway host's part. Replicas elect a leader (Lease
`isthmus-egress-gateway`); only the leader owns the source IPs. Once it has programmed its rules it
labels its own Pod `egress.isthmus.io/leader: "true"` (and clears the label from any other gateway
Pod: a leader that lost the Lease without saying so); the gateway Service selects that label, so its
endpoints name the leader and failover moves the addresses with the Lease. Readiness means healthy
(caches synced, the apiserver answering, and, when leading, the rules programmed), so both replicas
are ready, the Deployment is Available and a PodDisruptionBudget can count them (Patroni's "label
the leader" pattern rather than "only the leader is ready").

The leader programs every Gateway object of its namespace:

- **userspace** (default): relays from forwarders arrive on `--relay-address`; one is accepted only
  from a forwarder address its rule names, and connects to `targetIP:port` *from* the claimed source
  IP (bind before connect: never from another address). Ingress listens on `sourceIP:port`,
  accepts only the rule's peer (targetIP) and relays to the forwarder.
- **kernel**: nftables SNAT/DNAT in the gateway's network namespace (kernel.py), the source IPs
  added to `--interface`.

A rule is programmed only if its source IP is a SourceIP bound to a claim of the ExternalService's
namespace: a Gateway object written by anyone else cannot make the gateway send from an address
nobody claimed. Losing the lease closes every listener and aborts every flow (fail closed).

Built on `runtime.Manager` (the Lease, the Lease handed back on stop). The informers run for the
whole process, not per term: a standby is healthy only with synced caches, and takes over without
listing again. On a graceful stop the leader closes its listeners, removes its label, then hands the
Lease back; a standby polling every `acquire_period` takes it within about that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any, Literal

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from isthmus.api.base import format_time, new_condition
from isthmus.api.egress import (
    GATEWAY_APP,
    GATEWAY_APP_LABEL,
    GATEWAY_FIELD_MANAGER,
    GATEWAY_LEADER_LABEL,
    GATEWAY_LEASE,
    GATEWAY_RELAY_PORT,
    GATEWAY_UDP_RELAY_PORT,
    LEADER_DELETION_COST,
    POD_DELETION_COST,
    READY,
    Gateway,
    GatewayRule,
    Reason,
    SourceIP,
    SourceIPPhase,
    source_ip_name,
)
from isthmus.egress import relay
from isthmus.egress.listeners import Listeners, ListenKey
from isthmus.egress.metrics import FLOWS, LEADING, REFUSED, RULES, start_series, track_gateway
from isthmus.egress.splice import Pipe, link, open_pipe
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime import LeaderElection, Manager, SharedInformerFactory, Term

log = logging.getLogger(__name__)
GatewayRes: Any = resource_for(Gateway)
SourceIPRes: Any = resource_for(SourceIP)
Mode = Literal["userspace", "kernel"]
RETRY_SECONDS = 30.0
IDLE_RELAY_SECONDS = 10.0
LABEL_RETRY_SECONDS = 1.0
"""A leader whose label write failed asks again this soon (until labelled, no forwarder reaches it)."""
UNLABEL_TIMEOUT = 2.0
"""How long a stepping-down leader tries to remove its label before handing the Lease back."""


def leader_patch(leading: bool) -> dict[str, Any]:
    """The merge patch a gateway writes on a Pod: the leader label and deletion cost, or their removal
    (the only fields the admission policy lets the gateway change)."""
    return {"metadata": {"labels": {GATEWAY_LEADER_LABEL: "true" if leading else None},
                         "annotations": {POD_DELETION_COST: LEADER_DELETION_COST if leading else None}}}


def is_marked_leader(pod: dict[str, Any]) -> bool:
    """Labelled leader and carrying the leader's deletion cost (what `leader_patch(True)` writes)."""
    meta = pod.get("metadata") or {}
    return bool((meta.get("labels") or {}).get(GATEWAY_LEADER_LABEL) == "true"
                and (meta.get("annotations") or {}).get(POD_DELETION_COST) == LEADER_DELETION_COST)


def stale_leaders(pods: list[dict[str, Any]], me: str) -> list[str]:
    """Gateway Pods other than `me` still labelled leader (or still carrying the leader's deletion
    cost): a previous leader that could not clear them, e.g. cut off from the apiserver."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if meta.get("name") == me or labels.get(GATEWAY_APP_LABEL) != GATEWAY_APP:
            continue
        if GATEWAY_LEADER_LABEL in labels or annotations.get(POD_DELETION_COST) == LEADER_DELETION_COST:
            out.append(str(meta.get("name")))
    return sorted(out)


def claimed(rule: GatewayRule, namespace: str, sips: dict[str, SourceIP]) -> bool:
    sip = sips.get(source_ip_name(rule.source_ip))
    return (sip is not None and sip.spec.claim_ref is not None and sip.spec.claim_ref.namespace == namespace
            and sip.status.phase == SourceIPPhase.BOUND and sip.metadata.deletion_timestamp is None)


class GatewayRuntime:
    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: str,
        identity: str,
        relay_ip: str,
        mode: Mode = "userspace",
        interface: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        acquire_period: float | None = None,
        pod_name: str | None = None,
        pod_namespace: str | None = None,
        kernel: Any = None,
    ) -> None:
        """`kernel`: a KernelGateway to use in kernel mode (tests pass one bound to their namespace).
        `pod_name`: this replica's Pod, labelled while it leads (None outside a Pod: no label)."""
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.relay_ip = relay_ip
        self.mode = mode
        self.pod_name = pod_name
        self.pod_namespace = pod_namespace or namespace
        self.lease_duration = lease_duration
        self.manager = Manager("egress-gateway", election=LeaderElection(
            client, GATEWAY_LEASE, namespace, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period))
        assert self.manager.elector is not None
        self.elector = self.manager.elector
        self.elector.acquire_period = acquire_period
        self.manager.setup(self._wire)
        self.manager.add(self._watch, leader_only=False)
        self.factory = SharedInformerFactory(client)
        self._gateways = self.factory.informer(GatewayRes, namespace)
        self._sips = self.factory.informer(SourceIPRes)
        for inf in (self._gateways, self._sips):
            inf.add_handler(lambda _o: self._changed.set(), lambda _o, _n: self._changed.set(),
                            lambda _o: self._changed.set())
        self.listeners = Listeners(self._on_tcp, self._on_udp, on_pipe=self._on_pipe,
                                   piped=lambda k: k.port == GATEWAY_RELAY_PORT and k.ip == relay_ip)
        self._relaying: set[asyncio.Task[None]] = set()
        self.kernel: Any = kernel
        if mode == "kernel" and kernel is None:
            from isthmus.egress.kernel import KernelGateway

            if not interface:
                raise ValueError("kernel mode needs the interface that carries the source IPs")
            self.kernel = KernelGateway(interface=interface)
        self.egress: dict[tuple[str, str, str, int], frozenset[str]] = {}
        """(protocol, source IP, target IP, port) → forwarder addresses allowed to relay it."""
        self.ingress: dict[tuple[str, str, int], GatewayRule] = {}
        self.programmed = False
        """Leading, and the rules programmed at least once this term."""
        self.labelled = False
        """This replica's Pod carries the leader label (the gateway Service targets it)."""
        self._programmed = asyncio.Event()
        self._changed = asyncio.Event()
        self._applied: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        """The kernel flows last applied (an unchanged set is not re-applied)."""
        track_gateway(self)
        start_series("gateway")

    @property
    def ready(self) -> bool:
        """Healthy, leading or not: the caches synced, the apiserver answered the election within a
        Lease duration (a standby that could not take over is not ready), and a leader has programmed
        its rules. Which replica carries traffic is the leader label's business, not readiness's."""
        contact = self.elector.last_contact
        if not self.factory.synced or contact is None:
            return False
        if time.monotonic() - contact > self.lease_duration:
            return False
        return self.programmed or not self.manager.is_leader

    @property
    def leading(self) -> bool:
        return self.elector.is_leader

    async def run(self) -> None:
        await self.manager.run()

    # as a Component (cli/app.py's run_component): the Manager's runs, the readiness is ours
    async def start(self) -> None:
        await self.manager.start()

    async def wait(self) -> None:
        await self.manager.wait()

    async def stop(self) -> None:
        await self.manager.stop()

    async def _watch(self) -> None:
        """The informers, from start to stop whatever the Lease."""
        self.factory.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.factory.stop()

    def _wire(self, term: Term) -> None:
        LEADING.set(1)
        term.on_synced(self._synced)
        term.add(self._program_loop, self._label_loop)
        term.on_stopped(self._stopped)

    async def _synced(self) -> None:
        await self.factory.wait_synced()  # never program (nor claim the label) from empty caches
        log.info("egress-gateway %s leading (%s mode)", self.identity, self.mode)

    async def _label_loop(self) -> None:
        """Once programmed, label this replica's Pod leader and clear stale leaders; look again every
        RETRY_SECONDS (a label removed by hand, a stale leader come back), writing only what is missing."""
        if self.pod_name is None:
            return
        await self._programmed.wait()
        delay = 0.0
        while True:
            await asyncio.sleep(delay)
            try:
                if not self.labelled:  # at once on taking over: the Service waits for it
                    await self._patch_pod(self.pod_name, leading=True)
                    log.info("egress-gateway %s labelled pod %s leader", self.identity, self.pod_name)
                    self.labelled = True
                pods = [p.to_dict() async for p in self.client.list(
                    Pod, namespace=self.pod_namespace, labels={GATEWAY_APP_LABEL: GATEWAY_APP})]
                if not any(is_marked_leader(p) for p in pods if (p.get("metadata") or {}).get("name") == self.pod_name):
                    await self._patch_pod(self.pod_name, leading=True)
                for name in stale_leaders(pods, self.pod_name):
                    log.warning("removing the leader label of pod %s (a previous leader)", name)
                    await self._patch_pod(name, leading=False)
                delay = RETRY_SECONDS
            except Exception as e:  # the apiserver unreachable or refusing: the term goes on, asks again
                log.warning("cannot label the leader pod: %s",
                            helpers.describe_error(e) if isinstance(e, ApiError) else repr(e))
                delay = LABEL_RETRY_SECONDS

    async def _patch_pod(self, name: str, *, leading: bool) -> None:
        try:
            await self.client.patch(Pod, name, leader_patch(leading), namespace=self.pod_namespace,
                                    patch_type=PatchType.MERGE, field_manager=GATEWAY_FIELD_MANAGER)
        except ApiError as e:
            if not helpers.is_not_found(e):  # a Pod gone needs no label removed
                raise

    async def _unlabel(self) -> None:
        """Stepping down: the label goes before the Lease does (a successor labels itself at once)."""
        if self.pod_name is None:
            return
        self.labelled = False
        try:
            async with asyncio.timeout(UNLABEL_TIMEOUT):
                await self._patch_pod(self.pod_name, leading=False)
        except Exception as e:  # the next leader clears it
            log.warning("cannot remove the leader label of pod %s: %s", self.pod_name, e)

    async def _program_loop(self) -> None:
        """Program the rules at every change of the Gateways or SourceIPs (ready once programmed)."""
        written: dict[str, tuple[Any, ...]] = {}
        self._changed.set()
        while True:
            with contextlib.suppress(TimeoutError):  # a status write that failed is retried
                async with asyncio.timeout(RETRY_SECONDS):
                    await self._changed.wait()
            self._changed.clear()
            objs = [Gateway.from_dict(o) for o in self._gateways.cache.list()]
            bound = {o.name: o for o in (SourceIP.from_dict(s) for s in self._sips.cache.list())}
            problems = await self._program(objs, bound)
            self.programmed = True
            self._programmed.set()
            for gw in objs:
                state = (gw.metadata.generation, problems.get(gw.name, ""))
                if written.get(gw.name) != state and await self._write_status(gw, problems.get(gw.name, "")):
                    written[gw.name] = state
            await asyncio.sleep(0.02)  # coalesce bursts of changes

    async def _stopped(self) -> None:
        """Leadership ended: no listener, no flow, no kernel rule stays (fail closed), then the leader
        label goes (before the Lease is handed back: runtime.Manager's order)."""
        self.programmed = False
        self._programmed.clear()
        LEADING.set(0)
        self.listeners.close()
        self.egress, self.ingress = {}, {}
        if self.kernel is not None:
            self._applied = None
            try:
                await self.kernel.release()
            except Exception:
                log.exception("releasing the kernel rules failed")
        await self._unlabel()

    async def _program(self, objs: list[Gateway], sips: dict[str, SourceIP]) -> dict[str, str]:
        """Program every claimed rule; returns the problem of each Gateway object that has one."""
        problems: dict[str, list[str]] = {}
        egress: dict[tuple[str, str, str, int], set[str]] = {}
        ingress: dict[tuple[str, str, int], GatewayRule] = {}
        owner: dict[tuple[str, str, int], str] = {}
        kernel_egress: list[Any] = []
        kernel_ingress: list[Any] = []
        for gw in sorted(objs, key=lambda g: (g.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC),
                                              g.name)):
            ns = gw.spec.external_service.namespace or ""
            for rule in gw.spec.egress_rules:
                if not claimed(rule, ns, sips):
                    problems.setdefault(gw.name, []).append(f"{rule.source_ip} is not bound to a claim of "
                                                            f"namespace {ns}: not programmed")
                    continue
                egress.setdefault((rule.protocol, rule.source_ip, rule.destination_ip, rule.destination_port),
                                  set()).update(rule.forwarder_ips)
                if self.kernel is not None:
                    from isthmus.egress.kernel import EgressFlow

                    kernel_egress.append(EgressFlow(rule.protocol, rule.source_ip, rule.destination_ip,
                                                    rule.destination_port, tuple(sorted(rule.client_ips))))
            for rule in gw.spec.ingress_rules:
                if not claimed(rule, ns, sips) or rule.target_port is None or rule.peer_ip is None:
                    continue
                key = (rule.protocol, rule.source_ip, rule.target_port)
                if key in ingress:
                    problems.setdefault(gw.name, []).append(
                        f"{rule.protocol} {rule.source_ip}:{rule.target_port} already serves {owner[key]}")
                    continue
                ingress[key], owner[key] = rule, rule.service or gw.name
                if self.kernel is not None:
                    from isthmus.egress.kernel import IngressFlow

                    kernel_ingress.append(IngressFlow(rule.protocol, rule.source_ip, rule.target_port, rule.peer_ip,
                                                      rule.destination_ip, rule.destination_port))
        self.egress = {k: frozenset(v) for k, v in egress.items()}
        self.ingress = ingress
        RULES.labels("egress").set(len(self.egress))
        RULES.labels("ingress").set(len(self.ingress))
        if self.kernel is not None:
            wanted_flows = (tuple(kernel_egress), tuple(kernel_ingress))
            if wanted_flows != self._applied:
                try:
                    await self.kernel.apply(kernel_egress, kernel_ingress)
                except Exception as err:
                    self._applied = None
                    return {gw.name: f"kernel rules not applied: {err}" for gw in objs}
                self._applied = wanted_flows
        else:
            wanted = {ListenKey("TCP", self.relay_ip, GATEWAY_RELAY_PORT),
                      ListenKey("TCP", self.relay_ip, GATEWAY_UDP_RELAY_PORT)}
            wanted |= {ListenKey(p, ip, port) for p, ip, port in ingress}
            for key, error in (await self.listeners.update(wanted)).items():
                for gw in objs:
                    if any(r.source_ip == key.ip and r.target_port == key.port for r in gw.spec.ingress_rules) or \
                            key.ip == self.relay_ip:
                        problems.setdefault(gw.name, []).append(f"cannot listen on {key.protocol} "
                                                                f"{key.ip}:{key.port}: {error}")
        return {k: "; ".join(v) for k, v in problems.items()}

    async def _write_status(self, gw: Gateway, problem: str) -> bool:
        """Whether the status is written (a failure is retried within RETRY_SECONDS)."""
        gen = gw.metadata.generation
        if problem:
            reason = Reason.SOURCE_NOT_CLAIMED if "not bound" in problem else Reason.BIND_FAILED
            cond = new_condition(READY, False, reason, problem, gen)
        else:
            cond = new_condition(READY, True, Reason.PROGRAMMED, f"programmed by {self.identity} ({self.mode})", gen)
        body = {"status": {"conditions": [cond.to_dict()], "observedGeneration": gen, "holder": self.identity,
                           "lastProgrammedTime": format_time(datetime.now(UTC))}}
        try:
            await self.client.patch(GatewayRes.Status, gw.name, body, namespace=self.namespace,
                                    patch_type=PatchType.MERGE, field_manager=GATEWAY_FIELD_MANAGER)
        except ApiError as e:
            if not helpers.is_not_found(e):
                log.warning("cannot write Gateway status: %s", helpers.describe_error(e))
            return False
        return True

    # ------------------------------------------------------------------ flows

    def _on_pipe(self, key: ListenKey, conn: Pipe) -> None:
        """A forwarder's TCP relay (egress, the hot path): its header first, within IDLE_RELAY_SECONDS
        (a connection that never says what it wants is dropped, not held)."""
        conn.on_line = self._egress_header
        asyncio.get_running_loop().call_later(IDLE_RELAY_SECONDS, lambda: conn.reset() if conn.on_line else None)

    def _egress_header(self, conn: Pipe, line: bytes) -> None:
        assert conn.transport is not None
        conn.transport.pause_reading()
        peer = conn.transport.get_extra_info("peername")
        peer_ip = str(peer[0]) if peer else ""
        try:
            h = relay.parse_header(line)
        except relay.RelayError as err:
            conn.reset()
            REFUSED.labels("gateway", "egress", "bad_header").inc()
            log.info("bad relay from %s: %s", peer_ip, err)
            return
        allowed = self.egress.get((h.protocol, h.source_ip, h.a, int(h.b))) if h.kind == "EGRESS" else None
        if allowed is None or peer_ip not in allowed or h.protocol != "TCP":
            conn.write(b"ERR not allowed\n")
            conn.close()
            REFUSED.labels("gateway", "egress", "not_allowed").inc()
            log.info("refused relay from %s for %s %s -> %s:%s", peer_ip, h.protocol, h.source_ip, h.a, h.b)
            return
        task = asyncio.get_running_loop().create_task(self._connect_target(conn, h))
        self._relaying.add(task)
        task.add_done_callback(self._relaying.discard)

    async def _connect_target(self, conn: Pipe, h: relay.Header) -> None:
        up = Pipe()
        try:
            await open_pipe(h.source_ip, h.a, int(h.b), up)
        except (OSError, TimeoutError) as err:
            conn.write(f"ERR {relay.UNREACHABLE} {h.a}:{h.b} from {h.source_ip}: {err}\n".encode())
            conn.close()
            REFUSED.labels("gateway", "egress", "target_error").inc()
            return
        if conn.closed:
            up.close()
            return
        conn.write(b"OK\n")
        FLOWS.labels("gateway", "egress", "TCP").inc()
        link(conn, up)

    async def _on_tcp(self, key: ListenKey, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = relay.peer_ip(writer)
        if key.port == GATEWAY_UDP_RELAY_PORT and key.ip == self.relay_ip:
            await self._egress(peer, reader, writer)
            return
        rule = self.ingress.get((key.protocol, key.ip, key.port))
        if rule is None or peer != rule.peer_ip or not rule.forwarder_address:
            relay.refuse(writer)
            REFUSED.labels("gateway", "ingress", "not_the_target").inc()
            log.info("refused ingress from %s to %s:%d", peer, key.ip, key.port)
            return
        try:
            up = await self._open_ingress(rule)
        except (OSError, TimeoutError, relay.RelayError, asyncio.IncompleteReadError) as err:
            relay.refuse(writer)
            REFUSED.labels("gateway", "ingress", "forwarder_error").inc()
            log.info("ingress to %s failed: %s", rule.service, err)
            return
        FLOWS.labels("gateway", "ingress", "TCP").inc()
        await relay.pipe((reader, writer), up)

    async def _open_ingress(self, rule: GatewayRule) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert rule.forwarder_address and rule.target_port and rule.peer_ip
        host, port = relay.split_host_port(rule.forwarder_address)
        r, w = await relay.connect_from(self.relay_ip, host, port)
        try:
            w.write(relay.ingress_header(rule.protocol, rule.source_ip, rule.target_port, rule.peer_ip).encode())
            await w.drain()
            await relay.read_answer(r)
        except BaseException:
            relay.close(w)
            raise
        return r, w

    async def _egress(self, peer: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            h = await relay.read_header(reader)
        except (relay.RelayError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as err:
            relay.refuse(writer)
            REFUSED.labels("gateway", "egress", "bad_header").inc()
            log.info("bad relay from %s: %s", peer, err)
            return
        allowed = self.egress.get((h.protocol, h.source_ip, h.a, int(h.b))) if h.kind == "EGRESS" else None
        if allowed is None or peer not in allowed:
            await relay.answer(writer, "not allowed")
            relay.close(writer)
            REFUSED.labels("gateway", "egress", "not_allowed").inc()
            log.info("refused relay from %s for %s %s -> %s:%s", peer, h.protocol, h.source_ip, h.a, h.b)
            return
        if h.protocol == "UDP":
            FLOWS.labels("gateway", "egress", "UDP").inc()
            await relay.bridge_udp(reader, writer, h.source_ip, h.a, int(h.b))
            return
        try:
            up = await relay.connect_from(h.source_ip, h.a, int(h.b))
        except (OSError, TimeoutError) as err:
            await relay.answer(writer, f"{relay.UNREACHABLE} {h.a}:{h.b} from {h.source_ip}: {err}")
            relay.close(writer)
            REFUSED.labels("gateway", "egress", "target_error").inc()
            return
        await relay.answer(writer)
        FLOWS.labels("gateway", "egress", "TCP").inc()
        await relay.pipe((reader, writer), up)

    async def _on_udp(self, key: ListenKey,
                      peer: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        rule = self.ingress.get((key.protocol, key.ip, key.port))
        if rule is None or peer[0] != rule.peer_ip or not rule.forwarder_address:
            REFUSED.labels("gateway", "ingress", "not_the_target").inc()
            return None
        try:
            opened = await self._open_ingress(rule)
        except (OSError, TimeoutError, relay.RelayError, asyncio.IncompleteReadError):
            REFUSED.labels("gateway", "ingress", "forwarder_error").inc()
            return None
        FLOWS.labels("gateway", "ingress", "UDP").inc()
        return opened
