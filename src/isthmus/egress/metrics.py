"""Egress metrics (runtime REGISTRY): relayed and refused flows of forwarders and gateways, and the
gateway's programmed rules. Counted per flow, not per buffer, so prometheus_client's cost is fine."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from isthmus.runtime import REGISTRY

FLOWS = Counter("isthmus_egress_flows", "Flows relayed (connections, or UDP peer flows).",
                ["component", "direction", "protocol"], registry=REGISTRY)
REFUSED = Counter("isthmus_egress_refused", "Flows refused: the peer is not allowed (fail closed) or the far "
                  "side could not be reached.", ["component", "direction", "reason"], registry=REGISTRY)
RULES = Gauge("isthmus_egress_gateway_rules", "Rules the leading gateway programs.", ["direction"],
              registry=REGISTRY)
LEADING = Gauge("isthmus_egress_gateway_leading", "1 while this gateway replica leads and owns the source IPs.",
                registry=REGISTRY)
