"""Discovery: Multi-Cluster Services (KEP-1645) with ClusterSet IPs.

Pure logic: `aggregate` (merge exports, conflicts, the derived VIP), `allocator` (VIPs inside this
cluster's block), `endpoints` (what is published and imported), `liveness` (silent clusters).
Commands: `commands` (export/unexport), `coredns` (the stub zone join adds), `views` (`show`). The
long-running `agent` converges it all per service. Membership, broker-info and broker set-up, which
every capability shares, are `isthmus.clusterset`.
"""
