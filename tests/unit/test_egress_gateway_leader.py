"""The gateway's leader label: the patch it writes, the stale leaders it clears, and readiness
meaning healthy (a standby is ready; a leader once programmed)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from isthmus.api.egress import GATEWAY_LEADER_LABEL, POD_DELETION_COST
from isthmus.egress.gateway import GatewayRuntime, is_marked_leader, leader_patch, stale_leaders
from isthmus.runtime import SharedInformerFactory


def _pod(name: str, app: str = "isthmus-egress-gateway", *, leader: bool = False, cost: str | None = None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": app}
    if leader:
        labels[GATEWAY_LEADER_LABEL] = "true"
    return {"metadata": {"name": name, "labels": labels,
                         "annotations": {POD_DELETION_COST: cost} if cost is not None else {}}}


def test_the_leader_patch_sets_or_removes_the_label_and_the_deletion_cost() -> None:
    assert leader_patch(True) == {"metadata": {"labels": {GATEWAY_LEADER_LABEL: "true"},
                                               "annotations": {POD_DELETION_COST: "1"}}}
    assert leader_patch(False) == {"metadata": {"labels": {GATEWAY_LEADER_LABEL: None},
                                                "annotations": {POD_DELETION_COST: None}}}


def test_stale_leaders_are_the_other_gateway_pods_still_marked() -> None:
    pods = [_pod("me", leader=True, cost="1"), _pod("old", leader=True), _pod("half", cost="1"),
            _pod("standby"), _pod("agent", app="isthmus-agent", leader=True), _pod("user-cost", cost="50")]
    assert stale_leaders(pods, "me") == ["half", "old"]


def test_a_pod_is_marked_leader_with_both_the_label_and_the_cost() -> None:
    assert is_marked_leader(_pod("me", leader=True, cost="1"))
    assert not is_marked_leader(_pod("me", leader=True))  # a user removed the cost: written again
    assert not is_marked_leader(_pod("me", cost="1"))


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> GatewayRuntime:
    monkeypatch.setattr(SharedInformerFactory, "synced", property(lambda _self: True))
    gw = GatewayRuntime(client=object(), namespace="isthmus-system", identity="g", relay_ip="127.0.0.1")  # type: ignore[arg-type]
    gw.elector.last_contact = time.monotonic()
    return gw


def test_a_standby_that_reaches_the_apiserver_is_ready(gateway: GatewayRuntime) -> None:
    assert not gateway.leading and gateway.ready


def test_a_leader_is_ready_once_programmed(gateway: GatewayRuntime) -> None:
    gateway.elector._set_leader(True)
    assert not gateway.ready
    gateway.programmed = True
    assert gateway.ready


def test_a_replica_the_apiserver_has_not_answered_for_a_lease_duration_is_not_ready(gateway: GatewayRuntime) -> None:
    gateway.elector.last_contact = time.monotonic() - gateway.lease_duration - 1
    assert not gateway.ready
    gateway.elector.last_contact = None
    assert not gateway.ready


def test_a_replica_with_unsynced_caches_is_not_ready(gateway: GatewayRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SharedInformerFactory, "synced", property(lambda _self: False))
    assert not gateway.ready
