"""kube-lite: the parts of Kubernetes our controllers read, for a cluster that is only an apiserver.

A real cluster's kube-apiserver allocates ClusterIPs and NodePorts, kube-controller-manager
turns Deployments (through ReplicaSets) and StatefulSets into Pods and Pods into EndpointSlices
and Endpoints, and kubelets register their Node, run the Pods and serve their logs. kube-lite
does the same, level-triggered over informer caches, so that Isthmus runs on
an embedded apiserver exactly as on a real cluster (docs/local.md). Pods annotated
``isthmus.io/workload: echo`` get real echo servers on their pod IP; Pods of the Isthmus image
run as supervised processes, as a kubelet runs containers (processes.py). Every Pod is started
in pods.py (`PodRuntime.reconcile`).

Everything is rebuilt from the API objects when kube-lite starts: it keeps no state of its own.
"""

from __future__ import annotations

WORKLOAD_ANNOTATION = "isthmus.io/workload"
"""Pod (or Pod template) annotation naming the workload kube-lite runs for the Pod."""
ECHO_WORKLOAD = "echo"
"""``isthmus.io/workload: echo``: HTTP/UDP echo servers on every container port of the Pod IP."""

FIELD_MANAGER = "isthmus-kube-lite"
COMPONENT = "kube-lite"
"""Event source, like kube's "endpointslice-controller" or "kubelet"."""

KUBE_ENDPOINTSLICE_MANAGER = "endpointslice-controller.k8s.io"
"""kube's own managed-by value: consumers treat our slices exactly like a real cluster's."""
HEADLESS_LABEL = "service.kubernetes.io/headless"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
STATEFULSET_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
CONTROLLER_REVISION_HASH_LABEL = "controller-revision-hash"

from isthmus.local.kubelite.run import KubeLite, run_kubelite  # noqa: E402  (run imports the names above)

__all__ = [
    "COMPONENT",
    "CONTROLLER_REVISION_HASH_LABEL",
    "ECHO_WORKLOAD",
    "FIELD_MANAGER",
    "HEADLESS_LABEL",
    "KUBE_ENDPOINTSLICE_MANAGER",
    "POD_INDEX_LABEL",
    "POD_TEMPLATE_HASH_LABEL",
    "STATEFULSET_POD_NAME_LABEL",
    "WORKLOAD_ANNOTATION",
    "KubeLite",
    "run_kubelite",
]
