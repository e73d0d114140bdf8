"""Built-in kinds: names, schemas that accept real manifests, kube's defaults; CRD descriptors and validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from isthmus.apiserver.builtins import builtin_resources, crd_resources
from isthmus.apiserver.openapi.schema import apply_defaults, prune, validate
from isthmus.apiserver.registry.customresourcedefinition import validate_crd
from isthmus.apiserver.registry.resources import ResourceInfo

MANIFESTS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: "50%"}}
  template:
    metadata: {labels: {app: web}, annotations: {prometheus.io/scrape: "true"}}
    spec:
      serviceAccountName: web
      securityContext: {runAsNonRoot: true, fsGroup: 2000}
      initContainers:
      - {name: init, image: busybox, command: [sh, -c, "true"]}
      containers:
      - name: web
        image: nginx:1.25
        imagePullPolicy: IfNotPresent
        args: ["--port", "80"]
        ports: [{containerPort: 80, name: http}]
        env:
        - {name: A, value: "1"}
        - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: S, valueFrom: {secretKeyRef: {name: s, key: k, optional: true}}}
        envFrom: [{configMapRef: {name: cm}}]
        resources: {limits: {cpu: 500m, memory: 128Mi}, requests: {cpu: 0.1, memory: 64Mi}}
        readinessProbe: {httpGet: {path: /healthz, port: http}, initialDelaySeconds: 5}
        livenessProbe: {tcpSocket: {port: 80}, periodSeconds: 20}
        volumeMounts: [{name: data, mountPath: /data, readOnly: true}]
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumes:
      - {name: data, emptyDir: {sizeLimit: 1Gi}}
      - {name: cfg, configMap: {name: cm, items: [{key: a, path: a}]}}
      tolerations: [{key: k, operator: Exists, effect: NoSchedule}]
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, annotations: {kubernetes.dcos.io/dklb-config: "x"}}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: https, port: 443, targetPort: 8443, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  restartPolicy: Never
  nodeSelector: {kubernetes.io/os: linux}
  containers:
  - name: c
    image: busybox
    command: [sleep, "3600"]
    ports: [{containerPort: 8080, protocol: UDP}]
    resources: {limits: {cpu: 1, memory: 1Gi}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-abc, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- addresses: [127.0.0.2]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: p, namespace: default}
ports: [{name: http, port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing}
spec:
  ingressClassName: edgelb
  tls: [{hosts: [a.example.com], secretName: tls}]
  rules:
  - host: a.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: leader}
spec: {holderIdentity: a, leaseDurationSeconds: 15, renewTime: "2024-01-01T00:00:00.000000Z"}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {k: v}
data: {b: dmFsdWU=}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {a: "1"}
---
apiVersion: v1
kind: Event
metadata: {name: e}
involvedObject: {kind: Pod, name: p, namespace: default}
reason: Started
message: hi
type: Normal
firstTimestamp: "2024-01-01T00:00:00Z"
count: 1
source: {component: kubelet}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
"""


@pytest.fixture(scope="module")
def infos() -> dict[tuple[str, str], ResourceInfo]:
    return {(r.group, r.kind): r for r in builtin_resources()}


def _info(infos: dict[tuple[str, str], ResourceInfo], obj: dict[str, Any]) -> ResourceInfo:
    api = obj["apiVersion"]
    group = api.split("/")[0] if "/" in api else ""
    return infos[(group, obj["kind"])]


def test_names(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    svc = infos[("", "Service")]
    assert (svc.plural, svc.singular, svc.short_names, svc.categories, svc.has_status) == (
        "services",
        "service",
        ["svc"],
        ["all"],
        True,
    )
    ns = infos[("", "Namespace")]
    assert not ns.namespaced and ns.short_names == ["ns"]
    crd = infos[("apiextensions.k8s.io", "CustomResourceDefinition")]
    assert crd.short_names == ["crd", "crds"] and not crd.namespaced and crd.has_status
    assert infos[("apps", "Deployment")].short_names == ["deploy"]
    assert infos[("events.k8s.io", "Event")].plural == "events"
    assert not infos[("", "ConfigMap")].has_status
    assert "spec.nodeName" in infos[("", "Pod")].field_selectors
    assert "involvedObject.name" in infos[("", "Event")].field_selectors
    assert infos[("", "Secret")].field_selectors == {"type"}
    assert len(infos) == 58  # every kind kube v1.32 serves (HPA in two versions shares one key here)


def test_real_manifests_validate_without_pruning(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    for doc in yaml.safe_load_all(MANIFESTS):
        info = _info(infos, doc)
        assert info.schema is not None
        obj = copy.deepcopy(doc)
        assert prune(obj, info.schema) == [], doc["kind"]
        assert obj == doc
        apply_defaults(obj, info.schema)
        if info.defaulter:
            info.defaulter(obj)
        assert validate(obj, info.schema) == [], doc["kind"]


def test_unknown_and_invalid_fields(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    dep = next(d for d in yaml.safe_load_all(MANIFESTS) if d["kind"] == "Deployment")
    schema = infos[("apps", "Deployment")].schema
    assert schema is not None
    dep["spec"]["replicas"] = "two"
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    dep["metadata"]["labelz"] = {}
    assert prune(dep, schema) == ["metadata.labelz", "spec.template.spec.containers[0].imagePullPolcy"]
    causes = validate(dep, schema)
    assert causes[0]["field"] == "spec.replicas" and causes[0]["reason"] == "FieldValueTypeInvalid"


def test_required_service_port_and_container_name(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"name": "x"}]},
    }
    schema = infos[("", "Service")].schema
    assert schema is not None
    assert validate(svc, schema) == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.ports[0].port"}
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"image": "x"}]},
    }
    pschema = infos[("", "Pod")].schema
    assert pschema is not None
    assert [c["field"] for c in validate(pod, pschema)] == ["spec.containers[0].name"]


def test_kube_extensions(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    pod = infos[("", "Pod")].schema
    assert pod is not None
    spec = pod["properties"]["spec"]["properties"]
    containers = spec["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    ports = containers["items"]["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert ports["x-kubernetes-patch-merge-key"] == "containerPort"
    assert spec["volumes"]["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    assert spec["tolerations"]["x-kubernetes-list-type"] == "atomic"
    meta = pod["properties"]["metadata"]["properties"]
    assert meta["finalizers"]["x-kubernetes-list-type"] == "set"
    assert meta["ownerReferences"]["x-kubernetes-list-map-keys"] == ["uid"]
    svc = infos[("", "Service")].schema
    assert svc is not None
    sports = svc["properties"]["spec"]["properties"]["ports"]
    assert sports["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    assert sports["items"]["properties"]["targetPort"] == {
        "x-kubernetes-int-or-string": True,
        "description": sports["items"]["properties"]["targetPort"]["description"],
    }
    dep = infos[("apps", "Deployment")].schema
    assert dep is not None
    ru = dep["properties"]["spec"]["properties"]["strategy"]["properties"]["rollingUpdate"]["properties"]
    assert ru["maxSurge"]["x-kubernetes-int-or-string"] is True
    crd = infos[("apiextensions.k8s.io", "CustomResourceDefinition")].schema
    assert crd is not None
    version = crd["properties"]["spec"]["properties"]["versions"]["items"]["properties"]
    assert version["schema"]["properties"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"] is True


def test_service_defaults(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    svc: dict[str, Any] = {
        "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}
    }
    defaulter = infos[("", "Service")].defaulter
    assert defaulter is not None
    defaulter(svc)
    spec = svc["spec"]
    assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
    assert spec["internalTrafficPolicy"] == "Cluster"
    assert spec["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert spec["ports"][1]["targetPort"] == "dns"
    assert "externalTrafficPolicy" not in spec


def test_pod_deployment_statefulset_defaults(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    pod: dict[str, Any] = {
        "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}
    }
    d = infos[("", "Pod")].defaulter
    assert d is not None
    d(pod)
    assert pod["spec"]["restartPolicy"] == "Always"
    assert pod["spec"]["dnsPolicy"] == "ClusterFirst"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30
    c = pod["spec"]["containers"][0]
    assert c["ports"][0]["protocol"] == "TCP"
    assert c["imagePullPolicy"] == "Always"  # untagged image
    dep: dict[str, Any] = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    dd = infos[("apps", "Deployment")].defaulter
    assert dd is not None
    dd(dep)
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    assert dep["spec"]["revisionHistoryLimit"] == 10 and dep["spec"]["progressDeadlineSeconds"] == 600
    assert dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    zero: dict[str, Any] = {"spec": {"replicas": 0}}
    dd(zero)
    assert zero["spec"]["replicas"] == 0
    sts: dict[str, Any] = {"spec": {}}
    sd = infos[("apps", "StatefulSet")].defaulter
    assert sd is not None
    sd(sts)
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady"
    assert sts["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert sts["spec"]["replicas"] == 1


def test_other_defaults(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    ns: dict[str, Any] = {"metadata": {"name": "a"}}
    nd = infos[("", "Namespace")].defaulter
    assert nd is not None
    nd(ns)
    assert ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "a"}
    sec: dict[str, Any] = {}
    sd = infos[("", "Secret")].defaulter
    assert sd is not None
    sd(sec)
    assert sec["type"] == "Opaque"
    eps: dict[str, Any] = {"ports": [{"port": 80}]}
    ed = infos[("discovery.k8s.io", "EndpointSlice")].defaulter
    assert ed is not None
    ed(eps)
    assert eps["ports"][0]["protocol"] == "TCP"
    assert infos[("networking.k8s.io", "Ingress")].defaulter is None


def _crd(**over: Any) -> dict[str, Any]:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
                            },
                        }
                    },
                },
                {
                    "name": "v1alpha1",
                    "served": False,
                    "storage": False,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                },
            ],
        },
    }
    crd["spec"].update(over)
    return crd


def test_crd_resources() -> None:
    infos = crd_resources(_crd())
    assert len(infos) == 1
    info = infos[0]
    assert (info.group, info.version, info.plural, info.kind, info.namespaced) == (
        "example.com",
        "v1",
        "widgets",
        "Widget",
        True,
    )
    assert info.has_status and info.storage_version and not info.builtin
    assert info.short_names == ["wd"]
    assert info.printer_columns[0]["jsonPath"] == ".spec.size"
    assert info.schema is not None
    props = info.schema["properties"]
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(props)
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "bogus": 1},
        "spec": {"size": 1},
    }
    assert prune(obj, info.schema) == ["metadata.bogus"]


def test_valid_crd_has_no_causes() -> None:
    assert validate_crd(_crd()) == []


def test_crd_name_and_group() -> None:
    crd = _crd(group="example")
    crd["metadata"]["name"] = "widgets.example"
    causes = validate_crd(crd)
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "example": should be a domain with at least one dot',
            "field": "spec.group",
        }
    ]
    crd = _crd()
    crd["metadata"]["name"] = "gadgets.example.com"
    assert validate_crd(crd)[0] == {
        "reason": "FieldValueInvalid",
        "message": 'Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group',
        "field": "metadata.name",
    }


def test_crd_scope_storage_and_structural() -> None:
    crd = _crd(scope="Global")
    crd["spec"]["versions"][0]["storage"] = False
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = {
        "minimum": 1
    }
    crd["spec"]["versions"][1]["schema"] = {}
    causes = {c["field"]: c for c in validate_crd(crd)}
    assert (
        causes["spec.scope"]["message"]
        == 'Unsupported value: "Global": supported values: "Cluster", "Namespaced"'
    )
    assert causes["spec.versions"]["message"].endswith(
        "must have exactly one version marked as storage version"
    )
    f = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type"
    assert causes[f] == {
        "reason": "FieldValueRequired",
        "message": "Required value: must not be empty for specified object fields",
        "field": f,
    }
    assert (
        causes["spec.versions[1].schema.openAPIV3Schema"]["message"] == "Required value: schemas are required"
    )


def test_crd_names_required() -> None:
    crd = _crd(names={"kind": "Widget"})
    fields = {c["field"]: c["message"] for c in validate_crd(crd)}
    assert fields["spec.names.plural"] == "Required value"
    crd = _crd(names={"plural": "Widgets", "kind": "Widget"})
    crd["metadata"]["name"] = "Widgets.example.com"
    assert any(c["field"] == "spec.names.plural" for c in validate_crd(crd))


def test_the_store_skips_only_the_hooks_a_kind_leaves_generic(infos: dict[tuple[str, str], ResourceInfo]) -> None:
    """A strategy's plain_* flags say which hooks are the generic no-ops (the store does not call
    those): worked out per class, so a kind that overrides any hook of a group keeps them all."""
    from isthmus.apiserver.registry.strategy import Strategy

    class Canonical(Strategy):
        def canonicalize(self, obj: Any) -> None:
            obj["seen"] = True

    class Converting(Strategy):
        def from_storage(self, obj: Any) -> Any:
            return obj

    assert (Strategy.plain_create, Strategy.plain_default, Strategy.plain_storage) == (True, True, True)
    assert (Canonical.plain_create, Canonical.plain_default, Canonical.plain_storage) == (False, True, True)
    assert (Converting.plain_create, Converting.plain_storage) == (True, False)
    by_kind = {info.kind: info.strategy for info in infos.values()}
    assert by_kind["ConfigMap"].plain_create and by_kind["ConfigMap"].plain_default
    assert not by_kind["Pod"].plain_create and not by_kind["Pod"].plain_default
    assert not by_kind["Service"].plain_default
