"""Exposure: Karmada's MultiClusterService on the broker (docs/mcsvc.md)."""
