"""HorizontalPodAutoscalers in autoscaling/v1, stored as autoscaling/v2 (kube's storage version).

kube's pkg/apis/autoscaling/v1/conversion.go: v1 has only a CPU utilization target and current
value; everything else v2 has (other metrics, behavior, conditions) travels in v1 as JSON
annotations, so an object survives a round trip through either version.
"""

from __future__ import annotations

from typing import Any

import orjson

from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.registry import printers
from isthmus.apiserver.registry.table import Column
from isthmus.apiserver.registry.workloads import HorizontalPodAutoscalerV1Strategy as _V1Base

Obj = dict[str, Any]

V1, V2 = "autoscaling/v1", "autoscaling/v2"
METRICS = "autoscaling.alpha.kubernetes.io/metrics"
CURRENT_METRICS = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"


def _is_cpu_target(m: Any) -> bool:
    return (isinstance(m, dict) and m.get("type") == "Resource"
            and (m.get("resource") or {}).get("name") == "cpu"
            and ((m.get("resource") or {}).get("target") or {}).get("type") == "Utilization")


def _is_cpu_current(m: Any) -> bool:
    return (isinstance(m, dict) and m.get("type") == "Resource"
            and (m.get("resource") or {}).get("name") == "cpu"
            and ((m.get("resource") or {}).get("current") or {}).get("averageUtilization") is not None)


def _pop_json(annotations: dict[str, str], key: str) -> Any:
    raw = annotations.pop(key, None)
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _set_annotations(obj: Obj, annotations: dict[str, str]) -> None:
    meta = obj.setdefault("metadata", {})
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)


def v1_to_v2(obj: Obj) -> Obj:
    if obj.get("apiVersion") != V1:
        return obj
    out: Obj = clone(obj)
    out["apiVersion"] = V2
    annotations = dict((out.get("metadata") or {}).get("annotations") or {})
    spec = out.get("spec") if isinstance(out.get("spec"), dict) else None
    if spec is not None:
        metrics: list[Any] = []
        cpu = spec.pop("targetCPUUtilizationPercentage", None)
        if cpu is not None:
            metrics.append({"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}})
        metrics += [m for m in _pop_json(annotations, METRICS) or [] if not _is_cpu_target(m)]
        if metrics:
            spec["metrics"] = metrics
        behavior = _pop_json(annotations, BEHAVIOR)
        if behavior is not None:
            spec["behavior"] = behavior
    status = out.get("status") if isinstance(out.get("status"), dict) else None
    if status is not None:
        current: list[Any] = []
        cpu = status.pop("currentCPUUtilizationPercentage", None)
        if cpu is not None:
            current.append({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}})
        current += [m for m in _pop_json(annotations, CURRENT_METRICS) or [] if not _is_cpu_current(m)]
        if current:
            status["currentMetrics"] = current
        conditions = _pop_json(annotations, CONDITIONS)
        if conditions:
            status["conditions"] = conditions
        if not status.get("currentReplicas"):
            status.pop("currentReplicas", None)  # v2: omitempty
    else:
        for key in (CURRENT_METRICS, CONDITIONS):
            annotations.pop(key, None)
    _set_annotations(out, annotations)
    return out


def v2_to_v1(obj: Obj) -> Obj:
    if obj.get("apiVersion") != V2:
        return obj
    out: Obj = clone(obj)
    out["apiVersion"] = V1
    annotations = dict((out.get("metadata") or {}).get("annotations") or {})
    spec = out.get("spec") if isinstance(out.get("spec"), dict) else None
    if spec is not None:
        metrics = spec.pop("metrics", None) or []
        cpu = next((m for m in metrics if _is_cpu_target(m)), None)
        if cpu is not None:
            spec["targetCPUUtilizationPercentage"] = cpu["resource"]["target"].get("averageUtilization")
        others = [m for m in metrics if m is not cpu]
        if others:
            annotations[METRICS] = orjson.dumps(others).decode()
        behavior = spec.pop("behavior", None)
        if behavior is not None:
            annotations[BEHAVIOR] = orjson.dumps(behavior).decode()
    status = out.get("status") if isinstance(out.get("status"), dict) else None
    if status is not None:
        current = status.pop("currentMetrics", None) or []
        cpu = next((m for m in current if _is_cpu_current(m)), None)
        if cpu is not None:
            status["currentCPUUtilizationPercentage"] = cpu["resource"]["current"]["averageUtilization"]
        others = [m for m in current if m is not cpu]
        if others:
            annotations[CURRENT_METRICS] = orjson.dumps(others).decode()
        conditions = status.pop("conditions", None)
        if conditions:
            annotations[CONDITIONS] = orjson.dumps(conditions).decode()
        status.setdefault("currentReplicas", 0)  # v1: no omitempty
        status.setdefault("desiredReplicas", 0)
    _set_annotations(out, annotations)
    return out


class HorizontalPodAutoscalerV1Strategy(_V1Base):
    """autoscaling/v1: served from, and written to, the autoscaling/v2 objects."""

    def to_storage(self, obj: Obj) -> Obj:
        return v1_to_v2(obj)

    def from_storage(self, obj: Obj) -> Obj:
        return v2_to_v1(obj)

    def table_columns(self) -> list[Column]:
        return printers.HPA_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.hpa_row(v1_to_v2(obj), now)  # kube prints the internal (v2-shaped) object
