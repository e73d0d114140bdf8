"""`isthmus dns`: the authoritative clusterset.local DNS server of one cluster."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from isthmus.api.mcs import CLUSTERSET_DOMAIN
from isthmus.cli.agent import OptionalClusterIdOpt
from isthmus.cli.app import (
    COMPONENTS,
    ComponentKubeconfigOpt,
    ContextOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)
from isthmus.cli.lameduck import DEFAULT_SHUTDOWN_DELAY, LameDuck

if TYPE_CHECKING:
    from isthmus.dns.service import DnsService

log = logging.getLogger("isthmus.dns")


@command("dns", panel=COMPONENTS)
def dns(
    cluster_id: OptionalClusterIdOpt = None,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    listen: Annotated[
        list[str] | None,
        typer.Option(
            help="HOST:PORT for UDP and TCP; repeat for several (IPv6: [::1]:5353).",
            show_default="127.0.0.1:5353",
        ),
    ] = None,
    zone: Annotated[
        list[str] | None,
        typer.Option(help="Clusterset zone to serve; repeatable.", show_default=CLUSTERSET_DOMAIN),
    ] = None,
    ttl: Annotated[int, typer.Option(help="TTL of every answer, and of negative answers, in seconds.")] = 5,
    cluster_names: Annotated[
        bool,
        typer.Option("--cluster-names", help="Also answer Lighthouse-style <cluster>.<svc>.<ns>.svc.<zone>."),
    ] = False,
    local_zone: Annotated[
        str | None,
        typer.Option(help="Also serve this cluster's own Services in this zone (e.g. cluster.local)."),
    ] = None,
    max_udp: Annotated[int, typer.Option(help="Largest UDP response (EDNS0); larger answers set TC.")] = 1232,
    tcp_query_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a TCP connection has to send a whole query; trickled bytes do not extend it."
        ),
    ] = 5.0,
    tcp_idle_timeout: Annotated[
        float, typer.Option(help="Seconds an answered TCP connection may wait for its next query.")
    ] = 10.0,
    tcp_max_connections: Annotated[
        int,
        typer.Option(help="Open TCP connections; at the cap the oldest idle one is closed for a new one."),
    ] = 1024,
    tcp_max_per_source: Annotated[
        int,
        typer.Option(
            help="Open TCP connections per client address; beyond, that address's oldest idle one is closed."
        ),
    ] = 64,
    workers: Annotated[
        str,
        typer.Option(
            help="Processes answering on the same addresses (SO_REUSEPORT), each with its own informers; "
            "0 or auto: one per CPU. /metrics and readiness are served once, by the parent.",
        ),
    ] = "1",
    udp_batch: Annotated[
        int,
        typer.Option(help="UDP datagrams per recvmmsg/sendmmsg call; 0: one recvfrom/sendto each."),
    ] = 64,
    shutdown_delay: Annotated[
        float,
        typer.Option(
            help="At SIGTERM: seconds to keep answering while not ready (the lame-duck period, as "
            "CoreDNS's `lameduck`), so proxies that still send queries here are answered; the pod's "
            "terminationGracePeriodSeconds must exceed it. 0: stop at once.",
        ),
    ] = DEFAULT_SHUTDOWN_DELAY,
    worker: Annotated[
        str | None, typer.Option(hidden=True, help="Internal: run as a --workers process (JSON).")
    ] = None,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Answer <svc>.<ns>.svc.clusterset.local from this cluster's ServiceImports and EndpointSlices."""
    from isthmus.dns.server import TcpLimits, parse_listen
    from isthmus.dns.service import DnsConfig, DnsService, validate_zone
    from isthmus.dns.workers import DnsWorkers, WorkerSpec, parse_workers
    from isthmus.kube.client import load_config, make_client

    try:
        count = parse_workers(workers)
        if udp_batch < 0:
            raise ValueError("--udp-batch must be 0 (recvfrom/sendto) or more")
        addrs = [parse_listen(a) for a in (listen or ["127.0.0.1:5353"])]
        zones = [validate_zone(z) for z in (zone or [CLUSTERSET_DOMAIN])]
        local = validate_zone(local_zone) if local_zone else None
        if local in zones:
            raise ValueError(f"--local-zone {local} is also a --zone; they must differ")
        tcp = TcpLimits(tcp_query_timeout, tcp_idle_timeout, tcp_max_connections, tcp_max_per_source)
    except ValueError as e:
        raise fail(str(e)) from None
    if not 0 <= ttl <= 2**31 - 1:
        raise fail("--ttl must be between 0 and 2147483647")
    if not 512 <= max_udp <= 65535:
        raise fail("--max-udp must be between 512 and 65535")
    if shutdown_delay < 0:
        raise fail("--shutdown-delay cannot be negative")
    config = DnsConfig(
        cluster_id=cluster_id or "",
        listen=addrs,
        zones=zones,
        ttl=ttl,
        cluster_names=cluster_names,
        local_zone=local,
        max_udp=max_udp,
        metrics_addr=metrics_addr,
        tcp=tcp,
        udp_batch=udp_batch,
    )
    spec = WorkerSpec.from_json(worker) if worker else None
    if spec is not None:  # a --workers process: the parent serves metrics and bound the sockets
        config = dataclasses.replace(config, metrics_addr=None)

    def worker_argv(w: WorkerSpec) -> list[str]:
        """The command line of one worker: this command, every setting but --workers and
        --metrics-addr, and the inherited sockets."""
        argv = [sys.executable, "-m", "isthmus", "dns", "--worker", w.to_json()]
        for host, port in parent.bound:
            argv += ["--listen", f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        for z in zones:
            argv += ["--zone", z]
        for flag, value in (
            ("--cluster-id", cluster_id), ("--kubeconfig", kubeconfig), ("--context", context),
            ("--local-zone", local), ("--ttl", ttl), ("--max-udp", max_udp), ("--udp-batch", udp_batch),
            ("--tcp-query-timeout", tcp_query_timeout), ("--tcp-idle-timeout", tcp_idle_timeout),
            ("--tcp-max-connections", tcp_max_connections), ("--tcp-max-per-source", tcp_max_per_source),
            ("--shutdown-delay", shutdown_delay), ("--log-format", log_format), ("--log-level", log_level),
        ):  # fmt: skip
            if value is not None:
                argv += [flag, str(value)]
        if cluster_names:
            argv.append("--cluster-names")
        return argv

    parent = DnsWorkers(worker_argv, addrs, count)

    async def build() -> LameDuck:
        return LameDuck(await build_server(), shutdown_delay, "dns")

    async def build_server() -> DnsService | _AfterJoin | _Worker | DnsWorkers:
        if spec is None and count > 1:
            load_config(kubeconfig, context)  # a bad kubeconfig ends the command here, as with one process
            return parent
        # The service serves its own /metrics (it adds the DNS counters), so run_component gets none.
        client = make_client(kubeconfig, context, field_manager="isthmus-dns")
        sockets = spec.sockets() if spec is not None else None
        inner: DnsService | _AfterJoin
        if cluster_id:
            inner = DnsService(client, config, sockets=sockets)
        else:
            inner = _AfterJoin(client, config, sockets)
        if spec is None:
            return inner
        return _Worker(inner, socket.socket(fileno=spec.status_fd))

    try:
        run_component(
            "dns",
            build,
            log_format=log_format,
            log_level=log_level,
            metrics_addr=metrics_addr if spec is None and count > 1 else None,
        )
    except OSError as e:
        raise fail(f"cannot listen: {e.strerror or e}") from None


class _Worker:
    """One `--workers` process: the DNS server, reporting its counters and readiness to the parent,
    and stopping when the parent is gone."""

    def __init__(self, inner: Any, status: socket.socket) -> None:
        self.inner = inner
        self.status = status
        self._report: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return bool(self.inner.ready)

    def lame_duck(self) -> None:
        self.inner.lame_duck()

    def _snapshot(self) -> dict[str, Any] | None:
        from isthmus.dns.service import DnsService

        svc = self.inner if isinstance(self.inner, DnsService) else self.inner.inner
        return None if svc is None else dict(svc.stats.snapshot())

    async def start(self) -> None:
        from isthmus.dns.workers import report_to_parent

        await self.inner.start()
        self._report = asyncio.get_running_loop().create_task(
            report_to_parent(self.status, self._snapshot), name="dns worker report"
        )

    async def wait(self) -> None:
        """Ends when the parent is gone (or the server failed to start after joining)."""
        assert self._report is not None
        waiters: list[asyncio.Future[Any]] = [self._report]
        if isinstance(self.inner, _AfterJoin):
            waiters.append(asyncio.ensure_future(self.inner.wait()))
        done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for f in pending:
            if f is not self._report:
                f.cancel()
        for f in done:
            f.result()
        if self._report in done:
            log.warning("dns worker: the parent process is gone, stopping")

    async def stop(self) -> None:
        from isthmus.dns.workers import final_report

        if self._report is not None:
            self._report.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._report
        await self.inner.stop()
        final_report(self.status, self._snapshot)
        self.status.close()


class _AfterJoin:
    """The DNS server of a cluster that may not have joined yet: it waits for the cluster ID `join`
    stores, then serves. Stoppable (SIGTERM) while waiting; not ready until serving."""

    def __init__(self, client: Any, config: Any, sockets: Any = None) -> None:
        self.client = client
        self.config = config
        self.sockets = sockets
        self.inner: Any = None
        self._task: asyncio.Task[None] | None = None
        self._said: set[str] = set()

    @property
    def ready(self) -> bool:
        return self.inner is not None and bool(self.inner.ready)

    def lame_duck(self) -> None:
        if self.inner is not None:
            self.inner.lame_duck()

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve_when_joined(), name="dns after join")

    async def _serve_when_joined(self) -> None:
        from isthmus.clusterset.membership import wait_for_cluster_id
        from isthmus.dns.service import DnsService

        def waiting(why: str) -> None:
            if why not in self._said:  # once per reason, not every poll
                self._said.add(why)
                log.warning("%s", why)

        joined = await wait_for_cluster_id(self.client, waiting)
        log.info("cluster joined as %s: serving", joined)
        self.inner = DnsService(
            self.client, dataclasses.replace(self.config, cluster_id=joined), sockets=self.sockets
        )
        await self.inner.start()

    async def wait(self) -> None:
        """Ends the command only if starting failed (e.g. the address is taken); else runs until stopped."""
        if self._task is not None:
            await asyncio.shield(self._task)
        await asyncio.Event().wait()

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.inner is not None:
            await self.inner.stop()
