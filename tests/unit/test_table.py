"""meta.k8s.io/v1 Tables: kube's built-in printer columns and CRD additionalPrinterColumns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from isthmus.apiserver.builtins import builtin_resources, crd_resources
from isthmus.apiserver.registry.resources import ResourceInfo
from isthmus.apiserver.registry.table import JSONPath, human_duration, to_table

NOW = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
CREATED = "2024-01-01T11:55:00Z"  # 5 minutes before NOW


def _builtin(plural: str, group: str = "") -> ResourceInfo:
    return next(r for r in builtin_resources() if r.plural == plural and r.group == group)


def _names(table: dict[str, Any]) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]


def test_human_duration_matches_kube() -> None:
    assert human_duration(5) == "5s"
    assert human_duration(119) == "119s"
    assert human_duration(300) == "5m"
    assert human_duration(310) == "5m10s"
    assert human_duration(3 * 3600 + 60) == "3h1m"
    assert human_duration(30 * 3600) == "30h"
    assert human_duration(3 * 86400 + 3600) == "3d1h"
    assert human_duration(400 * 86400) == "400d"


def test_service_table() -> None:
    svcs = [
        {
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": CREATED, "uid": "u"},
            "spec": {
                "type": "NodePort",
                "clusterIP": "127.0.100.1",
                "selector": {"app": "web"},
                "ports": [
                    {"port": 80, "protocol": "TCP"},
                    {"port": 443, "nodePort": 30443, "protocol": "TCP"},
                ],
            },
        },
        {
            "metadata": {"name": "lb", "creationTimestamp": CREATED},
            "spec": {"type": "LoadBalancer", "clusterIP": "127.0.100.2", "ports": []},
            "status": {"loadBalancer": {}},
        },
    ]
    t = to_table(_builtin("services"), svcs, resource_version="7", now=NOW)
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "7"}
    assert _names(t) == ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"]
    assert t["columnDefinitions"][0]["format"] == "name"
    assert set(t["columnDefinitions"][0]) == {"name", "type", "format", "description", "priority"}
    assert t["rows"][0]["cells"] == [
        "web",
        "NodePort",
        "127.0.100.1",
        "<none>",
        "80/TCP,443:30443/TCP",
        "5m",
        "app=web",
    ]
    assert t["rows"][1]["cells"][3:5] == ["<pending>", "<none>"]
    assert t["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": svcs[0]["metadata"],
    }


def test_include_object_modes() -> None:
    obj = {"metadata": {"name": "a", "creationTimestamp": CREATED}, "data": {"x": "1"}}
    info = _builtin("configmaps")
    assert (
        "object" not in to_table(info, [obj], resource_version="1", include_object="None", now=NOW)["rows"][0]
    )
    full = to_table(info, [obj], resource_version="1", include_object="Object", continue_token="c", now=NOW)
    assert full["rows"][0]["object"] is obj and full["metadata"]["continue"] == "c"
    assert full["rows"][0]["cells"] == ["a", 1, "5m"]


def test_pod_deployment_namespace_tables() -> None:
    pod = {
        "metadata": {"name": "p", "creationTimestamp": CREATED},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.5",
            "containerStatuses": [
                {
                    "name": "a",
                    "ready": True,
                    "restartCount": 2,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"finishedAt": "2024-01-01T11:59:00Z"}},
                },
                {
                    "name": "b",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    }
    t = to_table(_builtin("pods"), [pod], resource_version="1", now=NOW)
    assert _names(t) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert t["rows"][0]["cells"][:6] == ["p", "1/2", "CrashLoopBackOff", "2 (60s ago)", "5m", "127.0.0.5"]
    dep = {
        "metadata": {"name": "d", "creationTimestamp": CREATED},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    }
    t = to_table(_builtin("deployments", "apps"), [dep], resource_version="1", now=NOW)
    assert _names(t) == ["Name", "Ready", "Up-to-date", "Available", "Age"]
    assert t["rows"][0]["cells"] == ["d", "2/3", 3, 2, "5m", "c", "nginx", "app=d"]
    ns = {"metadata": {"name": "default", "creationTimestamp": CREATED}, "status": {"phase": "Active"}}
    t = to_table(_builtin("namespaces"), [ns], resource_version="1", now=NOW)
    assert t["rows"][0]["cells"] == ["default", "Active", "5m"]


def test_other_builtin_columns() -> None:
    expected = {
        ("statefulsets", "apps"): ["Name", "Ready", "Age"],
        ("configmaps", ""): ["Name", "Data", "Age"],
        ("secrets", ""): ["Name", "Type", "Data", "Age"],
        ("endpointslices", "discovery.k8s.io"): ["Name", "AddressType", "Ports", "Endpoints", "Age"],
        ("leases", "coordination.k8s.io"): ["Name", "Holder", "Age"],
        ("events", ""): ["Last Seen", "Type", "Reason", "Object", "Message"],
        ("ingresses", "networking.k8s.io"): ["Name", "Class", "Hosts", "Address", "Ports", "Age"],
        ("ingressclasses", "networking.k8s.io"): ["Name", "Controller", "Parameters", "Age"],
        ("customresourcedefinitions", "apiextensions.k8s.io"): ["Name", "Created At"],
    }
    for (plural, group), cols in expected.items():
        t = to_table(_builtin(plural, group), [], resource_version="1", now=NOW)
        assert _names(t) == cols, plural


def test_endpointslice_event_ingress_crd_cells() -> None:
    eps = {
        "metadata": {"name": "e", "creationTimestamp": CREATED},
        "addressType": "IPv4",
        "ports": [{"port": 80}, {"port": 81}, {"port": 82}, {"port": 83}],
        "endpoints": [{"addresses": ["127.0.0.2"]}, {"addresses": ["127.0.0.3"]}],
    }
    cells = to_table(_builtin("endpointslices", "discovery.k8s.io"), [eps], resource_version="1", now=NOW)[
        "rows"
    ][0]
    assert cells["cells"] == ["e", "IPv4", "80,81,82 + 1 more...", "127.0.0.2,127.0.0.3", "5m"]
    ev = {
        "metadata": {"name": "ev1", "creationTimestamp": CREATED},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "type": "Warning",
        "reason": "BackOff",
        "message": " boom ",
        "firstTimestamp": "2024-01-01T11:50:00Z",
        "lastTimestamp": CREATED,
        "count": 4,
        "source": {"component": "kubelet", "host": "n1"},
    }
    row = to_table(_builtin("events"), [ev], resource_version="1", now=NOW)["rows"][0]["cells"]
    assert row == ["5m", "Warning", "BackOff", "pod/p", "", "kubelet, n1", "boom", "10m", 4, "ev1"]
    ing = {
        "metadata": {"name": "i", "creationTimestamp": CREATED},
        "spec": {"ingressClassName": "edgelb", "tls": [{}], "rules": [{"host": "a.example.com"}, {}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.9"}]}},
    }
    row = to_table(_builtin("ingresses", "networking.k8s.io"), [ing], resource_version="1", now=NOW)["rows"][
        0
    ]
    assert row["cells"] == ["i", "edgelb", "a.example.com", "127.0.0.9", "80, 443", "5m"]
    crd = {"metadata": {"name": "widgets.example.com", "creationTimestamp": "2024-01-01T11:55:00+00:00"}}
    row = to_table(
        _builtin("customresourcedefinitions", "apiextensions.k8s.io"), [crd], resource_version="1", now=NOW
    )["rows"][0]
    assert row["cells"] == ["widgets.example.com", "2024-01-01T11:55:00Z"]


def _crd_info(columns: list[dict[str, Any]] | None) -> ResourceInfo:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object"}},
    }
    if columns is not None:
        version["additionalPrinterColumns"] = columns
    crd: dict[str, object] = {
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [version],
        }
    }
    return crd_resources(crd)[0]


def test_crd_printer_columns() -> None:
    info = _crd_info(
        [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {
                "name": "App",
                "type": "string",
                "jsonPath": ".metadata.labels.app",
                "priority": 1,
                "description": "app",
            },
            {"name": "Ports", "type": "string", "jsonPath": ".spec.ports"},
            {"name": "Created", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Missing", "type": "string", "jsonPath": ".spec.nope"},
        ]
    )
    obj = {
        "metadata": {"name": "w", "creationTimestamp": CREATED, "labels": {"app": "x"}},
        "spec": {"size": 3, "ports": [80, 443]},
        "status": {
            "conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]
        },
    }
    t = to_table(info, [obj], resource_version="3", now=NOW)
    cols = t["columnDefinitions"]
    assert [c["name"] for c in cols] == ["Name", "Size", "Ready", "App", "Ports", "Created", "Missing"]
    assert cols[1] == {
        "name": "Size",
        "type": "integer",
        "format": "",
        "description": "Custom resource definition column (in JSONPath format): .spec.size",
        "priority": 0,
    }
    assert cols[3]["priority"] == 1 and cols[3]["description"] == "app"
    assert t["rows"][0]["cells"] == ["w", 3, "True", "x", "[80,443]", "5m", None]


def test_crd_without_columns_gets_name_and_age() -> None:
    t = to_table(
        _crd_info(None),
        [{"metadata": {"name": "w", "creationTimestamp": CREATED}}],
        resource_version="1",
        now=NOW,
    )
    assert [(c["name"], c["type"]) for c in t["columnDefinitions"]] == [("Name", "string"), ("Age", "date")]
    assert t["rows"][0]["cells"] == ["w", "5m"]


def test_jsonpath_subset() -> None:
    obj = {"a": {"b.c": 1, "list": [{"k": "x", "v": 1}, {"k": "y", "v": 2}]}}
    assert JSONPath(".a['b.c']").find(obj) == [1]
    assert JSONPath(".a.list[1].k").find(obj) == ["y"]
    assert JSONPath(".a.list[-1].v").find(obj) == [2]
    assert JSONPath(".a.list[*].k").find(obj) == ["x", "y"]
    assert JSONPath("{.a.list[?(@.v>1)].k}").find(obj) == ["y"]
    assert JSONPath(".a.list[?(@.k=='x')].v").find(obj) == [1]
    assert JSONPath(".a.missing.x").find(obj) == []
