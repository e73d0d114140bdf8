"""Proxy metrics: plain ints bumped on the data path, turned into Prometheus families when scraped.

`prometheus_client`'s `labels().inc()` locks and walks a dict per call — too dear per relayed
buffer — so each listener bumps attributes of its `ListenerStats` and one collector, registered
once in the runtime's REGISTRY, reports every live `ProxyStats` at scrape time. Stats are kept per
(service, port, protocol, kind) and survive a listener being recreated, so counters never reset.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from isthmus.runtime import REGISTRY

__all__ = ["ERROR_REASONS", "ListenerStats", "ProxyStats"]

ERROR_REASONS = ("no_endpoints", "connect_failed", "connect_timeout", "upstream_error", "flow_limit")

Labels = tuple[str, str, str, str]
"""(service, port, protocol, kind)."""


class ListenerStats:
    """Counters of one service port on one kind of listener."""

    __slots__ = (
        "active",
        "balanced",
        "balanced_before",
        "bytes_in",
        "bytes_out",
        "connect_failed",
        "connect_timeout",
        "connections",
        "datagrams_in",
        "datagrams_out",
        "flow_limit",
        "no_endpoints",
        "spliced",
        "upstream_error",
    )

    def __init__(self) -> None:
        self.connections = 0
        """TCP connections accepted, and UDP flows opened."""
        self.active = 0
        """TCP connections being relayed, and UDP flows open."""
        self.balanced = 0
        """TCP connections the kernel pointed at an endpoint at connect() (socketlb.py), never
        seen by the listener; refreshed when metrics are scraped."""
        self.balanced_before = 0
        """Part of `balanced` from kernel counts the proxy no longer reads (the listener moved on)."""
        self.datagrams_in = 0
        """UDP datagrams from clients."""
        self.datagrams_out = 0
        """UDP datagrams relayed back to clients."""
        self.bytes_in = 0
        """Bytes from clients toward backends (TCP)."""
        self.bytes_out = 0
        """Bytes from backends toward clients (TCP)."""
        self.no_endpoints = 0
        self.spliced = 0
        """TCP connections handed to the kernel splice (splice.py)."""
        self.connect_failed = 0
        self.connect_timeout = 0
        self.upstream_error = 0
        self.flow_limit = 0


class ProxyStats:
    """Every listener's stats of one proxy, plus listener and table health."""

    def __init__(self) -> None:
        self.listeners: dict[Labels, ListenerStats] = {}
        self.bound = 0
        self.pending = 0
        self.bind_failures = 0
        self.rebuilds = 0
        self.conflicts = 0
        self.ready = False
        self.syncs = 0
        """nftables mode: transactions applied."""
        self.sync_failures = 0
        self.sync_seconds = 0.0
        """nftables mode: how long the last transaction took (nft and conntrack included)."""
        self.refresh: Callable[[], None] | None = None
        """Called before a scrape reads the stats (the kernel's connect-time counts)."""
        _LIVE.add(self)

    def for_listener(self, service: str, port: str, protocol: str, kind: str) -> ListenerStats:
        key = (service, port, protocol, kind)
        s = self.listeners.get(key)
        if s is None:
            s = self.listeners[key] = ListenerStats()
        return s


_LIVE: weakref.WeakSet[ProxyStats] = weakref.WeakSet()
_LABELS = ["service", "port", "protocol", "kind"]


class _ProxyCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        live = list(_LIVE)
        for p in live:
            if p.refresh is not None:
                p.refresh()
        per: defaultdict[Labels, list[ListenerStats]] = defaultdict(list)
        for p in live:
            for labels, s in list(p.listeners.items()):
                per[labels].append(s)
        ordered = sorted(per.items())

        def counter(name: str, doc: str, attr: str) -> CounterMetricFamily:
            fam = CounterMetricFamily(name, doc, labels=_LABELS)
            for labels, ss in ordered:
                fam.add_metric(list(labels), sum(getattr(s, attr) for s in ss))
            return fam

        yield counter(
            "isthmus_proxy_connections", "TCP connections accepted and UDP flows opened.", "connections"
        )
        yield counter("isthmus_proxy_datagrams", "UDP datagrams received from clients.", "datagrams_in")
        yield counter(
            "isthmus_proxy_datagrams_replied", "UDP datagrams relayed back to clients.", "datagrams_out"
        )
        yield counter("isthmus_proxy_received_bytes", "TCP bytes from clients toward backends.", "bytes_in")
        yield counter("isthmus_proxy_sent_bytes", "TCP bytes from backends toward clients.", "bytes_out")
        yield counter(
            "isthmus_proxy_balanced_connections",
            "TCP connections the kernel pointed at an endpoint at connect() (connect-time balancing), "
            "never relayed.",
            "balanced",
        )
        yield counter(
            "isthmus_proxy_spliced_connections",
            "TCP connections whose bytes the kernel moved once they carried a second client read.",
            "spliced",
        )
        errors = CounterMetricFamily(
            "isthmus_proxy_errors",
            "Connections or datagrams not served, and failed backend connects, by reason.",
            labels=[*_LABELS, "reason"],
        )
        for labels, ss in ordered:
            for reason in ERROR_REASONS:
                n = sum(getattr(s, reason) for s in ss)
                if n:
                    errors.add_metric([*labels, reason], n)
        yield errors
        active = GaugeMetricFamily(
            "isthmus_proxy_active_connections",
            "TCP connections relayed and UDP flows open now.",
            labels=_LABELS,
        )
        for labels, ss in ordered:
            active.add_metric(list(labels), sum(s.active for s in ss))
        yield active
        listeners = GaugeMetricFamily(
            "isthmus_proxy_listeners", "Listeners wanted, by state (bound or retrying).", labels=["state"]
        )
        listeners.add_metric(["bound"], sum(p.bound for p in live))
        listeners.add_metric(["pending"], sum(p.pending for p in live))
        yield listeners
        for name, doc, attr in (
            ("isthmus_proxy_bind_failures", "Failed attempts to bind a listener (retried).", "bind_failures"),
            ("isthmus_proxy_table_rebuilds", "Service rebuilds of the proxy table.", "rebuilds"),
        ):
            fam = CounterMetricFamily(name, doc)
            fam.add_metric([], sum(getattr(p, attr) for p in live))
            yield fam
        syncs = CounterMetricFamily("isthmus_proxy_nftables_syncs",
                                    "nftables mode: rule transactions, by result (failed ones are retried).",
                                    labels=["result"])
        syncs.add_metric(["ok"], sum(p.syncs for p in live))
        syncs.add_metric(["failed"], sum(p.sync_failures for p in live))
        yield syncs
        last = GaugeMetricFamily("isthmus_proxy_nftables_sync_seconds",
                                 "nftables mode: seconds the last rule transaction took.")
        last.add_metric([], max((p.sync_seconds for p in live), default=0.0))
        yield last
        conflicts = GaugeMetricFamily(
            "isthmus_proxy_conflicts", "Listeners claimed by more than one service port."
        )
        conflicts.add_metric([], sum(p.conflicts for p in live))
        yield conflicts
        ready = GaugeMetricFamily(
            "isthmus_proxy_ready", "1 once the informers synced and the table is applied."
        )
        ready.add_metric([], 1 if live and all(p.ready for p in live) else 0)
        yield ready


REGISTRY.register(_ProxyCollector())
