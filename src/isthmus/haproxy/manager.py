"""The pool manager of one edge host: runs LoadBalancerPool instances as HAProxy and reports them.

A pool asks for `count` instances; each is a *slot* (0..count-1) held through a Lease
(`lbp-<pool>-<slot>` in the manager's namespace, labelled with the pool) by at most one pool manager, and a
pool manager holds at most one slot per pool (an edge host cannot bind a pool's ports twice). So
N edge hosts spread a pool's instances, and an instance whose host goes quiet is taken over when
its Lease expires. Expiry is judged on the local clock from when this manager last saw the Lease
change (as client-go does), never by comparing clocks.

Per held slot, reconcile renders the config (`config.render`) and makes the instance run it:
start, checked reload (`haproxy -c`, then `reload` on the master CLI), or — when only servers
changed and the slots suffice — runtime-API commands with no reload, the file rewritten to match.
Each manager writes its own instance entry in the pool's status; every manager recomputes the
summary the same way (`summarize_status`), and marks the entries of slots whose Lease expired
Pending. An instance that dies is restarted with backoff (Events InstanceDied/InstanceRestarted).

Built on `runtime.Manager` without an election (every pool manager works; its slot Leases are its
own, above): the informers, the controller and the renew loop are the Manager's to start and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType
from prometheus_client import Counter, Gauge

from isthmus.api.base import Condition, merge_conditions, new_condition, now
from isthmus.api.lb import (
    LB_NAMESPACE,
    POOL_MANAGER,
    READY,
    STATUS_WRITTEN,
    InstanceState,
    LoadBalancerPool,
    LoadBalancerPoolSpec,
    Owner,
    PoolBackend,
    PoolFrontend,
    PoolFrontendStatus,
    PoolInstanceStatus,
    Reason,
    api_name,
    backend_owner,
    frontend_owner,
    is_pool_name,
    is_public,
    summarize_status,
)
from isthmus.haproxy import metrics
from isthmus.haproxy.config import (
    Layout,
    PoolConfigError,
    Slot,
    assign_slots,
    instance_addresses,
    render,
)
from isthmus.haproxy.process import HAProxyError, Instance, has_prometheus_exporter
from isthmus.kube.resources import resource_for
from isthmus.runtime import Controller, EventRecorder, Manager, Result, SharedInformerFactory, Term
from isthmus.runtime.metrics import REGISTRY

log = logging.getLogger(__name__)

POOL_LABEL = "isthmus.io/lb-pool"
"""On slot Leases: the pool they belong to."""
LEASE_DURATION = 15
RENEW_PERIOD = 3.0
MAX_RESTART_DELAY = 30.0

RELOADS = Counter("isthmus_pools_reloads_total", "Hitless HAProxy reloads done", ["pool"], registry=REGISTRY)
RUNTIME_UPDATES = Counter("isthmus_pools_runtime_updates_total", "Server changes applied with the runtime API", ["pool"], registry=REGISTRY)
REJECTIONS = Counter("isthmus_pools_config_rejections_total", "Configs refused by haproxy -c", ["pool"], registry=REGISTRY)
RESTARTS = Counter("isthmus_pools_instance_restarts_total", "Instances restarted after they died", ["pool"], registry=REGISTRY)
INSTANCES = Gauge("isthmus_pools_instances", "Instances this manager runs, by state", ["state"], registry=REGISTRY)
POOL_COUNTERS = (RELOADS, RUNTIME_UPDATES, REJECTIONS, RESTARTS)
"""Counters labelled by pool: every pool known gets its series at 0 (a dashboard shows 0, not "No
data", before the first event), and loses them when it is deleted (no series for pools long gone)."""

PoolResource = resource_for(LoadBalancerPool)


def _meta(obj: Any) -> ObjectMeta:
    meta: ObjectMeta = obj.metadata
    return meta


def lease_name(pool: str, slot: int) -> str:
    return f"lbp-{pool}-{slot}"


def allocate_port(addresses: tuple[str, ...], avoid: set[int]) -> int:
    """A port free on every address (the kernel picks on the first; checked on the others)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addresses[0], 0))
            port = int(s.getsockname()[1])
        if port in avoid or not all(_port_free(a, port) for a in addresses[1:]):
            continue
        return port
    raise HAProxyError(f"no free port on {', '.join(addresses)}")


def _port_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def _structure(spec: LoadBalancerPoolSpec, layout: Layout) -> str:
    """Everything but server addresses: when it is unchanged, servers move by runtime API."""
    bare = spec.model_copy(deep=True)
    for be in bare.haproxy.backends:
        be.servers = []
    sizes = {name: len(slots) for name, slots in layout.slots.items()}
    return repr((bare.to_dict(), layout.addresses, layout.stats_port, dict(layout.frontend_ports), sizes))


@dataclass
class Running:
    """What this manager runs for one pool (the slot it holds and its HAProxy)."""

    pool: str
    slot: int
    instance: Instance
    layout: Layout | None = None
    structure: str = ""
    generation: int = 0
    restarts: int = 0
    failures: int = 0
    rejected: str = ""
    """The last config text HAProxy refused (not retried before `retry_at` unless it changes)."""
    retry_at: float = 0.0
    state: InstanceState = InstanceState.STARTING
    message: str = ""
    applied: str = ""
    """The config text the process runs (== the file on disk)."""
    watcher: asyncio.Task[None] | None = None
    died_at: float | None = None
    frontends: list[PoolFrontendStatus] = field(default_factory=list)
    applied_spec: LoadBalancerPoolSpec | None = None
    """The spec the process runs (the pool's, less any part left out)."""
    partial: tuple[str, LoadBalancerPoolSpec, list[str]] | None = None
    """(the pool's spec, what of it runs, what was left out and why) once parts were left out: the
    same spec is not sorted out again at every reconcile."""
    left_out: list[str] = field(default_factory=list)


@dataclass
class _LeaseSeen:
    resource_version: str
    holder: str
    seen_at: float


class PoolManager:
    """Runs the slots this edge host holds of every LoadBalancerPool."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        identity: str,
        public_address: str,
        private_address: str,
        state_dir: Path,
        haproxy: str = "haproxy",
        lease_duration: int = LEASE_DURATION,
        renew_period: float = RENEW_PERIOD,
        workers: int = 4,
        namespace: str = LB_NAMESPACE,
    ) -> None:
        self.client = client
        self.namespace = namespace
        """Where the slot Leases are: the pod's own namespace (`isthmus pools` passes it)."""
        self.identity = identity
        self.public_address = public_address
        self.private_address = private_address
        self.state_dir = state_dir
        self.haproxy = haproxy
        self.lease_duration = lease_duration
        self.renew_period = renew_period
        self.workers = workers
        self.factory: SharedInformerFactory | None = None
        self.recorder = EventRecorder(client, POOL_MANAGER, instance=identity)
        # Every pool manager works at once: no Lease of its own (its slots have theirs, below).
        self.manager = Manager("pools")
        self.manager.setup(self._wire)
        self.manager.on_stop(self.shutdown)
        self.manager.ready_when(self._first_pass_done)
        self.running: dict[str, Running] = {}
        self.held: dict[str, tuple[int, str]] = {}
        """pool → (slot, lease resourceVersion) this manager holds."""
        self._seen: dict[str, _LeaseSeen] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._invalid: set[str] = set()
        """Pools with names no pool can have, already reported."""
        self._reconciled: set[str] = set()
        """Pools reconciled at least once since start (a slot taken and its HAProxy started, or none free)."""
        metrics.track(self)

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Caches synced, leftover run directories removed, every pool reconciled once."""
        return self.manager.ready

    def _first_pass_done(self) -> bool:
        """Every pool was reconciled once: this manager took the slots it could and its HAProxy
        instances serve. Readiness waits for it because what routes traffic here follows readiness (a
        rollout replaces the next replica once this one is ready; the runc speaker moves the edge
        addresses to a ready replica): ready on synced caches alone, a new replica would be sent
        connections before its instances listen."""
        return all(str(_meta(obj).name) in self._reconciled for obj in self.pools.cache.list()
                   if not _meta(obj).deletionTimestamp)

    async def run(self) -> None:
        await self.manager.run()

    def _wire(self, term: Term) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.factory = term.informers(self.client)
        self.pools = self.factory.informer(PoolResource)
        self.leases = self.factory.informer(Lease, namespace=self.namespace, labels={POOL_LABEL: None})
        self.controller = Controller("pools", self.reconcile, workers=self.workers)
        self.controller.watch(self.pools)
        # Our own renewals change nothing to act on; another holder's Lease (taken, released) does.
        self.controller.watch(self.leases, lambda lease: [] if lease.spec is not None and lease.spec.holderIdentity
                              == self.identity else [(lease.metadata.labels or {}).get(POOL_LABEL, "")])
        self.leases.add_handler(on_add=self._observe, on_update=lambda _o, n: self._observe(n))
        term.on_synced(self._synced)
        term.add(self.controller, self._renew_loop)

    async def _synced(self) -> None:
        self._remove_leftover_run_dirs()
        self._count()

    async def shutdown(self) -> None:
        """Stop every instance, say so in status, and hand the slots back (best effort, bounded)."""
        for pool in list(self.running):
            await self._stop(pool, "the pool manager stopped")
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                for pool in list(self.held):
                    await self._release(pool)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(3):
                await self.recorder.flush()
        if self.factory is not None:
            await self.factory.stop()

    def _run_dir(self, pool: str, slot: int) -> Path:
        return self.state_dir / f"{pool}-{slot}"

    def _remove_leftover_run_dirs(self) -> None:
        """Run directories of pools deleted while no pool manager ran here (their masters, if any
        survived, are stopped first: the pid file says which)."""
        known = {str(_meta(o).name) for o in self.pools.cache.list()}
        for path in self.state_dir.iterdir() if self.state_dir.is_dir() else []:
            pool, _, slot = path.name.rpartition("-")
            if path.is_dir() and slot.isdigit() and pool and pool not in known:
                instance = Instance(self.haproxy, path)
                instance.stop_stale()
                instance.remove()
                log.info("removed the run directory of a deleted pool", extra={"dir": str(path)})

    def _observe(self, lease: Any) -> None:
        spec = lease.spec or LeaseSpec()
        name = lease.metadata.name
        prev = self._seen.get(name)
        rv = lease.metadata.resourceVersion or ""
        if prev is None or prev.resource_version != rv:
            self._seen[name] = _LeaseSeen(rv, spec.holderIdentity or "", time.monotonic())

    def _expired(self, name: str) -> bool:
        seen = self._seen.get(name)
        if seen is None:
            return True
        return not seen.holder or time.monotonic() - seen.seen_at > self.lease_duration

    # -- slots ------------------------------------------------------------------------------------

    def _lease_body(self, pool: str, slot: int, rv: str | None) -> Lease:
        stamp = datetime.now(UTC)
        return Lease(
            metadata=ObjectMeta(name=lease_name(pool, slot), namespace=self.namespace, labels={POOL_LABEL: pool},
                                resourceVersion=rv),
            spec=LeaseSpec(holderIdentity=self.identity, leaseDurationSeconds=self.lease_duration,
                           acquireTime=stamp, renewTime=stamp),
        )  # fmt: skip

    async def _acquire(self, pool: str, count: int) -> int | None:
        """The lowest slot free for us (absent, released or expired Lease), or None."""
        for slot in range(count):
            name = lease_name(pool, slot)
            current = self.leases.cache.get(f"{self.namespace}/{name}")
            try:
                if current is None:
                    created = await self.client.create(self._lease_body(pool, slot, None))
                elif (current.spec and current.spec.holderIdentity == self.identity) or self._expired(name):
                    created = await self.client.replace(self._lease_body(pool, slot, _meta(current).resourceVersion))
                else:
                    continue
            except ApiError as e:
                if e.status.code in (404, 409):
                    continue  # another manager won this slot
                raise
            self.held[pool] = (slot, _meta(created).resourceVersion or "")
            log.info("holding a pool slot", extra={"pool": pool, "slot": slot})
            return slot
        return None

    async def _renew(self, pool: str) -> bool:
        slot, rv = self.held[pool]
        try:
            lease = await self.client.replace(self._lease_body(pool, slot, rv))
        except ApiError as e:
            if e.status.code in (404, 409):
                log.warning("lost a pool slot", extra={"pool": pool, "slot": slot})
                del self.held[pool]
                return False
            raise
        self.held[pool] = (slot, _meta(lease).resourceVersion or "")
        return True

    async def _release(self, pool: str) -> None:
        held = self.held.pop(pool, None)
        if held is None:
            return
        slot, rv = held
        body = self._lease_body(pool, slot, rv)
        assert body.spec is not None
        body.spec.holderIdentity = None
        with contextlib.suppress(ApiError):
            await self.client.replace(body)

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.renew_period)
            for pool in list(self.held):
                try:
                    if not await self._renew(pool):
                        self.controller.enqueue(pool)
                except Exception as e:  # the API is away: keep serving, try again next period
                    log.warning("cannot renew a pool slot", extra={"pool": pool, "error": str(e)})
            # Slots whose holder went quiet: their instance entries are stale (any manager says so),
            # and a pool we hold no slot of may take one over.
            for obj in self.pools.cache.list():
                pool = str(_meta(obj).name)
                if pool not in self.held or self._stale_entries(obj):
                    self.controller.enqueue(pool)

    def _stale_entries(self, obj: Any) -> bool:
        model = LoadBalancerPool.from_dict(obj)
        return any(
            inst.state != InstanceState.PENDING and inst.holder != self.identity
            and self._expired(lease_name(model.name, inst.slot))
            for inst in model.status.instances
        )

    # -- reconcile --------------------------------------------------------------------------------

    async def reconcile(self, pool: str) -> Result | None:
        lock = self._locks.setdefault(pool, asyncio.Lock())
        async with lock:
            result = await self._reconcile(pool)
        self._reconciled.add(pool)
        return result

    async def _reconcile(self, pool: str) -> Result | None:
        obj = self.pools.cache.get(pool)
        if obj is None or obj.metadata is None or obj.metadata.deletionTimestamp:
            await self._stop(pool, "pool deleted", remove=True)
            await self._release(pool)
            self._locks.pop(pool, None)
            for other, other_run in list(self.running.items()):
                if other_run.left_out:  # a port it was left out for may be free now
                    self.controller.enqueue(other)
            self._invalid.discard(pool)
            for counter in POOL_COUNTERS:
                with contextlib.suppress(KeyError):
                    counter.remove(pool)
            return None
        for counter in POOL_COUNTERS:
            counter.labels(pool)  # the series exists at 0 from now on
        model = LoadBalancerPool.from_dict(obj)
        if not is_pool_name(pool):
            await self._invalid_name(model)
            return None
        count = model.spec.count
        held = self.held.get(pool)
        if held is not None and held[0] >= count:  # the pool shrank below our slot
            await self._stop(pool, "slot no longer wanted", remove=True)
            await self._release(pool)
            held = None
        if held is None:
            slot = await self._acquire(pool, count)
            if slot is None:
                await self._stop(pool, "no slot")
                await self._write_status(pool, None)
                return Result(requeue_after=self.renew_period * 2)
        run = await self._converge(model)
        await self._write_status(pool, run)
        if run is not None and run.state == InstanceState.FAILED and not run.instance.running:
            run.failures += 1  # could not start (a port taken, a config HAProxy refuses): retried with backoff
            return Result(requeue_after=min(MAX_RESTART_DELAY, 0.5 * 2.0 ** min(run.failures, 6)))
        if run is not None:
            run.failures = 0
        return None

    async def _converge(self, model: LoadBalancerPool) -> Running | None:
        pool = model.name
        slot = self.held[pool][0]
        run = self.running.get(pool)
        if run is None or run.slot != slot:
            if run is not None:
                await self._stop(pool, "slot changed", remove=True)
            run = Running(pool, slot, Instance(self.haproxy, self._run_dir(pool, slot)))
            self.running[pool] = run
        generation = model.metadata.generation or 0
        # Frontends on ports other pools here bind: left out, judged again at every reconcile (the
        # other pool may go). Parts HAProxy refused: sorted out once per spec (`run.partial`).
        spec, dropped = self._without_taken_ports(pool, model.spec)
        wanted = _spec_key(spec)
        refused: list[str] = []
        if run.partial is not None and run.partial[0] == wanted:
            spec, refused = run.partial[1], run.partial[2]
        else:
            run.partial = None
        checked, text = False, ""
        try:
            layout, text = self._render(pool, spec, run)
            if self._needs_check(run, spec, layout, text):  # a start or a reload: checked first, here
                await run.instance.check(text)
                checked = True
        except (PoolConfigError, HAProxyError) as e:
            if run.partial is not None and run.partial[0] == wanted:
                return self._failed(run, model, str(e), Reason.CONFIG_REJECTED)
            # One owner's part HAProxy refuses must not hold back the others': find whose it is.
            REJECTIONS.labels(pool).inc()
            isolated = await self._isolate(pool, spec, run)
            if isolated is None:  # the pool-level settings themselves: not checked again before the backoff
                if text:
                    run.rejected = text
                    run.retry_at = time.monotonic() + min(MAX_RESTART_DELAY, 0.5 * 2.0 ** min(run.failures + 1, 6))
                return self._failed(run, model, str(e), Reason.CONFIG_REJECTED)
            spec, refused = isolated
            run.partial = (wanted, spec, refused)
            layout, text = self._render(pool, spec, run)
            checked = True
        left_out = [*dropped, *refused]
        if left_out:
            if run.left_out != left_out:
                self.recorder.warning(model, Reason.PARTS_LEFT_OUT, f"slot {slot} on {self.identity} serves the "
                                      f"pool without: {'; '.join(left_out)}"[:1000])  # fmt: skip
        run.left_out = left_out
        if run.instance.running and run.layout is not None and text == run.applied:
            run.generation, run.message = generation, _left_out_message(left_out)
            return run
        if text == run.rejected and time.monotonic() < run.retry_at:
            return run  # the same config failed a moment ago: wait out the backoff (no event storm)
        try:
            if not run.instance.running:
                await run.instance.write_checked(text, checked=checked)
                await run.instance.start()
                if run.died_at is not None:
                    run.restarts += 1
                    RESTARTS.labels(pool).inc()
                    self.recorder.normal(model, Reason.INSTANCE_RESTARTED,
                                         f"slot {slot} on {self.identity}: HAProxy restarted (restart {run.restarts})")
                else:
                    self.recorder.normal(model, Reason.INSTANCE_STARTED,
                                         f"slot {slot} on {self.identity}: HAProxy serves on "
                                         f"{', '.join(layout.addresses)}, stats port {layout.stats_port}")
                run.died_at = None
                run.watcher = asyncio.create_task(self._watch(run), name=f"haproxy {pool}")
            elif run.layout is not None and _structure(spec, layout) == run.structure:
                await run.instance.runtime(_server_commands(run.layout, layout))
                run.instance.write_unchecked(text)
                RUNTIME_UPDATES.labels(pool).inc()
            else:
                await run.instance.write_checked(text, checked=checked)
                await run.instance.reload()
                RELOADS.labels(pool).inc()
        except HAProxyError as e:
            REJECTIONS.labels(pool).inc()
            run.rejected = text
            run.retry_at = time.monotonic() + min(MAX_RESTART_DELAY, 0.5 * 2.0 ** min(run.failures + 1, 6))
            return self._failed(run, model, str(e), Reason.CONFIG_REJECTED)
        run.rejected = ""
        run.layout, run.structure, run.applied = layout, _structure(spec, layout), text
        run.generation, run.state, run.message = generation, InstanceState.RUNNING, _left_out_message(left_out)
        run.applied_spec = spec
        addresses = layout.addresses
        public = is_public(spec.role)
        run.frontends = [
            PoolFrontendStatus(
                name=fe.name, port=layout.frontend_ports[fe.name],
                private_addresses=[a for a in addresses if a == self.private_address],
                public_addresses=[a for a in addresses if public and a == self.public_address],
            )
            for fe in spec.haproxy.frontends
        ]  # fmt: skip
        self._count()
        return run

    @staticmethod
    def _needs_check(run: Running, spec: LoadBalancerPoolSpec, layout: Layout, text: str) -> bool:
        """Whether this config will be started or reloaded (a servers-only change goes through the
        runtime API unchecked; an unchanged or backed-off one is not applied at all)."""
        if run.instance.running and run.layout is not None and text == run.applied:
            return False
        if text == run.rejected and time.monotonic() < run.retry_at:
            return False
        return not (run.instance.running and run.layout is not None and _structure(spec, layout) == run.structure)

    def _render(self, pool: str, spec: LoadBalancerPoolSpec, run: Running) -> tuple[Layout, str]:
        layout = self._layout(pool, spec, run.layout)
        text = render(pool, spec, layout, run.instance.admin_sock, prometheus=has_prometheus_exporter(self.haproxy),
                      max_fds=_hard_file_limit())  # fmt: skip
        return layout, text

    def _without_taken_ports(self, pool: str, spec: LoadBalancerPoolSpec) -> tuple[LoadBalancerPoolSpec, list[str]]:
        """The spec without frontends whose port another pool this manager runs binds on the same
        addresses: that frontend (its owner's, not the pool's) is left out, the rest is served."""
        addresses = instance_addresses(spec.role, self.public_address, self.private_address)
        taken = self._ports_taken(pool, addresses)
        out = spec.model_copy(deep=True)
        left: list[str] = []
        keep = []
        for fe in out.haproxy.frontends:
            holder = taken.get(fe.bind_port) if fe.bind_port else None
            if holder is not None:
                left.append(f"frontend {fe.name}: port {fe.bind_port} on {', '.join(addresses)} is used by pool "
                            f"{holder} on this host")
                continue
            keep.append(fe)
        out.haproxy.frontends = keep
        return out, left

    async def _isolate(self, pool: str, spec: LoadBalancerPoolSpec,
                       run: Running) -> tuple[LoadBalancerPoolSpec, list[str]] | None:
        """The spec with the parts HAProxy refuses left out, owner by owner (an owner's parts are
        its frontends and backends, read from their names as the translator writes them). Starting
        from what runs now, each owner whose parts changed is added in turn and checked; those
        refused keep what they had. None: the pool-level settings themselves are refused."""
        base = (run.applied_spec or LoadBalancerPoolSpec()).model_copy(deep=True)
        base.role, base.network, base.cpus, base.mem, base.count = spec.role, spec.network, spec.cpus, spec.mem, spec.count
        base.cloud_provider_configuration, base.haproxy.stats = spec.cloud_provider_configuration, spec.haproxy.stats
        try:
            await run.instance.check(self._render(pool, base, run)[1])
        except (PoolConfigError, HAProxyError):
            return None
        refused: list[str] = []
        for group in sorted(_groups(spec) | _groups(base)):
            if _parts(spec, group) == _parts(base, group):
                continue
            trial = _with_parts(base, spec, group)
            try:
                await run.instance.check(self._render(pool, trial, run)[1])
            except (PoolConfigError, HAProxyError) as e:
                refused.append(f"{group}: {e}"[:400])
                continue
            base = trial
        return base, refused

    def _failed(self, run: Running, model: LoadBalancerPool, message: str, reason: str) -> Running:
        # A running instance keeps serving its last good config; the status says why the new one is not.
        run.state = InstanceState.RUNNING if run.instance.running else InstanceState.FAILED
        run.message = f"{'kept the previous config: ' if run.instance.running else ''}{message}"
        self.recorder.warning(model, reason, f"slot {run.slot} on {self.identity}: {message}")
        self._count()
        return run

    def _layout(self, pool: str, spec: LoadBalancerPoolSpec, previous: Layout | None) -> Layout:
        addresses = instance_addresses(spec.role, self.public_address, self.private_address)
        if previous is not None and previous.addresses != addresses:
            previous = None  # the role changed: every port is chosen again
        taken = self._ports_taken(pool, addresses)
        fixed_ports = {fe.bind_port for fe in spec.haproxy.frontends if fe.bind_port}
        stats = previous.stats_port if previous is not None else allocate_port(addresses, {*taken, *fixed_ports})
        fixed = {fe.bind_port for fe in spec.haproxy.frontends if fe.bind_port}
        if stats in fixed:  # a frontend now asks for the port the stats page had: the stats page moves
            stats = allocate_port(addresses, {*taken, *fixed})
        ports: dict[str, int] = {}
        for fe in spec.haproxy.frontends:
            if fe.bind_port:
                owner = taken.get(fe.bind_port)
                if owner is not None:
                    raise HAProxyError(f"frontend {fe.name!r}: port {fe.bind_port} on {', '.join(addresses)} "
                                       f"is used by pool {owner} on this host")
                ports[fe.name] = fe.bind_port
            elif previous is not None and fe.name in previous.frontend_ports:
                ports[fe.name] = previous.frontend_ports[fe.name]
            else:
                ports[fe.name] = allocate_port(addresses, {*taken, stats, *ports.values()})
        slots: dict[str, list[Slot]] = {}
        for be in spec.haproxy.backends:
            servers = [(s.address, s.port) for s in be.servers]
            old = previous.slots.get(be.name) if previous is not None else None
            slots[be.name] = assign_slots(servers, old) or assign_slots(servers, None) or []
        return Layout(addresses, stats, ports, slots)

    def _ports_taken(self, pool: str, addresses: tuple[str, ...]) -> dict[int, str]:
        """Ports other pools this manager runs use on any of `addresses` (port → pool)."""
        out: dict[int, str] = {}
        for other, run in self.running.items():
            if other == pool or run.layout is None or not set(run.layout.addresses) & set(addresses):
                continue
            out[run.layout.stats_port] = other
            for port in run.layout.frontend_ports.values():
                out[port] = other
        return out

    async def _watch(self, run: Running) -> None:
        code = await run.instance.wait()
        if self.running.get(run.pool) is not run or run.state == InstanceState.PENDING:
            return  # stopped on purpose
        run.died_at = time.monotonic()
        run.state, run.message = InstanceState.FAILED, f"HAProxy exited with code {code}; restarting"
        run.layout, run.applied = None, ""
        log.warning("HAProxy instance died", extra={"pool": run.pool, "code": code})
        obj = self.pools.cache.get(run.pool)
        if obj is not None:
            self.recorder.warning(obj, Reason.INSTANCE_DIED,
                                  f"slot {run.slot} on {self.identity}: HAProxy exited with code {code}; restarting it")
        self._count()
        self.controller.enqueue_after(run.pool, min(MAX_RESTART_DELAY, 0.5 * 2 ** min(run.restarts, 6)))
        with contextlib.suppress(Exception):
            await self._write_status(run.pool, run)

    async def _stop(self, pool: str, why: str, *, remove: bool = False) -> None:
        """Stop the pool's instance; with `remove` (the pool or our slot of it is gone) its run
        directory goes too, so deleted pools leave nothing on disk."""
        run = self.running.pop(pool, None)
        if run is None:
            if remove and pool in self.held:
                Instance(self.haproxy, self._run_dir(pool, self.held[pool][0])).remove()
            return
        run.state = InstanceState.PENDING
        await run.instance.stop()
        if run.watcher is not None:
            run.watcher.cancel()
        if remove:
            run.instance.remove()
        log.info("stopped a pool instance", extra={"pool": pool, "why": why})
        self._count()

    def _count(self) -> None:
        counts = {s.value: 0 for s in InstanceState}
        for run in self.running.values():
            counts[run.state.value] += 1
        for state, n in counts.items():
            INSTANCES.labels(state).set(n)

    async def _invalid_name(self, model: LoadBalancerPool) -> None:
        """A pool whose name cannot be a pool's (stored before names were matched whole): nothing
        can run it (its slot Lease would be invalid too), so it is reported once, not retried; the
        translator or an admin deletes it (`kubectl delete lbp` with the name %-encoded works)."""
        message = (f"pool name {model.name!r} is not a valid pool name (at most 63 characters of a-z, 0-9 and '-', "
                   "starting and ending with a letter or digit): no instance is started. Next step: delete it and "
                   "use a valid name")  # fmt: skip
        if model.name in self._invalid or any(
            c.type == READY and c.reason == Reason.INVALID_POOL_NAME for c in model.status.conditions
        ):
            return
        self._invalid.add(model.name)  # said once: the apiserver may refuse the Event and status too
        log.warning("a pool has an invalid name: not run", extra={"pool": model.name})
        self.recorder.warning(model, Reason.INVALID_POOL_NAME, message)
        cond = new_condition(READY, False, Reason.INVALID_POOL_NAME, message)
        status = {"conditions": [c.to_dict() for c in merge_conditions(model.status.conditions, [cond])],
                  "ready": f"0/{model.spec.count}"}  # fmt: skip
        try:
            await self.client.patch(PoolResource.Status, api_name(model.name), {"status": status},
                                    patch_type=PatchType.MERGE, field_manager=POOL_MANAGER)  # fmt: skip
        except ApiError as e:  # the apiserver refuses writes to such a name now: the log says it
            log.warning("cannot write the status of a pool with an invalid name",
                        extra={"pool": model.name, "error": e.status.message})

    # -- status -----------------------------------------------------------------------------------

    def _entry(self, run: Running) -> PoolInstanceStatus:
        return PoolInstanceStatus(
            slot=run.slot, state=run.state, holder=self.identity,
            private_address=self.private_address,
            public_address=self.public_address if run.layout is not None and self.public_address in run.layout.addresses
            else "",
            stats_port=run.layout.stats_port if run.layout is not None else 0,
            pid=run.instance.pid if run.instance.running else 0,
            restarts=run.restarts, observed_generation=run.generation, message=run.message,
            frontends=run.frontends if run.state == InstanceState.RUNNING else [],
        )  # fmt: skip

    async def _write_status(self, pool: str, run: Running | None) -> None:
        """Our slot's entry (and Pending for slots whose holder went quiet), then the summary."""
        for _ in range(5):
            try:
                obj = await self.client.get(PoolResource, api_name(pool))
            except ApiError as e:
                if e.status.code == 404:
                    return
                raise
            model = LoadBalancerPool.from_dict(obj)
            instances = {i.slot: i for i in model.status.instances}
            if run is not None:
                old = instances.get(run.slot)
                entry = self._entry(run)
                if old is not None and old.model_dump(exclude={"last_transition_time"}) == entry.model_dump(
                    exclude={"last_transition_time"}
                ):
                    entry.last_transition_time = old.last_transition_time
                else:
                    entry.last_transition_time = now()
                instances[run.slot] = entry
            for slot, inst in list(instances.items()):
                if run is not None and slot == run.slot:
                    continue
                if inst.holder == self.identity or (
                    inst.state != InstanceState.PENDING and self._expired(lease_name(pool, slot))
                ):
                    quiet = "" if inst.holder == self.identity else f"pool manager {inst.holder} stopped renewing; "
                    instances[slot] = PoolInstanceStatus(slot=slot, message=f"{quiet}waiting for a pool manager",
                                                         last_transition_time=now())
            kept = [c for c in model.status.conditions if c.type != STATUS_WRITTEN]  # written now: gone
            summary = summarize_status(model.spec.count, model.metadata.generation or 0, list(instances.values()),
                                       is_public(model.spec.role), kept)
            if summary.to_dict() == model.status.to_dict():
                return
            # A merge patch carrying the resourceVersion read: of two managers writing at once, one
            # gets 409 and writes again on what the other wrote.
            status = summary.to_dict()
            status.setdefault("observedGeneration", None)  # merge patch: an absent field would keep the old one
            body = {"metadata": {"resourceVersion": model.metadata.resource_version}, "status": status}
            try:
                await self.client.patch(PoolResource.Status, api_name(pool), body, patch_type=PatchType.MERGE,
                                        field_manager=POOL_MANAGER)
                return
            except ApiError as e:
                if e.status.code == 404:
                    return
                if e.status.code in (400, 413, 422):  # refused as it is: retrying the same body cannot help
                    await self._status_not_written(model, e)
                    return
                if e.status.code != 409:
                    raise
        log.warning("pool status not written after 5 conflicts", extra={"pool": pool})

    async def _status_not_written(self, model: LoadBalancerPool, error: ApiError) -> None:
        """The apiserver refused the status (too large, invalid): say so in a small status that
        fits (a condition and the printer columns), and once as an Event; written again in full as
        soon as the pool changes so that it fits."""
        why = f"{error.status.code} {error.status.reason or ''}: {error.status.message or ''}".strip()[:500]
        message = (f"the pool manager {self.identity} cannot write this pool's status ({why}); instances and "
                   f"frontends shown here are stale. Next step: fewer instances (count) or frontends per pool")
        cond = new_condition(STATUS_WRITTEN, False, Reason.STATUS_NOT_WRITTEN, message)
        said = [c for c in model.status.conditions if c.type == STATUS_WRITTEN and c.status == "False"]
        if said and said[0].message == message:
            return  # said already: no write, so no watch event to reconcile (and be refused) again
        if not said:
            self.recorder.warning(model, Reason.STATUS_NOT_WRITTEN, message)
        log.warning("pool status refused by the apiserver", extra={"pool": model.name, "error": why})
        conditions: list[Condition] = merge_conditions(model.status.conditions, [cond])
        body = {"metadata": {"resourceVersion": model.metadata.resource_version},
                "status": {"conditions": [c.to_dict() for c in conditions]}}  # fmt: skip
        with contextlib.suppress(ApiError):
            await self.client.patch(PoolResource.Status, api_name(model.name), body, patch_type=PatchType.MERGE,
                                    field_manager=POOL_MANAGER)  # fmt: skip


def _spec_key(spec: LoadBalancerPoolSpec) -> str:
    return json.dumps(spec.to_dict(), sort_keys=True)


def _left_out_message(left_out: list[str]) -> str:
    return f"serving without: {'; '.join(left_out)}"[:1000] if left_out else ""


def _group(name: str, owner: Owner | None) -> str:
    return f"{owner.kind} {owner.namespace}/{owner.name}" if owner is not None else f"part {name}"


def _groups(spec: LoadBalancerPoolSpec) -> set[str]:
    """Each owner of the spec's parts (a part no translator named is its own owner)."""
    return {_group(f.name, frontend_owner(f.name)) for f in spec.haproxy.frontends} | {
        _group(b.name, backend_owner(b.name)) for b in spec.haproxy.backends}  # fmt: skip


def _parts(spec: LoadBalancerPoolSpec, group: str) -> tuple[list[PoolFrontend], list[PoolBackend]]:
    return ([f for f in spec.haproxy.frontends if _group(f.name, frontend_owner(f.name)) == group],
            [b for b in spec.haproxy.backends if _group(b.name, backend_owner(b.name)) == group])  # fmt: skip


def _with_parts(base: LoadBalancerPoolSpec, spec: LoadBalancerPoolSpec, group: str) -> LoadBalancerPoolSpec:
    """`base` with `group`'s parts as `spec` has them."""
    out = base.model_copy(deep=True)
    frontends, backends = _parts(spec, group)
    out.haproxy.frontends = sorted(
        [f for f in out.haproxy.frontends if _group(f.name, frontend_owner(f.name)) != group] + frontends,
        key=lambda f: f.name)  # fmt: skip
    out.haproxy.backends = sorted(
        [b for b in out.haproxy.backends if _group(b.name, backend_owner(b.name)) != group] + backends,
        key=lambda b: b.name)  # fmt: skip
    return out


def _hard_file_limit() -> int | None:
    """The file limit HAProxy (our child) may raise itself to; None when unlimited."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return None if hard == resource.RLIM_INFINITY else int(hard)


def _server_commands(old: Layout, new: Layout) -> list[str]:
    """Runtime-API commands moving servers from `old` slots to `new` ones (same slot counts)."""
    out: list[str] = []
    for backend, slots in new.slots.items():
        before = old.slots.get(backend, [])
        for i, slot in enumerate(slots, 1):
            prev = before[i - 1] if i - 1 < len(before) else Slot()
            if slot == prev:
                continue
            where = f"{backend}/s{i}"
            if slot.address is None:
                out.append(f"set server {where} state maint")
            else:
                out.append(f"set server {where} addr {slot.address} port {slot.port}")
                out.append(f"set server {where} state ready")
    return out
