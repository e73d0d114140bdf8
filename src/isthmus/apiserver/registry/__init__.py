"""The generic registry: per-resource strategies and the store that runs every write through them."""
