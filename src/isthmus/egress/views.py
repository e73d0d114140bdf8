"""`isthmus show egress`: rows from ExternalServices and SourceIPClaims (pure, so the CLI and tests agree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from isthmus.api.base import find_condition
from isthmus.api.egress import READY, ExternalService, SourceIPClaim


def external_service_rows(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for raw in objects:
        es = ExternalService.from_dict(dict(raw))
        ready = find_condition(es.status.conditions, READY)
        by_service = {s.service: s for s in es.status.sources or []}
        sources = []
        for i, src in enumerate(es.spec.sources):
            service = f"{src.service.namespace or es.namespace}/{src.service.name}"
            seen = by_service.get(service)
            sources.append({"service": service, "claim": src.source_ip_claim_name or "",
                            "sourceIP": (seen.source_ip if seen else None) or "",
                            "endpoints": seen.endpoints if seen and seen.endpoints is not None else None,
                            "index": i})
        rows.append({
            "namespace": es.namespace or "",
            "name": es.name,
            "target": es.spec.target_ip,
            "ports": [f"{p.port}/{p.protocol}" for p in es.spec.ports],
            "address": es.status.address or "",
            "forwarder": es.status.forwarder or "",
            "ready": ready.status if ready is not None else "Unknown",
            "problem": ready.message if ready is not None and ready.status != "True" else "",
            "sources": sources,
            "conditions": [c.to_dict() for c in es.status.conditions],
        })
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))


def claim_rows(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for raw in objects:
        claim = SourceIPClaim.from_dict(dict(raw))
        ready = find_condition(claim.status.conditions, READY)
        rows.append({
            "namespace": claim.namespace or "",
            "name": claim.name,
            "class": claim.spec.source_ip_class_name,
            "phase": claim.status.phase.value if claim.status.phase else "Pending",
            "sourceIP": claim.status.source_ip or "",
            "reason": ready.reason if ready is not None else "",
            "message": ready.message if ready is not None and ready.status != "True" else "",
        })
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))
