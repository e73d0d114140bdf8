"""How a kubelet ends a Pod that is being deleted, in the order its clients need.

A deleted Pod keeps running for its grace period (``deletionGracePeriodSeconds``, from
``terminationGracePeriodSeconds``). In that time, as on a real cluster:

1. the EndpointSlice controller marks its endpoints ``ready: false, terminating: true`` (serving
   as before), so the consumers (kube-proxy here: the VIP proxy, the pools behind it, discovery)
   stop sending it new connections. kube-lite's kubelet waits until its own slices say so before
   it signals anything: it runs the EndpointSlice controller too, so nothing reaches a Pod that
   is already going away;
2. each container's ``lifecycle.preStop`` hook runs (``sleep``, ``httpGet``, ``exec``), within
   the grace period, a failure being a ``FailedPreStopHook`` Event;
3. SIGTERM, then SIGKILL once the grace period is over (at least 2 s after the hooks, as the
   kubelet gives);
4. once nothing runs, the Pod object is removed (grace 0) and its address released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.local.kubelite.probes import ProbeResult, probe_once

__all__ = ["MIN_KILL_GRACE", "endpoints_withdrawn", "grace_seconds", "pre_stop"]

MIN_KILL_GRACE = 2.0
"""The kubelet's minimumGracePeriodInSeconds: what SIGTERM gets when the hooks used up the rest."""


def grace_seconds(pod: Mapping[str, Any]) -> float:
    """The grace period of a Pod being deleted (the deletion's, else the spec's, else 30)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    g = meta.get("deletionGracePeriodSeconds")
    if g is None:
        g = spec.get("terminationGracePeriodSeconds")
    return 30.0 if g is None else float(g)


def endpoints_withdrawn(slices: Iterable[EndpointSlice], uid: str) -> bool:
    """Whether no EndpointSlice lists the Pod (by uid) as a ready endpoint any more (a condition
    left unset reads as ready, as kube's consumers read it). An endpoint marked terminating has been
    seen going: a Service with publishNotReadyAddresses keeps it ready on purpose (kube's rule), and
    waiting for that to change would hold SIGTERM back for the whole grace period."""
    for s in slices:
        for ep in s.endpoints or []:
            ref = ep.targetRef
            if ref is None or ref.uid != uid:
                continue
            conditions = ep.conditions
            if conditions is None or (conditions.ready is not False and not conditions.terminating):
                return False
    return True


async def pre_stop(
    hook: Mapping[str, Any], *, host: str, container: Mapping[str, Any], env: Mapping[str, str],
    cwd: str | None, seconds: float, **probe_options: Any,
) -> ProbeResult:
    """Run one container's preStop handler, for at most ``seconds``; ``probe_options``: probe_once's
    (where httpGet connects from, how exec runs in runc mode)."""
    seconds = max(seconds, 0.0)
    sleep = hook.get("sleep")
    if sleep is not None:
        await asyncio.sleep(min(float(sleep.get("seconds") or 0), seconds))
        return ProbeResult(True)
    if not (hook.get("httpGet") or hook.get("exec") or hook.get("tcpSocket")):
        return ProbeResult(False, "unsupported preStop handler (kube-lite runs sleep, httpGet and exec)")
    # The handlers are a probe's, bounded by what is left of the grace period rather than timeoutSeconds.
    return await probe_once({**hook, "timeoutSeconds": max(seconds, 0.001)}, host=host, container=container,
                            env=env, cwd=cwd, **probe_options)
