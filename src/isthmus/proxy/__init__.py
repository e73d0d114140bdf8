"""`isthmus proxy`: the userspace service proxy of the local clusterset.

Like kube-proxy's old userspace mode: it listens on each ClusterIP:port, NodePort and ClusterSet
IP (VIP):port itself and relays TCP connections and UDP flows to ready endpoints, round-robin with
optional ClientIP affinity. `table` and `balancer` are pure; `tcp`/`udp` move bytes; `proxy`
keeps listeners in step with the cluster's Services, EndpointSlices and ServiceImports.
`--mode nftables` serves the same table with kernel NAT instead (`nftables`, kube-proxy's mode).
"""

from isthmus.proxy.balancer import Balancer
from isthmus.proxy.proxy import (
    ProxyConfig,
    ProxyService,
    bind_socket,
    import_snapshot,
    service_snapshot,
    slice_snapshot,
)
from isthmus.proxy.table import (
    DEFAULT_AFFINITY_TIMEOUT,
    Backend,
    EndpointSnap,
    ImportSnap,
    ListenerKey,
    Port,
    ServiceSnap,
    SliceSnap,
    Table,
    Target,
    backends_for,
    build_table,
    merge_targets,
    service_targets,
)

__all__ = [
    "DEFAULT_AFFINITY_TIMEOUT",
    "Backend",
    "Balancer",
    "EndpointSnap",
    "ImportSnap",
    "ListenerKey",
    "Port",
    "ProxyConfig",
    "ProxyService",
    "ServiceSnap",
    "SliceSnap",
    "Table",
    "Target",
    "backends_for",
    "bind_socket",
    "build_table",
    "import_snapshot",
    "merge_targets",
    "service_snapshot",
    "service_targets",
    "slice_snapshot",
]
