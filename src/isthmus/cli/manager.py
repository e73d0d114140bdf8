"""`isthmus controller-manager`: a member cluster's leader-elected controllers in one process.

The load-balancing translator (`lb`), exposure's member controller (`mcsvc`) and the egress
operator (`egress-operator`) are each a single-replica, leader-elected controller with little to do
between changes. Run one process per controller and each pays the interpreter and its libraries again
(about 20 MB apiece in the local clusterset); run them together, as kube-controller-manager and
karmada-controller-manager do, and they pay once. Each keeps its own Lease, metrics and, with
`--use-service-account-credentials`, its own ServiceAccount: the manager may only ask for those
accounts' tokens (TokenRequest), and every controller's requests carry its own account's token, so
its RBAC role, the webhooks and the audit trail see the same identity as when it ran alone.

Each controller is built on its own `runtime.Manager` (its Lease, informers and readiness), and a
Manager is a component: the command runs them side by side (`Together`), ready when each is healthy:
leading with synced caches, or standing by with the apiserver answering its election
(`Manager.healthy`). Several replicas therefore all become ready, as kube-controller-manager's do,
and a RollingUpdate or a PodDisruptionBudget can count them; a readiness that needed every Lease
would keep a second replica unready for good. Which replica leads each controller is the Lease's
business (and `isthmus_leader_is_leader`'s, 0 on a standby), not readiness's.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from isthmus.cli.agent import OptionalClusterIdOpt, default_identity
from isthmus.cli.app import (
    COMPONENTS,
    Background,
    Component,
    ComponentKubeconfigOpt,
    ContextOpt,
    IdentityOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    Together,
    command,
    fail,
    run_component,
)
from isthmus.cli.egress import ForwarderImageOpt, ForwarderReplicasOpt
from isthmus.cli.lb import CLUSTER_NAME, GraceOpt, LbClassLessOpt
from isthmus.kube.helpers import describe_error
from isthmus.kube.tokens import ServiceAccountToken

if TYPE_CHECKING:
    from isthmus.runtime.manager import Manager

log = logging.getLogger(__name__)

CONTROLLERS = ("lb", "mcsvc", "egress-operator")
"""What the manager runs, in start order."""
ACCOUNTS = {"lb": "isthmus-lb", "mcsvc": "isthmus-mcsvc", "egress-operator": "isthmus-egress-operator"}
"""Each controller's ServiceAccount (deploy/member/<component>/rbac.yaml)."""
DEFAULT_NAMESPACE = "isthmus-system"
RETRY_SECONDS = (1.0, 30.0)


STANDBY_POLL_SECONDS = 0.5
"""How often a standby reads each Lease: a Lease handed back at the leader's SIGTERM is taken within
about this long, not the 2 s retry period (the egress operator keeps the forwarders' EndpointSlices,
so its handover is an egress outage). Three Leases at 0.5 s are 6 reads a second per standby."""


class Healthy:
    """A leader-elected part whose readiness is its Manager's health (a standby counts), run and stopped
    by the Manager itself, so a stop still hands the Lease back at once."""

    def __init__(self, manager: Manager, poll: float = STANDBY_POLL_SECONDS) -> None:
        self.manager = manager
        manager.stand_by(poll)

    @property
    def ready(self) -> bool:
        return self.manager.healthy

    async def start(self) -> None:
        await self.manager.start()

    async def wait(self) -> None:
        await self.manager.wait()

    async def stop(self) -> None:
        await self.manager.stop()


def parse_controllers(value: str) -> list[str]:
    """`--controllers`: a comma-separated list, `*` for all; `-name` leaves one out (kube's syntax)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise fail("--controllers names no controller")
    unknown = sorted({n.lstrip("-") for n in names} - set(CONTROLLERS) - {"*"})
    if unknown:
        raise fail(f"--controllers: unknown controller {', '.join(unknown)} (known: {', '.join(CONTROLLERS)})")
    wanted = set(CONTROLLERS) if "*" in names else {n for n in names if not n.startswith("-")}
    wanted -= {n[1:] for n in names if n.startswith("-")}
    if not wanted:
        raise fail("--controllers leaves no controller to run")
    return [c for c in CONTROLLERS if c in wanted]


@command("controller-manager", panel=COMPONENTS)
def controller_manager(
    controllers: Annotated[
        str, typer.Option("--controllers", metavar="LIST",
                          help="Controllers to run, comma-separated: lb, mcsvc, egress-operator; `*` for all, "
                          "`-name` to leave one out.")
    ] = "*",
    use_service_account_credentials: Annotated[
        bool, typer.Option("--use-service-account-credentials",
                           help="Run each controller as its own ServiceAccount (isthmus-lb, isthmus-mcsvc, "
                           "isthmus-egress-operator), with tokens from TokenRequest; the manager's own "
                           "credentials only ask for them.")
    ] = False,
    service_account_namespace: Annotated[
        str | None, typer.Option("--service-account-namespace", metavar="NS",
                                 help="Namespace of those ServiceAccounts (default: $POD_NAMESPACE, else "
                                 "isthmus-system).", show_default=False)
    ] = None,
    cluster_name: Annotated[str | None, CLUSTER_NAME] = None,
    grace: GraceOpt = 20.0,
    lb_class_less: LbClassLessOpt = False,
    cluster_id: OptionalClusterIdOpt = None,
    mcsvc_workers: Annotated[int, typer.Option("--mcsvc-workers", min=1, help="mcsvc: concurrent reconciles.")] = 8,
    forwarder_image: ForwarderImageOpt = None,
    forwarder_replicas: ForwarderReplicasOpt = 2,
    egress_workers: Annotated[
        int, typer.Option("--egress-operator-workers", min=1, help="egress-operator: concurrent reconciles.")
    ] = 4,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    identity: IdentityOpt = None,  # every controller's Lease
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Run the member's leader-elected controllers (lb, mcsvc, egress-operator) in one process."""
    # Here, not at the top: `isthmus controller-manager` imports only this command module (cli/main.py's
    # table), and the parts' modules are needed only once it runs.
    from isthmus.cli.egress import egress_operator_part
    from isthmus.cli.exposure import mcsvc_part
    from isthmus.cli.lb import lb_part
    from isthmus.kube.client import client_for, load_config

    wanted = parse_controllers(controllers)
    if "lb" in wanted and (cluster_name is None or not cluster_name.strip() or ":" in cluster_name):
        raise fail("--cluster-name is needed by the lb controller: non-empty, with no ':'")
    holder = identity or default_identity()
    namespace = service_account_namespace or os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE
    config = load_config(kubeconfig, context)

    def part(name: str, client: Any) -> Component:
        if name == "lb":
            assert cluster_name is not None
            return Healthy(lb_part(client, cluster_name, holder, grace, lb_class_less))
        if name == "mcsvc":
            return mcsvc_part(client, cluster_id, holder, mcsvc_workers, standby_poll=STANDBY_POLL_SECONDS)
        return Healthy(egress_operator_part(client, holder, forwarder_image, egress_workers, forwarder_replicas))

    async def build() -> Together:
        if not use_service_account_credentials:
            shared = client_for(config)
            return Together([part(name, shared) for name in wanted])
        issuer = client_for(config)
        tokens = [ServiceAccountToken(issuer, namespace, ACCOUNTS[name]) for name in wanted]
        await _first_tokens(tokens)
        parts = [part(name, client_for(config, auth=token)) for name, token in zip(wanted, tokens, strict=True)]
        parts += [Background(f"token {t.name}", t.keep_fresh, lambda: True) for t in tokens]
        return Together(parts)

    run_component("controller-manager", build, log_format=log_format, log_level=log_level,
                  metrics_addr=metrics_addr)


async def _first_tokens(tokens: list[ServiceAccountToken]) -> None:
    """Every controller's first token, retried (doubling up to 30 s) while the manager may not ask for
    one yet: alive and not ready meanwhile, with the reason in the log once per account."""
    pause = RETRY_SECONDS[0]
    said: set[str] = set()
    for token in tokens:
        while True:
            try:
                await token.fetch()
                break
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if token.name not in said:
                    log.warning("cannot get a token for %s: %s; retrying (not ready until then)", token.username,
                                describe_error(err))
                    said.add(token.name)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_SECONDS[1])

