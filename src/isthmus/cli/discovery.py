"""Discovery control-plane commands: deploy-broker, join, leave, export, unexport, show.

Flags, clients and printing only; the work is in `isthmus.mcs.join`. Every user error (bad CIDR,
taken ID, unreadable broker-info, unreachable API) ends as one `error: ...` line and exit code 2.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx2
import typer
from lightkube import ApiError, AsyncClient
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand
from typer.exceptions import TyperException

from isthmus.api.base import now
from isthmus.api.mcs import DEFAULT_BROKER_NAMESPACE
from isthmus.cli.app import app, fail
from isthmus.kube.client import KubeConfigError, load_config, make_client
from isthmus.mcs import join as mcs
from isthmus.mcs.brokerinfo import BrokerInfo, access_from_config

T = TypeVar("T")

KubeconfigOpt = Annotated[
    Path | None, typer.Option("--kubeconfig", help="Kubeconfig of the cluster (default: $KUBECONFIG).")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: current).")]
GlobalnetOpt = Annotated[
    bool, typer.Option("--globalnet", help="Not supported with ClusterSet IPs; rejected with an explanation.")
]
STALE_HEARTBEAT_SECONDS = 30


# --- plumbing -----------------------------------------------------------------------------------


class OneLineErrors(TyperCommand):
    """Usage errors (unknown option, missing or malformed value) as one `error: ...` line, exit 2,
    like every other user error of these commands, instead of click's usage box."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except TyperException as err:
            raise fail(f"{err} (see `isthmus {self.name} --help`)") from None


def _api_message(err: ApiError) -> str:
    status = err.status
    code = status.code if status is not None else None
    url = _url_of(err)
    where = f" at {url}" if url else ""
    if code == 401:
        return f"the API server{where} rejected the credentials (401 Unauthorized): check the token"
    if code == 403:
        return f"the API server{where} refused: {status.message} (403 Forbidden)"
    reason = f"{code} {status.reason}" if status is not None and status.reason else str(code)
    return f"the API server{where} answered {reason}: {status.message if status is not None else err}"


def _url_of(err: httpx2.HTTPError) -> str:
    try:
        url = err.request.url
    except RuntimeError:
        return ""
    return f"{url.scheme}://{url.host}:{url.port}" if url.port else f"{url.scheme}://{url.host}"


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine, turning every expected failure into `error: ...` + exit 2."""
    try:
        return asyncio.run(coro)
    except (mcs.DiscoveryError, KubeConfigError, ValueError) as err:
        raise fail(str(err)) from None
    except ApiError as err:
        raise fail(_api_message(err)) from None
    except httpx2.HTTPError as err:
        url = _url_of(err)
        raise fail(f"cannot reach the API server{' at ' + url if url else ''}: {err or type(err).__name__}") from None
    except TimeoutError:
        raise fail("timed out waiting for the API server") from None
    except OSError as err:  # e.g. TLS files, sockets outside httpx
        raise fail(f"{err.strerror or err}") from None


async def _with_clients(
    factories: list[Callable[[], AsyncClient]], body: Callable[..., Awaitable[T]]
) -> T:
    """Open the clients, run `body(*clients)`, always close them."""
    clients: list[AsyncClient] = []
    try:
        for make in factories:
            clients.append(make())
        return await body(*clients)
    finally:
        for c in clients:
            try:
                await c.close()
            except Exception:  # closing must never hide the real outcome
                pass


def _cluster_factory(kubeconfig: Path | None, context: str | None) -> Callable[[], AsyncClient]:
    return lambda: make_client(kubeconfig, context, field_manager=mcs.FIELD_MANAGER)


def _read_broker_info(path: Path) -> BrokerInfo:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise fail(f"cannot read broker-info {path}: {reason}") from None
    try:
        return BrokerInfo.decode(text)
    except ValueError as err:
        raise fail(f"{path}: {err}") from None


def _namespace(kubeconfig: Path | None, context: str | None, namespace: str | None) -> str:
    if namespace:
        return namespace
    try:
        return load_config(kubeconfig, context).namespace
    except KubeConfigError as err:
        raise fail(str(err)) from None


def _on_off(value: bool) -> str:
    return "on" if value else "off"


# --- deploy-broker ------------------------------------------------------------------------------


@app.command("deploy-broker", cls=OneLineErrors)
def deploy_broker(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: Annotated[
        str, typer.Option("--namespace", help="Broker namespace holding the clusterset's objects.")
    ] = DEFAULT_BROKER_NAMESPACE,
    enable_clusterset_ip: Annotated[
        bool,
        typer.Option("--enable-clusterset-ip", help="Export services with a ClusterSet IP (VIP) by default."),
    ] = False,
    cidr_range: Annotated[
        list[str] | None,
        typer.Option(
            "--clusterset-ip-cidr-range",
            help="ClusterSet IP range(s); repeat or comma-separate. Default 243.0.0.0/8.",
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the broker-info document.")
    ] = Path("broker-info.subm"),
    globalnet: GlobalnetOpt = False,
) -> None:
    """Set up the broker on the API of --kubeconfig and write broker-info.subm for `isthmus join`."""
    if globalnet:
        raise fail(mcs.GLOBALNET_UNSUPPORTED)
    try:
        server, ca_pem, token = access_from_config(load_config(kubeconfig, context))
    except (KubeConfigError, ValueError) as err:
        raise fail(str(err)) from None

    async def body(client: AsyncClient) -> BrokerInfo:
        return await mcs.deploy_broker(
            client,
            namespace=namespace,
            enable_clusterset_ip=enable_clusterset_ip,
            cidr_range=cidr_range,
            server_url=server,
            ca_pem=ca_pem,
            token=token,
        )

    info = _run(_with_clients([_cluster_factory(kubeconfig, context)], body))
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it carries the broker token
        with os.fdopen(fd, "w") as f:
            f.write(info.encode() + "\n")
    except OSError as err:
        raise fail(f"cannot write {output}: {err.strerror or err}") from None
    typer.echo(f"broker ready in namespace {info.namespace} of {info.server}")
    typer.echo(
        f"  ClusterSet IP by default: {_on_off(info.clusterset_ip_enabled)}; "
        f"range {', '.join(info.clusterset_ip_cidr_range)}"
    )
    typer.echo(f"  wrote {output} (it holds the broker's credentials: share it only with joining clusters)")
    if token is None:
        typer.echo("note: the kubeconfig's user has no token: clusters will reach the broker without one", err=True)


# --- join ---------------------------------------------------------------------------------------


@app.command("join", cls=OneLineErrors)
def join(
    broker_info: Annotated[Path, typer.Argument(help="The broker-info.subm written by deploy-broker.")],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    cluster_id: Annotated[
        str | None, typer.Option("--cluster-id", help="This cluster's ID: a DNS-1123 label, unique in the clusterset.")
    ] = None,
    enable_clusterset_ip: Annotated[
        bool | None,
        typer.Option(
            "--enable-clusterset-ip/--disable-clusterset-ip",
            help="This cluster's default for exports without the annotation (default: the broker's).",
            show_default=False,
        ),
    ] = None,
    clusterset_ip_cidr: Annotated[
        str | None,
        typer.Option("--clusterset-ip-cidr", help="This cluster's VIP block (default: the first free /16 of the range)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing registration (other CIDR, taken ID, other ID).")
    ] = False,
    globalnet: GlobalnetOpt = False,
) -> None:
    """Join this cluster to the clusterset described by BROKER_INFO."""
    if globalnet:
        raise fail(mcs.GLOBALNET_UNSUPPORTED)
    if not cluster_id:
        raise fail("--cluster-id is required (a DNS-1123 label naming this cluster in the clusterset)")
    info = _read_broker_info(broker_info)

    async def body(broker: AsyncClient, cluster: AsyncClient) -> tuple[Any, bool]:
        registered = await mcs.join(
            broker,
            cluster,
            info,
            cluster_id=cluster_id,
            enable_clusterset_ip=enable_clusterset_ip,
            clusterset_ip_cidr=clusterset_ip_cidr,
            force=force,
        )
        broker_obj = await mcs.get_broker(broker, info.namespace)
        return registered, broker_obj.spec.clusterset_ip_enabled

    cluster, broker_default = _run(_with_clients([info.client, _cluster_factory(kubeconfig, context)], body))
    own = cluster.spec.clusterset_ip_enabled
    default = f"{_on_off(own)} (this cluster's setting)" if own is not None else f"{_on_off(broker_default)} (broker's setting)"
    typer.echo(f"cluster {cluster.name} joined the clusterset at {info.server}")
    typer.echo(f"  clusterset IP CIDR: {', '.join(cluster.spec.clusterset_ip_cidr)}")
    typer.echo(f"  ClusterSet IP by default: {default}")


# --- leave --------------------------------------------------------------------------------------


@app.command("leave", cls=OneLineErrors)
def leave(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    broker_info: Annotated[
        Path | None,
        typer.Option("--broker-info", help="Clean a cluster that is gone off the broker (with --cluster-id)."),
    ] = None,
    cluster_id: Annotated[str | None, typer.Option("--cluster-id", help="The cluster to remove.")] = None,
) -> None:
    """Leave the clusterset: this cluster (--kubeconfig), or a dead one (--broker-info, --cluster-id)."""
    if broker_info is not None:
        if not cluster_id:
            raise fail("--broker-info needs --cluster-id: the cluster to remove from the broker")
        if kubeconfig is not None:
            raise fail("use either --kubeconfig (this cluster leaves) or --broker-info (remove a dead cluster)")
        info = _read_broker_info(broker_info)
        gone_id: str = cluster_id

        async def broker_only(broker: AsyncClient) -> tuple[mcs.LeaveResult, list[str]]:
            result = await mcs.leave(broker, None, info.namespace, gone_id)
            members = [] if result.deregistered else [r.cluster_id for r in await mcs.cluster_rows(broker, info.namespace)]
            return result, members

        result, members = _run(_with_clients([info.client], broker_only))
        if not result.deregistered:
            known = ", ".join(members) or "none"
            raise fail(f"cluster {gone_id!r} is not registered on the broker (members: {known})")
        typer.echo(f"cluster {gone_id} removed from the broker; its exports and endpoints are garbage-collected")
        return

    async def this_cluster(cluster: AsyncClient) -> mcs.LeaveResult:
        joined_as, info = await mcs.membership(cluster)
        if cluster_id and cluster_id != joined_as:
            raise mcs.DiscoveryError(f"this cluster joined as {joined_as!r}, not {cluster_id!r}")
        broker = info.client()
        try:
            return await mcs.leave(broker, cluster, info.namespace, joined_as)
        finally:
            await broker.close()

    result = _run(_with_clients([_cluster_factory(kubeconfig, context)], this_cluster))
    registered = "removed from the broker" if result.deregistered else "was not registered on the broker"
    typer.echo(f"cluster {result.cluster_id} left the clusterset: {registered}; "
               f"{result.local_objects} local object(s) deleted")


# --- export / unexport --------------------------------------------------------------------------


def _parse_bool(value: str | None, flag: str) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise fail(f"{flag} must be true or false, not {value!r}")


@app.command("export", cls=OneLineErrors)
def export(
    name: Annotated[str, typer.Argument(help="The Service to export (the ServiceExport gets its name).")],
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")] = None,
    use_clusterset_ip: Annotated[
        str | None,
        typer.Option(
            "--use-clusterset-ip",
            metavar="true|false",
            help="Set the use-clusterset-ip annotation (default: the cluster's setting applies).",
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Export a Service to the clusterset (creates its ServiceExport)."""
    use = _parse_bool(use_clusterset_ip, "--use-clusterset-ip")
    ns = _namespace(kubeconfig, context, namespace)

    async def body(client: AsyncClient) -> str:
        _, change = await mcs.export(client, name, ns, use)
        return change

    change = _run(_with_clients([_cluster_factory(kubeconfig, context)], body))
    typer.echo(f"serviceexport {ns}/{name} {change}")


@app.command("unexport", cls=OneLineErrors)
def unexport(
    name: Annotated[str, typer.Argument(help="The exported Service.")],
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Withdraw a Service from the clusterset (deletes its ServiceExport)."""
    ns = _namespace(kubeconfig, context, namespace)

    async def body(client: AsyncClient) -> bool:
        return await mcs.unexport(client, name, ns)

    if not _run(_with_clients([_cluster_factory(kubeconfig, context)], body)):
        raise fail(f"serviceexport {ns}/{name} not found")
    typer.echo(f"serviceexport {ns}/{name} deleted")


# --- show ---------------------------------------------------------------------------------------

SHOW_WHAT = ("clusters", "exports", "imports")


def _age(at: datetime | None, ref: datetime) -> str:
    """kubectl-style age: 45s, 12m, 3h, 5d."""
    if at is None:
        return "-"
    secs = max(0, int((ref - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _cond(view: mcs.ConditionView | None) -> str:
    return "-" if view is None else f"{view.status} {view.reason}".strip()


def _print_table(table: Table) -> None:
    console = Console()
    if not console.is_terminal:  # pipes and files: never squeeze or wrap columns
        console = Console(width=1000)
    console.print(table)


def _new_table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


@app.command("show", cls=OneLineErrors)
def show(
    what: Annotated[str, typer.Argument(metavar="clusters|exports|imports", help="What to list.")],
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace (exports, imports).")] = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")] = False,
    output: Annotated[str, typer.Option("--output", "-o", metavar="table|json", help="Output format.")] = "table",
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    broker_info: Annotated[
        Path | None, typer.Option("--broker-info", help="clusters: ask this broker instead of the cluster's.")
    ] = None,
) -> None:
    """List the clusterset's clusters, this cluster's exports (with their conditions) or its imports."""
    if what not in SHOW_WHAT:
        raise fail(f"cannot show {what!r}: choose one of {', '.join(SHOW_WHAT)}")
    if output not in ("table", "json"):
        raise fail(f"--output must be table or json, not {output!r}")
    if namespace and all_namespaces:
        raise fail("use either --namespace or --all-namespaces")
    ref = now()
    if what == "clusters":
        _show_clusters(kubeconfig, context, broker_info, output, ref)
        return
    ns = None if all_namespaces else _namespace(kubeconfig, context, namespace)

    async def body(client: AsyncClient) -> list[Any]:
        if what == "exports":
            return list(await mcs.export_rows(client, ns))
        return list(await mcs.import_rows(client, ns))

    rows = _run(_with_clients([_cluster_factory(kubeconfig, context)], body))
    if output == "json":
        typer.echo(json.dumps({"items": [r.to_dict() for r in rows]}, indent=2))
        return
    if not rows:
        typer.echo(f"no {what} {'in any namespace' if ns is None else 'in namespace ' + ns}", err=True)
        return
    if what == "exports":
        table = _new_table("NAMESPACE", "NAME", "VIP", "VALID", "READY", "CONFLICT", "AGE", "MESSAGE")
        for r in rows:
            table.add_row(r.namespace, r.name, r.use_clusterset_ip or "-", _cond(r.valid), _cond(r.ready),
                          _cond(r.conflict), _age(r.created, ref), "; ".join(r.problems()))
    else:
        table = _new_table("NAMESPACE", "NAME", "TYPE", "VIP", "CLUSTERS", "PORTS")
        for r in rows:
            table.add_row(r.namespace, r.name, r.type, ", ".join(r.ips) or "-", ", ".join(r.clusters) or "-",
                          r.port_text() or "-")
    _print_table(table)


def _show_clusters(
    kubeconfig: Path | None, context: str | None, broker_info: Path | None, output: str, ref: datetime
) -> None:
    if broker_info is not None:
        info = _read_broker_info(broker_info)

        async def from_file(broker: AsyncClient) -> list[mcs.ClusterRow]:
            return await mcs.cluster_rows(broker, info.namespace)

        rows = _run(_with_clients([info.client], from_file))
    else:

        async def via_cluster(cluster: AsyncClient) -> list[mcs.ClusterRow]:
            _, joined = await mcs.membership(cluster)
            broker = joined.client()
            try:
                return await mcs.cluster_rows(broker, joined.namespace)
            finally:
                await broker.close()

        rows = _run(_with_clients([_cluster_factory(kubeconfig, context)], via_cluster))
    if output == "json":
        typer.echo(json.dumps({"items": [r.to_dict(ref) for r in rows]}, indent=2))
        return
    if not rows:
        typer.echo("no clusters have joined", err=True)
        return
    table = _new_table("CLUSTER", "CIDR", "VIP DEFAULT", "JOINED", "HEARTBEAT", "READY")
    for r in rows:
        beat = "never" if r.heartbeat is None else f"{_age(r.heartbeat, ref)} ago"
        if r.heartbeat is not None and (ref - r.heartbeat).total_seconds() > STALE_HEARTBEAT_SECONDS:
            beat += " (stale)"
        table.add_row(r.cluster_id, ", ".join(r.cidrs) or "-",
                      f"{_on_off(r.clusterset_ip_enabled)} ({r.enabled_source})",
                      _age(r.joined_at, ref), beat, r.ready or "-")
    _print_table(table)
