"""Namespaces (kube's pkg/registry/core/namespace).

A namespace is created Active with the `kubernetes` spec finalizer, which only the server moves
(through /status, also served as /finalize); deleting one marks it Terminating and keeps it
while that finalizer stays (controllers/namespace.py empties it, then removes the finalizer).
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.defaulting import ensure_dict, set_default
from isthmus.apiserver.registry.strategy import StatusStrategy, Strategy, fields
from isthmus.apiserver.registry.table import AGE_COLUMN, NAME_COLUMN, Column, age, col, dig, name_of

Obj = dict[str, Any]


KEY = "/namespaces"
FINALIZER = "kubernetes"


def default_namespace(obj: Obj) -> None:
    """SetDefaults_Namespace (the immutable kubernetes.io/metadata.name label) and NamespaceStatus."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and isinstance(name, str) and name:
        labels = ensure_dict(meta, "labels")
        labels["kubernetes.io/metadata.name"] = name
    set_default(ensure_dict(obj, "status"), "phase", "Active")


def _ns(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), str(dig(obj, "status", "phase") or ""), age(obj, now)]


COLUMNS: list[Column] = [NAME_COLUMN, col("Status", desc="The status of the namespace"), AGE_COLUMN]


class NamespaceStatusStrategy(StatusStrategy):
    """/status and /finalize: status and spec.finalizers move, nothing else."""

    def prepare_for_update(self, new: Obj, old: Obj) -> Obj:
        keep = super().prepare_for_update(new, old)
        keep.setdefault("spec", {})["finalizers"] = (new.get("spec") or {}).get("finalizers", [])
        return keep


class NamespaceStrategy(Strategy):
    name_rule = "label"
    # kube serves /finalize apart (spec.finalizers only); here it is /status, which moves both.
    subresource_aliases = {"finalize": "status"}
    field_selectors = fields("status.phase")
    status_strategy = NamespaceStatusStrategy()

    def default(self, obj: Obj) -> None:
        default_namespace(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.setdefault("spec", {})["finalizers"] = [FINALIZER]

    def initial_status(self, obj: Obj) -> Obj | None:
        return {"phase": "Active"}

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        # spec.finalizers are written like status: owned by the server.
        new.setdefault("spec", {})["finalizers"] = list((old.get("spec") or {}).get("finalizers", []))

    def holds_deletion(self, obj: Obj) -> bool:
        # The namespace controller removes `kubernetes` once the namespace is empty.
        return bool((obj.get("spec") or {}).get("finalizers"))

    def prepare_for_delete(self, obj: Obj) -> None:
        obj.setdefault("status", {})["phase"] = "Terminating"

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _ns(obj, now)
