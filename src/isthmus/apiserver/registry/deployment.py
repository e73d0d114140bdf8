"""Deployments (apps, kube's pkg/registry/apps/deployment): Go defaults and kubectl's columns."""

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
    label_selector_string,
    name_of,
)

Obj = dict[str, Any]


def default_deployment(obj: Obj) -> None:
    """apps/v1 SetDefaults_Deployment."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    set_default(spec, "replicas", 1)
    strategy = ensure_dict(spec, "strategy")
    set_default(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = ensure_dict(strategy, "rollingUpdate")
        set_default(ru, "maxUnavailable", "25%")
        set_default(ru, "maxSurge", "25%")
    set_default(spec, "revisionHistoryLimit", 10)
    set_default(spec, "progressDeadlineSeconds", 600)
    default_template(spec)


def _deployment(obj: Obj, now: float) -> list[Any]:
    containers, images = containers_images(dig(obj, "spec", "template", "spec"))
    desired = int(dig(obj, "spec", "replicas") or 0)
    st = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(st, dict)
    return [
        name_of(obj),
        f"{int(st.get('readyReplicas') or 0)}/{desired}",
        int(st.get("updatedReplicas") or 0),
        int(st.get("availableReplicas") or 0),
        age(obj, now),
        containers,
        images,
        label_selector_string(dig(obj, "spec", "selector")),
    ]


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Ready", desc="Number of the pod with ready state"),
    col(
        "Up-to-date",
        "integer",
        "Total number of non-terminated pods targeted by this deployment that have "
        "the desired template spec.",
    ),
    col(
        "Available",
        "integer",
        "Total number of available pods (ready for at least minReadySeconds) "
        "targeted by this deployment.",
    ),
    AGE_COLUMN,
    col("Containers", desc="Names of each container in the template.", priority=1),
    col("Images", desc="Images referenced by each container in the template.", priority=1),
    col(
        "Selector",
        desc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will "
        "be the ones affected by this deployment.",
        priority=1,
    ),
]


class DeploymentStrategy(Strategy):
    scale_strategy = ScaleStrategy("spec.replicas", "status.replicas", "spec.selector")

    def default(self, obj: Obj) -> None:
        default_deployment(obj)

    def initial_status(self, obj: Obj) -> Obj | None:
        return {}  # kube's PrepareForCreate: DeploymentStatus{}, every field omitempty

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _deployment(obj, now)
