"""ConfigMaps (kube's pkg/registry/core/configmap): only their columns differ from the generic."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    col,
    name_of,
)

Obj = dict[str, Any]


def _configmap(obj: Obj, now: float) -> list[Any]:
    n = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [name_of(obj), n, age(obj, now)]


COLUMNS: list[Column] = [NAME_COLUMN, col("Data", "integer", "Data contains the configuration data."), AGE_COLUMN]


class ConfigMapStrategy(Strategy):
    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _configmap(obj, now)
