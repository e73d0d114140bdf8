"""Discovery: Multi-Cluster Services (KEP-1645) with ClusterSet IPs.

Pure logic: `aggregate` (merge exports, conflicts, the derived VIP), `allocator` (VIPs inside this
cluster's block), `endpoints` (what is published and imported), `liveness` (silent clusters).
The long-running agent, one flow per module over one informer context (`caches`): `exports`
(this cluster's exports published to the broker), `aggregates` (the derived aggregate and its VIP:
where a VIP is allocated), `imports` (local ServiceImports and their EndpointSlices), `heartbeat`
(this agent's heartbeat, its peers' liveness); `agent` wires them into one controller per service,
`metrics` reports what they cache. Commands: `commands` (export/unexport), `coredns` (the stub zone
join adds), `views` (`show`). Membership, broker-info and broker set-up, which every capability
shares, are `isthmus.clusterset`.
"""
