"""Shell completion of the values kubectl completes: contexts from the kubeconfig, namespaces and
object names from the API server the command line names so far (its `--kubeconfig`, `--context`
and `-n`, else their defaults).

Each is an `autocompletion=` callback of an option or argument, run by click's completion protocol
(`_ISTHMUS_COMPLETE=complete_bash ...`) while the user presses TAB: so each is bounded
(`COMPLETION_TIMEOUT` for all its requests) and silent, like kubectl's `__complete`: a value that
cannot be had (no kubeconfig, an unreachable server, a 403) offers nothing, never an error or a
wait at the prompt.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer

COMPLETION_TIMEOUT = 2.0
"""Seconds for everything one TAB asks the API server (kubectl's completion has no bound of its own,
and a shell that hangs on TAB is worse than one that offers nothing)."""


def _matching(names: list[str], incomplete: str) -> list[str]:
    return sorted({n for n in names if n.startswith(incomplete)})


def _path(value: Any) -> Path | None:
    return Path(value) if isinstance(value, str | Path) and str(value) else None


def _kubeconfig(ctx: typer.Context, param: str = "kubeconfig") -> Path | None:
    """The kubeconfig the command would use: its flag, else what the command's default finds."""
    from isthmus.cli.app import local_kubeconfig

    given = _path(ctx.params.get(param))
    return given if given is not None else local_kubeconfig()


def _context(ctx: typer.Context) -> str | None:
    value = ctx.params.get("context")
    if isinstance(value, list | tuple):  # diagnose, ui: --context repeated; the last one named
        value = value[-1] if value else None
    return value if isinstance(value, str) and value else None


def contexts(ctx: typer.Context, incomplete: str) -> list[str]:
    """`--context <TAB>`: the kubeconfig's contexts."""
    from isthmus.kube.client import context_names

    try:
        return _matching(context_names(_kubeconfig(ctx)), incomplete)
    except Exception:
        return []


def broker_contexts(ctx: typer.Context, incomplete: str) -> list[str]:
    """`--broker-context <TAB>`: the contexts of --broker-kubeconfig (else of the kubeconfig)."""
    from isthmus.kube.client import context_names

    try:
        broker = _path(ctx.params.get("broker_kubeconfig"))
        return _matching(context_names(broker if broker is not None else _kubeconfig(ctx)), incomplete)
    except Exception:
        return []


def _names(ctx: typer.Context, kinds: list[Any], namespaced: bool) -> list[str]:
    """The names of every object of `kinds` (in the command's namespace when `namespaced`), asked
    at once within COMPLETION_TIMEOUT; [] on any error."""
    from lightkube import ApiError

    from isthmus.kube.client import load_config, make_client

    async def ask() -> list[str]:
        kubeconfig, context = _kubeconfig(ctx), _context(ctx)
        namespace = None
        if namespaced:
            namespace = ctx.params.get("namespace") or load_config(kubeconfig, context).namespace
        client = make_client(kubeconfig, context, timeout=COMPLETION_TIMEOUT)

        async def one(kind: Any) -> list[str]:
            try:
                return [o.metadata.name async for o in client.list(kind, namespace=namespace) if o.metadata]
            except ApiError:  # a kind this server does not serve, or may not be listed: the others still count
                return []

        try:
            async with asyncio.timeout(COMPLETION_TIMEOUT):
                found = await asyncio.gather(*(one(k) for k in kinds))
        finally:
            await client.close()
        return [name for names in found for name in names]

    try:
        return asyncio.run(ask())
    except Exception:
        return []


def namespaces(ctx: typer.Context, incomplete: str) -> list[str]:
    """`-n <TAB>`: the cluster's namespaces."""
    from lightkube.resources.core_v1 import Namespace

    return _matching(_names(ctx, [Namespace], namespaced=False), incomplete)


def services(ctx: typer.Context, incomplete: str) -> list[str]:
    """`export <TAB>`: the Services of the namespace."""
    from lightkube.resources.core_v1 import Service

    return _matching(_names(ctx, [Service], namespaced=True), incomplete)


def service_exports(ctx: typer.Context, incomplete: str) -> list[str]:
    """`unexport <TAB>`: the ServiceExports of the namespace."""
    from isthmus.api.mcs import ServiceExport
    from isthmus.kube.resources import resource_for

    return _matching(_names(ctx, [resource_for(ServiceExport)], namespaced=True), incomplete)


def exposable(ctx: typer.Context, incomplete: str) -> list[str]:
    """`expose <TAB>`: the namespace's MultiClusterServices (to change one) and Services."""
    from lightkube.resources.core_v1 import Service

    from isthmus.api.mcsvc import MultiClusterService
    from isthmus.kube.resources import resource_for

    return _matching(_names(ctx, [Service, resource_for(MultiClusterService)], namespaced=True), incomplete)
