"""`isthmus lb`: the load-balancing translator of one cluster (dklb's role)."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
from isthmus.cli.output import Column, print_list
from isthmus.cli.show import ShowRequest, age, register_show
from isthmus.diagnose.model import plural

if TYPE_CHECKING:
    from isthmus.runtime.manager import Manager

CLUSTER_NAME = typer.Option("--cluster-name", help="This cluster's name: the first part of every pool, frontend "
                            "and backend name it makes (slashes become dots).")
ClusterNameOpt = Annotated[str, CLUSTER_NAME]
LbClassLessOpt = Annotated[bool, typer.Option(
    "--lb-class-less-services",
    help="Also handle Services of type LoadBalancer that name no loadBalancerClass (by default only those of "
         "class isthmus.io/edgelb): only where no cloud controller, MetalLB or Cilium LB-IPAM answers them.")]
GraceOpt = Annotated[
    float, typer.Option("--unprovisioned-grace", min=1.0,
                        help="Seconds a pool may go without a serving instance before its owners get a Warning.")
]


@command("lb", panel=COMPONENTS)
def lb(
    cluster_name: ClusterNameOpt,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    identity: Annotated[
        str | None,
        typer.Option("--identity", help="Holder identity in the translator's leader-election Lease (default: "
                     "$POD_NAME, else the host name).", show_default=False),
    ] = None,
    grace: GraceOpt = 20.0,
    class_less: LbClassLessOpt = False,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Turn edgelb-class Services and Ingresses into LoadBalancerPools (leader-elected)."""
    from isthmus.kube.client import make_client

    if not cluster_name.strip() or ":" in cluster_name:
        raise fail("--cluster-name must be non-empty and contain no ':'")
    holder = identity or os.environ.get("POD_NAME") or socket.gethostname()

    async def build() -> Manager:
        return lb_part(make_client(kubeconfig, context), cluster_name, holder, grace, class_less)

    run_component("lb", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


def lb_part(client: Any, cluster_name: str, holder: str, grace: float, class_less: bool = False) -> Manager:
    """The translator as a part of a command (`isthmus lb`, `isthmus controller-manager`): its Manager."""
    from isthmus.lb.controller import Translator

    return Translator(client, cluster_name, identity=holder, grace=grace, class_less=class_less).manager


def show_lb(req: ShowRequest) -> None:
    """`isthmus show pools|loadbalancers` (namespace None: every namespace)."""
    what, namespace, output, kubeconfig, context = req.what, req.namespace, req.output, req.kubeconfig, req.context
    from lightkube.resources.core_v1 import Event, Service
    from lightkube.resources.networking_v1 import Ingress, IngressClass

    from isthmus.api.lb import LoadBalancerPool
    from isthmus.kube.client import make_client
    from isthmus.kube.resources import resource_for
    from isthmus.lb.controller import is_edgelb_ingress
    from isthmus.lb.views import load_balancer_rows, pool_rows, shown_service

    async def gather() -> list[dict[str, Any]]:
        client = make_client(kubeconfig, context, timeout=10.0)
        try:
            pools = [dict(p.to_dict()) async for p in client.list(resource_for(LoadBalancerPool))]  # type: ignore[no-untyped-call]
            if what == "pools":
                return pool_rows(pools, namespace)
            ns = namespace if namespace is not None else "*"
            classes = [c.to_dict() async for c in client.list(IngressClass)]
            objects: list[tuple[str, dict[str, Any]]] = []
            objects += [("Service", s.to_dict()) async for s in client.list(Service, namespace=ns)
                        if shown_service(s.to_dict())]  # fmt: skip
            objects += [("Ingress", i.to_dict()) async for i in client.list(Ingress, namespace=ns)
                        if is_edgelb_ingress(i.to_dict(), classes)]  # fmt: skip
            warnings: dict[tuple[str, str, str], str] = {}
            latest: dict[tuple[str, str, str], str] = {}
            async for e in client.list(Event, namespace=ns):
                ref = e.involvedObject
                key = (ref.kind or "", ref.namespace or "", ref.name or "")
                when = str(e.lastTimestamp or e.eventTime or "")
                if e.type == "Warning" and when >= latest.get(key, ""):
                    latest[key] = when
                    warnings[key] = f"{e.reason}: {e.message}"
            return load_balancer_rows(objects, pools, warnings)
        finally:
            await client.close()

    rows = asyncio.run(gather())
    empty = f"no {what}" + (f" in namespace {namespace}" if namespace else "")
    if what == "pools":
        columns: list[Column | str] = ["POOL", "ROLE", "READY", "ADDRESSES", "STATS", "PART", "PORT / SERVERS", "OWNER", "AGE", "MESSAGE",
                   Column("INSTANCES", wide=True)]

        def pool(r: dict[str, Any]) -> list[list[str]]:
            instances = ", ".join(f"{i['slot']}:{i['state']}" + (f" pid {i['pid']}" if i["pid"] else "")
                                  for i in r["instances"]) or "-"
            out = [[r["name"], r["role"], r["ready"], ",".join(r["addresses"]) or "-",
                    ",".join(map(str, r["statsPorts"])) or "-", "", "", "", age(r["created"]),
                    "" if r["healthy"] else r["message"], instances]]
            for f in r["frontends"]:
                routing = f" ({plural(f['rules'], 'rule')})" if f["rules"] else ""
                out.append(["", "", "", "", "", f"  frontend {f['name']}", f"{f['protocol']} :{f['port']}{routing}",
                            f["owner"], "", "", ""])
            for b in r["backends"]:
                out.append(["", "", "", "", "", f"  backend {b['name']}", ", ".join(b["servers"]) or "none (503)",
                            b["owner"], "", "", ""])
            return out

        print_list(rows, output, columns, pool, empty=empty)
        return
    columns = ["KIND", "NAMESPACE", "NAME", "POOL", "READY", "ADDRESSES", "PROBLEM", Column("CONFIGURED", wide=True)]

    def balancer(r: dict[str, Any]) -> list[list[str]]:
        return [[r["kind"], r["namespace"], r["name"], r["pool"] or "-", r["poolReady"] or "-",
                 " ".join(r["addresses"]) or "<pending>", r["problem"] or r["lastWarning"] or "-",
                 "yes" if r["configured"] else "no"]]

    print_list(rows, output, columns, balancer, empty=empty)


register_show("pools", show_lb, default_all_namespaces=True)  # pools are cluster-scoped
register_show("loadbalancers", show_lb)
