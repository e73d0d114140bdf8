"""DNS metrics: plain counters on the hot path, turned into Prometheus families only when scraped.

`prometheus_client`'s `labels().inc()` takes a lock and a dict walk per call — a sizeable share of
a ~10 µs query — so the server bumps ints in a `DnsStats` and a collector registered once in the
runtime's REGISTRY reports every live `DnsStats` at scrape time.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from isthmus.runtime import REGISTRY

__all__ = [
    "CLUSTERSET_METRICS",
    "LATENCY_BUCKETS",
    "TCP_CLOSE_REASONS",
    "DnsStats",
    "add_snapshots",
    "qtype_name",
    "rcode_name",
]

CLUSTERSET_METRICS = ("isthmus_dns_answers",)
"""The families of the clusterset view (labelled by cluster; the dashboard test checks each is drawn)."""

LATENCY_BUCKETS: tuple[float, ...] = (
    0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.1,
)  # fmt: skip
_BOUNDS_NS = [int(b * 1e9) for b in LATENCY_BUCKETS]

_QTYPES = {
    1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA", 33: "SRV",
    41: "OPT", 64: "SVCB", 65: "HTTPS", 251: "IXFR", 252: "AXFR", 255: "ANY",
}  # fmt: skip
_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 16: "BADVERS"}


TCP_CLOSE_REASONS = ("query_timeout", "idle_timeout", "source_limit", "global_limit")
"""Why the server closed a TCP connection: no whole query within the query deadline, idle past the
idle timeout, or closed to make room for a new connection from the same address (per-source cap)
or from any address (global cap)."""


def qtype_name(qtype: int) -> str:
    """A bounded label: the common types by name, everything else "other"."""
    return _QTYPES.get(qtype, "other")


def rcode_name(rcode: int) -> str:
    return _RCODES.get(rcode, str(rcode))


class DnsStats:
    """Counters of one server; mutated only from the event loop thread.

    With `--workers` the parent holds one per worker (`worker` is its index), kept up to date from
    the snapshots the worker sends (`snapshot`, `load`)."""

    def __init__(self, worker: int | None = None, cluster: str = "") -> None:
        self.worker = worker
        self.cluster = cluster
        """The cluster this server answers for (label of the clusterset-level families)."""
        self.restarts = 0
        """Times the parent restarted this worker."""
        self.queries: defaultdict[tuple[int, int], int] = defaultdict(int)
        """(qtype, rcode) → answered queries."""
        self.hits = 0
        """Answered straight from the wire cache."""
        self.misses = 0
        """Answered by building a response (NXDOMAIN, NODATA, REFUSED, errors)."""
        self.dropped = 0
        """Packets not answered: shorter than a header, responses, UDP send failures."""
        self.latency = [0] * (len(_BOUNDS_NS) + 1)
        self.latency_sum_ns = 0
        self.records = 0
        self.ready = False
        self.tcp_connections = 0
        """Open DNS-over-TCP connections."""
        self.tcp_closed = dict.fromkeys(TCP_CLOSE_REASONS, 0)
        """Reason → TCP connections the server closed (not counting clients that closed first)."""
        _LIVE.add(self)

    def observe_ns(self, ns: int) -> None:
        self.latency[bisect_left(_BOUNDS_NS, ns)] += 1
        self.latency_sum_ns += ns

    def observe_many(self, ns: int, count: int) -> None:
        """`count` answers that each took `ns` (a batch answered together)."""
        self.latency[bisect_left(_BOUNDS_NS, ns)] += count
        self.latency_sum_ns += ns * count


    def snapshot(self) -> dict[str, Any]:
        """Everything as JSON-able values (a worker sends this to the parent)."""
        return {
            "queries": [[qt, rc, n] for (qt, rc), n in list(self.queries.items())],
            "hits": self.hits,
            "misses": self.misses,
            "dropped": self.dropped,
            "latency": list(self.latency),
            "latency_sum_ns": self.latency_sum_ns,
            "records": self.records,
            "ready": self.ready,
            "tcp_connections": self.tcp_connections,
            "tcp_closed": dict(self.tcp_closed),
            "cluster": self.cluster,
        }

    def load(self, snap: dict[str, Any]) -> None:
        """Become a snapshot (the parent's copy of a worker's counters)."""
        self.queries = defaultdict(int, {(qt, rc): n for qt, rc, n in snap["queries"]})
        self.latency = list(snap["latency"])
        self.tcp_closed = {r: snap["tcp_closed"].get(r, 0) for r in TCP_CLOSE_REASONS}
        for attr in ("hits", "misses", "dropped", "latency_sum_ns", "records", "ready", "tcp_connections"):
            setattr(self, attr, snap[attr])
        self.cluster = snap.get("cluster") or self.cluster


def add_snapshots(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`b` with the counters of `a` added (gauges are `b`'s): a restarted worker's counters go on
    from where its predecessor's stopped."""
    queries: defaultdict[tuple[int, int], int] = defaultdict(int)
    for src in (a["queries"], b["queries"]):
        for qt, rc, n in src:
            queries[(qt, rc)] += n
    out = dict(b)
    out["queries"] = [[qt, rc, n] for (qt, rc), n in queries.items()]
    for attr in ("hits", "misses", "dropped", "latency_sum_ns"):
        out[attr] = a[attr] + b[attr]
    out["latency"] = [x + y for x, y in zip(a["latency"], b["latency"], strict=True)]
    out["tcp_closed"] = {r: a["tcp_closed"].get(r, 0) + b["tcp_closed"].get(r, 0) for r in TCP_CLOSE_REASONS}
    return out


_LIVE: weakref.WeakSet[DnsStats] = weakref.WeakSet()


class _DnsCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        live = list(_LIVE)
        queries = CounterMetricFamily(
            "isthmus_dns_queries",
            "DNS queries answered, by query type and response code.",
            labels=["qtype", "rcode"],
        )
        totals: defaultdict[tuple[str, str], int] = defaultdict(int)
        for s in live:
            for (qt, rc), n in list(s.queries.items()):
                totals[(qtype_name(qt), rcode_name(rc))] += n
        for (qt_name, rc_name), n in sorted(totals.items()):
            queries.add_metric([qt_name, rc_name], n)
        yield queries
        answers = CounterMetricFamily(
            "isthmus_dns_answers",
            "DNS responses this cluster's server sent, by response code (NOERROR, NXDOMAIN, SERVFAIL, ...): "
            "the clusterset view of isthmus_dns_queries_total.",
            labels=["cluster", "rcode"],
        )
        by_rcode: defaultdict[tuple[str, str], int] = defaultdict(int)
        for s in live:
            for (_qt, rc), n in list(s.queries.items()):
                by_rcode[(s.cluster, rcode_name(rc))] += n
        for (cluster, rc_name), n in sorted(by_rcode.items()):
            answers.add_metric([cluster, rc_name], n)
        yield answers
        yield _counter(
            "isthmus_dns_cache_hits", "Queries answered from the precomputed wire cache.", live, "hits"
        )
        yield _counter("isthmus_dns_cache_misses", "Queries answered by building a response.", live, "misses")
        yield _counter(
            "isthmus_dns_dropped",
            "Packets dropped unanswered (runts, responses, send failures).",
            live,
            "dropped",
        )
        closed = CounterMetricFamily(
            "isthmus_dns_tcp_closed",
            "TCP connections closed by the server: query_timeout (no whole query in time), idle_timeout, "
            "source_limit and global_limit (closed to make room for a new connection).",
            labels=["reason"],
        )
        for reason in TCP_CLOSE_REASONS:
            closed.add_metric([reason], sum(s.tcp_closed[reason] for s in live))
        yield closed
        conns = GaugeMetricFamily("isthmus_dns_tcp_connections", "Open DNS-over-TCP connections.")
        conns.add_metric([], sum(s.tcp_connections for s in live))
        yield conns
        records = GaugeMetricFamily("isthmus_dns_cache_entries", "(name, type) answers in the wire cache.")
        records.add_metric([], sum(s.records for s in live))
        yield records
        ready = GaugeMetricFamily("isthmus_dns_ready", "1 once the informers synced and answers are served.")
        ready.add_metric([], 1 if live and all(s.ready for s in live) else 0)
        yield ready
        workers = sorted((s for s in live if s.worker is not None), key=lambda s: s.worker or 0)
        if workers:
            answered = CounterMetricFamily(
                "isthmus_dns_worker_queries",
                "DNS queries answered by each --workers process (restarts included).",
                labels=["worker"],
            )
            restarts = CounterMetricFamily(
                "isthmus_dns_worker_restarts", "Times a --workers process died and was restarted.", labels=["worker"]
            )
            for s in workers:
                answered.add_metric([str(s.worker)], sum(s.queries.values()))
                restarts.add_metric([str(s.worker)], s.restarts)
            yield answered
            yield restarts
        hist = HistogramMetricFamily(
            "isthmus_dns_request_duration_seconds",
            "Time from receiving a query to handing its response to the kernel.",
        )
        counts = [0] * (len(_BOUNDS_NS) + 1)
        total_ns = 0
        for s in live:
            for i, n in enumerate(s.latency):
                counts[i] += n
            total_ns += s.latency_sum_ns
        buckets: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip([*map(str, LATENCY_BUCKETS), "+Inf"], counts, strict=True):
            acc += n
            buckets.append((bound, acc))
        hist.add_metric([], buckets, total_ns / 1e9)
        yield hist


def _counter(name: str, doc: str, live: list[DnsStats], attr: str) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc)
    fam.add_metric([], sum(getattr(s, attr) for s in live))
    return fam


REGISTRY.register(_DnsCollector())
