"""kube v1.32's bootstrap RBAC policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy), as data.

What kube-apiserver's `rbac/bootstrap-roles` post-start hook writes, with the feature gates at
their v1.32 defaults: the default ClusterRoles (`cluster-admin`; `admin`, `edit` and `view`, which
aggregate the `system:aggregate-to-*` roles; the `system:*` roles of nodes, the scheduler, the
controller manager, kube-proxy, monitoring, discovery...), the controller manager's per-controller
`system:controller:*` roles, their bindings, and the Roles and RoleBindings of kube-system and
kube-public (`extension-apiserver-authentication-reader` among them). Roles gated by features off
in v1.32 (dynamic resource allocation, service CIDRs, volume attributes classes, coordinated
leader election) are left out, as kube leaves them out.

controllers/bootstraprbac.py writes them at every start; controllers/clusterroleaggregation.py fills
the rules of the aggregated roles. Rules are written compactly: `_r(verbs, groups, resources)`
with space-separated words, `core` for the core group "".
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.authorization.rbac import GROUP

__all__ = ["AUTOUPDATE", "CLUSTER_ROLES", "CLUSTER_ROLE_BINDINGS", "ROLES", "ROLE_BINDINGS"]

Obj = dict[str, Any]

AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAPPING = {"kubernetes.io/bootstrapping": "rbac-defaults"}
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"
READ = "get list watch"
WRITE = "create delete deletecollection patch update"
READ_WRITE = "create delete deletecollection get list patch update watch"
SYSTEM = "kube-system"


def _words(text: str) -> list[str]:
    return ["" if w == "core" else w for w in text.split()]


def _r(verbs: str, groups: str, resources: str, names: str = "") -> Obj:
    """One resource rule, in the field order kube's YAML shows."""
    out: Obj = {"apiGroups": _words(groups)}
    if names:
        out["resourceNames"] = names.split()
    out["resources"] = resources.split()
    out["verbs"] = verbs.split()
    return out


def _u(verbs: str, urls: str) -> Obj:
    return {"nonResourceURLs": urls.split(), "verbs": verbs.split()}


EVENTS = _r("create patch update", "core events.k8s.io", "events")


def _meta(name: str, namespace: str = "", labels: Obj | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {**BOOTSTRAPPING, **(labels or {})}
    meta["annotations"] = {AUTOUPDATE: "true"}
    return meta


def _role(name: str, *rules: Obj, namespace: str = "", labels: Obj | None = None) -> Obj:
    kind = "Role" if namespace else "ClusterRole"
    return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": _meta(name, namespace, labels), "rules": list(rules)}


def _aggregated(name: str, into: str = "") -> Obj:
    """admin, edit, view: an aggregationRule over `aggregate-to-<name>`; edit and view are themselves
    aggregated into the next wider role."""
    role = _role(name, labels={f"{AGGREGATE_TO}{into}": "true"} if into else None)
    role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {f"{AGGREGATE_TO}{name}": "true"}}]}
    role["rules"] = None
    return role


def _subject(spec: str) -> Obj:
    """`User:x`, `Group:x` or `SA:<ns>/<name>` as kube's binding builders write them."""
    kind, _, name = spec.partition(":")
    if kind == "SA":
        ns, _, sa = name.partition("/")
        return {"kind": "ServiceAccount", "name": sa, "namespace": ns}
    return {"apiGroup": GROUP, "kind": kind, "name": name}


def _binding(name: str, role: str, *subjects: str, namespace: str = "") -> Obj:
    kind, role_kind = ("RoleBinding", "Role") if namespace else ("ClusterRoleBinding", "ClusterRole")
    out: Obj = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": _meta(name, namespace),
                "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role}}
    if subjects:
        out["subjects"] = [_subject(s) for s in subjects]
    return out


_CSR = "certificates.k8s.io"

CLUSTER_ROLES: tuple[Obj, ...] = (
    _aggregated("admin"),
    _role("cluster-admin", _r("*", "*", "*"), _u("*", "*")),
    _aggregated("edit", into="admin"),
    _role("system:aggregate-to-admin",
          _r("create", "authorization.k8s.io", "localsubjectaccessreviews"),
          _r(READ_WRITE, GROUP, "rolebindings roles"),
          labels={f"{AGGREGATE_TO}admin": "true"}),
    _role("system:aggregate-to-edit",
          _r(READ, "core", "pods/attach pods/exec pods/portforward pods/proxy secrets services/proxy"),
          _r("impersonate", "core", "serviceaccounts"),
          _r(WRITE, "core", "pods pods/attach pods/exec pods/portforward pods/proxy"),
          _r("create", "core", "pods/eviction"),
          _r(WRITE, "core", "configmaps events persistentvolumeclaims replicationcontrollers "
             "replicationcontrollers/scale secrets serviceaccounts services services/proxy"),
          _r("create", "core", "serviceaccounts/token"),
          _r(WRITE, "apps", "daemonsets deployments deployments/rollback deployments/scale replicasets "
             "replicasets/scale statefulsets statefulsets/scale"),
          _r(WRITE, "autoscaling", "horizontalpodautoscalers"),
          _r(WRITE, "batch", "cronjobs jobs"),
          _r(WRITE, "extensions", "daemonsets deployments deployments/rollback deployments/scale ingresses "
             "networkpolicies replicasets replicasets/scale replicationcontrollers/scale"),
          _r(WRITE, "policy", "poddisruptionbudgets"),
          _r(WRITE, "networking.k8s.io", "ingresses networkpolicies"),
          _r(READ_WRITE, "coordination.k8s.io", "leases"),
          labels={f"{AGGREGATE_TO}edit": "true"}),
    _role("system:aggregate-to-view",
          _r(READ, "core", "configmaps endpoints persistentvolumeclaims persistentvolumeclaims/status pods "
             "replicationcontrollers replicationcontrollers/scale serviceaccounts services services/status"),
          _r(READ, "core", "bindings events limitranges namespaces/status pods/log pods/status "
             "replicationcontrollers/status resourcequotas resourcequotas/status"),
          _r(READ, "core", "namespaces"),
          _r(READ, "discovery.k8s.io", "endpointslices"),
          _r(READ, "apps", "controllerrevisions daemonsets daemonsets/status deployments deployments/scale "
             "deployments/status replicasets replicasets/scale replicasets/status statefulsets statefulsets/scale "
             "statefulsets/status"),
          _r(READ, "autoscaling", "horizontalpodautoscalers horizontalpodautoscalers/status"),
          _r(READ, "batch", "cronjobs cronjobs/status jobs jobs/status"),
          _r(READ, "extensions", "daemonsets daemonsets/status deployments deployments/scale deployments/status "
             "ingresses ingresses/status networkpolicies replicasets replicasets/scale replicasets/status "
             "replicationcontrollers/scale"),
          _r(READ, "policy", "poddisruptionbudgets poddisruptionbudgets/status"),
          _r(READ, "networking.k8s.io", "ingresses ingresses/status networkpolicies"),
          labels={f"{AGGREGATE_TO}view": "true"}),
    _role("system:auth-delegator",
          _r("create", "authentication.k8s.io", "tokenreviews"),
          _r("create", "authorization.k8s.io", "subjectaccessreviews")),
    _role("system:basic-user",
          _r("create", "authorization.k8s.io", "selfsubjectaccessreviews selfsubjectrulesreviews"),
          _r("create", "authentication.k8s.io", "selfsubjectreviews")),
    _role("system:certificates.k8s.io:certificatesigningrequests:nodeclient",
          _r("create", _CSR, "certificatesigningrequests/nodeclient")),
    _role("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
          _r("create", _CSR, "certificatesigningrequests/selfnodeclient")),
    _role("system:certificates.k8s.io:kube-apiserver-client-approver",
          _r("approve", _CSR, "signers", "kubernetes.io/kube-apiserver-client")),
    _role("system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
          _r("approve", _CSR, "signers", "kubernetes.io/kube-apiserver-client-kubelet")),
    _role("system:certificates.k8s.io:kubelet-serving-approver",
          _r("approve", _CSR, "signers", "kubernetes.io/kubelet-serving")),
    _role("system:certificates.k8s.io:legacy-unknown-approver",
          _r("approve", _CSR, "signers", "kubernetes.io/legacy-unknown")),
    _role("system:discovery",
          _u("get", "/api /api/* /apis /apis/* /healthz /livez /openapi /openapi/* /readyz /version /version/")),
    _role("system:heapster",
          _r(READ, "core", "events namespaces nodes pods"),
          _r(READ, "extensions", "deployments")),
    _role("system:kube-aggregator", _r(READ, "core", "endpoints services")),
    _role("system:kube-controller-manager",
          EVENTS,
          _r("create", "coordination.k8s.io", "leases"),
          _r("get update", "coordination.k8s.io", "leases", "kube-controller-manager"),
          _r("create", "core", "secrets serviceaccounts"),
          _r("delete", "core", "secrets"),
          _r("get", "core", "configmaps namespaces secrets serviceaccounts"),
          _r("update", "core", "secrets serviceaccounts"),
          _r("create", "authentication.k8s.io", "tokenreviews"),
          _r("create", "authorization.k8s.io", "subjectaccessreviews"),
          _r("list watch", "*", "*"),
          _r("create", "core", "serviceaccounts/token")),
    _role("system:kube-dns", _r("list watch", "core", "endpoints services")),
    _role("system:kube-scheduler",
          EVENTS,
          _r("create", "coordination.k8s.io", "leases"),
          _r("get update", "coordination.k8s.io", "leases", "kube-scheduler"),
          _r(READ, "core", "nodes"),
          _r("delete get list watch", "core", "pods"),
          _r("create", "core", "bindings pods/binding"),
          _r("patch update", "core", "pods/status"),
          _r(READ, "core", "replicationcontrollers services"),
          _r(READ, "apps extensions", "replicasets"),
          _r(READ, "apps", "statefulsets"),
          _r(READ, "policy", "poddisruptionbudgets"),
          _r(READ, "core", "persistentvolumeclaims persistentvolumes"),
          _r("create", "authentication.k8s.io", "tokenreviews"),
          _r("create", "authorization.k8s.io", "subjectaccessreviews"),
          _r(READ, "storage.k8s.io", "csinodes"),
          _r(READ, "core", "namespaces"),
          _r(READ, "storage.k8s.io", "csidrivers"),
          _r(READ, "storage.k8s.io", "csistoragecapacities")),
    _role("system:kubelet-api-admin",
          _r(READ, "core", "nodes"),
          _r("proxy", "core", "nodes"),
          _r("*", "core", "nodes/log nodes/metrics nodes/proxy nodes/stats")),
    _role("system:monitoring",
          _u("get", "/healthz /healthz/* /livez /livez/* /metrics /metrics/slis /readyz /readyz/*")),
    _role("system:node",
          _r("create", "authentication.k8s.io", "tokenreviews"),
          _r("create", "authorization.k8s.io", "localsubjectaccessreviews subjectaccessreviews"),
          _r(READ, "core", "services"),
          _r("create get list watch", "core", "nodes"),
          _r("patch update", "core", "nodes/status"),
          _r("patch update", "core", "nodes"),
          _r("create patch update", "core", "events"),
          _r(READ, "core", "pods"),
          _r("create delete", "core", "pods"),
          _r("patch update", "core", "pods/status"),
          _r("create", "core", "pods/eviction"),
          _r(READ, "core", "configmaps secrets"),
          _r("get", "core", "persistentvolumeclaims persistentvolumes"),
          _r("get", "core", "endpoints"),
          _r("create get list watch", _CSR, "certificatesigningrequests"),
          _r("create delete get patch update", "coordination.k8s.io", "leases"),
          _r("get", "storage.k8s.io", "volumeattachments"),
          _r("create", "core", "serviceaccounts/token"),
          _r("get patch update", "core", "persistentvolumeclaims/status"),
          _r(READ, "storage.k8s.io", "csidrivers"),
          _r("create delete get patch update", "storage.k8s.io", "csinodes"),
          _r(READ, "node.k8s.io", "runtimeclasses")),
    _role("system:node-bootstrapper", _r("create get list watch", _CSR, "certificatesigningrequests")),
    _role("system:node-problem-detector",
          _r("get", "core", "nodes"),
          _r("patch", "core", "nodes/status"),
          EVENTS),
    _role("system:node-proxier",
          _r("list watch", "core", "endpoints services"),
          _r(READ, "core", "nodes"),
          EVENTS,
          _r("list watch", "discovery.k8s.io", "endpointslices")),
    _role("system:persistent-volume-provisioner",
          _r("create delete get list watch", "core", "persistentvolumes"),
          _r("get list update watch", "core", "persistentvolumeclaims"),
          _r(READ, "storage.k8s.io", "storageclasses"),
          _r("watch", "core", "events"),
          EVENTS),
    _role("system:public-info-viewer", _u("get", "/healthz /livez /readyz /version /version/")),
    _role("system:service-account-issuer-discovery", _u("get", "/.well-known/openid-configuration /openid/v1/jwks")),
    _role("system:volume-scheduler",
          _r("get list patch update watch", "core", "persistentvolumes"),
          _r(READ, "storage.k8s.io", "storageclasses"),
          _r("get list patch update watch", "core", "persistentvolumeclaims")),
    _aggregated("view", into="edit"),
)

# kube-controller-manager's controllers, each with its own ServiceAccount in kube-system
# (controller_policy.go): name → rules. Every role but three ends with the events rule.
_C = "system:controller:"
_CONTROLLERS: dict[str, tuple[Obj, ...]] = {
    "attachdetach-controller": (
        _r("list watch", "core", "persistentvolumeclaims persistentvolumes"),
        _r(READ, "core", "nodes"),
        _r("patch update", "core", "nodes/status"),
        _r("list watch", "core", "pods"),
        EVENTS,
        _r("create delete get list watch", "storage.k8s.io", "volumeattachments"),
        _r(READ, "storage.k8s.io", "csidrivers"),
        _r(READ, "storage.k8s.io", "csinodes")),
    "certificate-controller": (
        _r("delete get list watch", _CSR, "certificatesigningrequests"),
        _r("update", _CSR, "certificatesigningrequests/approval certificatesigningrequests/status"),
        _r("approve", _CSR, "signers", "kubernetes.io/kube-apiserver-client-kubelet"),
        _r("sign", _CSR, "signers", "kubernetes.io/kube-apiserver-client kubernetes.io/kube-apiserver-client-kubelet "
           "kubernetes.io/kubelet-serving kubernetes.io/legacy-unknown"),
        _r("create", "authorization.k8s.io", "subjectaccessreviews"),
        EVENTS),
    "clusterrole-aggregation-controller": (
        _r("escalate get list patch update watch", GROUP, "clusterroles"),),
    "cronjob-controller": (
        _r("get list update watch", "batch", "cronjobs"),
        _r("create delete get list patch update watch", "batch", "jobs"),
        _r("update", "batch", "cronjobs/status"),
        _r("update", "batch", "cronjobs/finalizers"),
        _r("delete list watch", "core", "pods"),
        EVENTS),
    "daemon-set-controller": (
        _r(READ, "apps extensions", "daemonsets"),
        _r("update", "apps extensions", "daemonsets/status"),
        _r("update", "apps extensions", "daemonsets/finalizers"),
        _r("list watch", "core", "nodes"),
        _r("create delete list patch watch", "core", "pods"),
        _r("create", "core", "pods/binding"),
        _r("create delete get list patch update watch", "apps", "controllerrevisions"),
        EVENTS),
    "deployment-controller": (
        _r("get list update watch", "apps extensions", "deployments"),
        _r("update", "apps extensions", "deployments/status"),
        _r("update", "apps extensions", "deployments/finalizers"),
        _r("create delete get list patch update watch", "apps extensions", "replicasets"),
        _r("get list update watch", "core", "pods"),
        EVENTS),
    "disruption-controller": (
        _r(READ, "apps extensions", "deployments"),
        _r(READ, "apps extensions", "replicasets"),
        _r(READ, "core", "replicationcontrollers"),
        _r(READ, "policy", "poddisruptionbudgets"),
        _r(READ, "apps", "statefulsets"),
        _r("update", "policy", "poddisruptionbudgets/status"),
        _r("patch update", "core", "pods/status"),
        _r("get", "*", "*/scale"),
        EVENTS),
    "endpoint-controller": (
        _r(READ, "core", "pods services"),
        _r("create delete get list update watch", "core", "endpoints"),
        _r("create", "core", "endpoints/restricted"),
        EVENTS),
    "endpointslice-controller": (
        _r(READ, "core", "nodes pods services"),
        _r("update", "core", "services/finalizers"),
        _r("create delete get list update watch", "discovery.k8s.io", "endpointslices"),
        EVENTS),
    "endpointslicemirroring-controller": (
        _r(READ, "core", "endpoints services"),
        _r("update", "core", "services/finalizers"),
        _r("update", "core", "endpoints/finalizers"),
        _r("create delete get list update watch", "discovery.k8s.io", "endpointslices"),
        EVENTS),
    "ephemeral-volume-controller": (
        _r(READ, "core", "pods"),
        _r("update", "core", "pods/finalizers"),
        _r("create get list watch", "core", "persistentvolumeclaims"),
        EVENTS),
    "expand-controller": (
        _r("get list patch update watch", "core", "persistentvolumes"),
        _r("patch update", "core", "persistentvolumeclaims/status"),
        _r(READ, "core", "persistentvolumeclaims"),
        EVENTS),
    "generic-garbage-collector": (
        _r("delete get list patch update watch", "*", "*"),
        EVENTS),
    "horizontal-pod-autoscaler": (
        _r(READ, "autoscaling", "horizontalpodautoscalers"),
        _r("update", "autoscaling", "horizontalpodautoscalers/status"),
        _r("get update", "*", "*/scale"),
        _r("list watch", "core", "pods"),
        _r("list watch", "metrics.k8s.io", "pods"),
        _r(READ, "custom.metrics.k8s.io", "*"),
        _r(READ, "external.metrics.k8s.io", "*"),
        EVENTS),
    "job-controller": (
        _r("get list patch update watch", "batch", "jobs"),
        _r("update", "batch", "jobs/status"),
        _r("update", "batch", "jobs/finalizers"),
        _r("create delete list patch watch", "core", "pods"),
        EVENTS),
    "legacy-service-account-token-cleaner": (
        _r("get", "core", "configmaps", "kube-apiserver-legacy-service-account-token-tracking"),
        _r("delete patch", "core", "secrets")),
    "namespace-controller": (
        _r("delete get list watch", "core", "namespaces"),
        _r("update", "core", "namespaces/finalize namespaces/status"),
        _r("delete deletecollection get list watch", "*", "*")),
    "node-controller": (
        _r("delete get list patch update watch", "core", "nodes"),
        _r("patch update", "core", "nodes/status"),
        _r("patch update", "core", "pods/status"),
        _r("delete get list watch", "core", "pods"),
        EVENTS),
    "persistent-volume-binder": (
        _r("create delete get list update watch", "core", "persistentvolumes"),
        _r("update", "core", "persistentvolumes/status"),
        _r("get list update watch", "core", "persistentvolumeclaims"),
        _r("update", "core", "persistentvolumeclaims/status"),
        _r("create delete get list watch", "core", "pods"),
        _r(READ, "storage.k8s.io", "storageclasses"),
        _r("list watch", "core", "nodes"),
        EVENTS,
        _r("watch", "core", "events")),
    "pod-garbage-collector": (
        _r("delete list watch", "core", "pods"),
        _r(READ, "core", "nodes"),
        _r("patch", "core", "pods/status")),
    "pv-protection-controller": (
        _r("get list update watch", "core", "persistentvolumes"),
        EVENTS),
    "pvc-protection-controller": (
        _r("get list update watch", "core", "persistentvolumeclaims"),
        _r("update", "core", "persistentvolumeclaims/status"),
        _r(READ, "core", "pods"),
        EVENTS),
    "replicaset-controller": (
        _r("get list update watch", "apps extensions", "replicasets"),
        _r("update", "apps extensions", "replicasets/status"),
        _r("update", "apps extensions", "replicasets/finalizers"),
        _r("create delete list patch watch", "core", "pods"),
        EVENTS),
    "replication-controller": (
        _r("get list update watch", "core", "replicationcontrollers"),
        _r("update", "core", "replicationcontrollers/status"),
        _r("update", "core", "replicationcontrollers/finalizers"),
        _r("create delete list patch watch", "core", "pods"),
        EVENTS),
    "resourcequota-controller": (
        _r("list watch", "*", "*"),
        _r("update", "core", "resourcequotas/status"),
        EVENTS),
    "root-ca-cert-publisher": (
        _r("create update", "core", "configmaps"),
        EVENTS),
    "route-controller": (
        _r("list watch", "core", "nodes"),
        _r("patch", "core", "nodes/status"),
        EVENTS),
    "service-account-controller": (
        _r("create", "core", "serviceaccounts"),
        EVENTS),
    "service-controller": (
        _r(READ, "core", "services"),
        _r("patch update", "core", "services/status"),
        _r("list watch", "core", "nodes"),
        EVENTS),
    "statefulset-controller": (
        _r("list watch", "core", "pods"),
        _r(READ, "apps", "statefulsets"),
        _r("update", "apps", "statefulsets/status"),
        _r("update", "apps", "statefulsets/finalizers"),
        _r("create delete get patch update", "core", "pods"),
        _r("create delete get list patch update watch", "apps", "controllerrevisions"),
        _r("create get list watch", "core", "persistentvolumeclaims"),
        _r("delete update", "core", "persistentvolumeclaims"),
        _r("update", "core", "pods/finalizers"),
        EVENTS),
    "ttl-after-finished-controller": (
        _r("delete get list watch", "batch", "jobs"),
        EVENTS),
    "ttl-controller": (
        _r("list patch update watch", "core", "nodes"),
        EVENTS),
    "validatingadmissionpolicy-status-controller": (
        _r(READ, "admissionregistration.k8s.io", "validatingadmissionpolicies"),
        _r("get patch update", "admissionregistration.k8s.io", "validatingadmissionpolicies/status"),
        EVENTS),
}

CONTROLLER_ROLES: tuple[Obj, ...] = tuple(_role(_C + name, *rules) for name, rules in _CONTROLLERS.items())

CLUSTER_ROLES = CLUSTER_ROLES + CONTROLLER_ROLES

CLUSTER_ROLE_BINDINGS: tuple[Obj, ...] = (
    _binding("cluster-admin", "cluster-admin", "Group:system:masters"),
    _binding("system:monitoring", "system:monitoring", "Group:system:monitoring"),
    _binding("system:discovery", "system:discovery", "Group:system:authenticated"),
    _binding("system:basic-user", "system:basic-user", "Group:system:authenticated"),
    _binding("system:public-info-viewer", "system:public-info-viewer", "Group:system:authenticated",
             "Group:system:unauthenticated"),
    _binding("system:node-proxier", "system:node-proxier", "User:system:kube-proxy"),
    _binding("system:kube-controller-manager", "system:kube-controller-manager", "User:system:kube-controller-manager"),
    _binding("system:kube-dns", "system:kube-dns", f"SA:{SYSTEM}/kube-dns"),
    _binding("system:kube-scheduler", "system:kube-scheduler", "User:system:kube-scheduler"),
    _binding("system:volume-scheduler", "system:volume-scheduler", "User:system:kube-scheduler"),
    # kube keeps this binding without subjects since the Node authorizer (1.7) took over.
    _binding("system:node", "system:node"),
    _binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery",
             "Group:system:serviceaccounts"),
    *(_binding(_C + name, _C + name, f"SA:{SYSTEM}/{name}") for name in _CONTROLLERS),
)

_LEADER_LOCKING = (_r("create get list update watch", "coordination.k8s.io", "leases"),)

ROLES: tuple[Obj, ...] = (
    _role("system:controller:bootstrap-signer",
          _r(READ, "core", "configmaps"),
          _r("update", "core", "configmaps", "cluster-info"),
          EVENTS, namespace="kube-public"),
    _role("extension-apiserver-authentication-reader",
          _r(READ, "core", "configmaps", "extension-apiserver-authentication"), namespace=SYSTEM),
    _role("system::leader-locking-kube-controller-manager", *_LEADER_LOCKING, namespace=SYSTEM),
    _role("system::leader-locking-kube-scheduler", *_LEADER_LOCKING, namespace=SYSTEM),
    _role("system:controller:bootstrap-signer", _r(READ, "core", "secrets"), namespace=SYSTEM),
    _role("system:controller:cloud-provider", _r("create get list watch", "core", "configmaps"), namespace=SYSTEM),
    _role("system:controller:token-cleaner",
          _r("delete get list watch", "core", "secrets"),
          EVENTS, namespace=SYSTEM),
)

ROLE_BINDINGS: tuple[Obj, ...] = (
    _binding("system:controller:bootstrap-signer", "system:controller:bootstrap-signer",
             f"SA:{SYSTEM}/bootstrap-signer", namespace="kube-public"),
    _binding("system::extension-apiserver-authentication-reader", "extension-apiserver-authentication-reader",
             "User:system:kube-controller-manager", "User:system:kube-scheduler", namespace=SYSTEM),
    _binding("system::leader-locking-kube-controller-manager", "system::leader-locking-kube-controller-manager",
             "User:system:kube-controller-manager", f"SA:{SYSTEM}/kube-controller-manager",
             f"SA:{SYSTEM}/leader-election-controller", namespace=SYSTEM),
    _binding("system::leader-locking-kube-scheduler", "system::leader-locking-kube-scheduler",
             "User:system:kube-scheduler", f"SA:{SYSTEM}/kube-scheduler", namespace=SYSTEM),
    _binding("system:controller:bootstrap-signer", "system:controller:bootstrap-signer",
             f"SA:{SYSTEM}/bootstrap-signer", namespace=SYSTEM),
    _binding("system:controller:cloud-provider", "system:controller:cloud-provider",
             f"SA:{SYSTEM}/cloud-provider", namespace=SYSTEM),
    _binding("system:controller:token-cleaner", "system:controller:token-cleaner",
             f"SA:{SYSTEM}/token-cleaner", namespace=SYSTEM),
)
