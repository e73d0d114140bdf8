"""Controllers the server runs next to its handlers, as kube-controller-manager and apiextensions do,
and its start-up writes, as kube-apiserver's post-start hooks do.

Each sees committed writes through the storage's `on_write` callback and acts through the
generic store, like any client: the garbage collector (ownerReferences, orphan and foreground
deletion), the namespace controller (emptying terminating namespaces), the CRD controller
(serving, establishing and cleaning up CustomResourceDefinitions), the ServiceAccount and
token controllers, the `default/kubernetes` Service and the Event TTL. `base.py` is their work
queue. At start, before serving: the system namespaces (namespace.py) and the bootstrap RBAC
policy (bootstraprbac.py).
"""
