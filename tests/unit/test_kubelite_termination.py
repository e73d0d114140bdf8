"""The kubelet's order for a deleted Pod (termination.py): endpoints withdrawn first, preStop, grace."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.local.kubelite.termination import endpoints_withdrawn, grace_seconds, pre_stop


def _slice(*endpoints: tuple[str, bool | None]) -> EndpointSlice:
    eps: list[dict[str, Any]] = []
    for uid, ready in endpoints:
        ep: dict[str, Any] = {"addresses": ["127.101.0.9"], "targetRef": {"kind": "Pod", "name": uid, "uid": uid}}
        if ready is not None:
            ep["conditions"] = {"ready": ready, "serving": True, "terminating": not ready}
        eps.append(ep)
    return EndpointSlice.from_dict({"metadata": {"name": "web-abcde", "namespace": "d"}, "addressType": "IPv4",
                                    "endpoints": eps})


def test_a_pod_is_withdrawn_once_no_slice_calls_it_ready() -> None:
    assert not endpoints_withdrawn([_slice(("a", True), ("b", True))], "a")
    assert not endpoints_withdrawn([_slice(("b", False)), _slice(("a", None))], "a")  # unset reads as ready
    assert endpoints_withdrawn([_slice(("a", False), ("b", True))], "a")  # terminating: withdrawn
    assert endpoints_withdrawn([_slice(("b", True))], "a")  # gone from every slice
    assert endpoints_withdrawn([], "a")


def test_a_publish_not_ready_service_s_terminating_endpoint_does_not_hold_sigterm_back() -> None:
    """publishNotReadyAddresses keeps a terminating endpoint ready (kube's rule: the pool manager's
    metrics Service): marked terminating, it has been seen going, so SIGTERM is not held for the grace."""
    published = _slice(("a", True))
    (ep,) = published.endpoints or []
    assert ep.conditions is not None
    ep.conditions.terminating = True
    assert endpoints_withdrawn([published], "a")
    assert not endpoints_withdrawn([published, _slice(("a", True))], "a")  # another slice still calls it ready


def test_the_grace_period_is_the_deletions_then_the_specs_then_30_seconds() -> None:
    assert grace_seconds({"metadata": {"deletionGracePeriodSeconds": 5},
                          "spec": {"terminationGracePeriodSeconds": 60}}) == 5
    assert grace_seconds({"metadata": {"deletionGracePeriodSeconds": 0}}) == 0
    assert grace_seconds({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 60}}) == 60
    assert grace_seconds({"metadata": {}, "spec": {}}) == 30


async def test_pre_stop_sleeps_within_what_is_left_of_the_grace_period() -> None:
    start = time.monotonic()
    assert (await pre_stop({"sleep": {"seconds": 60}}, host="127.0.0.1", container={}, env={}, cwd=None,
                           seconds=0.2)).ok
    assert time.monotonic() - start < 5


async def test_pre_stop_exec_runs_and_its_failure_is_reported() -> None:
    ok = await pre_stop({"exec": {"command": ["true"]}}, host="127.0.0.1", container={}, env={"PATH": "/usr/bin:/bin"},
                        cwd=None, seconds=10)
    assert ok.ok
    bad = await pre_stop({"exec": {"command": ["sh", "-c", "echo nope; exit 3"]}}, host="127.0.0.1", container={},
                         env={"PATH": "/usr/bin:/bin"}, cwd=None, seconds=10)
    assert not bad.ok and bad.message == "nope"
    late = await asyncio.wait_for(pre_stop({"exec": {"command": ["sleep", "30"]}}, host="127.0.0.1", container={},
                                           env={"PATH": "/usr/bin:/bin"}, cwd=None, seconds=0.3), 10)
    assert not late.ok and "timed out" in late.message
    assert not (await pre_stop({"grpc": {"port": 1}}, host="127.0.0.1", container={}, env={}, cwd=None,
                               seconds=1)).ok
