"""Storage-version migration of the CRDs Isthmus installed: every object rewritten at the CRD's
storage version, and only then `status.storedVersions` trimmed to it.

Why this order: `storedVersions` lists every version objects may still be persisted at. A GitOps
tool applying an older CRD without the new version fails once the new one is listed there, and a
version removed from storedVersions while objects are still stored at it cannot be read once it is
no longer served. So, as kube's storage version migrator: a no-op update of each object (PUT with
its resourceVersion as precondition, re-read and retried on a conflict) makes the apiserver encode
it at the storage version (kube's `None` conversion only rewrites apiVersion); the trim comes after
the last rewrite succeeded, and not at all when one failed. Run it again: it starts over, and a
CRD whose storedVersions is already the storage version alone is left alone (idempotent).

A CRD another project installed (`crdcompat.installed_by`) is never touched: its objects and its
migration are that project's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition, CustomResourceDefinitionStatus
from lightkube.types import PatchType

from isthmus.api.crdcompat import ISTHMUS, installed_by
from isthmus.kube.helpers import get_or_none, wait_established

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5
"""Conflicts on one object before the migration gives up on it (someone keeps writing it)."""


class MigrationError(Exception):
    """A CRD whose objects could not all be rewritten: its storedVersions were left as they were."""


@dataclass
class CrdMigration:
    """What the migration did for one CRD."""

    name: str
    storage: str = ""
    rewritten: int = 0
    trimmed: list[str] = field(default_factory=list)
    """Versions removed from status.storedVersions."""
    skipped: str = ""
    """Why nothing was done ("" when migrated or already at the storage version alone)."""
    failed: list[str] = field(default_factory=list)
    """Objects not rewritten (`namespace/name: why`): storedVersions kept."""

    def summary(self) -> str:
        if self.skipped:
            return f"{self.name}: {self.skipped}"
        if self.failed:
            return (f"{self.name}: {self.rewritten} rewritten at {self.storage}, {len(self.failed)} not "
                    f"({'; '.join(self.failed)}): status.storedVersions kept")
        if not self.trimmed:
            return f"{self.name}: stored at {self.storage} only already"
        return (f"{self.name}: {self.rewritten} rewritten at {self.storage}, "
                f"{', '.join(self.trimmed)} removed from status.storedVersions")


def storage_version(crd: Mapping[str, Any]) -> str:
    return next((str(v["name"]) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")), "")


def stored_versions(crd: Mapping[str, Any]) -> list[str]:
    return [str(v) for v in (crd.get("status") or {}).get("storedVersions") or []]


def _resource(crd: Mapping[str, Any], version: str) -> Any:
    spec = crd["spec"]
    names = spec["names"]
    create = create_namespaced_resource if spec.get("scope") != "Cluster" else create_global_resource
    return create(spec["group"], version, names["kind"], names["plural"])


async def _rewrite(client: AsyncClient, res: Any, obj: Any) -> str | None:
    """A no-op update of one object; None when done (or the object is gone), else why not."""
    namespace = obj.metadata.namespace
    name = obj.metadata.name
    for _ in range(CONFLICT_RETRIES):
        try:
            # The listed object carries its resourceVersion: the PUT is refused if it changed meanwhile.
            await client.replace(obj)
            return None
        except ApiError as err:
            code = err.status.code
            if code == 404:
                return None  # deleted since the list: nothing left stored at the old version
            if code != 409:
                return f"{err.status.message or err}"
        try:
            obj = await client.get(res, name, namespace=namespace) if namespace else await client.get(res, name)
        except ApiError as err:
            if err.status.code == 404:
                return None
            return f"{err.status.message or err}"
    return f"still changing after {CONFLICT_RETRIES} attempts"


async def migrate_crd(client: AsyncClient, crd: Mapping[str, Any]) -> CrdMigration:
    """Rewrite every object of an installed, Established CRD at its storage version, then trim
    status.storedVersions to it. Raises nothing for a failed object: see `CrdMigration.failed`."""
    name = str(crd["metadata"]["name"])
    storage = storage_version(crd)
    out = CrdMigration(name, storage)
    stored = stored_versions(crd)
    if stored == [storage]:
        return out
    await wait_established(client, name)
    res = _resource(crd, storage)
    async for obj in client.list(res, namespace="*" if crd["spec"].get("scope") != "Cluster" else None):
        why = await _rewrite(client, res, obj)
        if why is None:
            out.rewritten += 1
        else:
            out.failed.append(f"{obj.metadata.namespace + '/' if obj.metadata.namespace else ''}"
                              f"{obj.metadata.name}: {why}")
    if out.failed:
        return out
    # Re-read: the storage version may have been appended since (never trim what was not read).
    current = (await client.get(CustomResourceDefinition, name)).to_dict()
    if storage_version(current) != storage:
        out.failed.append(f"the storage version changed to {storage_version(current)} meanwhile")
        return out
    out.trimmed = [v for v in stored_versions(current) if v != storage]
    if out.trimmed:
        await client.patch(CustomResourceDefinitionStatus, name, {"status": {"storedVersions": [storage]}},
                           patch_type=PatchType.MERGE)
    return out


async def migrate_installed(client: AsyncClient, wanted: Iterable[Mapping[str, Any]]) -> list[CrdMigration]:
    """`migrate_crd` for each of these CRDs (manifests, as `crdgen.all_crds` makes them) that is
    installed by Isthmus and stores at the version the manifest says (i.e. was upgraded already).
    Raises MigrationError, after trying every CRD, when any object could not be rewritten."""
    results: list[CrdMigration] = []
    for manifest in wanted:
        name = str(manifest["metadata"]["name"])
        found = await get_or_none(client, CustomResourceDefinition, name)
        if found is None:
            results.append(CrdMigration(name, skipped="not installed"))
            continue
        crd = found.to_dict()
        who = installed_by(crd)
        if who != ISTHMUS:
            results.append(CrdMigration(name, skipped=f"installed by {who or 'another installer'}: left to it"))
            continue
        if storage_version(crd) != storage_version(manifest):
            results.append(CrdMigration(name, skipped=(
                f"stores at {storage_version(crd) or 'no version'}, not {storage_version(manifest)}: apply this "
                "version's CRDs first")))
            continue
        results.append(await migrate_crd(client, crd))
    failed = [r for r in results if r.failed]
    for r in results:
        log.info("CRD %s", r.summary())
    if failed:
        raise MigrationError("; ".join(r.summary() for r in failed))
    return results
