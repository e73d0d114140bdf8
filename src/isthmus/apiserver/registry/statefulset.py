"""StatefulSets (apps, kube's pkg/registry/apps/statefulset): Go defaults and kubectl's columns."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.defaulting import ensure_dict, set_default
from isthmus.apiserver.registry.pod import default_template
from isthmus.apiserver.registry.strategy import ScaleStrategy, Strategy
from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    col,
    containers_images,
    dig,
    name_of,
)

Obj = dict[str, Any]


def default_statefulset(obj: Obj) -> None:
    """apps/v1 SetDefaults_StatefulSet."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    set_default(spec, "replicas", 1)
    set_default(spec, "podManagementPolicy", "OrderedReady")
    strategy = ensure_dict(spec, "updateStrategy")
    set_default(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        set_default(ensure_dict(strategy, "rollingUpdate"), "partition", 0)
    set_default(spec, "revisionHistoryLimit", 10)
    policy = ensure_dict(spec, "persistentVolumeClaimRetentionPolicy")
    set_default(policy, "whenDeleted", "Retain")
    set_default(policy, "whenScaled", "Retain")
    default_template(spec)


def _statefulset(obj: Obj, now: float) -> list[Any]:
    containers, images = containers_images(dig(obj, "spec", "template", "spec"))
    desired = int(dig(obj, "spec", "replicas") or 0)
    ready = int(dig(obj, "status", "readyReplicas") or 0)
    return [name_of(obj), f"{ready}/{desired}", age(obj, now), containers, images]


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Ready", desc="Number of the pod with ready state"),
    AGE_COLUMN,
    col("Containers", desc="Names of each container in the template.", priority=1),
    col("Images", desc="Images referenced by each container in the template.", priority=1),
]


class StatefulSetStrategy(Strategy):
    scale_strategy = ScaleStrategy("spec.replicas", "status.replicas", "spec.selector")

    def default(self, obj: Obj) -> None:
        default_statefulset(obj)

    def initial_status(self, obj: Obj) -> Obj | None:
        # kube's PrepareForCreate: StatefulSetStatus{}; replicas and availableReplicas have no omitempty.
        return {"replicas": 0, "availableReplicas": 0}

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _statefulset(obj, now)
