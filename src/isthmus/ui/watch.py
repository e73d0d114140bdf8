"""Watching the clusters for the web view: which contexts are the broker and the members, and one
set of informers per cluster that fill the model's `Store`.

A cluster is reported unreachable the moment one of its lists or watches fails to connect (the
informer then relists with backoff, so it comes back by itself); an API refusal (403, a CRD not
installed there) is reported for that kind only. Nothing here polls: informers watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from isthmus.api.mcs import Broker
from isthmus.kube.client import client_for, context_names, load_config
from isthmus.kube.helpers import describe_error
from isthmus.kube.resources import resource_for
from isthmus.runtime.informer import Informer, WatchError, WatchGone
from isthmus.ui.kinds import BROKER_ROLE, MEMBER_ROLE, Kind, kinds_for
from isthmus.ui.model import Store

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 5.0
"""How long finding out whether a context is the broker may take (contexts are probed at once)."""


@dataclass(frozen=True)
class Source:
    """One cluster to watch: its name on the page (the context's), role and configuration."""

    name: str
    role: str
    config: SingleConfig

    @property
    def server(self) -> str:
        return str(self.config.cluster.server)


def plain(obj: Any) -> dict[str, Any]:
    """A cached object (typed lightkube model or Generic dict) as a plain JSON-able dict."""
    to_dict = getattr(obj, "to_dict", None)
    out: dict[str, Any] = to_dict() if callable(to_dict) else dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return out


async def _is_broker(config: SingleConfig) -> bool:
    """Does this cluster hold a Broker object (`isthmus deploy-broker` made one)?"""
    client: Any = client_for(config, timeout=PROBE_TIMEOUT)  # lightkube's overloads reject generic resources
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            async for _ in client.list(resource_for(Broker), namespace="*", chunk_size=1):
                return True
    except Exception as err:  # unreachable or no Broker CRD: not (known to be) the broker
        log.debug("not the broker", extra={"server": config.cluster.server, "error": describe_error(err)})
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    return False


async def discover(
    kubeconfig: str | os.PathLike[str] | None,
    contexts: list[str] | None,
    broker_kubeconfig: str | os.PathLike[str] | None = None,
    broker_context: str | None = None,
) -> list[Source]:
    """The clusters to watch. Members: `contexts`, else every context of the kubeconfig. The broker:
    `broker_context` (of `broker_kubeconfig`, else of the kubeconfig), else the first context of the
    kubeconfig whose cluster holds a Broker object (it is not also a member), else the broker-info a
    member stored when it joined."""
    names = sorted(context_names(kubeconfig))
    chosen = list(dict.fromkeys(contexts)) if contexts else names
    if not chosen:  # no kubeconfig file: the in-cluster account (or a precise error) as kubectl does
        config = load_config(kubeconfig, None)
        return [Source(config.context_name or "cluster", MEMBER_ROLE, config)]
    configs = {n: load_config(kubeconfig, n) for n in chosen}  # unknown contexts fail here, clearly
    broker: Source | None = None
    if broker_context is not None or broker_kubeconfig is not None:
        config = load_config(broker_kubeconfig if broker_kubeconfig is not None else kubeconfig, broker_context)
        broker = Source(broker_context or config.context_name or "broker", BROKER_ROLE, config)
    else:
        candidates = {n: configs.get(n) or load_config(kubeconfig, n) for n in names}
        found = await asyncio.gather(*(_is_broker(c) for c in candidates.values()))
        for name, is_broker in zip(candidates, found, strict=True):
            if is_broker:
                broker = Source(name, BROKER_ROLE, candidates[name])
                break
    members = [Source(n, MEMBER_ROLE, c) for n, c in configs.items() if broker is None or n != broker.name]
    if broker is None:
        broker = await _broker_of_members(members, taken=set(names))
    return ([broker] if broker is not None else []) + members


async def _broker_of_members(members: list[Source], taken: set[str]) -> Source | None:
    """The broker as a joined member knows it (the broker-info `isthmus join` stored there, with that
    cluster's own broker token), as `show clusters` finds it; None when no member answers."""
    from isthmus.clusterset.membership import membership

    async def one(source: Source) -> SingleConfig | None:
        client = client_for(source.config, timeout=PROBE_TIMEOUT)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                _, info = await membership(client)
            name = "broker" if "broker" not in taken else "broker (broker-info)"
            config: SingleConfig | None = KubeConfig.from_dict(info.to_kubeconfig(name)).get()
            return config
        except Exception as err:  # not joined, unreachable, or no right to read the Secret
            log.debug("no broker-info", extra={"cluster": source.name, "error": describe_error(err)})
            return None
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    found = await asyncio.gather(*(one(m) for m in members))
    config = next((c for c in found if c is not None), None)
    return Source(str(config.context_name), BROKER_ROLE, config) if config is not None else None


class _ReportingInformer(Informer[Any]):
    """An informer that says how its lists and watches go (`report(None)` after a good list)."""

    def __init__(self, *args: Any, report: Callable[[BaseException | None], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._report = report

    async def _list(self, reason: str) -> None:
        try:
            await super()._list(reason)
        except Exception as err:
            self._report(err)
            raise
        self._report(None)

    async def _watch(self) -> bool:
        try:
            return await super()._watch()
        except WatchGone:
            raise  # history compacted: relisted at once, nothing wrong
        except Exception as err:
            self._report(err)
            raise


class ClusterWatch:
    """The informers of one cluster, writing into `store` and calling `changed()` after each change."""

    def __init__(self, source: Source, store: Store, changed: Callable[[], None],
                 client: AsyncClient | None = None) -> None:
        self.source = source
        self.store = store
        self.changed = changed
        self.client = client if client is not None else client_for(source.config)
        self._owns_client = client is None
        self._transport_errors: dict[str, str] = {}
        self._pending: set[str] = set()
        store.add_cluster(source.name, source.role, source.server)
        self.informers: list[Informer[Any]] = []
        for kind in kinds_for(source.role):
            self._pending.add(kind.kind)
            self.informers.append(self._informer(kind))

    def _informer(self, kind: Kind) -> Informer[Any]:
        def report(err: BaseException | None) -> None:
            self._report(kind, err)

        def put(obj: Any) -> None:
            self.store.put(self.name, kind.kind, plain(obj))
            self.changed()

        def update(_old: Any, obj: Any) -> None:
            put(obj)

        def delete(obj: Any) -> None:
            self.store.delete(self.name, kind.kind, plain(obj))
            self.changed()

        inf = _ReportingInformer(self.client, kind.resource, kind.namespace, labels=kind.labels, report=report)
        inf.add_handler(on_add=put, on_update=update, on_delete=delete)
        return inf

    @property
    def name(self) -> str:
        return self.source.name

    def start(self) -> None:
        for inf in self.informers:
            inf.start()

    async def stop(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self.informers))
        if self._owns_client:
            with contextlib.suppress(Exception):
                await self.client.close()

    def _report(self, kind: Kind, err: BaseException | None) -> None:
        conn = self.store.connections[self.name]
        name = kind.kind
        self._transport_errors.pop(name, None)
        conn.kind_errors.pop(name, None)
        if err is not None:
            problem = _api_problem(err)
            if problem is None:  # could not talk to the API server at all
                self._transport_errors[name] = f"cannot reach {self.source.server}: {describe_error(err)}"
            else:
                conn.kind_errors[name] = problem
        self._pending.discard(name)
        error = next(iter(self._transport_errors.values()), None)
        if error != conn.error and (error is None) != (conn.error is None):  # once per outage, not per kind
            if error is None:
                log.info("cluster reachable again", extra={"cluster": self.name})
            else:
                log.warning("cluster unreachable", extra={"cluster": self.name, "error": error})
        conn.error = error
        conn.synced = not self._pending
        self.changed()


def _api_problem(err: BaseException) -> str | None:
    """The API's answer to a list or watch as a short reason, or None when no answer came (or the
    answer says these credentials are refused, as good as unreachable for a viewer)."""
    if isinstance(err, ApiError):
        status = err.status
        code = status.code if status is not None else None
        if code == 401:
            return None
        if code == 404:
            return "not served here (its CRD is not installed)"
        return f"{code} {status.reason if status is not None else ''}: {status.message if status is not None else err}"
    if isinstance(err, WatchError):
        return str(err)
    return None

