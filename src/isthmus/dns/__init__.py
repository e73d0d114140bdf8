"""`isthmus dns`: the authoritative `clusterset.local` (and local `cluster.local`) DNS server.

`records` builds answers from ServiceImports and EndpointSlices (pure), `wire` caches them as wire
bytes, `server` serves them over UDP and TCP, `source` keeps them in step with the cluster's informers.
"""
