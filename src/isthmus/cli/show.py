"""`isthmus show` plug-ins: each capability's CLI module registers the things it can list, so the
`show` command (in cli/discovery.py, which owns its discovery-only flags) never imports another
capability's code. `cli.main` imports every command module, so the registry is full at start.

A kind that lives on the broker (MultiClusterServices) is read there whatever the context names:
the broker itself, or a member, whose broker is found from what join stored in it and read with
the kubeconfig's context for that broker when there is one (its admin), else with the member's
own broker credentials. Its messages say where they looked."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightkube import AsyncClient
    from lightkube.config.kubeconfig import SingleConfig

    from isthmus.clusterset.brokerinfo import BrokerInfo


@dataclass(frozen=True)
class ShowRequest:
    """What `show` parsed for a plug-in; `namespace` None means every namespace."""

    what: str
    namespace: str | None
    output: str
    """table, wide, json or yaml (cli/output.py)."""
    kubeconfig: Path | None
    context: str | None


@dataclass(frozen=True)
class Show:
    run: Callable[[ShowRequest], None]
    default_all_namespaces: bool = False
    """Without -n: every namespace (cluster-scoped things filtered by namespace), not the context's."""
    on_broker: bool = False
    """The kind lives on the broker: `open_broker` finds it from any member's context."""


SHOWS: dict[str, Show] = {}

LISTED = ("egress", "pools", "loadbalancers", "mcs")
"""The order help, completion and errors list the plug-ins in, whatever order their command modules
were imported in (a kind not named here comes last)."""


def register_show(
    what: str, run: Callable[[ShowRequest], None], *, default_all_namespaces: bool = False, on_broker: bool = False
) -> None:
    """Make `isthmus show <what>` call `run`."""
    SHOWS[what] = Show(run, default_all_namespaces, on_broker)
    ordered = sorted(SHOWS.items(), key=lambda kv: LISTED.index(kv[0]) if kv[0] in LISTED else len(LISTED))
    SHOWS.clear()
    SHOWS.update(ordered)


def _context_for(kubeconfig: Path | None, info: BrokerInfo) -> str | None:
    """The kubeconfig's context that is `info`'s broker (the current one first), if any: at its URL,
    or with its CA (clusterset/brokerinfo.py `reaches_broker`)."""
    from isthmus.clusterset.brokerinfo import reaches_broker
    from isthmus.kube.client import KubeConfigError, context_names, load_config

    try:
        for name in context_names(kubeconfig):
            if reaches_broker(load_config(kubeconfig, name), info):
                return name
    except KubeConfigError:
        return None
    return None


async def open_broker(
    kubeconfig: Path | None, context: str | None, *, request_timeout: float, write: bool = False
) -> tuple[AsyncClient, str]:
    """A client for the broker of `context`, and where that is for messages (`on the broker
    (context broker)`). A context that is no member is used as it is: the broker itself, or a
    cluster outside any clusterset (which a read's message then says). A member's broker is reached
    through the kubeconfig's context for its server; else a read uses the member's own broker
    credentials, and a `write` (which needs the broker admin's) is refused with what to pass."""
    from lightkube import ALL_NS, ApiError

    from isthmus.api.mcs import Broker
    from isthmus.cli.app import fail
    from isthmus.clusterset.brokerinfo import as_seen_from
    from isthmus.clusterset.control import ClustersetError, list_if_kind
    from isthmus.clusterset.membership import membership
    from isthmus.kube.client import load_config, make_client

    name = load_config(kubeconfig, context).context_name
    cluster = make_client(kubeconfig, context, timeout=request_timeout)
    try:
        try:
            _, info = await membership(cluster)
        except (ClustersetError, ApiError):  # not a member (or may not read what join stored): use it as it is
            if write:
                return cluster, f"in context {name}"
            with contextlib.suppress(ApiError):
                if await list_if_kind(cluster, Broker, ALL_NS):
                    return cluster, f"on the broker (context {name})"
            return cluster, (f"in context {name}, which is neither a member nor the broker of a clusterset "
                             f"(pass the broker's --context)")
    except BaseException:
        await cluster.close()
        raise
    await cluster.close()  # a member: its broker is reached with a client of its own
    broker = _context_for(kubeconfig, info)
    if broker is not None:
        return make_client(kubeconfig, broker, timeout=request_timeout), f"on the broker (context {broker})"
    if write:
        raise fail(f"context {name} is a member of the clusterset whose broker is {info.server}, and the kubeconfig "
                   f"has no context for it: MultiClusterServices are written on the broker with its admin's "
                   f"credentials (pass the broker's --kubeconfig or --context)")
    return (as_seen_from(info, _configs(kubeconfig)).client(timeout=request_timeout),
            f"on the broker at {info.server} (read with {name}'s broker credentials)")


def _configs(kubeconfig: Path | None) -> list[SingleConfig]:
    """Every context of the kubeconfig, loaded (those that do not load are left out)."""
    from isthmus.kube.client import KubeConfigError, context_names, load_config

    out = []
    try:
        for n in context_names(kubeconfig):
            with contextlib.suppress(KubeConfigError):
                out.append(load_config(kubeconfig, n))
    except KubeConfigError:
        return []
    return out


def age(at: datetime | str | None, ref: datetime | None = None) -> str:
    """kubectl-style age of a time (or an RFC 3339 string): 45s, 12m, 3h, 5d; `-` when unknown."""
    if not at:
        return "-"
    when = datetime.fromisoformat(at) if isinstance(at, str) else at
    secs = max(0, int(((ref or datetime.now(UTC)) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"
