"""The runc-mode network of the local clusterset: namespaces, the fabric, pod networking, relays.

See docs/network.md. `plan` is pure; `netns`, `fabric`, `cni` and `relay` need root and iproute2.
"""
