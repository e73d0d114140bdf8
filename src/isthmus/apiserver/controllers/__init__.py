"""Controllers the server runs next to its handlers, as kube-controller-manager and apiextensions do.

Each sees committed writes through the storage's `on_write` callback and acts through the
generic store, like any client: the garbage collector (ownerReferences, orphan and foreground
deletion), the namespace controller (emptying terminating namespaces) and the CRD controller
(serving, establishing and cleaning up CustomResourceDefinitions).
"""
