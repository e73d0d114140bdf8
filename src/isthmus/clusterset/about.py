"""What the agent and the DNS server check before they run: the cluster ID they were given against
the About API's `cluster.clusterset.k8s.io` (KEP-2149), which `isthmus join` writes and other
multi-cluster tools read. Kept apart from membership.py so a component's start imports only this.
"""

from __future__ import annotations

from lightkube import ApiError, AsyncClient

from isthmus.api.about import CLUSTER_ID_PROPERTY, ClusterProperty, identity_mismatch
from isthmus.clusterset.control import ClustersetError
from isthmus.kube.helpers import get_or_none, status_code


class ClusterIdentityError(ClustersetError):
    """The cluster's ClusterProperty cluster.clusterset.k8s.io disagrees with the ID it joined as."""


async def check_cluster_identity(client: AsyncClient, joined: str) -> str | None:
    """What the agent and the DNS server check before they run as cluster `joined`: raises
    ClusterIdentityError when the cluster's cluster.clusterset.k8s.io names another ID. Returns a
    warning when there is nothing to compare (a cluster joined before join wrote the property, or a
    role that may not read it yet), so an upgrade never stops a running clusterset."""
    try:
        prop = await get_or_none(client, ClusterProperty, CLUSTER_ID_PROPERTY)
    except ApiError as err:
        if status_code(err) != 403:
            raise
        return (f"may not read ClusterProperty {CLUSTER_ID_PROPERTY} ({err.status.message}): running as "
                f"{joined!r} unchecked; grant get on clusterproperties (deploy/member)")
    if prop is None or prop.value is None:
        return (f"no ClusterProperty {CLUSTER_ID_PROPERTY} in this cluster (joined before Isthmus wrote the "
                f"About API): running as {joined!r}; re-run `isthmus join --cluster-id {joined}` to write it")
    problem = identity_mismatch(joined, prop.value)
    if problem is not None:
        raise ClusterIdentityError(problem)
    return None
