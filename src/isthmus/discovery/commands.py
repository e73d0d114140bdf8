"""The `isthmus export` and `isthmus unexport` commands: the first creates or updates a ServiceExport,
the second deletes it; the agent does the rest (its export flow is exports.py; docs/discovery.md
"ServiceExport conditions")."""

from __future__ import annotations

from typing import Literal

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, Service

from isthmus.api.base import ObjectMeta
from isthmus.api.mcs import USE_CLUSTERSET_IP_ANNOTATION, ServiceExport
from isthmus.clusterset.control import FIELD_MANAGER, ClustersetError, delete_if_kind
from isthmus.kube.helpers import create_or_update, get_or_none, is_not_found

Change = Literal["created", "configured", "unchanged"]
_NO_MCS_CRDS = (
    "this cluster does not serve ServiceExports (the multicluster.x-k8s.io CRDs are not installed): "
    "run `isthmus join` first"
)


async def export(
    client: AsyncClient,
    name: str,
    namespace: str,
    use_clusterset_ip: bool | None,
    *,
    allow_missing: bool = False,
) -> tuple[ServiceExport, Change]:
    """Create (or update) the ServiceExport `namespace/name`.

    The Service must exist unless `allow_missing` (as subctl does: a typo must not create an export
    nobody sees). `use_clusterset_ip` sets the `use-clusterset-ip` annotation; None leaves an
    existing one as it is (the cluster's setting applies to a new export). Changing it later only
    moves the Conflict condition: the service's behaviour is fixed while it is exported.
    """
    if await get_or_none(client, Namespace, namespace) is None:
        raise ClustersetError(f"namespace {namespace!r} does not exist")
    if not allow_missing and await get_or_none(client, Service, name, namespace=namespace) is None:
        raise ClustersetError(
            f"service {namespace}/{name} not found (use --allow-missing to export it before it exists)"
        )

    def mutate(current: ServiceExport | None) -> ServiceExport | None:
        obj = current or ServiceExport(metadata=ObjectMeta(name=name, namespace=namespace))
        if use_clusterset_ip is None:
            return obj if current is None else None
        annotations = dict(obj.metadata.annotations or {})
        value = str(use_clusterset_ip).lower()
        if current is not None and annotations.get(USE_CLUSTERSET_IP_ANNOTATION) == value:
            return None
        annotations[USE_CLUSTERSET_IP_ANNOTATION] = value
        obj.metadata.annotations = annotations
        obj.metadata.managed_fields = None
        return obj

    try:
        before = await get_or_none(client, ServiceExport, name, namespace=namespace)
        stored = await create_or_update(client, ServiceExport, name, mutate, namespace=namespace,
                                        field_manager=FIELD_MANAGER)
    except ApiError as err:
        if is_not_found(err):
            raise ClustersetError(_NO_MCS_CRDS) from None
        raise
    if stored is None:  # pragma: no cover - mutate always creates when absent
        raise AssertionError("ServiceExport vanished")
    if before is None:
        return stored, "created"
    changed = before.metadata.resource_version != stored.metadata.resource_version
    return stored, "configured" if changed else "unchanged"


async def unexport(client: AsyncClient, name: str, namespace: str) -> bool:
    """Delete the ServiceExport; whether one existed. The agent withdraws the service from the clusterset."""
    return bool(await delete_if_kind(client, ServiceExport, name, namespace))
