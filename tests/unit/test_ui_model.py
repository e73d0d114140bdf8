"""The web view's model: objects per cluster → the page's sections, health, and deltas."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from isthmus.api.mcs import (
    HEARTBEAT_ANNOTATION,
    KUBE_SERVICE_NAME_LABEL,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
)
from isthmus.ui.kinds import BROKER_ROLE, MEMBER_ROLE
from isthmus.ui.model import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    UNREACHABLE,
    Store,
    apply_delta,
    build_view,
    cluster_health,
    diff,
    related_conditions,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def obj(kind: str, name: str, ns: str | None = None, **body: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **body.pop("metadata", {})}
    if ns:
        meta["namespace"] = ns
    return {"kind": kind, "metadata": meta, **body}


def cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def clusterset(heartbeat: datetime = NOW) -> Store:
    """A broker with c1 and c2 registered; both synced and reachable."""
    s = Store()
    s.add_cluster("broker", BROKER_ROLE, "https://127.0.0.1:1")
    for name in ("c1", "c2"):
        s.add_cluster(name, MEMBER_ROLE, f"https://127.0.0.1:{name[1]}")
        s.put("broker", "Cluster", obj("Cluster", name, "isthmus-broker",
                                       metadata={"annotations": {HEARTBEAT_ANNOTATION: _ts(heartbeat)}},
                                       spec={"clusterID": name, "clustersetIPCIDR": [f"127.24{name[1]}.0.0/16"]},
                                       status={"conditions": [cond("Ready", "True", "AgentRunning")]}))
    for conn in s.connections.values():
        conn.synced = True
    return s


def test_a_service_gathers_its_exporters_importers_vip_and_endpoints_per_source() -> None:
    s = clusterset()
    for c in ("c1", "c2"):
        s.put(c, "ServiceExport", obj("ServiceExport", "web", "shop",
                                      status={"conditions": [cond("Ready", "True", "Exported")]}))
    s.put("c2", "ServiceImport", obj("ServiceImport", "web", "shop",
                                     spec={"type": "ClusterSetIP", "ips": ["127.240.0.9"],
                                           "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                                     status={"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]}))
    mcs = {SERVICE_NAME_LABEL: "web"}
    s.put("c2", "EndpointSlice", obj("EndpointSlice", "web-c1", "shop",
                                     metadata={"labels": {**mcs, SOURCE_CLUSTER_LABEL: "c1"}},
                                     endpoints=[{"addresses": ["127.101.0.5"], "conditions": {"ready": True}},
                                                {"addresses": ["127.101.0.6"], "conditions": {"ready": False}}]))
    # kube's own slice of the local Service is not an import's endpoints
    s.put("c2", "EndpointSlice", obj("EndpointSlice", "web-kube", "shop",
                                     metadata={"labels": {**mcs, KUBE_SERVICE_NAME_LABEL: "web"}},
                                     endpoints=[{"addresses": ["127.102.0.9"]}]))
    svc = build_view(s)["services"]["shop/web"]
    assert sorted(svc["exporters"]) == ["c1", "c2"]
    assert list(svc["importers"]) == ["c2"]
    assert svc["vip"] == ["127.240.0.9"] and svc["ports"] == ["http:80/TCP"]
    assert svc["importers"]["c2"]["endpoints"] == {"c1": ["127.101.0.5"]}
    assert svc["importers"]["c2"]["ref"] == {"cluster": "c2", "kind": "ServiceImport", "namespace": "shop",
                                             "name": "web"}
    assert svc["conflicts"] == [] and svc["clusters"] == ["c1", "c2"]


def test_an_importer_carries_its_serviceimport_ready_condition() -> None:
    """The page shows each importer's Ready (mcs-api v1beta1), its reason when it is not True."""
    s = clusterset()
    s.put("c1", "ServiceImport", obj("ServiceImport", "web", "shop", spec={"type": "ClusterSetIP"},
                                     status={"conditions": [cond("Ready", "False", "IPFamilyNotSupported")]}))
    s.put("c2", "ServiceImport", obj("ServiceImport", "web", "shop", spec={"type": "ClusterSetIP"}))
    importers = build_view(s)["services"]["shop/web"]["importers"]
    assert (importers["c1"]["ready"]["status"], importers["c1"]["ready"]["reason"]) == ("False", "IPFamilyNotSupported")
    assert importers["c2"]["ready"] is None


def test_conflicts_are_the_condition_messages_of_every_exporter_in_conflict() -> None:
    s = clusterset()
    message = 'port "http" is TCP/80 in cluster c1 (oldest) but TCP/8080 in cluster c2'
    s.put("c1", "ServiceExport", obj("ServiceExport", "web", "shop",
                                     status={"conditions": [cond("Conflict", "False", "NoConflicts")]}))
    s.put("c2", "ServiceExport", obj("ServiceExport", "web", "shop",
                                     status={"conditions": [cond("Conflict", "True", "PortConflict", message),
                                                            cond("Valid", "False", "NoService", "no Service web")]}))
    svc = build_view(s)["services"]["shop/web"]
    assert svc["conflicts"] == [{"cluster": "c2", "reason": "PortConflict", "message": message}]
    assert svc["exporters"]["c2"]["problems"] == [f"conflict: {message}", "not valid: no Service web"]
    assert svc["exporters"]["c1"]["problems"] == []


def test_a_cluster_is_healthy_until_its_heartbeat_is_stale() -> None:
    c1 = build_view(clusterset(heartbeat=NOW - timedelta(seconds=5)))["clusters"]["c1"]
    assert c1["joined"] and c1["cidrs"] == ["127.241.0.0/16"] and c1["problems"] == []
    assert cluster_health(c1, NOW) == HEALTHY
    assert cluster_health(c1, NOW + timedelta(seconds=40)) == UNHEALTHY
    never = clusterset()
    never.put("broker", "Cluster", obj("Cluster", "c1", "isthmus-broker", spec={"clusterID": "c1"}))
    assert cluster_health(build_view(never)["clusters"]["c1"], NOW) == UNHEALTHY


def test_a_cluster_whose_api_cannot_be_reached_is_unreachable_with_the_error() -> None:
    s = clusterset()
    s.connections["c2"].error = "cannot reach https://127.0.0.1:2: ConnectionRefusedError"
    c2 = build_view(s)["clusters"]["c2"]
    assert cluster_health(c2, NOW) == UNREACHABLE
    assert c2["error"].startswith("cannot reach")
    s.connections["c2"].error = None
    s.connections["c2"].synced = False
    assert cluster_health(build_view(s)["clusters"]["c2"], NOW) == UNKNOWN


def test_parts_not_ready_and_membership_problems_make_a_cluster_unhealthy() -> None:
    s = clusterset()
    s.put("c1", "Deployment", obj("Deployment", "isthmus-agent", "isthmus-system", spec={"replicas": 1},
                                  status={"readyReplicas": 1}))
    s.put("c1", "Deployment", obj("Deployment", "isthmus-dns", "isthmus-system", spec={"replicas": 2},
                                  status={"readyReplicas": 1}))
    s.put("c1", "Pod", obj("Pod", "isthmus-dns-5d8f7-abcde", "isthmus-system",
                           status={"containerStatuses": [{"restartCount": 3}]}))
    s.add_cluster("c3", MEMBER_ROLE)
    s.connections["c3"].synced = True
    view = build_view(s)["clusters"]
    dns = next(p for p in view["c1"]["parts"] if p["name"] == "isthmus-dns")
    assert (dns["ready"], dns["replicas"], dns["ok"], dns["restarts"]) == (1, 2, False, 3)
    assert view["c1"]["problems"] == ["isthmus-dns: 1/2 ready"]
    assert cluster_health(view["c1"], NOW) == UNHEALTHY
    assert view["c3"]["joined"] is False
    assert view["c3"]["problems"] == ["not registered on the broker (not joined, or left)"]
    assert cluster_health(view["broker"], NOW) == HEALTHY  # the broker has no heartbeat of its own


def test_exposure_pools_and_egress_items() -> None:
    s = clusterset()
    s.put("broker", "MultiClusterService", obj(
        "MultiClusterService", "cart", "shop",
        spec={"types": ["LoadBalancer"], "providerClusters": [{"name": "c1"}, {"name": "c2"}]},
        status={"loadBalancer": {"ingress": [{"ip": "127.30.0.1"}]}, "conditions": [cond("Ready", "True")]}))
    s.put("c1", "LoadBalancerPool", obj(
        "LoadBalancerPool", "p1",
        spec={"role": "slave_public", "haproxy": {
            "stats": {"bindPort": 9000},
            "frontends": [{"name": "f", "bindPort": 80, "protocol": "TCP", "linkBackend": {"defaultBackend": "b"}}],
            "backends": [{"name": "b", "servers": [{"address": "127.101.0.5", "port": 8080}]}]}},
        status={"ready": "1/1", "frontends": [{"name": "f", "port": 80, "publicAddresses": ["127.30.1.1"]}],
                "instances": [{"slot": 0, "state": "Running", "pid": 42}]}))
    s.put("c1", "SourceIPClaim", obj("SourceIPClaim", "ip", "shop", spec={"sourceIPClassName": "cls"},
                                     status={"phase": "Bound", "sourceIP": "127.32.1.1"}))
    s.put("c1", "ExternalService", obj(
        "ExternalService", "db", "shop", spec={"targetIP": "127.33.0.1", "ports": [{"port": 7000}]},
        status={"sourceIPs": "127.32.1.1", "conditions": [cond("Ready", "True")],
                "sources": [{"service": "shop/web", "sourceIP": "127.32.1.1", "endpoints": 2}]}))
    view = build_view(s)
    mcs = view["mcs"]["broker/shop/cart"]
    assert (mcs["providers"], mcs["consumers"], mcs["address"]) == ("c1, c2", "all", "127.30.0.1")
    pool = view["pools"]["c1/p1"]
    assert pool["frontends"] == [{"name": "f", "port": 80, "protocol": "TCP", "backend": "b",
                                  "addresses": ["127.30.1.1"]}]
    assert pool["backends"][0]["servers"] == ["127.101.0.5:8080"] and pool["statsPort"] == 9000
    assert pool["instances"][0]["state"] == "Running" and pool["ref"]["namespace"] is None
    claim = view["egress"]["c1/SourceIPClaim/shop/ip"]
    assert (claim["state"], claim["sourceIP"]) == ("Bound", "127.32.1.1")
    es = view["egress"]["c1/ExternalService/shop/db"]
    assert es["state"] == "Ready True" and es["sources"][0]["endpoints"] == 2


def test_diff_sends_only_what_changed_and_rebuilds_the_new_view() -> None:
    s = clusterset()
    s.put("c1", "ServiceExport", obj("ServiceExport", "a", "ns"))
    s.put("c1", "ServiceExport", obj("ServiceExport", "b", "ns"))
    before = build_view(s)
    assert diff(before, build_view(s)) is None
    s.delete("c1", "ServiceExport", obj("ServiceExport", "a", "ns"))
    s.put("c2", "ServiceExport", obj("ServiceExport", "b", "ns"))
    s.put("c2", "MultiClusterService", obj("MultiClusterService", "m", "ns"))
    after = build_view(s)
    delta = diff(before, after)
    assert delta is not None
    assert delta["del"] == {"services": ["ns/a"]}
    assert set(delta["set"]) == {"services", "mcs"} and list(delta["set"]["services"]) == ["ns/b"]
    rebuilt = copy.deepcopy(before)
    apply_delta(rebuilt, delta)
    assert rebuilt == after


def test_without_a_broker_heartbeats_are_unknown_not_missing() -> None:
    s = Store()
    s.add_cluster("c1", MEMBER_ROLE)
    s.connections["c1"].synced = True
    c1 = build_view(s)["clusters"]["c1"]
    assert c1["brokerWatched"] is False and c1["problems"] == []
    assert cluster_health(c1, NOW) == HEALTHY


def test_a_registered_cluster_without_a_context_is_shown_from_the_brokers_view() -> None:
    s = clusterset()
    s.put("broker", "Cluster", obj("Cluster", "c9", "isthmus-broker",
                                   metadata={"annotations": {HEARTBEAT_ANNOTATION: _ts(NOW)}},
                                   spec={"clusterID": "c9"}))
    c9 = build_view(s)["clusters"]["c9"]
    assert c9["watched"] is False and c9["joined"] is True and c9["problems"] == []
    assert cluster_health(c9, NOW) == HEALTHY


def _web_in_conflict() -> tuple[Store, str]:
    """What the agents write: every exporter of web in conflict (and still Ready: it is served)."""
    s = clusterset()
    message = 'port "http" is TCP/80 in cluster c1 (oldest) but TCP/8080 in cluster c2'
    for c in ("c1", "c2"):
        s.put(c, "ServiceExport", obj("ServiceExport", "web", "shop", status={"conditions": [
            cond("Valid", "True", "Valid"), cond("Ready", "True", "Exported"),
            cond("Conflict", "True", "PortConflict", message)]}))
        s.put(c, "ServiceImport", obj("ServiceImport", "web", "shop", spec={"type": "ClusterSetIP"}))
    s.put("c1", "ServiceExport", obj("ServiceExport", "ok", "shop",
                                     status={"conditions": [cond("Ready", "True", "Exported")]}))
    s.put("c2", "ServiceImport", obj("ServiceImport", "ok", "shop", spec={"type": "ClusterSetIP"}))
    return s, message


def test_an_exporter_in_conflict_wears_a_red_conflict_badge_not_a_green_ready() -> None:
    s, message = _web_in_conflict()
    services = build_view(s)["services"]
    for c in ("c1", "c2"):
        assert services["shop/web"]["exporters"][c]["badge"] == {
            "text": "Conflict (PortConflict)", "level": "bad", "title": message}
    assert services["shop/ok"]["exporters"]["c1"]["badge"] == {"text": "Ready True", "level": "ok", "title": "Exported"}
    s.put("c1", "ServiceExport", obj("ServiceExport", "ok", "shop", status={"conditions": [
        cond("Valid", "False", "NoService", "no Service ok"), cond("Ready", "False", "Invalid")]}))
    assert build_view(s)["services"]["shop/ok"]["exporters"]["c1"]["badge"]["text"] == "Invalid"


def test_clicking_a_conflicted_service_opens_an_export_in_conflict_and_an_import_shows_its_exports() -> None:
    s, message = _web_in_conflict()
    services = build_view(s)["services"]
    assert services["shop/web"]["ref"] == {"cluster": "c1", "kind": "ServiceExport", "namespace": "shop",
                                           "name": "web"}
    assert services["shop/ok"]["ref"]["kind"] == "ServiceImport"  # nothing wrong: where it is used
    # The import itself (opened from its importer's link) has no conditions: its exports' come along.
    related = related_conditions(s, "ServiceImport", "shop", "web")
    assert [(r["ref"]["cluster"], r["badge"]["text"]) for r in related] == [("c1", "Conflict (PortConflict)"),
                                                                          ("c2", "Conflict (PortConflict)")]
    assert {"type": "Conflict", "status": "True", "reason": "PortConflict", "message": message}.items() <= \
        related[1]["conditions"][2].items()
    assert related_conditions(s, "ServiceExport", "shop", "web") == []


def test_pools_show_dklbs_role_in_words_with_the_raw_role_beside() -> None:
    s = clusterset()
    for name, role in (("pub", "slave_public"), ("priv", "*"), ("dflt", None)):
        s.put("c1", "LoadBalancerPool", obj("LoadBalancerPool", name, spec={"role": role} if role else {}))
    pools = build_view(s)["pools"]
    assert (pools["c1/pub"]["role"], pools["c1/pub"]["roleRaw"]) == ("public", "slave_public")
    assert (pools["c1/priv"]["role"], pools["c1/priv"]["roleRaw"]) == ("private", "*")
    assert pools["c1/dflt"]["role"] == "public"  # the CRD's default role


def test_every_egress_row_has_a_state_badge() -> None:
    s = clusterset()
    s.put("c1", "SourceIPClass", obj("SourceIPClass", "lab", status={"allocated": 1, "capacity": 4, "conditions": [
        cond("Ready", "False", "RangesOverlap", "spec.ranges[0] shares 127.32.9.3-127.32.9.4 with 'old'")]}))
    s.put("c1", "SourceIPClaim", obj("SourceIPClaim", "a", "shop", status={"phase": "Bound"}))
    s.put("c1", "SourceIPClaim", obj("SourceIPClaim", "b", "shop", status={"phase": "Pending", "conditions": [
        cond("Ready", "False", "ClassExhausted", "no free address")]}))
    s.put("c1", "SourceIPClaim", obj("SourceIPClaim", "new", "shop"))
    s.put("c1", "SourceIP", obj("SourceIP", "127.32.9.1", status={"phase": "Released"}))
    s.put("c1", "ExternalService", obj("ExternalService", "db", "shop", status={"conditions": [
        cond("Ready", "False", "GatewayNotReady", "no gateway leads")]}))
    s.put("c1", "ExternalService", obj("ExternalService", "up", "shop", status={"conditions": [cond("Ready", "True")]}))
    s.put("c1", "Gateway", obj("Gateway", "shop-db", "isthmus-system", status={"holder": "gw-1"}))
    egress = build_view(s)["egress"]
    badges = {k.split("/", 1)[1]: (v["badge"]["text"], v["badge"]["level"]) for k, v in egress.items()}
    assert badges == {
        "SourceIPClass/lab": ("RangesOverlap", "bad"),
        "SourceIPClaim/shop/a": ("Bound", "ok"),
        "SourceIPClaim/shop/b": ("Pending", "warn"),
        "SourceIPClaim/shop/new": ("Pending", ""),
        "SourceIP/127.32.9.1": ("Released", "warn"),
        "ExternalService/shop/db": ("GatewayNotReady", "bad"),
        "ExternalService/shop/up": ("Ready", "ok"),
        "Gateway/isthmus-system/shop-db": ("held", "ok"),
    }
    assert egress["c1/SourceIPClaim/shop/b"]["badge"]["title"] == "no free address"
