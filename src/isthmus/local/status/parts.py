"""The supervised parts (every cluster's apiserver and kube-lite, the broker's, the web view):
which are alive and provably ours, which answer their readiness probe now, and what `status`
says of each (health, process detail, the problem it is)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from isthmus.local import plan
from isthmus.local.endpoints import ready_url
from isthmus.local.plan import PartId
from isthmus.local.state import Layout, PartState, State
from isthmus.local.status.health import (
    HEALTH_DOWN,
    HEALTH_FAILED,
    HEALTH_READY,
    HEALTH_RESTARTING,
    HEALTH_STANDBY,
    HEALTH_STARTING,
)
from isthmus.local.supervisor import is_ours, probe

__all__ = ["SupervisedParts", "read_parts"]


@dataclass(frozen=True)
class SupervisedParts:
    """The supervised parts as read now. `supervisor`: the running supervisor's pid, if any."""

    layout: Layout
    state: State
    supervisor: int | None
    parts: list[PartId]
    alive: dict[str, bool]
    ready: dict[str, bool]

    def _state(self, p: PartId) -> PartState:
        return self.state.parts.get(p.name, PartState())

    def health(self, p: PartId) -> str:
        st = self._state(p)
        if self.ready[p.name]:
            return HEALTH_READY
        if st.failed:
            return HEALTH_FAILED
        if st.standby and self.supervisor:
            return HEALTH_STANDBY
        if self.alive[p.name]:
            return HEALTH_STARTING
        if self.supervisor:
            return HEALTH_RESTARTING if st.last_exit is not None or st.last_error else HEALTH_STARTING
        return HEALTH_DOWN

    def detail(self, p: PartId) -> dict[str, Any]:
        st = self._state(p)
        return {"pid": st.pid if self.alive[p.name] else None, "restarts": st.restarts, "lastExit": st.last_exit,
                "lastError": st.last_error, "failed": st.failed,
                "log": str(self.layout.log(p.name)), "readyz": ready_url(self.state, p)}

    def problem(self, p: PartId) -> str | None:
        h = self.health(p)
        if h in (HEALTH_READY, HEALTH_STANDBY):
            return None
        st = self._state(p)
        said = f": {st.last_error}" if st.last_error and h in (HEALTH_FAILED, HEALTH_RESTARTING) else ""
        if h == HEALTH_FAILED:
            return f"{p.name} failed, not restarted{said}"
        return f"{p.name} {h}{said}"

    def restarts(self, parts: Iterable[PartId]) -> int:
        return sum(self._state(p).restarts for p in parts)


async def read_parts(layout: Layout, state: State, supervisor: int | None) -> SupervisedParts:
    """Every supervised part of the plan (those the state has ports for), probed now."""
    parts = [p for p in plan.parts(state.clusters, state.runtime, state.nodes) if plan.metrics_port_name(p) in state.ports]
    alive = {p.name: is_ours(state.parts.get(p.name, PartState()).pid, layout.root) for p in parts}
    async with aiohttp.ClientSession(trust_env=False) as session:
        probes = await asyncio.gather(*(
            probe(session, ready_url(state, p)) if alive[p.name] and p.name in state.parts else _false()
            for p in parts
        ))
    ready = {p.name: ok for p, ok in zip(parts, probes, strict=True)}
    return SupervisedParts(layout, state, supervisor, parts, alive, ready)


async def _false() -> bool:
    return False
