"""Which service an object belongs to: the `<namespace>/<name>` keys dns, the proxy and the agent
queue and index by, written once.

- a Service, ServiceExport or local ServiceImport is keyed by its own name;
- one of kube's own EndpointSlices by `kubernetes.io/service-name`;
- an MCS object (our EndpointSlices, and on the broker ExportedServices, aggregated ServiceImports
  and slices) by `multicluster.kubernetes.io/service-name`, in the namespace named by
  `isthmus.io/source-namespace` when it lives in the broker's namespace.
"""

from __future__ import annotations

from typing import Any

from isthmus.api.mcs import SOURCE_NAMESPACE_LABEL, kube_service_name, mcs_service_name
from isthmus.runtime.objects import object_labels, object_name, object_namespace, split_key

__all__ = ["kube_slice_keys", "mcs_keys", "own_keys", "service_of", "slice_keys"]


# Key mappers run for every cached object and event: make_key's f-string is written out in them.


def own_keys(obj: Any) -> tuple[str, ...]:
    ns, name = object_namespace(obj), object_name(obj) or ""
    return (f"{ns}/{name}" if ns else name,)


def kube_slice_keys(obj: Any) -> tuple[str, ...]:
    svc = kube_service_name(object_labels(obj))
    if not svc:
        return ()
    ns = object_namespace(obj)
    return (f"{ns}/{svc}" if ns else svc,)


def mcs_keys(obj: Any) -> tuple[str, ...]:
    labels = object_labels(obj)
    svc = mcs_service_name(labels)
    ns = labels.get(SOURCE_NAMESPACE_LABEL) or object_namespace(obj)
    return (f"{ns}/{svc}",) if svc and ns else ()


def slice_keys(obj: Any) -> tuple[str, ...]:
    """Any EndpointSlice: the service of kube's own slices and of MCS slices alike."""
    return (*mcs_keys(obj), *kube_slice_keys(obj))


def service_of(key: str) -> tuple[str, str]:
    """`(namespace, name)` of a service key."""
    ns, name = split_key(key)
    if ns is None:
        raise ValueError(f"{key!r} is not a <namespace>/<name> service key")
    return ns, name
