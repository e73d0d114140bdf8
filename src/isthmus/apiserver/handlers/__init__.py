"""Request handlers by concern, as kube's endpoints/handlers and endpoints/discovery.

server.py authenticates and routes; `scope` turns a resource path and its query into a
RequestScope; `get` serves get and list, `watch` watches, `create`, `update`, `patch` and
`delete` hand writes to the generic store; `discovery` and `openapi` describe what is served.
"""
