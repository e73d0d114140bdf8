"""A whole clusterset in one process, for the discovery agent's integration tests.

`ClusterSet` starts a broker and n member clusters as embedded apiservers (random 127.0.0.1
ports, persistent data dirs so `restart()` keeps state), deploys the broker and joins every
cluster through `isthmus.clusterset.membership`, then runs one `isthmus.discovery.agent.Agent` per cluster in
this event loop. Teardown stops every agent and server even when the test failed.

Also here: builders of the objects a user (or kube's own controllers) would write: Services,
kube-controller EndpointSlices, ServiceExports. Polling (`eventually`, `never`) is in tests.harness.polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.mcs import (
    DEFAULT_BROKER_NAMESPACE,
    KUBE_SERVICE_NAME_LABEL,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    USE_CLUSTERSET_IP_ANNOTATION,
    Cluster,
    ConditionType,
    ExportedService,
    ServiceDiscovery,
    ServiceExport,
    ServiceImport,
    ValidReason,
    broker_object_name,
)
from isthmus.apiserver.server import ApiServer
from isthmus.discovery.aggregate import derive
from isthmus.discovery.endpoints import broker_service_import
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer
from tests.harness.polling import eventually

T = TypeVar("T")

SE = resource_for(ServiceExport)
SI = resource_for(ServiceImport)
ES = resource_for(ExportedService)
CLUSTER = resource_for(Cluster)
SD = resource_for(ServiceDiscovery)

BROKER_NS = DEFAULT_BROKER_NAMESPACE
BROKER_TOKEN = "broker-secret-token"
KUBE_MANAGED_BY = "endpointslice-controller.k8s.io"
INVALID_ANNOTATION = str(getattr(ValidReason, "INVALID_ANNOTATION", "InvalidAnnotation"))
"""Contract reason for a malformed use-clusterset-ip value (docs/discovery.md)."""

AGENT_READY_TIMEOUT = 30.0
SETUP_TIMEOUT = 60.0


# --- polling ------------------------------------------------------------------------------------


# --- object builders ----------------------------------------------------------------------------

DEFAULT_PORTS: tuple[dict[str, Any], ...] = ({"name": "http", "port": 80, "targetPort": 8080},)


def _ports(ports: Iterable[dict[str, Any] | int] | None) -> list[dict[str, Any]]:
    out = []
    for p in ports if ports is not None else DEFAULT_PORTS:
        d = {"port": p} if isinstance(p, int) else dict(p)
        d.setdefault("protocol", "TCP")
        out.append(d)
    return out


def service(
    name: str,
    ns: str,
    type: str = "ClusterIP",
    ports: Iterable[dict[str, Any] | int] | None = None,
    cluster_ip: str = "127.10.0.5",
    selector: dict[str, str] | None = None,
    session_affinity: str | None = None,
    headless: bool = False,
    timeout_seconds: int | None = None,
    labels: dict[str, str] | None = None,
) -> Service:
    """A Service as a user writes it, with the ClusterIP kube would have allocated."""
    spec: dict[str, Any] = {"type": type, "selector": selector or {"app": name}}
    if type == "ExternalName":
        spec = {"type": type, "externalName": "db.example.invalid"}
    else:
        ps = _ports(ports)
        if type in ("NodePort", "LoadBalancer"):
            for i, p in enumerate(ps):
                p.setdefault("nodePort", 30000 + (hash((name, ns)) % 2000) + i)
        spec["ports"] = ps
        ip = "None" if headless else cluster_ip
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        if not headless:
            spec["ipFamilies"] = ["IPv4"]
    if session_affinity:
        spec["sessionAffinity"] = session_affinity
        if session_affinity == "ClientIP" and timeout_seconds:
            spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": timeout_seconds}}
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return Service.from_dict({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec})


Endpoint = tuple[str, bool] | tuple[str, bool, str | None]


def endpoint_slice(
    service: str,
    ns: str,
    endpoints: Sequence[Endpoint] = (("127.20.0.1", True, None),),
    ports: Iterable[dict[str, Any] | int] | None = None,
    name: str | None = None,
    node: str = "node-1",
    zone: str = "zone-a",
) -> EndpointSlice:
    """The EndpointSlice kube's EndpointSlice controller would write for `service`.

    `ports` are the target ports (default http/8080), `endpoints` (ip, ready[, hostname]).
    """
    eps = []
    for ep in endpoints:
        ip, ready = ep[0], ep[1]
        hostname = ep[2] if len(ep) > 2 else None
        e: dict[str, Any] = {
            "addresses": [ip],
            "conditions": {"ready": ready, "serving": ready, "terminating": False},
            "nodeName": node,
            "zone": zone,
        }
        if hostname:
            e["hostname"] = hostname
        eps.append(e)
    target_ports = _ports(ports) if ports is not None else [{"name": "http", "port": 8080, "protocol": "TCP"}]
    return EndpointSlice.from_dict(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name or f"{service}-kube1",
                "namespace": ns,
                "labels": {KUBE_SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: KUBE_MANAGED_BY},
            },
            "addressType": "IPv4",
            "endpoints": eps,
            "ports": target_ports,
        }
    )


def service_export(
    name: str,
    ns: str,
    use_clusterset_ip: str | None = None,
    exported_labels: dict[str, str] | None = None,
    exported_annotations: dict[str, str] | None = None,
) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if use_clusterset_ip is not None:
        meta["annotations"] = {USE_CLUSTERSET_IP_ANNOTATION: use_clusterset_ip}
    spec: dict[str, Any] = {}
    if exported_labels is not None:
        spec["exportedLabels"] = exported_labels
    if exported_annotations is not None:
        spec["exportedAnnotations"] = exported_annotations
    return SE.from_dict(
        {"apiVersion": ServiceExport.crd.api_version, "kind": "ServiceExport", "metadata": meta, "spec": spec}
    )


# --- reading helpers ----------------------------------------------------------------------------


def as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    d: dict[str, Any] = obj.to_dict()
    return d


def condition(obj: Any, type_: str) -> dict[str, Any] | None:
    for c in (as_dict(obj).get("status") or {}).get("conditions") or []:
        if c.get("type") == str(type_):
            return dict(c)
    return None


def cond_is(obj: Any, type_: str, status: str, reason: str | None = None) -> bool:
    c = condition(obj, type_)
    if c is None or c.get("status") != status:
        return False
    return reason is None or c.get("reason") == str(reason)


def reasons(obj: Any, type_: str = ConditionType.CONFLICT) -> set[str]:
    c = condition(obj, type_)
    return set((c or {}).get("reason", "").split(",")) - {""}


def clusters_of(si: Any) -> list[str]:
    return sorted(c["cluster"] for c in (as_dict(si).get("status") or {}).get("clusters") or [])


def ips_of(si: Any) -> list[str]:
    return list((as_dict(si).get("spec") or {}).get("ips") or [])


def ports_of(obj: Any) -> dict[str | None, dict[str, Any]]:
    d = as_dict(obj)
    ports = (d.get("spec") or {}).get("ports") if "spec" in d else d.get("ports")
    return {p.get("name"): p for p in ports or []}


def annotations_of(obj: Any) -> dict[str, str]:
    return dict((as_dict(obj).get("metadata") or {}).get("annotations") or {})


def labels_of(obj: Any) -> dict[str, str]:
    return dict((as_dict(obj).get("metadata") or {}).get("labels") or {})


def addresses_of(slice_: Any) -> list[str]:
    return sorted(a for e in as_dict(slice_).get("endpoints") or [] for a in e.get("addresses") or [])


def ip_in(ip: str, cidr: str) -> bool:
    return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)


def ip_add(ip: str, n: int) -> str:
    return str(ipaddress.ip_address(ip) + n)


async def get_or_none(
    client: AsyncClient, res: Any, name: str, ns: str | None = None
) -> dict[str, Any] | None:
    try:
        return as_dict(await client.get(res, name, namespace=ns))
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


async def list_dicts(
    client: AsyncClient, res: Any, ns: str | None = None, labels: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    return [as_dict(o) async for o in client.list(res, namespace=ns, labels=labels)]


# --- the clusterset -----------------------------------------------------------------------------


@dataclass
class Member:
    index: int
    id: str
    server: RunningApiServer
    client: AsyncClient
    agent: Any = None
    task: asyncio.Task[Any] | None = None
    cluster: Any = None
    """What join returned (the broker's Cluster object)."""
    extra_agents: list[tuple[Any, asyncio.Task[Any]]] = field(default_factory=list)

    @property
    def cidr(self) -> str:
        c = as_dict(self.cluster)
        cidrs = (c.get("spec") or {}).get("clustersetIPCIDR") or []
        return str(cidrs[0])


class ClusterSet:
    def __init__(
        self,
        tmp_path: Path,
        n: int = 3,
        enable_clusterset_ip: bool = False,
        cidrs: Sequence[str | None] | None = None,
        *,
        cluster_enable: Sequence[bool | None] | None = None,
        cidr_range: list[str] | None = None,
        start_agents: bool = True,
    ) -> None:
        self.tmp_path = tmp_path
        self.n = n
        self.enable_clusterset_ip = enable_clusterset_ip
        self.cidrs = list(cidrs) if cidrs is not None else [None] * n
        self.cluster_enable = list(cluster_enable) if cluster_enable is not None else [None] * n
        self.cidr_range = cidr_range
        self.start_agents = start_agents
        self.broker: RunningApiServer | None = None
        self.broker_client: AsyncClient = None  # type: ignore[assignment]
        self.info: Any = None
        self.clusters: list[Member] = []
        self._servers: list[RunningApiServer] = []
        self._broker_port: int | None = None
        self.member_credentials = True
        """Each member gets its own broker ServiceAccount token (join with the admin client), so every
        agent runs under the broker's member Role and write policy, as on a real broker."""

    # ---- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> ClusterSet:
        try:
            async with asyncio.timeout(SETUP_TIMEOUT):
                await self._setup()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _new_server(self, name: str, **kwargs: Any) -> RunningApiServer:
        srv = RunningApiServer(self.tmp_path / name, bookmark_interval=1.0, **kwargs)
        self._servers.append(srv)
        await srv.start()
        return srv

    async def _setup(self) -> None:
        from isthmus.clusterset.broker import deploy_broker

        self.broker = await self._new_server("broker", token=BROKER_TOKEN)
        self.broker_client = self.broker.client()
        self.info = await deploy_broker(
            self.broker_client,
            namespace=BROKER_NS,
            enable_clusterset_ip=self.enable_clusterset_ip,
            cidr_range=self.cidr_range,
            server_url=self.broker.url,
            ca_pem=self.broker.server.ca_pem.decode() if self.broker.server.ca_pem else None,
        )
        for i in range(self.n):
            await self.add_cluster(
                f"c{i + 1}", cidr=self.cidrs[i], enable=self.cluster_enable[i], start_agent=False
            )
        if self.start_agents:
            await asyncio.gather(*(self.start_agent(i) for i in range(len(self.clusters))))

    async def add_cluster(
        self,
        cluster_id: str,
        *,
        cidr: str | None = None,
        enable: bool | None = None,
        start_agent: bool = True,
        dirname: str | None = None,
    ) -> Member:
        """Start a new member apiserver, join it as `cluster_id`, and (by default) start its agent."""
        from isthmus.clusterset import membership as joinmod

        srv = await self._new_server(dirname or cluster_id)
        client = srv.client()
        cluster = await joinmod.join(
            self.broker_client,
            client,
            self.info,
            cluster_id=cluster_id,
            enable_clusterset_ip=enable,
            clusterset_ip_cidr=cidr,
            force=False,
            member_credentials=self.member_credentials,
        )
        m = Member(index=len(self.clusters), id=cluster_id, server=srv, client=client, cluster=cluster)
        self.clusters.append(m)
        if start_agent:
            await self.start_agent(m.index)
        return m

    async def _start_agent_obj(self, m: Member) -> tuple[Any, asyncio.Task[Any]]:
        from isthmus.discovery.agent import Agent

        agent = await Agent.from_cluster(m.client, m.id)
        task = asyncio.create_task(agent.run(), name=f"agent-{m.id}")
        return agent, task

    async def start_agent(self, i: int, wait: bool = True) -> Any:
        m = self.clusters[i]
        assert m.task is None or m.task.done(), f"agent of {m.id} already running"
        m.agent, m.task = await self._start_agent_obj(m)
        if wait:
            await self.wait_agent_ready(m.agent, m.task)
        return m.agent

    async def start_extra_agent(self, i: int, wait: float | None = None) -> Any:
        """A second agent for the same cluster (leader-election races); stopped at teardown."""
        m = self.clusters[i]
        agent, task = await self._start_agent_obj(m)
        m.extra_agents.append((agent, task))
        if wait:
            with contextlib.suppress(TimeoutError):
                await self.wait_agent_ready(agent, task, within=wait)
        return agent

    @staticmethod
    async def wait_agent_ready(
        agent: Any, task: asyncio.Task[Any], within: float = AGENT_READY_TIMEOUT
    ) -> None:
        ready = asyncio.ensure_future(agent.wait_ready())
        try:
            async with asyncio.timeout(within):
                done, _ = await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not ready.done():
                ready.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ready
        if task in done and ready not in done:
            task.result()  # the agent crashed: raise its error
            raise AssertionError("agent.run() returned before the agent was ready")
        ready.result()

    @staticmethod
    async def _stop(agent: Any, task: asyncio.Task[Any] | None) -> None:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
                async with asyncio.timeout(10):
                    await task
        broker = getattr(agent, "broker", None)  # the agent's own broker client (from broker-info)
        if isinstance(broker, AsyncClient):
            with contextlib.suppress(Exception):
                await broker.close()
        for meth in ("aclose", "close", "stop"):
            fn = getattr(agent, meth, None)
            if callable(fn):
                with contextlib.suppress(Exception):
                    res = fn()
                    if asyncio.iscoroutine(res):
                        async with asyncio.timeout(5):
                            await res
                break

    async def stop_extra_agents(self, i: int) -> None:
        m = self.clusters[i]
        for agent, task in m.extra_agents:
            await self._stop(agent, task)
        m.extra_agents.clear()

    async def spare_server(self, name: str) -> tuple[RunningApiServer, AsyncClient]:
        """A fresh member apiserver that has not joined (bad-join tests); closed at teardown."""
        srv = await self._new_server(name)
        return srv, srv.client()

    async def stop_agent(self, i: int) -> None:
        m = self.clusters[i]
        await self._stop(m.agent, m.task)
        m.task = None

    async def restart_agent(self, i: int) -> Any:
        await self.stop_agent(i)
        return await self.start_agent(i)

    def agent_error(self, i: int) -> BaseException | None:
        t = self.clusters[i].task
        if t is not None and t.done() and not t.cancelled():
            return t.exception()
        return None

    async def restart_broker(self) -> None:
        assert self.broker is not None
        await self.broker.restart()

    async def stop_broker(self) -> None:
        assert self.broker is not None
        self._broker_port = self.broker.server.port
        await self.broker.stop()

    async def start_broker(self) -> None:
        assert self.broker is not None and self._broker_port is not None
        b = self.broker
        b.server = ApiServer(data_dir=b.data_dir, **{**b.kwargs, "port": self._broker_port})
        await b.start()

    async def leave(self, i: int) -> Any:
        """Uninstall cluster i: stop its agent(s), then `isthmus.clusterset.membership.leave`."""
        from isthmus.clusterset import membership as joinmod

        m = self.clusters[i]
        await self.stop_agent(i)
        for agent, task in m.extra_agents:
            await self._stop(agent, task)
        m.extra_agents.clear()
        return await joinmod.leave(self.broker_client, m.client, self.info.namespace, m.id)

    async def close(self) -> None:
        for m in self.clusters:
            for agent, task in m.extra_agents:
                await self._stop(agent, task)
            await self._stop(m.agent, m.task)
        for srv in reversed(self._servers):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await srv.close()

    # ---- writes in member clusters --------------------------------------------------------------

    def c(self, i: int) -> AsyncClient:
        return self.clusters[i].client

    async def ensure_namespace(self, i: int, ns: str) -> None:
        try:
            await self.c(i).create(Namespace.from_dict({"metadata": {"name": ns}}))
        except ApiError as err:
            if err.status.code != 409:
                raise

    async def put(self, i: int, obj: Any) -> dict[str, Any]:
        """Create, or replace the existing object of that name."""
        client = self.c(i)
        ns = obj.metadata.namespace
        try:
            return as_dict(await client.create(obj, namespace=ns))
        except ApiError as err:
            if err.status.code != 409:
                raise
        current = await client.get(type(obj), obj.metadata.name, namespace=ns)
        obj.metadata.resourceVersion = current.metadata.resourceVersion
        return as_dict(await client.replace(obj, namespace=ns))

    async def delete(self, i: int, res: Any, name: str, ns: str) -> None:
        with contextlib.suppress(ApiError):
            await self.c(i).delete(res, name, namespace=ns)

    async def patch(self, i: int, res: Any, name: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        return as_dict(await self.c(i).patch(res, name, body, namespace=ns, patch_type=PatchType.MERGE))

    async def export(
        self,
        i: int,
        name: str,
        ns: str,
        *,
        svc: Service | None = None,
        endpoints: Sequence[Endpoint] | None = (("127.20.0.1", True, None),),
        slice_ports: Iterable[dict[str, Any] | int] | None = None,
        use_clusterset_ip: str | None = None,
        exported_labels: dict[str, str] | None = None,
        exported_annotations: dict[str, str] | None = None,
        create_export: bool = True,
    ) -> None:
        """Namespace + Service + kube EndpointSlice + ServiceExport in cluster i."""
        await self.ensure_namespace(i, ns)
        await self.put(i, svc if svc is not None else service(name, ns))
        if endpoints is not None:
            await self.put(i, endpoint_slice(name, ns, endpoints, ports=slice_ports))
        if create_export:
            await self.put(
                i,
                service_export(
                    name,
                    ns,
                    use_clusterset_ip=use_clusterset_ip,
                    exported_labels=exported_labels,
                    exported_annotations=exported_annotations,
                ),
            )

    async def unexport(self, i: int, name: str, ns: str) -> None:
        await self.delete(i, SE, name, ns)

    # ---- reads ------------------------------------------------------------------------------------

    async def get_export(self, i: int, name: str, ns: str) -> dict[str, Any] | None:
        return await get_or_none(self.c(i), SE, name, ns)

    async def local_import(self, i: int, name: str, ns: str) -> dict[str, Any] | None:
        return await get_or_none(self.c(i), SI, name, ns)

    async def broker_import(self, name: str, ns: str) -> dict[str, Any] | None:
        """The aggregated ServiceImport of `ns/name` as every reader derives it from the broker's
        ExportedServices (the same pure function the agents use; none is stored on the broker)."""
        return _derived(await self.exported_services(name, ns), name, ns)

    async def broker_imports(self) -> list[dict[str, Any]]:
        """Every derived aggregate (see broker_import)."""
        by_service: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for o in await list_dicts(self.broker_client, ES, BROKER_NS):
            spec = o.get("spec") or {}
            by_service.setdefault((spec.get("serviceName", ""), spec.get("serviceNamespace", "")), []).append(o)
        out = [_derived(items, name, ns) for (name, ns), items in sorted(by_service.items())]
        return [o for o in out if o is not None]

    async def exported_services(self, name: str, ns: str) -> list[dict[str, Any]]:
        items = await list_dicts(self.broker_client, ES, BROKER_NS)
        return [
            o
            for o in items
            if (o.get("spec") or {}).get("serviceName") == name
            and (o.get("spec") or {}).get("serviceNamespace") == ns
        ]

    async def broker_slices(self, name: str, ns: str) -> list[dict[str, Any]]:
        return await list_dicts(
            self.broker_client,
            EndpointSlice,
            BROKER_NS,
            labels={SERVICE_NAME_LABEL: name, SOURCE_NAMESPACE_LABEL: ns},
        )

    async def imported_slices(self, i: int, name: str, ns: str) -> dict[str, dict[str, Any]]:
        """Isthmus-made slices for `name` in cluster i, keyed by source cluster."""
        items = await list_dicts(self.c(i), EndpointSlice, ns, labels={SERVICE_NAME_LABEL: name})
        out: dict[str, dict[str, Any]] = {}
        for s in items:
            src = labels_of(s).get(SOURCE_CLUSTER_LABEL, "?")
            assert src not in out, f"two imported slices from {src} for {ns}/{name} in {self.clusters[i].id}"
            out[src] = s
        return out

    async def all_slices(self, i: int, ns: str) -> list[dict[str, Any]]:
        return await list_dicts(self.c(i), EndpointSlice, ns)

    # ---- common waits -----------------------------------------------------------------------------

    async def wait_condition(
        self,
        i: int,
        name: str,
        ns: str,
        type_: str,
        status: str,
        reason: str | None = None,
        within: float = 10.0,
    ) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            se = await self.get_export(i, name, ns)
            assert se is not None, "no ServiceExport"
            assert cond_is(se, type_, status, reason), f"{type_} is {condition(se, type_)}"
            return se

        return await eventually(check, within, what=f"{self.clusters[i].id} {ns}/{name} {type_}={status}")

    async def wait_exported(self, i: int, name: str, ns: str, within: float = 10.0) -> dict[str, Any]:
        """Ready=True in cluster i and cluster i in the aggregate's status.clusters."""
        await self.wait_condition(i, name, ns, ConditionType.READY, "True", within=within)

        async def agg() -> dict[str, Any] | None:
            si = await self.broker_import(name, ns)
            assert si is not None, "no aggregate ServiceImport on the broker"
            assert self.clusters[i].id in clusters_of(si), f"clusters={clusters_of(si)}"
            return si

        return await eventually(agg, within)

    async def wait_aggregate(
        self,
        name: str,
        ns: str,
        clusters: Iterable[str],
        within: float = 10.0,
    ) -> dict[str, Any]:
        want = sorted(clusters)

        async def agg() -> dict[str, Any] | None:
            si = await self.broker_import(name, ns)
            assert si is not None, "no aggregate ServiceImport on the broker"
            assert clusters_of(si) == want, f"clusters={clusters_of(si)} want {want}"
            return si

        return await eventually(agg, within)

    async def wait_import(
        self,
        i: int,
        name: str,
        ns: str,
        clusters: Iterable[str] | None = None,
        within: float = 10.0,
    ) -> dict[str, Any]:
        want = sorted(clusters) if clusters is not None else None

        async def imp() -> dict[str, Any] | None:
            si = await self.local_import(i, name, ns)
            assert si is not None, f"no ServiceImport {ns}/{name} in {self.clusters[i].id}"
            if want is not None:
                assert clusters_of(si) == want, f"clusters={clusters_of(si)} want {want}"
            return si

        return await eventually(imp, within)

    async def wait_gone(self, i: int | None, res: Any, name: str, ns: str, within: float = 10.0) -> None:
        client = self.broker_client if i is None else self.c(i)

        async def gone() -> bool:
            return await get_or_none(client, res, name, ns) is None

        await eventually(gone, within, what=f"{res.__name__} {ns}/{name} deleted")

    async def vip_of(self, name: str, ns: str, within: float = 10.0) -> str:
        """The aggregate's single VIP (waits for it)."""

        async def vip() -> str:
            si = await self.broker_import(name, ns)
            assert si is not None, "no aggregate"
            ips = ips_of(si)
            assert len(ips) == 1, f"ips={ips}"
            return ips[0]

        return await eventually(vip, within)


def _derived(items: list[dict[str, Any]], name: str, ns: str) -> dict[str, Any] | None:
    """The aggregate derived from ExportedService dicts of one service: only views labelled with the
    cluster their spec names, under its canonical name (as the agents read them)."""
    specs = [ExportedService.from_dict(o).spec for o in items
             if labels_of(o).get(SOURCE_CLUSTER_LABEL) == (o.get("spec") or {}).get("cluster")
             and o["metadata"]["name"] == broker_object_name(name, ns, (o.get("spec") or {}).get("cluster", ""))]
    derived = derive(specs)
    if derived is None:
        return None
    obj = broker_service_import(derived.result, service=name, namespace=ns, vip_enabled=derived.vip_enabled,
                                allocated_by=derived.allocated_by)
    obj.metadata.namespace = BROKER_NS
    return as_dict(obj)
