"""What the server knows about each resource type it serves (built-in kinds and CRD versions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceInfo:
    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    has_status: bool = False
    # OpenAPI v3 schema of the whole object, refs inlined, carrying the kube extensions
    # (x-kubernetes-preserve-unknown-fields, x-kubernetes-list-type, x-kubernetes-list-map-keys,
    # x-kubernetes-map-type, x-kubernetes-patch-merge-key, x-kubernetes-patch-strategy,
    # x-kubernetes-int-or-string, x-kubernetes-embedded-resource). None = anything goes.
    schema: dict[str, Any] | None = None
    # CRD additionalPrinterColumns shape: {name, type, jsonPath, description?, priority?, format?}
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    builtin: bool = True  # built-ins accept strategic-merge-patch; CRDs do not (415, like kube)
    storage_version: bool = True  # the version objects are stored under (CRDs: spec.versions[].storage)
    # Kind-specific defaulting kube does in Go (e.g. Service ports[].targetPort = port); runs after schema defaults.
    defaulter: Callable[[dict[str, Any]], None] | None = None
    # Field selector paths beyond metadata.name / metadata.namespace (e.g. pods: spec.nodeName, status.phase).
    field_selectors: set[str] = field(default_factory=set)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def key(self) -> str:
        """Storage key, version independent: '<group>/<plural>' ('/pods' for core)."""
        return f"{self.group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"
