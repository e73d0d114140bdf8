"""Leases (coordination.k8s.io): only their columns differ from the generic."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import AGE_COLUMN, NAME_COLUMN, Column, age, col, dig, name_of

Obj = dict[str, Any]


def _lease(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), str(dig(obj, "spec", "holderIdentity") or ""), age(obj, now)]


COLUMNS: list[Column] = [NAME_COLUMN, col("Holder", desc="The holder of the lease."), AGE_COLUMN]


class LeaseStrategy(Strategy):
    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _lease(obj, now)
