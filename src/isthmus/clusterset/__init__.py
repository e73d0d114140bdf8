"""The clusterset: what every capability and the CLI share about it, below the capabilities.

`broker` sets up the broker (`isthmus deploy-broker`) and reads its `Broker` object; `brokerinfo` is
the broker-info document and where a component gets its broker credentials and client; `membership`
is `isthmus join`/`leave`; `cidrs` plans each cluster's VIP CIDR and checks cluster IDs; `control`
holds what these control-plane steps share (their user error, field manager, kind-tolerant reads).
"""
