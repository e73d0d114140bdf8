"""EndpointSlice building: selection, port resolution, conditions, hostnames, grouping and names."""

from __future__ import annotations

from typing import Any

from isthmus.local.kubelite.endpointslices import (
    desired_slices,
    pod_endpoint,
    resolve_ports,
    safe_encode,
    selector_matches,
    slice_name,
    slices_equal,
)


def service(**spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"app": "web"})
    spec.setdefault("ports", [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}])
    return {
        "metadata": {"name": "web", "namespace": "d", "uid": "svc-uid", "labels": {"team": "a"}},
        "spec": spec,
    }


def pod(
    name: str, ip: str | None = "127.101.0.2", *, ready: bool = True, port: int = 8080, **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "d", "uid": f"uid-{name}", "labels": {"app": "web"}}
    meta.update(extra.pop("meta", {}))
    spec: dict[str, Any] = {
        "nodeName": "c1-node",
        "containers": [{"name": "c", "ports": [{"name": "web", "containerPort": port}]}],
    }
    spec.update(extra)
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": spec, "status": status}


def test_selector() -> None:
    assert selector_matches({"a": "1"}, {"a": "1", "b": "2"})
    assert not selector_matches({"a": "1", "c": "3"}, {"a": "1"})
    assert not selector_matches({}, {"a": "1"}) and not selector_matches(None, {})


def test_resolve_named_numbered_and_missing_ports() -> None:
    svc = service(
        ports=[
            {"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
            {"name": "num", "port": 81, "targetPort": 9090, "protocol": "TCP"},
            {"name": "udp", "port": 53, "targetPort": "web", "protocol": "UDP"},  # name exists, protocol not
            {"name": "none", "port": 82, "targetPort": "nope"},
            {"name": "dflt", "port": 83},
        ]
    )
    assert resolve_ports(svc, pod("a")) == (
        ("dflt", 83, "TCP", None),
        ("http", 8080, "TCP", None),
        ("num", 9090, "TCP", None),
    )


def test_endpoint_conditions_and_hostname() -> None:
    ep = pod_endpoint(service(), pod("a", hostname="a", subdomain="web"))
    assert ep == {
        "addresses": ["127.101.0.2"],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "hostname": "a",
        "nodeName": "c1-node",
        "targetRef": {"kind": "Pod", "name": "a", "namespace": "d", "uid": "uid-a"},
    }
    assert "hostname" not in (pod_endpoint(service(), pod("a", hostname="a", subdomain="other")) or {})
    not_ready = pod_endpoint(service(), pod("b", ready=False))
    assert not_ready is not None and not_ready["conditions"] == {
        "ready": False,
        "serving": False,
        "terminating": False,
    }
    published = pod_endpoint(service(publishNotReadyAddresses=True), pod("b", ready=False))
    assert published is not None and published["conditions"]["ready"] is True
    term = pod_endpoint(service(), pod("c", meta={"deletionTimestamp": "2024-01-01T00:00:00Z"}))
    assert term is not None and term["conditions"] == {"ready": False, "serving": True, "terminating": True}
    assert pod_endpoint(service(), pod("d", ip=None)) is None
    done = pod("e")
    done["status"]["phase"] = "Succeeded"
    assert pod_endpoint(service(), done) is None


def test_slices_grouped_by_port_set_with_stable_names() -> None:
    pods = [
        pod("a", "127.101.0.2"),
        pod("b", "127.101.0.3", port=9000),
        pod("c", "127.101.0.4"),
        pod("x", None),
    ]
    other = pod("z", "127.101.0.9")
    other["metadata"]["labels"] = {"app": "other"}
    slices = desired_slices(service(), [*pods, other])
    assert len(slices) == 2
    by_port = {s["ports"][0]["port"]: s for s in slices}
    assert [e["addresses"][0] for e in by_port[8080]["endpoints"]] == ["127.101.0.2", "127.101.0.4"]
    assert [e["targetRef"]["name"] for e in by_port[9000]["endpoints"]] == ["b"]
    s = by_port[8080]
    assert s["metadata"]["name"] == slice_name("web", [("http", 8080, "TCP", None)])
    assert s["metadata"]["labels"] == {
        "team": "a",
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    owner = s["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Service" and owner["uid"] == "svc-uid" and owner["controller"] is True
    assert s["addressType"] == "IPv4" and s["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert desired_slices(service(), list(reversed(pods))) == slices  # order-independent


def test_empty_service_gets_placeholder_and_headless_label() -> None:
    slices = desired_slices(service(clusterIP="None"), [])
    assert len(slices) == 1 and slices[0]["endpoints"] == [] and slices[0]["ports"] == []
    assert slices[0]["metadata"]["labels"]["service.kubernetes.io/headless"] == ""


def test_chunks_of_100() -> None:
    pods = [pod(f"p{i:03}", f"127.101.{i // 200}.{i % 200 + 1}") for i in range(250)]
    slices = desired_slices(service(), pods)
    assert [len(s["endpoints"]) for s in slices] == [100, 100, 50]
    assert len({s["metadata"]["name"] for s in slices}) == 3


def test_names() -> None:
    name = slice_name("web", [("http", 80, "TCP", None)])
    assert name.startswith("web-") and len(name) == 9
    assert name == slice_name("web", [("http", 80, "TCP", None)])
    assert name != slice_name("web", [("http", 81, "TCP", None)])
    assert all(ch in "bcdfghjklmnpqrstvwxz2456789" for ch in safe_encode(b"x", 20))


def test_slices_equal_ignores_server_fields() -> None:
    want = desired_slices(service(), [pod("a")])[0]
    stored = {
        **want,
        "metadata": {**want["metadata"], "resourceVersion": "7", "uid": "u", "creationTimestamp": "t"},
    }
    assert slices_equal(want, stored)
    changed = desired_slices(service(), [pod("a", ready=False)])[0]
    assert not slices_equal(changed, stored)
