"""FlowSchemas and PriorityLevelConfigurations (flowcontrol.apiserver.k8s.io): status reset on create,
and kubectl's columns (kube's printFlowSchema, printPriorityLevelConfiguration)."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry import printers
from isthmus.apiserver.registry.table import Column
from isthmus.apiserver.registry.workloads import EmptyStatusStrategy

Obj = dict[str, Any]


class FlowSchemaStrategy(EmptyStatusStrategy):
    def table_columns(self) -> list[Column]:
        return printers.FLOWSCHEMA_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.flowschema_row(obj, now)


class PriorityLevelConfigurationStrategy(EmptyStatusStrategy):
    def table_columns(self) -> list[Column]:
        return printers.PRIORITYLEVEL_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.prioritylevel_row(obj, now)
