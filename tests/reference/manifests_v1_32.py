"""A minimal valid manifest of every creatable resource type a kube-apiserver v1.32 serves.

Keyed by (group/version, plural), as in data/discovery-v1.32.json. Every manifest here is
accepted by a real v1.32 apiserver (its validation is the bar: required fields are set, names
follow each kind's naming rule); namespaced objects carry no namespace, the caller sets one.
The virtual, create-only reviews (authentication/authorization) and bindings are not here: they
are not stored, so they do not go through the conformance walk.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

_CONTAINERS = [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]
_POD_SPEC: Obj = {"containers": _CONTAINERS}
_TEMPLATE: Obj = {"metadata": {"labels": {"app": "conf"}}, "spec": _POD_SPEC}
_JOB_TEMPLATE: Obj = {"spec": {"restartPolicy": "Never", "containers": _CONTAINERS}}
_SELECTOR: Obj = {"matchLabels": {"app": "conf"}}


def _m(api_version: str, kind: str, name: str, **body: Any) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **body}


MANIFESTS: dict[tuple[str, str], Obj] = {
    # core/v1
    ("v1", "configmaps"): _m("v1", "ConfigMap", "conf-cm", data={"a": "1"}),
    ("v1", "endpoints"): _m("v1", "Endpoints", "conf-ep", subsets=[
        {"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80, "protocol": "TCP"}]}]),
    ("v1", "events"): _m("v1", "Event", "conf-ev.1", involvedObject={"kind": "Pod", "name": "p", "namespace": "NS"},
                         reason="Started", message="started", type="Normal", source={"component": "conf"}),
    ("v1", "limitranges"): _m("v1", "LimitRange", "conf-limits", spec={
        "limits": [{"type": "Container", "default": {"cpu": "100m"}}]}),
    ("v1", "namespaces"): _m("v1", "Namespace", "conf-ns"),
    ("v1", "nodes"): _m("v1", "Node", "conf-node"),
    ("v1", "persistentvolumeclaims"): _m("v1", "PersistentVolumeClaim", "conf-pvc", spec={
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
    ("v1", "persistentvolumes"): _m("v1", "PersistentVolume", "conf-pv", spec={
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/conf"}}),
    ("v1", "pods"): _m("v1", "Pod", "conf-pod", spec=_POD_SPEC),
    ("v1", "podtemplates"): _m("v1", "PodTemplate", "conf-podtemplate", template=_TEMPLATE),
    ("v1", "replicationcontrollers"): _m("v1", "ReplicationController", "conf-rc", spec={
        "replicas": 1, "selector": {"app": "conf"}, "template": _TEMPLATE}),
    ("v1", "resourcequotas"): _m("v1", "ResourceQuota", "conf-quota", spec={"hard": {"pods": "10"}}),
    ("v1", "secrets"): _m("v1", "Secret", "conf-secret", type="Opaque", data={"a": "MQ=="}),
    ("v1", "serviceaccounts"): _m("v1", "ServiceAccount", "conf-sa"),
    ("v1", "services"): _m("v1", "Service", "conf-svc", spec={"selector": {"app": "conf"}, "ports": [{"port": 80}]}),
    # admissionregistration.k8s.io/v1
    ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"): _m(
        "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "conf-mwc"),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"): _m(
        "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "conf-vap", spec={
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"): _m(
        "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "conf-vapb", spec={
            "policyName": "conf-vap", "validationActions": ["Deny"]}),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"): _m(
        "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "conf-vwc"),
    # apiextensions.k8s.io/v1
    ("apiextensions.k8s.io/v1", "customresourcedefinitions"): _m(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "confs.conformance.example.com", spec={
            "group": "conformance.example.com", "scope": "Namespaced",
            "names": {"plural": "confs", "singular": "conf", "kind": "Conf"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}),
    # apiregistration.k8s.io/v1
    ("apiregistration.k8s.io/v1", "apiservices"): _m("apiregistration.k8s.io/v1", "APIService",
                                                     "v1.conformance.example.com", spec={
        "group": "conformance.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
        "service": {"namespace": "default", "name": "conf-api"}, "insecureSkipTLSVerify": True}),
    # apps/v1
    ("apps/v1", "controllerrevisions"): _m("apps/v1", "ControllerRevision", "conf-cr", revision=1, data={}),
    ("apps/v1", "daemonsets"): _m("apps/v1", "DaemonSet", "conf-ds", spec={"selector": _SELECTOR,
                                                                          "template": _TEMPLATE}),
    ("apps/v1", "deployments"): _m("apps/v1", "Deployment", "conf-deploy", spec={
        "replicas": 1, "selector": _SELECTOR, "template": _TEMPLATE}),
    ("apps/v1", "replicasets"): _m("apps/v1", "ReplicaSet", "conf-rs", spec={
        "replicas": 1, "selector": _SELECTOR, "template": _TEMPLATE}),
    ("apps/v1", "statefulsets"): _m("apps/v1", "StatefulSet", "conf-sts", spec={
        "replicas": 1, "serviceName": "conf-svc", "selector": _SELECTOR, "template": _TEMPLATE}),
    # autoscaling
    ("autoscaling/v2", "horizontalpodautoscalers"): _m("autoscaling/v2", "HorizontalPodAutoscaler", "conf-hpa2", spec={
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "conf-deploy"},
        "maxReplicas": 3}),
    ("autoscaling/v1", "horizontalpodautoscalers"): _m("autoscaling/v1", "HorizontalPodAutoscaler", "conf-hpa1", spec={
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "conf-deploy"},
        "maxReplicas": 3, "targetCPUUtilizationPercentage": 70}),
    # batch/v1
    ("batch/v1", "cronjobs"): _m("batch/v1", "CronJob", "conf-cj", spec={
        "schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": _JOB_TEMPLATE}}}),
    ("batch/v1", "jobs"): _m("batch/v1", "Job", "conf-job", spec={"template": _JOB_TEMPLATE}),
    # certificates.k8s.io/v1
    ("certificates.k8s.io/v1", "certificatesigningrequests"): _m(
        "certificates.k8s.io/v1", "CertificateSigningRequest", "conf-csr", spec={
            "request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K", "signerName": "example.com/conf",
            "usages": ["digital signature"]}),
    # coordination.k8s.io/v1
    ("coordination.k8s.io/v1", "leases"): _m("coordination.k8s.io/v1", "Lease", "conf-lease",
                                             spec={"holderIdentity": "conf"}),
    # discovery.k8s.io/v1
    ("discovery.k8s.io/v1", "endpointslices"): _m("discovery.k8s.io/v1", "EndpointSlice", "conf-eps",
                                                  addressType="IPv4", endpoints=[{"addresses": ["10.0.0.1"]}],
                                                  ports=[{"name": "http", "port": 80, "protocol": "TCP"}]),
    # events.k8s.io/v1
    ("events.k8s.io/v1", "events"): _m("events.k8s.io/v1", "Event", "conf-ev2.1",
                                       eventTime="2026-01-01T00:00:00.000000Z", reportingController="example.com/conf",
                                       reportingInstance="conf-1", action="Started", reason="Started", type="Normal",
                                       regarding={"kind": "Pod", "name": "p", "namespace": "NS"}),
    # flowcontrol.apiserver.k8s.io/v1
    ("flowcontrol.apiserver.k8s.io/v1", "flowschemas"): _m(
        "flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "conf-fs", spec={
            "priorityLevelConfiguration": {"name": "conf-plc"}, "matchingPrecedence": 1000}),
    ("flowcontrol.apiserver.k8s.io/v1", "prioritylevelconfigurations"): _m(
        "flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration", "conf-plc", spec={
            "type": "Limited", "limited": {"nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"}}}),
    # networking.k8s.io/v1
    ("networking.k8s.io/v1", "ingressclasses"): _m("networking.k8s.io/v1", "IngressClass", "conf-ingc",
                                                   spec={"controller": "example.com/conf"}),
    ("networking.k8s.io/v1", "ingresses"): _m("networking.k8s.io/v1", "Ingress", "conf-ing", spec={
        "defaultBackend": {"service": {"name": "conf-svc", "port": {"number": 80}}}}),
    ("networking.k8s.io/v1", "networkpolicies"): _m("networking.k8s.io/v1", "NetworkPolicy", "conf-netpol",
                                                    spec={"podSelector": {}}),
    # node.k8s.io/v1
    ("node.k8s.io/v1", "runtimeclasses"): _m("node.k8s.io/v1", "RuntimeClass", "conf-rtc", handler="runc"),
    # policy/v1
    ("policy/v1", "poddisruptionbudgets"): _m("policy/v1", "PodDisruptionBudget", "conf-pdb", spec={
        "minAvailable": 1, "selector": _SELECTOR}),
    # rbac.authorization.k8s.io/v1
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): _m(
        "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "conf-crb",
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "conf-cr"},
        subjects=[{"kind": "ServiceAccount", "name": "conf-sa", "namespace": "default"}]),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): _m(
        "rbac.authorization.k8s.io/v1", "ClusterRole", "conf-cr",
        rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): _m(
        "rbac.authorization.k8s.io/v1", "RoleBinding", "conf-rb",
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "conf-role"},
        subjects=[{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane"}]),
    ("rbac.authorization.k8s.io/v1", "roles"): _m(
        "rbac.authorization.k8s.io/v1", "Role", "conf-role",
        rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
    # scheduling.k8s.io/v1
    ("scheduling.k8s.io/v1", "priorityclasses"): _m("scheduling.k8s.io/v1", "PriorityClass", "conf-pc", value=1000),
    # storage.k8s.io/v1
    ("storage.k8s.io/v1", "csidrivers"): _m("storage.k8s.io/v1", "CSIDriver", "conf.csi.example.com", spec={}),
    ("storage.k8s.io/v1", "csinodes"): _m("storage.k8s.io/v1", "CSINode", "conf-node", spec={"drivers": []}),
    ("storage.k8s.io/v1", "csistoragecapacities"): _m("storage.k8s.io/v1", "CSIStorageCapacity", "conf-csisc",
                                                      storageClassName="conf-sc"),
    ("storage.k8s.io/v1", "storageclasses"): _m("storage.k8s.io/v1", "StorageClass", "conf-sc",
                                                provisioner="example.com/conf"),
    ("storage.k8s.io/v1", "volumeattachments"): _m("storage.k8s.io/v1", "VolumeAttachment", "conf-va", spec={
        "attacher": "conf.csi.example.com", "nodeName": "conf-node", "source": {"persistentVolumeName": "conf-pv"}}),
}


def manifest(group_version: str, plural: str, namespace: str | None = None) -> Obj:
    """A fresh copy of the manifest, with `namespace` set (and substituted for "NS") when given."""
    import json

    text = json.dumps(MANIFESTS[(group_version, plural)])
    obj: Obj = json.loads(text.replace('"NS"', json.dumps(namespace or "default")))
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    return obj
