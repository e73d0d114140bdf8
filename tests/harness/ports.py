"""Ports for the servers tests start.

A port the kernel handed to `bind(0)` and the test released is in the ephemeral range, where any
outgoing connection (another test's client, a watch) may take it as its local port before the
server binds it; a server then exits at start (CI saw `isthmus dns` exit 2 that way). So pick, as
`isthmus up` does, from 10000-29999 outside the kernel's ephemeral range, free for TCP and (when
the server listens on both) UDP."""

import random

from isthmus.local.up import PORT_POOL, ephemeral_ports, port_free


def free_port(udp: bool = False, host: str = "127.0.0.1") -> int:
    ephemeral = ephemeral_ports()
    pool = [p for p in PORT_POOL if p not in ephemeral]
    for port in random.sample(pool, min(len(pool), 200)):
        if port_free(port, udp, host):
            return port
    raise OSError(f"no free port on {host} outside the ephemeral range")
