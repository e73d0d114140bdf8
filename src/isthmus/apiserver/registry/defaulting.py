"""Helpers for the Go defaulting strategies replicate (kube's SetDefaults_* functions)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def ensure_dict(parent: Obj, key: str) -> Obj:
    """parent[key] as a dict, created when absent (only used where kube creates the struct too)."""
    val = parent.get(key)
    if not isinstance(val, dict):
        val = {}
        parent[key] = val
    return val


def set_default(obj: Obj, key: str, value: Any) -> None:
    """obj[key] = value unless set (Go zero values, None and "", count as unset)."""
    if obj.get(key) in (None, ""):
        obj[key] = value
