"""The components that run as pods (each cluster's agent, dns, controller manager...; the
broker's): read from their Deployments and Pods through the cluster's apiserver, and what
`status` says of each (health, process detail, the problem it is)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from isthmus.local import components, plan
from isthmus.local.plan import APISERVER, BROKER, PartId
from isthmus.local.state import Layout
from isthmus.local.status.health import HEALTH_DOWN, HEALTH_READY, short

__all__ = ["pod_detail", "pod_health", "pod_problem", "read_pods"]


def _deployments(cp: plan.ClusterPlan) -> dict[str, str]:
    return plan.BROKER_DEPLOYMENTS if cp.name == BROKER else plan.DEPLOYMENTS


async def _pods_of(layout: Layout, cp: plan.ClusterPlan, ready: Mapping[str, bool]) -> dict[str, components.PodPart]:
    deployments = _deployments(cp)
    if not ready[PartId(cp.name, APISERVER).name]:
        return {kind: components.PodPart(last_error="its apiserver is not ready") for kind in deployments}
    try:
        return await components.read_components(layout.kubeconfig_of(cp.name), deployments)
    except Exception as e:
        return {kind: components.PodPart(last_error=f"cannot read it: {short(e)}") for kind in deployments}


async def read_pods(layout: Layout, plans: Sequence[plan.ClusterPlan],
                    ready: Mapping[str, bool]) -> dict[str, dict[str, components.PodPart]]:
    """Cluster name → component kind → its pods, for every cluster in `plans` (`ready`: which
    supervised parts are ready; a cluster whose apiserver is not is not asked)."""
    found = await asyncio.gather(*(_pods_of(layout, cp, ready) for cp in plans))
    return dict(zip([cp.name for cp in plans], found, strict=True))


def pod_health(part: components.PodPart, supervised: bool) -> str:
    """Its health; down (unless ready) when no supervisor runs."""
    return part.health if supervised or part.health == HEALTH_READY else HEALTH_DOWN


def pod_detail(cp: plan.ClusterPlan, kind: str, part: components.PodPart) -> dict[str, Any]:
    deployment = _deployments(cp)[kind]
    return {"pid": part.pid, "restarts": part.restarts, "lastExit": part.last_exit,
            "lastError": part.last_error, "failed": False, "pod": part.pod,
            "deployment": f"{plan.COMPONENT_NAMESPACE}/{deployment}",
            "readyReplicas": part.ready_replicas, "replicas": part.replicas,
            "log": f"kubectl --context {cp.name} -n {plan.COMPONENT_NAMESPACE} logs deploy/{deployment}"}


def pod_problem(cp: plan.ClusterPlan, kind: str, part: components.PodPart, supervised: bool) -> str | None:
    if part.health == HEALTH_READY:
        return None
    said = f": {part.last_error}" if part.last_error else ""
    return f"{cp.name}-{kind} {part.health if supervised else HEALTH_DOWN}{said}"
