"""ConfigMaps (kube's pkg/registry/core/configmap): at most 1 MiB of data; `immutable` freezes them."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from isthmus.apiserver.apimachinery.errors import cause
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import AGE_COLUMN, NAME_COLUMN, Column, age, col, name_of

Obj = dict[str, Any]
Cause = dict[str, str]

# kube's core.MaxSecretSize: the most data a ConfigMap or a Secret holds (bytes, as decoded).
MAX_DATA_BYTES = 1024 * 1024
IMMUTABLE = "field is immutable when `immutable` is set"


def decoded_len(value: Any) -> int:
    """Bytes of a base64 value ([]byte in kube: data of Secrets, binaryData of ConfigMaps)."""
    if not isinstance(value, str):
        return 0
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return len(value) * 3 // 4


def too_long(field: str) -> Cause:
    """field.TooLong as kube v1.32 words it (no value shown)."""
    return cause(field, f"Too long: may not be more than {MAX_DATA_BYTES} bytes", "FieldValueTooLong")


def _map(obj: Obj, key: str) -> dict[str, Any] | None:
    """A data map for comparison: absent, null and empty are all nil once kube stored them."""
    value = obj.get(key)
    return value if isinstance(value, dict) and value else None


def immutable_changes(new: Obj, old: Obj, fields: tuple[str, ...]) -> list[Cause]:
    """ValidateConfigMapUpdate / ValidateSecretUpdate: nothing of an immutable object's data moves."""
    if old.get("immutable") is not True:
        return []
    out: list[Cause] = []
    if new.get("immutable") is not True:
        out.append(cause("immutable", f"Forbidden: {IMMUTABLE}", "FieldValueForbidden"))
    for f in fields:
        if _map(new, f) != _map(old, f):
            out.append(cause(f, f"Forbidden: {IMMUTABLE}", "FieldValueForbidden"))
    return out


def _configmap(obj: Obj, now: float) -> list[Any]:
    n = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [name_of(obj), n, age(obj, now)]


COLUMNS: list[Column] = [NAME_COLUMN, col("Data", "integer", "Data contains the configuration data."), AGE_COLUMN]


class ConfigMapStrategy(Strategy):
    def validate(self, obj: Obj) -> list[Cause]:
        # ValidateConfigMap: data (UTF-8 bytes) and binaryData (decoded bytes) together; the error
        # names no field ("" is the whole object).
        size = 0
        data = obj.get("data")
        if isinstance(data, dict):
            for v in data.values():  # text_len of each, in the loop: a call per value cost more than the sum
                if isinstance(v, str):
                    size += len(v.encode())
        binary = obj.get("binaryData")
        if isinstance(binary, dict):
            size += sum(decoded_len(v) for v in binary.values())
        return [too_long("")] if size > MAX_DATA_BYTES else []

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        return immutable_changes(new, old, ("data", "binaryData")) + self.validate(new)

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _configmap(obj, now)
