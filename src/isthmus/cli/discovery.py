"""Discovery control-plane commands: deploy-broker, join, leave, export, unexport, show.

Flags, clients and printing only; the work is in `isthmus.clusterset.broker` and `.membership`,
`isthmus.discovery.commands` and `.views`. Every user error (bad CIDR, taken ID, unreadable
broker-info, unreachable or silent API server) ends as one `error: ...` line and exit code 2
(cli/app.py). Requests time out after a few seconds (`COMMAND_TIMEOUT`), so a server that accepts
and never answers fails fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from lightkube import AsyncClient
from typer._click.core import ParameterSource

from isthmus.api.about import CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, clusterset_identity
from isthmus.api.base import now
from isthmus.api.mcs import DEFAULT_BROKER_NAMESPACE, STALE_HEARTBEAT_SECONDS, cluster_service_account
from isthmus.cli import complete
from isthmus.cli.app import MEMBERSHIP, SERVICES, ContextOpt, KubeconfigOpt, command, fail
from isthmus.cli.output import JSON, TABLE, YAML, Column, OutputOpt, print_document, print_list
from isthmus.cli.show import SHOWS, ShowRequest, age
from isthmus.clusterset import broker as clusterset_broker
from isthmus.clusterset import membership as clusterset_membership
from isthmus.clusterset.brokerinfo import BrokerInfo, access_from_config
from isthmus.clusterset.control import FIELD_MANAGER
from isthmus.diagnose.model import plural
from isthmus.discovery import commands as export_commands
from isthmus.discovery import coredns, views
from isthmus.kube.client import COMMAND_TIMEOUT, load_config, make_client

T = TypeVar("T")

GlobalnetOpt = Annotated[
    bool, typer.Option("--globalnet", help="Not supported with ClusterSet IPs; rejected with an explanation.")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


# --- plumbing -----------------------------------------------------------------------------------


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine; its errors become `error:` lines in cli/app.py."""
    return asyncio.run(coro)


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
    return lambda: make_client(kubeconfig, context, field_manager=FIELD_MANAGER, timeout=COMMAND_TIMEOUT)


def _broker_factory(
    info: BrokerInfo, kubeconfig: Path | None = None, context: str | None = None
) -> Callable[[], AsyncClient]:
    """The broker API: as its admin with --broker-kubeconfig (join, leave), else with broker-info's
    own credentials (a joined cluster's token, or none)."""
    if kubeconfig is not None:
        return lambda: make_client(kubeconfig, context, namespace=info.namespace, field_manager=FIELD_MANAGER,
                                   timeout=COMMAND_TIMEOUT)
    from isthmus.clusterset.brokerinfo import as_seen_from
    from isthmus.kube.client import KubeConfigError, context_names, load_config

    configs = []
    with contextlib.suppress(KubeConfigError):
        configs = [load_config(None, n) for n in context_names(None)]
    seen = as_seen_from(info, configs)  # this machine may reach the broker elsewhere than members do
    return lambda: seen.client(timeout=COMMAND_TIMEOUT)


BrokerKubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--broker-kubeconfig",
        help="Kubeconfig with the broker's admin credentials: join creates the cluster's own broker "
             "ServiceAccount and token with them, leave revokes it. Used for this command only, never stored.",
        show_default=False,
    ),
]
BrokerContextOpt = Annotated[
    str | None, typer.Option("--broker-context", help="Context of --broker-kubeconfig (default: its current one).",
                             autocompletion=complete.broker_contexts)
]


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
    return namespace or load_config(kubeconfig, context).namespace


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _confirm(question: str, yes: bool) -> None:
    """Ask before a destructive step; `--yes` skips the question. Declining changes nothing, exit 1."""
    if yes:
        return
    if not typer.confirm(question, default=False):
        typer.echo("nothing changed", err=True)
        raise typer.Exit(1)


def _needs_terminal(yes: bool, what: str) -> None:
    """Without --yes, a confirmation is needed: refuse up front (before any request) without a terminal."""
    if not yes and not sys.stdin.isatty():
        raise fail(f"{what}: pass --yes to confirm (there is no terminal to ask on)")


# --- deploy-broker ------------------------------------------------------------------------------


@command("deploy-broker", panel=MEMBERSHIP)
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
            "--clusterset-ip-cidr-range", metavar="CIDR",
            help="ClusterSet IP range(s), IPv4 and/or IPv6 (e.g. fd00:243::/48); repeat or "
                 "comma-separate. Default 243.0.0.0/8.",
        ),
    ] = None,
    broker_info: Annotated[
        Path, typer.Option("--broker-info", help="Where to write the broker-info document for `isthmus join`.")
    ] = Path("broker-info.subm"),
    old_output: Annotated[
        Path | None, typer.Option("--output", "-o", hidden=True, help="Deprecated spelling of --broker-info.")
    ] = None,
    server_url: Annotated[
        str | None,
        typer.Option("--server-url", metavar="URL",
                     help="The broker API's address as members reach it, when it is not --kubeconfig's (a "
                          "private address, a load balancer); written into broker-info for their agents."),
    ] = None,
    globalnet: GlobalnetOpt = False,
) -> None:
    """Set up the broker on the API of --kubeconfig and write broker-info.subm for `isthmus join`."""
    if globalnet:
        raise fail(clusterset_broker.GLOBALNET_UNSUPPORTED)
    output = broker_info
    if old_output is not None:  # -o means an output format everywhere else; scripts of before still work
        typer.echo("warning: deploy-broker --output/-o is deprecated: use --broker-info", err=True)
        output = old_output
    try:
        server, ca_pem, _ = access_from_config(load_config(kubeconfig, context))
    except ValueError as err:
        raise fail(str(err)) from None
    if server_url is not None:
        if not server_url.startswith("https://") or len(server_url) <= len("https://"):
            raise fail(f"--server-url {server_url!r} is not an https:// URL")
        server = server_url.rstrip("/")

    async def body(client: AsyncClient) -> BrokerInfo:
        return await clusterset_broker.deploy_broker(
            client,
            namespace=namespace,
            enable_clusterset_ip=enable_clusterset_ip,
            cidr_range=cidr_range,
            server_url=server,
            ca_pem=ca_pem,
        )

    info = _run(_with_clients([_cluster_factory(kubeconfig, context)], body))
    try:
        with open(output, "w") as f:
            f.write(info.encode() + "\n")
    except OSError as err:
        raise fail(f"cannot write {output}: {err.strerror or err}") from None
    typer.echo(f"broker ready in namespace {info.namespace} of {info.server}")
    typer.echo(
        f"  ClusterSet IP by default: {_on_off(info.clusterset_ip_enabled)}; "
        f"range {', '.join(info.clusterset_ip_cidr_range)}"
    )
    typer.echo(f"  wrote {output} (no credentials in it: `isthmus join --broker-kubeconfig` gives each "
               f"cluster its own)")


# --- join ---------------------------------------------------------------------------------------


@command("join", panel=MEMBERSHIP)
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
        list[str] | None,
        typer.Option(
            "--clusterset-ip-cidr", metavar="CIDR",
            help="This cluster's VIP block(s): at most one IPv4 and one IPv6; repeat or comma-separate "
                 "(default: the first free IPv4 /16 and IPv6 /64 of the broker's ranges).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing registration (other CIDR, taken ID, other ID).")
    ] = False,
    broker_kubeconfig: BrokerKubeconfigOpt = None,
    broker_context: BrokerContextOpt = None,
    no_coredns: Annotated[
        bool, typer.Option("--no-coredns", help="Leave CoreDNS alone (no clusterset.local stub zone).")
    ] = False,
    globalnet: GlobalnetOpt = False,
    output: OutputOpt = TABLE,
) -> None:
    """Join this cluster to the clusterset described by BROKER_INFO.

    With --broker-kubeconfig the cluster gets its own broker ServiceAccount and a one-year token
    (re-run join to renew it); without, it reaches the broker with BROKER_INFO's own token (an old
    broker-info that carries one). Adds the clusterset.local stub zone to the cluster's CoreDNS
    unless --no-coredns. With -o json or yaml, prints the cluster's Cluster object on the broker.
    """
    if globalnet:
        raise fail(clusterset_broker.GLOBALNET_UNSUPPORTED)
    if not cluster_id:
        raise fail("--cluster-id is required (a DNS-1123 label naming this cluster in the clusterset)")
    info = _read_broker_info(broker_info)
    if broker_kubeconfig is None and info.token is None:
        raise fail(f"{broker_info} carries no broker credentials: pass the broker's admin kubeconfig as "
                   f"--broker-kubeconfig, so join can give this cluster its own")
    notes: list[str] = []

    async def body(broker: AsyncClient, cluster: AsyncClient) -> tuple[Any, Any]:
        registered = await clusterset_membership.join(
            broker,
            cluster,
            info,
            cluster_id=cluster_id,
            enable_clusterset_ip=enable_clusterset_ip,
            clusterset_ip_cidr=clusterset_ip_cidr,
            force=force,
            member_credentials=broker_kubeconfig is not None,
        )
        broker_obj = await clusterset_broker.get_broker(broker, info.namespace)
        if not no_coredns:
            notes.append(await coredns.ensure_coredns_stub(cluster))
        return registered, broker_obj

    factories = [_broker_factory(info, broker_kubeconfig, broker_context), _cluster_factory(kubeconfig, context)]
    cluster, broker_obj = _run(_with_clients(factories, body))
    broker_default = broker_obj.spec.clusterset_ip_enabled
    if output in (JSON, YAML):
        print_document(cluster.to_dict(), output)
        for note in notes:
            typer.echo(note, err=True)
        return
    own = cluster.spec.clusterset_ip_enabled
    default = f"{_on_off(own)} (this cluster's setting)" if own is not None else f"{_on_off(broker_default)} (broker's setting)"
    typer.echo(f"cluster {cluster.name} joined the clusterset at {info.server}")
    typer.echo(f"  clusterset IP CIDR: {', '.join(cluster.spec.clusterset_ip_cidr)}")
    typer.echo(f"  ClusterSet IP by default: {default}")
    typer.echo(f"  ClusterProperties (About API): {CLUSTER_ID_PROPERTY}={cluster.name}, "
               f"{CLUSTERSET_PROPERTY}={clusterset_identity(broker_obj.metadata.uid or '')}")
    if broker_kubeconfig is not None:
        typer.echo(f"  broker credentials: ServiceAccount {info.namespace}/{cluster_service_account(cluster.name)} "
                   f"(token valid one year; re-run join to renew)")
    else:
        typer.echo("note: no --broker-kubeconfig: this cluster reaches the broker with broker-info's "
                   "credentials", err=True)
    for note in notes:
        typer.echo(f"  {note}")


# --- leave --------------------------------------------------------------------------------------


@command("leave", panel=MEMBERSHIP)
def leave(
    ctx: typer.Context,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    broker_info: Annotated[
        Path | None,
        typer.Option("--broker-info", help="Clean a cluster that is gone off the broker (with --cluster-id)."),
    ] = None,
    cluster_id: Annotated[str | None, typer.Option("--cluster-id", help="The cluster to remove.")] = None,
    broker_kubeconfig: BrokerKubeconfigOpt = None,
    broker_context: BrokerContextOpt = None,
    yes: YesOpt = False,
) -> None:
    """Leave the clusterset: this cluster (--kubeconfig), or a dead one (--broker-info, --cluster-id).

    Asks for confirmation first, naming the cluster and the broker; --yes skips the question.
    """
    if broker_info is not None:
        if not cluster_id:
            raise fail("--broker-info needs --cluster-id: the cluster to remove from the broker")
        if ctx.get_parameter_source("kubeconfig") is ParameterSource.COMMANDLINE:  # not a default found
            raise fail("use either --kubeconfig (this cluster leaves) or --broker-info (remove a dead cluster)")
        _needs_terminal(yes, f"leave would remove cluster {cluster_id} from the broker")
        _leave_broker_only(_read_broker_info(broker_info), cluster_id, yes, broker_kubeconfig, broker_context)
        return
    _needs_terminal(yes, "leave would remove this cluster from its clusterset")

    async def lookup(cluster: AsyncClient) -> tuple[str, BrokerInfo]:
        return await clusterset_membership.membership(cluster)

    joined_as, info = _run(_with_clients([_cluster_factory(kubeconfig, context)], lookup))
    if cluster_id and cluster_id != joined_as:
        raise fail(f"this cluster joined as {joined_as!r}, not {cluster_id!r}")
    _confirm(
        f"Remove cluster {joined_as} from the clusterset (broker {info.server}, namespace {info.namespace}) "
        f"and delete what join and the agent made in it?",
        yes,
    )

    notes: list[str] = []

    async def this_cluster(broker: AsyncClient, cluster: AsyncClient) -> clusterset_membership.LeaveResult:
        result = await clusterset_membership.leave(broker, cluster, info.namespace, joined_as)
        notes.append(await coredns.remove_coredns_stub(cluster))
        return result

    factories = [_broker_factory(info, broker_kubeconfig, broker_context), _cluster_factory(kubeconfig, context)]
    result = _run(_with_clients(factories, this_cluster))
    registered = "removed from the broker" if result.deregistered else "was not registered on the broker"
    revoked = "; its broker credentials revoked" if result.revoked else ""
    typer.echo(f"cluster {result.cluster_id} left the clusterset: {registered}{revoked}; "
               f"{plural(result.local_objects, 'local object')} deleted")
    for note in (*result.notes, *notes):
        typer.echo(f"  {note}")


def _leave_broker_only(
    info: BrokerInfo, gone_id: str, yes: bool, broker_kubeconfig: Path | None, broker_context: str | None
) -> None:
    broker_factory = _broker_factory(info, broker_kubeconfig, broker_context)

    async def members(broker: AsyncClient) -> list[str]:
        return [r.cluster_id for r in await views.cluster_rows(broker, info.namespace)]

    known = _run(_with_clients([broker_factory], members))
    if gone_id not in known:
        raise fail(f"cluster {gone_id!r} is not registered on the broker (members: {', '.join(known) or 'none'})")
    _confirm(
        f"Remove cluster {gone_id} from the broker {info.server} (namespace {info.namespace})? "
        f"Its exports and endpoints disappear from every cluster.",
        yes,
    )

    async def remove(broker: AsyncClient) -> clusterset_membership.LeaveResult:
        return await clusterset_membership.leave(broker, None, info.namespace, gone_id)

    result = _run(_with_clients([broker_factory], remove))
    if not result.deregistered:  # someone else removed it meanwhile: the outcome the user asked for
        typer.echo(f"cluster {gone_id} was already gone from the broker")
        return
    typer.echo(f"cluster {gone_id} removed from the broker; its exports and endpoints are garbage-collected")


# --- export / unexport --------------------------------------------------------------------------


def _parse_bool(value: str | None, flag: str) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise fail(f"{flag} must be true or false, not {value!r}")


NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).",
                             autocompletion=complete.namespaces)
]


@command("export", panel=SERVICES)
def export(
    name: Annotated[str, typer.Argument(help="The Service to export (the ServiceExport gets its name).",
                                        autocompletion=complete.services)],
    namespace: NamespaceOpt = None,
    use_clusterset_ip: Annotated[
        str | None,
        typer.Option(
            "--use-clusterset-ip",
            metavar="true|false",
            help="Set the use-clusterset-ip annotation (default: the cluster's setting applies).",
        ),
    ] = None,
    allow_missing: Annotated[
        bool, typer.Option("--allow-missing", help="Export even if the Service does not exist (yet).")
    ] = False,
    output: OutputOpt = TABLE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Export a Service to the clusterset (creates its ServiceExport).

    Prints what changed (created, configured, unchanged); with -o json or yaml, the ServiceExport."""
    use = _parse_bool(use_clusterset_ip, "--use-clusterset-ip")
    ns = _namespace(kubeconfig, context, namespace)

    async def body(client: AsyncClient) -> tuple[Any, str]:
        return await export_commands.export(client, name, ns, use, allow_missing=allow_missing)

    obj, change = _run(_with_clients([_cluster_factory(kubeconfig, context)], body))
    if output in (JSON, YAML):
        print_document(obj.to_dict(), output)
        return
    typer.echo(f"serviceexport {ns}/{name} {change}")


@command("unexport", panel=SERVICES)
def unexport(
    name: Annotated[str, typer.Argument(help="The exported Service.", autocompletion=complete.service_exports)],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Withdraw a Service from the clusterset (deletes its ServiceExport)."""
    ns = _namespace(kubeconfig, context, namespace)

    async def body(client: AsyncClient) -> bool:
        return await export_commands.unexport(client, name, ns)

    if not _run(_with_clients([_cluster_factory(kubeconfig, context)], body)):
        raise fail(f"serviceexport {ns}/{name} not found")
    typer.echo(f"serviceexport {ns}/{name} deleted")


# --- show ---------------------------------------------------------------------------------------

SHOW_WHAT = ("clusters", "exports", "imports")
"""What this module shows itself; capabilities add theirs through `isthmus.cli.show`."""


def _cond(view: views.ConditionView | None) -> str:
    """`Status Reason`; several comma-joined reasons (Conflict) one per line."""
    if view is None:
        return "-"
    first, *more = [r for r in view.reason.split(",") if r] or [""]
    return "\n".join([f"{view.status} {first}".strip(), *more])


SHOW_CHOICES = ("clusters", "exports", "imports", "egress", "pools", "loadbalancers", "mcs")
"""For help and shell completion; what `show` accepts is SHOW_WHAT and the registered plug-ins."""


def _complete_what(incomplete: str) -> list[str]:
    return [w for w in (*SHOW_WHAT, *SHOWS) if w.startswith(incomplete)]


@command("show", panel=SERVICES)
def show(
    what: Annotated[str, typer.Argument(metavar="WHAT", autocompletion=_complete_what, show_default=False,
                                        help=f"What to list: {', '.join(SHOW_CHOICES[:-1])} or {SHOW_CHOICES[-1]}.")],
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")] = False,
    output: OutputOpt = TABLE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    broker_info: Annotated[
        Path | None, typer.Option("--broker-info", help="clusters: ask this broker instead of the cluster's.")
    ] = None,
    broker_kubeconfig: BrokerKubeconfigOpt = None,
    broker_context: BrokerContextOpt = None,
) -> None:
    """List clusters, exports, imports, egress, pools, load balancers or MultiClusterServices.

    The clusterset's clusters, this cluster's exports or imports, its egress (ExternalServices and
    SourceIPClaims), load-balancer pools (with their frontends, backends and owners), load balancers
    (Services of type LoadBalancer and Ingresses of class edgelb, with pool, addresses and the last
    problem), or the MultiClusterServices (read on the broker, from any clusterset context).

    Exports show their conditions (each conflict on its own line), the VIP their service has and
    this cluster's wish; imports mark the services this cluster exports in conflict. -o wide adds
    columns; -o json and -o yaml print a List of every row with all its fields.
    """
    if what not in SHOW_WHAT and what not in SHOWS:
        raise fail(f"cannot show {what!r}: choose one of {', '.join([*SHOW_WHAT, *SHOWS])}")
    if namespace and all_namespaces:
        raise fail("use either --namespace or --all-namespaces")
    plugin = SHOWS.get(what)
    if plugin is not None:
        everywhere = all_namespaces or (plugin.default_all_namespaces and namespace is None)
        ns_plugin = None if everywhere else _namespace(kubeconfig, context, namespace)
        plugin.run(ShowRequest(what, ns_plugin, output, kubeconfig, context))
        return
    ref = now()
    if what == "clusters":
        if broker_kubeconfig is not None and broker_info is None:
            raise fail("--broker-kubeconfig needs --broker-info (the broker namespace is in it)")
        _show_clusters(kubeconfig, context, broker_info, output, ref, broker_kubeconfig, broker_context)
        return
    ns = None if all_namespaces else _namespace(kubeconfig, context, namespace)

    async def body(client: AsyncClient) -> list[Any]:
        if what == "exports":
            return list(await views.export_rows(client, ns))
        return list(await views.import_rows(client, ns))

    rows = _run(_with_clients([_cluster_factory(kubeconfig, context)], body))
    empty = f"no {what} {'in any namespace' if ns is None else 'in namespace ' + ns}"
    if what == "exports":
        columns: list[Column | str] = ["NAMESPACE", "NAME", "VIP", "WANTS VIP", "VALID", "READY", "CONFLICT", "AGE", "MESSAGE",
                   Column("SERVICE IPS", wide=True)]

        def export_row(r: views.ExportRow) -> list[list[str]]:
            return [[r.namespace, r.name, r.vip(), r.wants_vip(), _cond(r.valid), _cond(r.ready), _cond(r.conflict),
                     age(r.created, ref), "\n".join(r.problems()) or "-",
                     "-" if r.service_ips is None else ",".join(r.service_ips) or "none"]]

        print_list([r.to_dict() for r in rows] if output in (JSON, YAML) else rows, output, columns, export_row,
                   empty=empty)
        return
    columns = ["NAMESPACE", "NAME", "TYPE", "VIP", "CLUSTERS", "PORTS", "READY", "CONFLICT", "AGE",
               Column("IP FAMILIES", wide=True), Column("AFFINITY", wide=True), Column("DNS NAME", wide=True)]

    def import_row(r: views.ImportRow) -> list[list[str]]:
        return [[r.namespace, r.name, r.type, ", ".join(r.ips) or "-", ", ".join(r.clusters) or "-",
                 r.port_text() or "-", r.ready_text(), "\n".join(r.conflicts) or "-", age(r.created, ref),
                 ", ".join(r.ip_families) or "-", r.session_affinity, r.dns_name()]]

    print_list([r.to_dict() for r in rows] if output in (JSON, YAML) else rows, output, columns, import_row,
               empty=empty)


def _show_clusters(
    kubeconfig: Path | None, context: str | None, broker_info: Path | None, output: str, ref: datetime,
    broker_kubeconfig: Path | None, broker_context: str | None,
) -> None:
    if broker_info is not None:
        info = _read_broker_info(broker_info)

        async def from_file(broker: AsyncClient) -> list[views.ClusterRow]:
            return await views.cluster_rows(broker, info.namespace)

        rows = _run(_with_clients([_broker_factory(info, broker_kubeconfig, broker_context)], from_file))
    else:

        async def via_cluster(cluster: AsyncClient) -> list[views.ClusterRow]:
            _, joined = await clusterset_membership.membership(cluster)
            broker = _broker_factory(joined)()
            try:
                return await views.cluster_rows(broker, joined.namespace)
            finally:
                await broker.close()

        rows = _run(_with_clients([_cluster_factory(kubeconfig, context)], via_cluster))
    columns: list[Column | str] = ["CLUSTER", "CIDR", "VIP DEFAULT", "JOINED", "HEARTBEAT", "READY", Column("HEARTBEAT AT", wide=True)]

    def cluster_row(r: views.ClusterRow) -> list[list[str]]:
        beat = "never" if r.heartbeat is None else f"{age(r.heartbeat, ref)} ago"
        if r.heartbeat is not None and (ref - r.heartbeat).total_seconds() > STALE_HEARTBEAT_SECONDS:
            beat += " (stale)"
        return [[r.cluster_id, ", ".join(r.cidrs) or "-", f"{_on_off(r.clusterset_ip_enabled)} ({r.enabled_source})",
                 age(r.joined_at, ref), beat, r.ready or "-",
                 r.heartbeat.isoformat() if r.heartbeat is not None else "-"]]

    print_list([r.to_dict(ref) for r in rows] if output in (JSON, YAML) else rows, output, columns, cluster_row,
               empty="no clusters have joined")
