"""What the clusterset's control-plane steps (broker set-up, join and leave, and discovery's export
commands and views) share: their user error, their field manager, and reads that treat an unknown
kind as no object.

A cluster that has not joined yet does not serve the Isthmus and MCS CRDs; a GET, LIST or DELETE
of such a kind answers 404 for the kind itself, which these steps read as "nothing there".
"""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta as LkObjectMeta
from lightkube.resources.core_v1 import Namespace

from isthmus.kube.helpers import ensure_deleted, get_or_none, is_conflict, is_not_found, list_all

FIELD_MANAGER = "isthmus-cli"
CRD_TIMEOUT = 60.0
"""How long deploy-broker and join wait for the CRDs they install to be served."""


class ClustersetError(Exception):
    """A user-caused problem (bad input, state that forbids the request); the message is for users."""


async def ensure_namespace(client: AsyncClient, name: str) -> None:
    """Create the namespace unless it exists (a concurrent create is fine)."""
    if await get_or_none(client, Namespace, name) is not None:
        return
    try:
        await client.create(Namespace(metadata=LkObjectMeta(name=name)), field_manager=FIELD_MANAGER)
    except ApiError as err:
        if not is_conflict(err):
            raise


async def get_if_kind(client: AsyncClient, res: type[Any], name: str, namespace: str) -> Any:
    """GET, None when the object or its kind (CRDs not installed yet) is absent."""
    try:
        return await get_or_none(client, res, name, namespace=namespace)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise


async def delete_if_kind(client: AsyncClient, res: type[Any], name: str, namespace: str) -> int:
    """DELETE; 1 when something was deleted, 0 when the object or its kind is absent."""
    try:
        return int(await ensure_deleted(client, res, name, namespace=namespace))
    except ApiError as err:
        if is_not_found(err):
            return 0
        raise


async def list_if_kind(client: AsyncClient, res: type[Any], namespace: str | None) -> list[Any]:
    """LIST; empty when the kind is not served (then no object of it exists)."""
    try:
        return await list_all(client, res, namespace=namespace)
    except ApiError as err:
        if is_not_found(err):
            return []
        raise
