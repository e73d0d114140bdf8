"""The Endpoints kube-lite writes beside EndpointSlices: subsets by resolved ports, ready or not."""

from __future__ import annotations

from typing import Any

from isthmus.local.kubelite.endpoints import desired_endpoints


def svc(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "s", "namespace": "d", "labels": {"team": "a"}},
        "spec": {
            "selector": {"app": "a"},
            "ports": [{"name": "web", "port": 80, "targetPort": "http"}],
            **spec,
        },
    }


def pod(name: str, ip: str, *, port: int | None = 8080, ready: bool = True, **meta: Any) -> dict[str, Any]:
    ports = [{"name": "http", "containerPort": port}] if port else []
    return {
        "metadata": {"name": name, "namespace": "d", "uid": f"u-{name}", "labels": {"app": "a"}, **meta},
        "spec": {"nodeName": "c1-node", "containers": [{"name": "c", "ports": ports}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_subsets_by_port_ready_and_not() -> None:
    pods = [
        pod("b", "127.1.0.2"),
        pod("a", "127.1.0.1", ready=False),
        pod("c", "127.1.0.3", port=9090),
        pod("n", "127.1.0.4", port=None),  # no port named http: not an endpoint
        pod("t", "127.1.0.5", deletionTimestamp="2024-01-01T00:00:00Z"),  # terminating
        {**pod("o", "127.1.0.6"), "metadata": {"name": "o", "namespace": "d", "labels": {"app": "other"}}},
    ]
    ep = desired_endpoints(svc(), pods)
    assert ep["metadata"] == {"name": "s", "namespace": "d", "labels": {"team": "a"}}
    first, second = ep["subsets"]
    assert first["ports"] == [{"name": "web", "port": 8080, "protocol": "TCP"}]
    assert [a["ip"] for a in first["addresses"]] == ["127.1.0.2"]
    assert [a["ip"] for a in first["notReadyAddresses"]] == ["127.1.0.1"]
    assert first["addresses"][0] == {
        "ip": "127.1.0.2",
        "nodeName": "c1-node",
        "targetRef": {"kind": "Pod", "namespace": "d", "name": "b", "uid": "u-b"},
    }
    assert second["ports"][0]["port"] == 9090 and [a["ip"] for a in second["addresses"]] == ["127.1.0.3"]


def test_publish_not_ready_headless_and_empty() -> None:
    ep = desired_endpoints(
        svc(publishNotReadyAddresses=True, clusterIP="None"), [pod("a", "127.1.0.1", ready=False)]
    )
    assert [a["ip"] for a in ep["subsets"][0]["addresses"]] == ["127.1.0.1"]
    assert "notReadyAddresses" not in ep["subsets"][0]
    assert ep["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
    assert "subsets" not in desired_endpoints(svc(), [])
