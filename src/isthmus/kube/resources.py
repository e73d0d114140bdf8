"""Our CRDs as lightkube generic resources, built from the api registry (names are never retyped),
plus conversion between our pydantic models and lightkube objects.

Core kinds (Service, EndpointSlice, ...) are lightkube's own: `lightkube.resources.*` and
`lightkube.models.*`.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_global_resource,
    create_namespaced_resource,
)

from isthmus.api.base import Resource

GenericResource = GenericNamespacedResource | GenericGlobalResource
GenericResourceType = type[GenericNamespacedResource] | type[GenericGlobalResource]
M = TypeVar("M", bound=Resource)


@cache
def resource_for(model: type[Resource]) -> GenericResourceType:
    """The lightkube resource class of a model (created and registered with lightkube on first use,
    so `lightkube.codecs.load_all_yaml` and `get_generic_resource` know it too; `RESOURCES` registers
    them all)."""
    info = model.crd
    create = create_namespaced_resource if info.namespaced else create_global_resource
    res: GenericResourceType = create(info.group, info.version, info.kind, info.plural)
    return res


if TYPE_CHECKING:
    RESOURCES: dict[type[Resource], GenericResourceType]
    """Every registered CRD model → its lightkube resource class (made on first use, as the registry)."""


def __getattr__(name: str) -> Any:
    if name != "RESOURCES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from isthmus.api import CRD_MODELS

    resources = globals()["RESOURCES"] = {m: resource_for(m) for m in CRD_MODELS}
    return resources


def to_lightkube(obj: Resource) -> GenericResource:
    """A model instance as a lightkube object (for `AsyncClient.create/replace/apply`)."""
    res = resource_for(type(obj))
    out: GenericResource = res.from_dict(obj.to_dict())
    return out


def from_lightkube(model: type[M], obj: Any) -> M:
    """A lightkube object (generic dict or typed model) or plain dict parsed into a model."""
    return model.from_dict(obj)
