"""The embedded Kubernetes-compatible API server, laid out as kube-apiserver is.

- `server.py`: ApiServer (app setup, authentication, body size limit, routing, start/stop) and `serve`.
- `authentication.py`: the authenticator chain (x509 client certificates, bearer tokens, anonymous
  on public paths) producing each request's `UserInfo`.
- `handlers/`: requests by concern: `scope` (path and query → RequestScope), `get` (get, list),
  `watch`, `create`, `update`, `patch`, `delete`, `scale`, `discovery`, `openapi`.
- `registry/`: `strategy.py` (the hooks a resource type may override), `store.py` (GenericStore:
  the one write pipeline every create, update, patch, apply and delete goes through), one module
  per kind with its strategy (defaults, validation, printer columns, field selectors, ...).
- `resources.py`: ResourceInfo (one served type, carrying its strategy) and ResourceRegistry (what
  is served now); `builtins.py`: the table of built-in types.
- `controllers/`: garbage collector, namespace controller, CRD controller (serve, establish, clean up).
- `storage.py`: objects in memory and SQLite, resourceVersions, watch history and fan-out.
- Shared machinery: `schema.py` (structural schemas), `patch.py`, `apply.py` (server-side apply),
  `decoding.py` (request bodies as kube's strict decoders read them),
  `selectors.py`, `meta.py` (ObjectMeta rules), `table.py` (Table responses), `openapi.py`,
  `protobuf.py`, `errors.py` (Status), `admission.py` (in-process hooks), `datadir.py`, `tls.py`,
  `kubeconfig.py`.
"""
