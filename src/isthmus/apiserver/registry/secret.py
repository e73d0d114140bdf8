"""Secrets (kube's pkg/registry/core/secret): type defaults to Opaque and is selectable; stringData
is written into data; at most 1 MiB of data; type is immutable, and `immutable` freezes the data."""

from __future__ import annotations

import base64
from typing import Any

from isthmus.apiserver.apimachinery.errors import cause
from isthmus.apiserver.openapi.schema import go_value
from isthmus.apiserver.registry.configmap import (
    MAX_DATA_BYTES,
    Cause,
    decoded_len,
    immutable_changes,
    too_long,
)
from isthmus.apiserver.registry.defaulting import set_default
from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.registry.table import AGE_COLUMN, NAME_COLUMN, Column, age, col, name_of

Obj = dict[str, Any]


def default_secret(obj: Obj) -> None:
    set_default(obj, "type", "Opaque")


def merge_string_data(obj: Obj) -> None:
    """kube's v1 → internal conversion: each stringData entry overwrites data (base64), and stringData,
    write-only, is never stored. Non-string values are left for schema validation to refuse."""
    sd = obj.get("stringData")
    if not isinstance(sd, dict) or not all(isinstance(v, str) for v in sd.values()):
        return
    del obj["stringData"]
    if not sd:
        return
    data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
    assert isinstance(data, dict)
    for k, v in sd.items():
        data[k] = base64.b64encode(v.encode()).decode()
    obj["data"] = data


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

    def prepare_for_create(self, obj: Obj) -> None:
        merge_string_data(obj)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        merge_string_data(new)

    def validate(self, obj: Obj) -> list[Cause]:
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        assert isinstance(data, dict)
        size = sum(decoded_len(v) for v in data.values())
        out = [too_long("data")] if size > MAX_DATA_BYTES else []
        annotations = obj.get("metadata", {}).get("annotations") or {}
        if obj.get("type") == "kubernetes.io/service-account-token" and \
                not annotations.get("kubernetes.io/service-account.name"):
            # kube's ValidateSecret: the tokens controller needs to know whose token it is.
            out.append(cause("metadata.annotations[kubernetes.io/service-account.name]", "Required value",
                             "FieldValueRequired"))
        return out

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        out: list[Cause] = []
        if new.get("type") != old.get("type"):
            # ValidateImmutableField
            out.append(cause("type", f"Invalid value: {go_value(new.get('type'))}: field is immutable"))
        return out + immutable_changes(new, old, ("data",)) + self.validate(new)

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _secret(obj, now)
