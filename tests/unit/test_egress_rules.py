"""The operator's plan: who is admitted as a source (every pod of the Service, ready or not) and what
status counts (its ready pods)."""

from __future__ import annotations

from isthmus.api.egress import ExternalService, SourceIPClaim
from isthmus.egress.rules import ServiceView, plan


def _es() -> ExternalService:
    return ExternalService.from_dict({
        "apiVersion": "egress.isthmus.io/v1alpha1", "kind": "ExternalService",
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": {"targetIP": "127.48.0.9", "sources": [{"service": {"name": "api"}, "sourceIPClaimName": "api-ip"}],
                 "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}})


def _claim() -> SourceIPClaim:
    return SourceIPClaim.from_dict({
        "apiVersion": "egress.isthmus.io/v1alpha1", "kind": "SourceIPClaim",
        "metadata": {"name": "api-ip", "namespace": "shop"},
        "spec": {"sourceIPClassName": "c"}, "status": {"phase": "Bound", "sourceIP": "127.48.1.1"}})


def test_a_starting_or_draining_pod_of_the_source_is_admitted_and_status_counts_the_ready_ones() -> None:
    # 10.0.0.1 ready, 10.0.0.2 starting (not ready yet), 10.0.0.3 terminating: all three are the Service's pods.
    view = ServiceView(cluster_ip="10.96.0.5", ports=(("TCP", 80),), ready_ips=("10.0.0.1",),
                       pod_ips=("10.0.0.1", "10.0.0.2", "10.0.0.3"))
    p = plan(_es(), {"api-ip": _claim()}, {"shop/api": view}, forwarder_ips=["10.0.1.1", "10.0.1.2"],
             forwarder_address="10.0.1.1:7080", gateway_address="10.0.2.1:7081", gateway_ips=["10.0.2.1"])
    assert not p.problems
    [fwd_rule] = p.forwarder.egress_rules
    [gw_rule] = p.gateway.egress_rules
    assert fwd_rule.client_ips == gw_rule.client_ips == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert gw_rule.forwarder_ips == ["10.0.1.1", "10.0.1.2"]
    assert [s.endpoints for s in p.sources] == [1]


def test_a_service_without_pods_admits_nobody() -> None:
    view = ServiceView(cluster_ip="10.96.0.5", ports=(("TCP", 80),), ready_ips=())
    p = plan(_es(), {"api-ip": _claim()}, {"shop/api": view}, forwarder_ips=[], forwarder_address=None,
             gateway_address=None, gateway_ips=[])
    assert [r.client_ips for r in p.forwarder.egress_rules] == [[]]
