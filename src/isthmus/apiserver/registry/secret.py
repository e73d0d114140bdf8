"""Secrets (kube's pkg/registry/core/secret): type defaults to Opaque and is selectable."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.defaulting import set_default
from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    col,
    name_of,
)

Obj = dict[str, Any]


def default_secret(obj: Obj) -> None:
    set_default(obj, "type", "Opaque")


def _secret(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), str(obj.get("type") or ""), len(obj.get("data") or {}), age(obj, now)]


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Type", desc="Used to facilitate programmatic handling of secret data."),
    col("Data", "integer", "Data contains the secret data."),
    AGE_COLUMN,
]


class SecretStrategy(Strategy):
    field_selectors = fields("type")

    def default(self, obj: Obj) -> None:
        default_secret(obj)

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _secret(obj, now)
