"""Where each cluster of the local clusterset answers, from its state (ports) and the address
plan (plan.py): its apiserver and kubeconfig, DNS and kubelet endpoints, pod and service CIDRs,
its ClusterSet IP range, node ports, pool and egress addresses."""

from __future__ import annotations

from typing import Any

from isthmus.local import plan
from isthmus.local.endpoints import server_url
from isthmus.local.plan import BROKER, HOST
from isthmus.local.state import Layout, State

__all__ = ["broker_endpoints", "broker_node", "cluster_endpoints", "cluster_node", "cluster_nodes", "network_fields"]


def cluster_endpoints(layout: Layout, state: State, cp: plan.ClusterPlan) -> dict[str, Any]:
    """A member cluster's names, endpoints and CIDRs (the first keys of its status)."""
    return {
        "name": cp.name, "context": cp.name, "server": server_url(state, cp.name),
        "kubeconfig": str(layout.kubeconfig_of(cp.name)),
        "dns": f"{cp.node_address}:{plan.dns_node_port(cp)}", "localZone": plan.LOCAL_ZONE,
        "kubelet": f"{HOST}:{state.ports[plan.kubelet_port_name(cp.name)]}",
        "podCIDR": cp.pod_cidr, "serviceCIDR": cp.service_cidr,
        "clustersetIPCIDR": state.joined.get(cp.name, cp.clusterset_ip_cidr),
    }


def cluster_node(cp: plan.ClusterPlan) -> dict[str, Any]:
    """A member cluster's node: its address, node ports, pool and egress addresses."""
    return {
        "nodeAddress": cp.node_address, "nodePortRange": cp.node_port_range,
        "poolPublicAddress": cp.pool_public_address, "poolPrivateAddress": cp.pool_private_address,
        "egressSourceIPs": "-".join(cp.egress_range or ()),
    }


def cluster_nodes(state: State, cp: plan.ClusterPlan) -> list[dict[str, Any]]:
    """A member cluster's nodes (`up --nodes`): name, pod CIDR slice, address, kubelet endpoint;
    the first runs the cluster's controllers."""
    return [{
        "name": plan.node_name(cp.name, k),
        "podCIDR": plan.node_pod_cidr(cp.pod_cidr, k, state.nodes),
        "address": plan.runc_node_address(cp.index, k) if state.runtime == plan.RUNC else cp.node_address,
        "kubelet": f"{HOST}:{state.ports[plan.kubelet_port_name(cp.name, k)]}",
        "controllers": k == 1,
    } for k in range(1, state.nodes + 1)]


def broker_endpoints(layout: Layout, state: State) -> dict[str, Any]:
    """The broker's names and endpoints, and the ClusterSet IP range it hands out."""
    return {
        "name": BROKER, "context": BROKER, "server": server_url(state, BROKER),
        "kubeconfig": str(layout.kubeconfig_of(BROKER)), "brokerInfo": str(layout.broker_info),
        "clustersetIPCIDRRange": plan.clusterset_ip_range(state.runtime),
        "clustersetIPEnabled": state.enable_clusterset_ip,
    }


def broker_node(state: State, bp: plan.ClusterPlan) -> dict[str, Any]:
    """The broker's node: kubelet, CIDRs, node ports and pool addresses."""
    return {
        "kubelet": f"{HOST}:{state.ports[plan.kubelet_port_name(BROKER)]}",
        "podCIDR": bp.pod_cidr, "serviceCIDR": bp.service_cidr,
        "nodeAddress": bp.node_address, "nodePortRange": bp.node_port_range,
        "poolPublicAddress": bp.pool_public_address,
        "poolPrivateAddress": bp.pool_private_address,
    }


def network_fields(layout: Layout, state: State) -> dict[str, Any]:
    """runc mode: the clusterset's network namespaces and where the host reaches into them (the
    registry's published port); process mode has none (everything is on the host's 127.0.0.0/8)."""
    if state.runtime != plan.RUNC:
        return {"network": None}
    from isthmus.local.network.plan import OUTSIDE_RANGE, fabric_plan

    fp = fabric_plan(layout.root, state.clusters, nodes=state.nodes)
    registry_port = state.ports.get(plan.PartId(BROKER, plan.REGISTRY).name)
    return {"network": {
        "netns": fp.netns, "fabricAddress": fp.gateway, "registry": fp.registry,
        "registryOnHost": f"{HOST}:{registry_port}" if registry_port else None,
        "outsideRange": OUTSIDE_RANGE,
        # node 1 of each cluster by cluster (as before `--nodes`), every node by its name
        "nodes": {n.cluster if n.node == 1 else n.name: {"netns": n.netns, "address": n.address} for n in fp.nodes},
    }}
