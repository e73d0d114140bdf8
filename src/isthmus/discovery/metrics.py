"""Clusterset-level discovery metrics, read from the agent's informer caches when scraped.

Nothing here is counted as it happens: at scrape time the collector walks the caches the agent
already holds (its ServiceExports and ServiceImports, the broker's Clusters) and its allocator and
liveness bookkeeping, so the numbers are what the caches say now and cost no API request. Each
agent reports its own cluster (label ``cluster``); a clusterset view sums or joins the agents'
series. Only a leading, synced agent reports (a standby's caches are empty or stale).

Cardinality stays bounded at any number of services: labels are clusters, states and conflict
types, never services. A walk over 10,000 exports is about 30 ms of dict reads (a 2-CPU machine).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from isthmus.api.mcs import (
    AGENT_FIELD_MANAGER,
    HEARTBEAT_ANNOTATION,
    ConditionType,
    ReadyReason,
)
from isthmus.runtime import REGISTRY

if TYPE_CHECKING:
    from isthmus.discovery.agent import Agent

__all__ = ["CLUSTERSET_METRICS", "EXPORT_STATES", "conflict_types", "export_state", "export_summary", "heartbeat_ages",
           "track"]

EXPORT_STATES = ("valid", "conflict", "invalid", "failed", "pending")
"""A ServiceExport's state, one per export: ``invalid`` (Valid=False), ``failed`` (Ready=False
Failed, e.g. no free ClusterSet IP), ``conflict`` (exported, Conflict=True), ``pending`` (not
exported yet, or no conditions yet) and ``valid`` (exported, no conflict)."""

CLUSTERSET_METRICS = (
    "isthmus_exports",
    "isthmus_export_conflicts",
    "isthmus_imports",
    "isthmus_clusterset_ips_allocated",
    "isthmus_clusterset_ips_capacity",
    "isthmus_cluster_heartbeat_age_seconds",
    "isthmus_cluster_silent",
    "isthmus_cluster_heartbeat_grace_seconds",
)
"""Every family this module exports (the dashboard test checks each is drawn)."""


def _d(obj: Any) -> Mapping[str, Any]:
    return obj if isinstance(obj, dict) else obj.to_dict()


_VALID, _READY, _CONFLICT, _FAILED = (str(ConditionType.VALID), str(ConditionType.READY), str(ConditionType.CONFLICT),
                                      str(ReadyReason.FAILED))


def export_summary(obj: Any) -> tuple[str, list[str]]:
    """A ServiceExport's state (one of EXPORT_STATES) and its conflict types (PortConflict, ...), from
    its conditions in one pass: this runs for every export at every scrape (about 3 µs each)."""
    valid = ready = ready_reason = conflict = conflict_reason = None
    for c in (_d(obj).get("status") or {}).get("conditions") or ():
        t = c.get("type")
        if t == _VALID:
            valid = c.get("status")
        elif t == _READY:
            ready, ready_reason = c.get("status"), c.get("reason")
        elif t == _CONFLICT:
            conflict, conflict_reason = c.get("status"), c.get("reason")
    types = [r for r in str(conflict_reason or "").split(",") if r] if conflict == "True" else []
    if valid == "False":
        return "invalid", types
    if ready == "False" and ready_reason == _FAILED:
        return "failed", types
    if ready != "True":
        return "pending", types
    return ("conflict" if conflict == "True" else "valid"), types


def export_state(obj: Any) -> str:
    """The state (one of EXPORT_STATES) a ServiceExport's conditions say it is in."""
    return export_summary(obj)[0]


def conflict_types(obj: Any) -> list[str]:
    """The conflict reasons (PortConflict, TypeConflict, ...) of a ServiceExport in conflict."""
    return export_summary(obj)[1]


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _agent_write_time(obj: Mapping[str, Any]) -> datetime | None:
    """The broker's time of the last write of this Cluster by its agent (managedFields)."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if (entry.get("manager") == AGENT_FIELD_MANAGER and entry.get("operation") == "Update"
                and not entry.get("subresource")):
            return _parse_time(entry.get("time"))
    return None


def heartbeat_ages(
    own: str, clusters: Iterable[Any], silent_for: Mapping[str, float | None], now: datetime
) -> dict[str, float]:
    """Seconds since each cluster's agent last beat, as this agent sees them.

    Its own: from its own heartbeat annotation (written with this host's clock, read with it).
    A peer: how long its heartbeat has not changed as this agent saw it (`silent_for`, the very
    figure the agent withdraws endpoints on); for a peer found silent at start-up (no such figure)
    the broker's own clock: its last write of the peer's Cluster against its last write of ours,
    plus the age of ours. Clocks of different hosts are never compared.
    """
    by_name = {str((_d(o).get("metadata") or {}).get("name")): _d(o) for o in clusters}
    ages: dict[str, float] = {}
    mine = by_name.get(own)
    own_age: float | None = None
    if mine is not None:
        beat = _parse_time(((mine.get("metadata") or {}).get("annotations") or {}).get(HEARTBEAT_ANNOTATION))
        if beat is not None:
            own_age = max(0.0, (now - beat).total_seconds())
            ages[own] = own_age
    own_written = _agent_write_time(mine) if mine is not None else None
    for name, obj in by_name.items():
        if name == own:
            continue
        seen = silent_for.get(name)
        if seen is not None:
            ages[name] = max(0.0, seen)
            continue
        written = _agent_write_time(obj)
        if written is not None and own_written is not None and own_age is not None:
            ages[name] = max(0.0, (own_written - written).total_seconds() + own_age)
    return ages


_LIVE: weakref.WeakSet[Agent] = weakref.WeakSet()


def track(agent: Agent) -> None:
    """Report this agent's caches at every scrape while it leads (held weakly)."""
    _LIVE.add(agent)


class _AgentCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        exports = GaugeMetricFamily(
            "isthmus_exports",
            "ServiceExports of this cluster by state: valid (exported, no conflict), conflict (exported, "
            "Conflict=True), invalid (Valid=False), failed (Ready=False Failed), pending (not exported yet).",
            labels=["cluster", "state"],
        )
        conflicts = GaugeMetricFamily(
            "isthmus_export_conflicts",
            "ServiceExports of this cluster in conflict, by conflict type (the Conflict condition's reasons: "
            "PortConflict, TypeConflict, ...); an export with two types counts under both.",
            labels=["cluster", "type"],
        )
        imports = GaugeMetricFamily(
            "isthmus_imports", "ServiceImports in this cluster, by type (ClusterSetIP, Headless).",
            labels=["cluster", "type"],
        )
        allocated = GaugeMetricFamily(
            "isthmus_clusterset_ips_allocated",
            "ClusterSet IPs (VIPs) in use from this cluster's ClusterSet IP CIDR.", labels=["cluster", "cidr"],
        )
        capacity = GaugeMetricFamily(
            "isthmus_clusterset_ips_capacity",
            "Allocatable addresses of this cluster's ClusterSet IP CIDR.", labels=["cluster", "cidr"],
        )
        ages = GaugeMetricFamily(
            "isthmus_cluster_heartbeat_age_seconds",
            "Seconds since the agent of cluster `peer` last beat on the broker, as the agent of `cluster` "
            "sees it (peer == cluster: its own heartbeat).",
            labels=["cluster", "peer"],
        )
        silent = GaugeMetricFamily(
            "isthmus_cluster_silent",
            "1 while the agent of `cluster` judges cluster `peer` silent and withdraws its endpoints from "
            "every import; 0 otherwise.",
            labels=["cluster", "peer"],
        )
        grace = GaugeMetricFamily(
            "isthmus_cluster_heartbeat_grace_seconds",
            "Seconds without a heartbeat after which this agent withdraws a peer's endpoints.", labels=["cluster"],
        )
        now = datetime.now(UTC)
        for agent in sorted(list(_LIVE), key=lambda a: a.cluster_id):
            if not agent.ready:
                continue
            cluster = agent.cluster_id
            states: Counter[str] = Counter(dict.fromkeys(EXPORT_STATES, 0))
            types: Counter[str] = Counter()
            for obj in agent.exports.cache.list():
                state, conflicting = export_summary(obj)
                states[state] += 1
                if conflicting:
                    types.update(conflicting)
            for state, n in states.items():
                exports.add_metric([cluster, state], n)
            for type_, n in sorted(types.items()):
                conflicts.add_metric([cluster, type_], n)
            by_type = Counter(str((_d(o).get("spec") or {}).get("type") or "") for o in agent.imports.cache.list())
            for type_, n in sorted(by_type.items()):
                imports.add_metric([cluster, type_], n)
            if agent.allocator is not None:
                allocated.add_metric([cluster, agent.allocator.cidr], agent.allocator.used)
                capacity.add_metric([cluster, agent.allocator.cidr], agent.allocator.size)
            peers = agent.b_clusters.cache.list()
            liveness = agent.liveness
            seen = {p: liveness.silent_for(p) for p in liveness.peers()}
            for peer, age in sorted(heartbeat_ages(cluster, peers, seen, now).items()):
                ages.add_metric([cluster, peer], age)
            judged = agent.silent_peers
            for peer in sorted({str((_d(o).get("metadata") or {}).get("name")) for o in peers} - {cluster}):
                silent.add_metric([cluster, peer], 1 if peer in judged else 0)
            grace.add_metric([cluster], liveness.grace)
        yield from (exports, conflicts, imports, allocated, capacity, ages, silent, grace)


REGISTRY.register(_AgentCollector())
