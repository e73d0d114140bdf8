"""`isthmus show mcs`: rows from MultiClusterService objects (pure, so the CLI and tests agree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from isthmus.api.mcsvc import ConditionType, MultiClusterService


def _state(report: Any) -> tuple[str, str]:
    """(state, problem) of one cluster's report."""
    parts = []
    if report.provider:
        parts.append("serving" if report.service_applied else "failing" if report.service_applied is False
                     else "pending")
        if report.ready_endpoints is not None:
            parts.append(f"{report.ready_endpoints} ready")
        if report.export:
            parts.append(f"export by {report.export}")
    if report.consumer and report.imported is not None:
        parts.append("imported" if report.imported else "not imported")
    problem = report.message if report.service_applied is False else ""
    return ", ".join(parts) or "-", problem


def mcs_rows(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for raw in objects:
        mcs = MultiClusterService.from_dict(dict(raw))
        ready = next((c for c in mcs.status.conditions if c.type == ConditionType.READY), None)
        clusters = []
        for r in sorted(mcs.status.clusters, key=lambda r: r.name):
            role = "+".join(x for x, on in (("provider", r.provider), ("consumer", r.consumer)) if on) or "-"
            state, problem = _state(r)
            clusters.append({"name": r.name, "role": role, "state": state, "problem": problem})
        rows.append({
            "namespace": mcs.namespace or "",
            "name": mcs.name,
            "types": list(mcs.spec.types),
            "providers": mcs.status.providers or "",
            "consumers": mcs.status.consumers or "",
            "ready": ready.status if ready is not None else "Unknown",
            "address": mcs.status.address or "",
            "problem": ready.message if ready is not None and ready.status != "True" else "",
            "conditions": [c.to_dict() for c in mcs.status.conditions],
            "clusters": clusters,
        })
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))
