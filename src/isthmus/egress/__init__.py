"""Egress: ExternalService with static source IPs (claims, binding, forwarder, gateway)."""
