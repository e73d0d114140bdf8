"""What the server knows about each resource type it serves (built-in kinds and CRD versions)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.registry.strategy import Strategy

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceInfo:
    """One served resource type (a group, version and plural) and its strategy.

    What discovery and OpenAPI describe is data here; what the write pipeline and reads do
    differently for this kind is `strategy`'s (registry/strategy.py).
    """

    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    has_status: bool = False  # the status subresource is served
    # OpenAPI v3 schema of the whole object, refs inlined, carrying the kube extensions
    # (x-kubernetes-preserve-unknown-fields, x-kubernetes-list-type, x-kubernetes-list-map-keys,
    # x-kubernetes-map-type, x-kubernetes-patch-merge-key, x-kubernetes-patch-strategy,
    # x-kubernetes-int-or-string, x-kubernetes-embedded-resource). None = anything goes.
    schema: dict[str, Any] | None = None
    builtin: bool = True  # built-ins accept strategic-merge-patch; CRDs do not (415, like kube)
    storage_version: bool = True  # the version objects are stored under (CRDs: spec.versions[].storage)
    strategy: Strategy = field(default_factory=Strategy)
    has_scale: bool = False  # the scale subresource (autoscaling/v1 Scale) is served
    # kube's own APIResourceList entries for this type and its subresources (built-ins: from the
    # v1.32 discovery data); None: discovery derives them from the fields above.
    discovery: list[dict[str, Any]] | None = None
    # Where its objects are stored when that is another group's resource (events.k8s.io/v1 events:
    # "/events", the core ones, as kube's /registry/events); None: "<group>/<plural>".
    storage_key: str | None = None

    @functools.cached_property  # read several times per request, like key
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @functools.cached_property  # read several times per request; the fields it joins never change
    def key(self) -> str:
        """Storage key, version independent: '<group>/<plural>' ('/pods' for core) unless
        `storage_key` names the resource this one shares its objects with. Several infos (of one
        group or not) may share a key: one of them is the storage version."""
        return self.storage_key or f"{self.group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    # Views of the strategy, for callers that only read.

    @property
    def defaulter(self) -> Callable[[dict[str, Any]], None] | None:
        """The kind-specific defaulting kube does in Go (runs after schema defaults), if any."""
        return self.strategy.default if self.strategy.has_defaults else None

    @property
    def field_selectors(self) -> AbstractSet[str]:
        """Field selector paths beyond metadata.name / metadata.namespace (e.g. pods: spec.nodeName)."""
        return self.strategy.field_selectors.keys()

    @property
    def printer_columns(self) -> list[dict[str, Any]]:
        """CRD additionalPrinterColumns shape: {name, type, jsonPath, description?, priority?, format?}."""
        return self.strategy.printer_columns

    def subresource(self, name: str) -> str:
        """The subresource a request path names, as the write pipeline knows it; 404 if not served."""
        name = self.strategy.subresource_aliases.get(name, name)
        if (name == "status" and self.has_status) or (name == "scale" and self.has_scale):
            return name
        raise errors.route_not_found()


class ResourceRegistry:
    """The resource types served right now: the built-ins, plus every served version of each stored CRD.

    Lookups by (group, version, plural) for requests, by storage key for controllers. `cache` holds
    documents derived from the set (discovery, OpenAPI) and is emptied whenever the set changes.
    """

    def __init__(self) -> None:
        self._infos: dict[tuple[str, str, str], ResourceInfo] = {}
        self._crds: dict[str, list[ResourceInfo]] = {}
        self.cache: dict[str, bytes] = {}

    def add(self, info: ResourceInfo) -> None:
        self._infos[(info.group, info.version, info.plural)] = info
        self.cache.clear()

    def serve_crd(self, name: str, infos: list[ResourceInfo]) -> None:
        """Serve `infos` for CRD `name`, replacing what it served before."""
        self.unserve_crd(name)
        for info in infos:
            self.add(info)
        self._crds[name] = infos

    def unserve_crd(self, name: str) -> None:
        for info in self._crds.pop(name, []):
            self._infos.pop((info.group, info.version, info.plural), None)
        self.cache.clear()

    def crd_infos(self, name: str) -> list[ResourceInfo]:
        return self._crds.get(name, [])

    def find(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._infos.get((group, version, plural))

    def get(self, group: str, version: str, plural: str) -> ResourceInfo:
        """The served info, else 404 as kube words it."""
        info = self._infos.get((group, version, plural))
        if info is None:
            raise errors.route_not_found()
        return info

    def all(self) -> list[ResourceInfo]:
        return list(self._infos.values())

    def keys(self) -> set[str]:
        """Storage keys of every served resource."""
        return {i.key for i in self._infos.values()}

    def storage_info(self, key: str) -> ResourceInfo | None:
        """The info objects under `key` are stored as (its storage version), else any served one."""
        found = None
        for info in self._infos.values():
            if info.key == key:
                if info.storage_version:
                    return info
                found = info
        return found

    def serves(self, kind: str, api_version: str) -> bool:
        return any(i.kind == kind and i.api_version == api_version for i in self._infos.values())
