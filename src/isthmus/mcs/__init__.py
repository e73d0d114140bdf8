"""Discovery: Multi-Cluster Services (KEP-1645) with ClusterSet IPs.

Pure logic: `aggregate` (merge exports, conflicts), `allocator` (VIPs, cluster CIDRs), `endpoints`
(what is published and imported), `liveness` (silent clusters). Control plane: broker setup, join and
leave, export helpers and `show` views. The long-running `agent` converges it all per service.
"""
