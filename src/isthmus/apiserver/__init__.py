"""The embedded Kubernetes-compatible API server, laid out as kube-apiserver (k8s.io/apiserver) is.

At the root, only the server's wiring:
- `server.py`: ApiServer (app setup, authentication, body size limit, routing, start/stop: the
  controllers and start-up writes in order) and `serve`.
- `httpserver.py`: the connections (a lean HTTP/1.1 path for plain requests, aiohttp's for the rest).
- `builtins.py`: the table of built-in types, each with its strategy (what the server is made of,
  as kube's pkg/controlplane).
- `kubeconfig.py`: the kubeconfig files the server writes for its clients.

Packages, one concern each:
- `handlers/`: requests by concern: `scope` (path and query → RequestScope), `get` (get, list),
  `watch`, `create`, `update`, `patch`, `delete`, `scale`, `discovery`, `openapi`, ...
- `registry/`: `strategy.py` (the hooks a resource type may override), `store.py` (GenericStore:
  the one write pipeline every create, update, patch, apply and delete goes through), one module
  per kind with its strategy; `resources.py` (ResourceInfo, ResourceRegistry: what is served now)
  and `table.py` (Table responses).
- `storage/`: objects in memory and SQLite (store, watch, journal), the data dir.
- `apimachinery/`: errors (Status), ObjectMeta rules, validators, selectors, JSON copies, patches.
- `serializer/`: request bodies (strict JSON/YAML decoding, protobuf).
- `openapi/`: structural schemas, the built-in kinds' schemas, the OpenAPI documents.
- `fieldmanager/`: server-side apply and managedFields.
- `authentication/`: the authenticator chain, ServiceAccount tokens, TLS certificates.
- `authorization/`: the authorizer chain, RBAC, the bootstrap policy.
- `admission/`: the admission chain, its ValidatingAdmissionPolicy (`policy/`) and webhook
  (`webhook/`) plugins and what they share (`matching.py`).
- `controllers/`: garbage collector, namespace, CRD, ServiceAccount, `kubernetes` Service and
  Event TTL controllers, the start-up writes (system namespaces, bootstrap RBAC), their work queue.
"""
