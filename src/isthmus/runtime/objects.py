"""Uniform access to the metadata of cached objects.

Informer caches hold what lightkube decodes: typed models (msgspec structs, for built-in
kinds) or ``Generic`` dicts (for resources made with ``lightkube.generic_resource``).
``Generic.metadata`` re-parses the metadata on every access, so these helpers read the
dict directly when they can; controllers and index functions should use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OwnerRef",
    "make_key",
    "object_key",
    "object_labels",
    "object_name",
    "object_namespace",
    "object_resource_version",
    "object_uid",
    "owner_refs",
    "split_key",
]


def _meta(obj: Any) -> Any:
    if isinstance(obj, dict):
        return obj.get("metadata")
    return getattr(obj, "metadata", None)


def _field(meta: Any, name: str) -> Any:
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get(name)
    return getattr(meta, name, None)


def _meta_field(obj: Any, name: str) -> Any:
    """_field(_meta(obj), name) in one call: these helpers run several times per cached object and
    event (an agent's restart at 3,000 imports made 226 of these calls per import in two)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else getattr(obj, "metadata", None)
    if meta is None:
        return None
    return meta.get(name) if isinstance(meta, dict) else getattr(meta, name, None)


def object_name(obj: Any) -> str:
    name = _meta_field(obj, "name")
    if not name:
        raise ValueError("object has no metadata.name")
    return str(name)


def object_namespace(obj: Any) -> str | None:
    ns = _meta_field(obj, "namespace")
    return str(ns) if ns else None


def object_uid(obj: Any) -> str | None:
    uid = _meta_field(obj, "uid")
    return str(uid) if uid else None


def object_resource_version(obj: Any) -> str | None:
    rv = _meta_field(obj, "resourceVersion")
    return str(rv) if rv else None


def object_labels(obj: Any) -> Mapping[str, str]:
    labels = _meta_field(obj, "labels")
    return labels if labels else {}


def make_key(namespace: str | None, name: str) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (client-go's MetaNamespaceKey)."""
    return f"{namespace}/{name}" if namespace else name


def object_key(obj: Any) -> str:
    meta = _meta(obj)
    if isinstance(meta, dict):  # _field, without its two calls
        name, ns = meta.get("name"), meta.get("namespace")
    else:
        name, ns = _field(meta, "name"), _field(meta, "namespace")
    if not name:
        raise ValueError("object has no metadata.name")
    return f"{ns}/{name}" if ns else str(name)


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of :func:`make_key`: ``(namespace or None, name)``."""
    ns, sep, name = key.partition("/")
    return (ns, name) if sep else (None, ns)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool


def owner_refs(obj: Any) -> list[OwnerRef]:
    refs = _field(_meta(obj), "ownerReferences") or []
    out: list[OwnerRef] = []
    for r in refs:
        out.append(
            OwnerRef(
                api_version=str(_field(r, "apiVersion") or ""),
                kind=str(_field(r, "kind") or ""),
                name=str(_field(r, "name") or ""),
                uid=str(_field(r, "uid") or ""),
                controller=bool(_field(r, "controller")),
            )
        )
    return out
