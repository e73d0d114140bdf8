"""`isthmus egress-forwarder`: one ExternalService's forwarder pod.

It watches its Forwarder object (the operator keeps it current) and:

- listens on each egress rule's port (`<name>.external-services:<port>` reaches it); a client is
  accepted only when its address is a pod of a source Service (ready or not) — anything else is refused
  (reset, counted): fail closed. An accepted flow is relayed to the gateway naming the source IP
  of the client's Service;
- listens on the relay port for the gateway's ingress relays (only from the gateway's addresses)
  and connects them to the source Service.

Its own outgoing connections leave from its pod address (`--listen`), which is what the gateway
checks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.types import PatchType

from isthmus.api.base import new_condition
from isthmus.api.egress import (
    FORWARDER_FIELD_MANAGER,
    FORWARDER_RELAY_PORT,
    GATEWAY_UDP_RELAY_PORT,
    READY,
    Forwarder,
    ForwarderRule,
    Reason,
)
from isthmus.egress import relay
from isthmus.egress.listeners import Listeners, ListenKey
from isthmus.egress.metrics import FLOWS, REFUSED, start_series
from isthmus.egress.splice import Pipe, link, open_pipe
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime import SharedInformerFactory

log = logging.getLogger(__name__)
ForwarderRes: Any = resource_for(Forwarder)
STATUS_EVERY = 10.0
GATEWAY_RETRY_SECONDS = 2.5
"""How long a new flow waits for a gateway that cannot take it yet (a leader moving takes 0.05-0.3 s
on its own, and the operator's news of it about a second more), within a client's usual connect patience."""
NO_GATEWAY = b"ERR no gateway address"
"""What a relay attempt "answers" while the Forwarder names no gateway (the operator between leaders)."""


class ForwarderRuntime:
    def __init__(self, client: AsyncClient, name: str, namespace: str, listen_ip: str) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.listen_ip = listen_ip
        self.listeners = Listeners(self._on_tcp, self._on_udp, on_pipe=self._on_pipe,
                                   piped=lambda k: k.protocol == "TCP" and k.port != FORWARDER_RELAY_PORT)
        self._relaying: set[asyncio.Task[None]] = set()
        self.egress: dict[tuple[str, int, str], ForwarderRule] = {}
        """(protocol, port, client address) → rule."""
        self.ingress: dict[tuple[str, str, int], ForwarderRule] = {}
        """(protocol, source IP, port) → rule."""
        self.gateway_ips: frozenset[str] = frozenset()
        self.gateway_address: tuple[str, int] | None = None
        self.refused = 0
        self.ready = False
        self._changed = asyncio.Event()
        start_series("forwarder")

    async def run(self) -> None:
        factory = SharedInformerFactory(self.client)
        inf = factory.informer(ForwarderRes, self.namespace, fields={"metadata.name": self.name})
        inf.add_handler(lambda _o: self._changed.set(), lambda _o, _n: self._changed.set(),
                        lambda _o: self._changed.set())
        factory.start()
        written: tuple[Any, ...] | None = None
        try:
            await factory.wait_synced()
            self._changed.set()
            while True:
                try:
                    async with asyncio.timeout(STATUS_EVERY):
                        await self._changed.wait()
                except TimeoutError:
                    pass
                self._changed.clear()
                raw = inf.cache.get(f"{self.namespace}/{self.name}")
                if raw is None:
                    await self._program(None)
                    continue
                fwd = Forwarder.from_dict(raw)
                errors = await self._program(fwd)
                state = (fwd.metadata.generation, tuple(sorted(errors.items())), self.refused)
                if state != written and await self._write_status(fwd, errors):
                    written = state
        finally:
            self.listeners.close()
            await factory.stop()

    async def _program(self, fwd: Forwarder | None) -> dict[ListenKey, str]:
        spec = fwd.spec if fwd is not None else None
        self.egress = {(r.protocol, r.target_port, ip): r for r in (spec.egress_rules if spec else []) for ip in
                       r.client_ips}
        self.ingress = {(r.protocol, r.source_ip, r.target_port): r for r in (spec.ingress_rules if spec else [])}
        self.gateway_ips = frozenset(spec.gateway_ips if spec else [])
        self.gateway_address = relay.split_host_port(spec.gateway_address) if spec and spec.gateway_address else None
        wanted = {ListenKey(r.protocol, self.listen_ip, r.target_port) for r in (spec.egress_rules if spec else [])}
        if spec is not None:
            wanted.add(ListenKey("TCP", self.listen_ip, FORWARDER_RELAY_PORT))
        errors = await self.listeners.update(wanted)
        self.ready = fwd is not None and not errors
        return errors

    async def _write_status(self, fwd: Forwarder, errors: dict[ListenKey, str]) -> bool:
        """Whether the status is written (a failure is retried on the next round)."""
        if errors:
            cond = new_condition(READY, False, Reason.BIND_FAILED, "; ".join(
                f"{k.protocol} {k.ip}:{k.port}: {e}" for k, e in sorted(errors.items())), fwd.metadata.generation)
        elif self.gateway_address is None and fwd.spec.egress_rules:
            cond = new_condition(READY, False, Reason.NO_GATEWAY, "no gateway address yet", fwd.metadata.generation)
        else:
            cond = new_condition(READY, True, Reason.PROGRAMMED,
                                 f"{len(fwd.spec.egress_rules)} egress and {len(fwd.spec.ingress_rules)} ingress "
                                 "rules", fwd.metadata.generation)
        old = {c.type: c for c in fwd.status.conditions}
        prev = old.get(READY)
        if prev is not None and prev.status == cond.status and prev.reason == cond.reason:
            cond.last_transition_time = prev.last_transition_time
        body = {"status": {"conditions": [cond.to_dict()], "observedGeneration": fwd.metadata.generation,
                           "refused": self.refused}}
        try:
            await self.client.patch(ForwarderRes.Status, self.name, body, namespace=self.namespace,
                                    patch_type=PatchType.MERGE, field_manager=FORWARDER_FIELD_MANAGER)
        except ApiError as e:
            if not helpers.is_not_found(e):
                log.warning("cannot write Forwarder status: %s", helpers.describe_error(e))
            return False
        return True

    def _refuse(self, direction: str, reason: str, detail: str) -> None:
        self.refused += 1
        REFUSED.labels("forwarder", direction, reason).inc()
        log.info("refused %s flow: %s", direction, detail)  # the count reaches status within STATUS_EVERY

    # ------------------------------------------------------------------ TCP

    def _on_pipe(self, key: ListenKey, client: Pipe) -> None:
        """A source pod's connection (egress, the hot path)."""
        assert client.transport is not None
        peer = client.transport.get_extra_info("peername")
        peer_ip = str(peer[0]) if peer else ""
        rule = self.egress.get((key.protocol, key.port, peer_ip))
        if rule is None:
            client.reset()
            self._refuse("egress", "not_a_source", f"{peer_ip} to port {key.port} is not a pod of a source service")
            return
        # Until the gateway said OK: the kernel holds the client's bytes (uvloop still reads once;
        # Pipe holds those, and an early EOF, until `link`).
        client.transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._relay_egress(client, rule))
        self._relaying.add(task)
        task.add_done_callback(self._relaying.discard)

    async def _relay_egress(self, client: Pipe, rule: ForwarderRule) -> None:
        """Relay through the gateway, trying again for up to GATEWAY_RETRY_SECONDS while it cannot take
        the flow (its leader moving: the old one gone, the new one not yet told about us, no leader
        named for a moment, or the target's answers not yet routed to the new leader's node, which the
        gateway reports as the target unreachable), as HAProxy's `retries` do; the client's bytes wait
        in its socket. A target that is really down is so answered after those seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GATEWAY_RETRY_SECONDS
        up: Pipe | None = None
        for attempt in itertools.count():
            gateway = self.gateway_address  # read afresh: the operator names the new leader meanwhile
            if gateway is None:
                line = NO_GATEWAY
            else:
                up, line = await self._try_gateway(rule, gateway)
            if line == b"OK\n" or client.closed:
                break
            if up is not None:
                up.reset()
            pause = min(0.05 * 2**attempt, 0.5)
            if loop.time() + pause > deadline:
                break
            await asyncio.sleep(pause)
        if line != b"OK\n" or client.closed or up is None:
            client.reset()
            if up is not None:
                up.reset()
            if line == NO_GATEWAY:
                self._refuse("egress", "no_gateway", "no gateway address")
            elif line != b"OK\n":
                REFUSED.labels("forwarder", "egress", "gateway_error").inc()
                log.info("egress %s via gateway failed: %s", rule.source_ip, line.decode(errors="replace").strip())
            return
        FLOWS.labels("forwarder", "egress", "TCP").inc()
        link(client, up)

    async def _try_gateway(self, rule: ForwarderRule, gateway: tuple[str, int]) -> tuple[Pipe, bytes]:
        """One relay attempt: the pipe to the gateway and its answer line (b"OK\\n" when it connected)."""
        answered: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def on_answer(up: Pipe, line: bytes) -> None:
            if up.transport is not None:
                up.transport.pause_reading()
            if not answered.done():
                answered.set_result(line)

        up = Pipe(on_line=on_answer)
        up.on_close = lambda _p: None if answered.done() else answered.set_result(b"")
        try:
            await open_pipe(self.listen_ip, gateway[0], gateway[1], up)
            up.write(relay.egress_header(rule.protocol, rule.source_ip, rule.destination_ip,
                                         rule.destination_port).encode())
            async with asyncio.timeout(relay.CONNECT_TIMEOUT + relay.HEADER_TIMEOUT):
                line = await answered
        except (OSError, TimeoutError) as err:
            line = f"ERR {err}".encode()
        return up, line

    async def _on_tcp(self, key: ListenKey, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The relay port: the gateway's ingress relays (egress TCP takes `_on_pipe`)."""
        await self._ingress(relay.peer_ip(writer), reader, writer)

    async def _open_egress(self, rule: ForwarderRule) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A UDP flow's relay (datagrams framed over TCP) to the gateway's UDP relay port."""
        assert self.gateway_address is not None
        r, w = await relay.connect_from(self.listen_ip, self.gateway_address[0], GATEWAY_UDP_RELAY_PORT)
        try:
            w.write(relay.egress_header(rule.protocol, rule.source_ip, rule.destination_ip,
                                        rule.destination_port).encode())
            await w.drain()
            await relay.read_answer(r)
        except BaseException:
            relay.close(w)
            raise
        return r, w

    async def _ingress(self, peer: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if peer not in self.gateway_ips:
            relay.refuse(writer)
            self._refuse("ingress", "not_the_gateway", f"relay from {peer}, not a gateway address")
            return
        try:
            h = await relay.read_header(reader)
        except (relay.RelayError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as err:
            relay.refuse(writer)
            self._refuse("ingress", "bad_header", str(err))
            return
        rule = self.ingress.get((h.protocol, h.source_ip, int(h.a))) if h.kind == "INGRESS" else None
        if rule is None:
            await relay.answer(writer, "no such ingress rule")
            relay.close(writer)
            self._refuse("ingress", "no_rule", f"{h.protocol} {h.source_ip}:{h.a}")
            return
        if h.protocol == "UDP":
            FLOWS.labels("forwarder", "ingress", "UDP").inc()
            await relay.bridge_udp(reader, writer, self.listen_ip, rule.destination_ip, rule.destination_port)
            return
        try:
            up = await relay.connect_from(self.listen_ip, rule.destination_ip, rule.destination_port)
        except (OSError, TimeoutError) as err:
            await relay.answer(writer, f"cannot reach {rule.service}: {err}")
            relay.close(writer)
            return
        await relay.answer(writer)
        FLOWS.labels("forwarder", "ingress", "TCP").inc()
        await relay.pipe((reader, writer), up)

    # ------------------------------------------------------------------ UDP

    async def _on_udp(self, key: ListenKey,
                      peer: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        rule = self.egress.get((key.protocol, key.port, peer[0]))
        if rule is None or self.gateway_address is None:
            self._refuse("egress", "not_a_source", f"UDP {peer[0]} to port {key.port} is not a pod of a source service")
            return None
        try:
            opened = await self._open_egress(rule)
        except (OSError, TimeoutError, relay.RelayError, asyncio.IncompleteReadError) as err:
            REFUSED.labels("forwarder", "egress", "gateway_error").inc()
            log.info("UDP egress %s via gateway failed: %s", rule.source_ip, err)
            return None
        FLOWS.labels("forwarder", "egress", "UDP").inc()
        return opened
