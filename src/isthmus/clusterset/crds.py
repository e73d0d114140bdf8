"""How deploy-broker and join install the CRDs: ours always (server-side apply upgrades them), the
shared ones (mcs-api's, Karmada's) only where absent or installed by Isthmus before. A compatible
copy another project installed (Submariner's ServiceExport, Karmada's MultiClusterService) is left
exactly as it is; an incompatible one stops the step with what it lacks, before anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from isthmus.api.crdcompat import ISTHMUS, incompatibilities, installed_by, not_stored
from isthmus.api.crdgen import all_crds, is_shared
from isthmus.clusterset.control import ClustersetError
from isthmus.kube.helpers import get_or_none, install_crds
from isthmus.kube.storagemigration import MigrationError, migrate_installed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrdPlan:
    """What to apply, and the shared CRDs kept as another project installed them."""

    apply: list[dict[str, Any]] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    """CRD name -> what to tell the user (installer, fields not stored)."""


def plan_crds(wanted: list[dict[str, Any]], installed: Mapping[str, Mapping[str, Any]]) -> CrdPlan:
    """Decide per CRD from what the cluster has (`installed`: name -> CRD as a dict). Raises
    ClustersetError naming every incompatible shared CRD, so nothing is half-installed."""
    plan = CrdPlan()
    refused = []
    for crd in wanted:
        name = crd["metadata"]["name"]
        current = installed.get(name)
        if not is_shared(crd) or current is None or installed_by(current) == ISTHMUS:
            plan.apply.append(crd)
            continue
        who = installed_by(current) or "someone else"
        problems = incompatibilities(current, crd)
        if problems:
            refused.append(f"{name} (installed by {who}): {'; '.join(problems)}")
            continue
        lost = not_stored(current, crd)
        plan.kept[name] = f"installed by {who}, compatible" + (f" (not stored: {', '.join(lost)})" if lost else "")
    if refused:
        raise ClustersetError(
            "CRDs another project installed are incompatible with Isthmus, which leaves them alone: "
            + " | ".join(refused) + " (docs/deploy.md: CRDs shared with other projects)")
    return plan


async def read_crd_plan(client: AsyncClient) -> CrdPlan:
    """`plan_crds` for this cluster: reads the shared CRDs installed; raises before anything is written."""
    wanted = all_crds()
    installed = {}
    for crd in wanted:
        if is_shared(crd):
            current = await get_or_none(client, CustomResourceDefinition, crd["metadata"]["name"])
            if current is not None:
                installed[crd["metadata"]["name"]] = current.to_dict()
    return plan_crds(wanted, installed)


async def apply_crd_plan(client: AsyncClient, plan: CrdPlan, field_manager: str) -> None:
    """Apply the plan's CRDs and wait until each is served, then move the objects of those whose
    storage version changed to it (`isthmus crds migrate`). Bound it with `asyncio.timeout`."""
    await install_crds(client, plan.apply, field_manager=field_manager)
    try:
        await migrate_installed(client, plan.apply)
    except MigrationError as err:
        raise ClustersetError(f"CRD storage migration incomplete (run `isthmus crds migrate` again): {err}") from None
    for name, note in plan.kept.items():
        log.info("CRD %s kept as it is: %s", name, note)


async def ensure_crds(client: AsyncClient, field_manager: str) -> CrdPlan:
    """Both steps at once (deploy-broker writes nothing before its CRDs)."""
    plan = await read_crd_plan(client)
    await apply_crd_plan(client, plan, field_manager)
    return plan
