"""The `status -o json` document, assembled from one reader per part (see the package docstring):
the plan, every part's state (probed now), membership and heartbeats as the broker has them, and
every reason the clusterset is not ready."""

from __future__ import annotations

from typing import Any

from isthmus.local import plan
from isthmus.local.endpoints import ui_url
from isthmus.local.plan import APISERVER, BROKER, PartId
from isthmus.local.state import (
    PHASE_FAILED,
    PHASE_RUNNING,
    PHASE_STARTING,
    PHASE_STOPPED,
    Layout,
    StateError,
    load_state,
)
from isthmus.local.status.addresses import (
    broker_endpoints,
    broker_node,
    cluster_endpoints,
    cluster_node,
    cluster_nodes,
    network_fields,
)
from isthmus.local.status.health import HEALTH_STANDBY, PHASE_UNSUPERVISED
from isthmus.local.status.members import read_membership
from isthmus.local.status.parts import read_parts
from isthmus.local.status.pods import pod_detail, pod_health, pod_problem, read_pods
from isthmus.local.supervisor import running_supervisor

__all__ = ["collect_status"]


async def collect_status(layout: Layout) -> dict[str, Any]:
    """The `status -o json` document: the plan, every part's state (probed now), membership and
    heartbeats as the broker has them, and every reason the clusterset is not ready."""
    state = load_state(layout)
    if state is None:
        raise FileNotFoundError(str(layout.state_file))
    ui_part = PartId(BROKER, plan.UI)
    missing = [n for n in plan.port_names(state.clusters, state.runtime, state.nodes) if n not in state.ports and n != ui_part.name]
    if missing:
        raise StateError(f"{layout.state_file} is damaged: ports.{missing[0]} is missing; fix or restore that "
                         f"value (`isthmus up --state-dir {layout.root}` picks missing ports)")
    sup_pid = running_supervisor(layout)
    # A new supervisor holds the PID file a moment before it claims state.json: until then the
    # phase there is its crashed predecessor's (maybe `running`), not this one's.
    sup_phase = PHASE_STARTING if state.supervisor_pid not in (None, sup_pid) else state.phase
    supervised = bool(sup_pid)
    sp = await read_parts(layout, state, sup_pid)
    broker_part = PartId(BROKER, APISERVER)
    membership = await read_membership(layout, sp.ready[broker_part.name])
    problems: list[str] = []
    cluster_plans = plan.address_plan(state.clusters, state.runtime)
    broker_plan = plan.broker_plan(state.runtime)
    broker_supervised = plan.broker_supervised_kinds(state.runtime)
    pod_parts = await read_pods(layout, [broker_plan, *cluster_plans], sp.ready)

    if not sup_pid:
        problems.append("the supervisor is not running")
    elif sup_phase != PHASE_RUNNING:
        problems.append(f"phase is {sup_phase}, not {PHASE_RUNNING}")
    broker_pods = pod_parts[BROKER]
    ui_standby = ui_part.name in sp.ready and sp.health(ui_part) == HEALTH_STANDBY
    broker_parts = [PartId(BROKER, kind) for kind in broker_supervised
                    if PartId(BROKER, kind).name in sp.ready]
    problems += [pp for p in broker_parts if (pp := sp.problem(p)) is not None]
    problems += [pp for kind, part in broker_pods.items()
                 if (pp := pod_problem(broker_plan, kind, part, supervised)) is not None]
    clusters = []
    for cp in cluster_plans:
        mine = [p for p in sp.parts if p.cluster == cp.name]
        pods = pod_parts[cp.name]
        mine_problems = [pp for p in mine if (pp := sp.problem(p)) is not None]
        mine_problems += [pp for kind, part in pods.items() if (pp := pod_problem(cp, kind, part, supervised)) is not None]
        if (pp := membership.problem(cp.name, cp.name in state.joined)) is not None:
            mine_problems.append(pp)
        problems += mine_problems
        clusters.append({
            **cluster_endpoints(layout, state, cp),
            **membership.fields(cp.name),
            **cluster_node(cp),
            "ready": not mine_problems,
            "restarts": sp.restarts(mine) + sum(part.restarts for part in pods.values()),
            "problems": mine_problems,
            "nodes": [{**node, "health": sp.health(PartId(cp.name, plan.KUBE_LITE, k))}
                      for k, node in enumerate(cluster_nodes(state, cp), start=1)],
            "parts": {kind: sp.health(PartId(cp.name, kind)) if kind in plan.SUPERVISED_KINDS
                      else pod_health(pods[kind], supervised) for kind in plan.CLUSTER_PART_KINDS},
            "processes": {kind: sp.detail(PartId(cp.name, kind)) if kind in plan.SUPERVISED_KINDS
                          else pod_detail(cp, kind, pods[kind]) for kind in plan.CLUSTER_PART_KINDS},
        })
    if sup_pid:
        phase = sup_phase
    elif any(sp.alive.values()):
        phase = PHASE_UNSUPERVISED  # the supervisor crashed: nothing restarts parts; `down` stops them
    else:
        phase = PHASE_FAILED if state.phase == PHASE_FAILED else PHASE_STOPPED
        # Nothing runs: one reason, not one per part.
        problems = [f"the last `isthmus up` failed: {state.error}" if phase == PHASE_FAILED and state.error
                    else f"nothing runs (`isthmus up --state-dir {layout.root}` starts it)"]
    broker_kinds = [kind for kind in plan.broker_part_kinds(state.runtime)
                    if kind not in broker_supervised or PartId(BROKER, kind).name in sp.ready]
    return {
        "ready": not problems,
        "phase": phase,
        "error": state.error,
        "problems": problems,
        "stateDir": str(layout.root),
        "runtime": state.runtime,
        "nodes": state.nodes,
        **network_fields(layout, state),
        "kubeconfig": str(layout.kubeconfig),
        "supervisor": {"pid": sup_pid, "running": sup_pid is not None, "log": str(layout.log("supervisor"))},
        "broker": {
            **broker_endpoints(layout, state),
            "ready": sp.ready[broker_part.name],
            "reachable": membership.members is not None,
            "reachError": membership.error,
            "restarts": sp.restarts(broker_parts) + sum(part.restarts for part in broker_pods.values()),
            **broker_node(state, broker_plan),
            "parts": {kind: sp.health(PartId(BROKER, kind)) if kind in broker_supervised
                      else pod_health(broker_pods[kind], supervised) for kind in broker_kinds},
            "processes": {kind: sp.detail(PartId(BROKER, kind)) if kind in broker_supervised
                          else pod_detail(broker_plan, kind, broker_pods[kind]) for kind in broker_kinds},
        },
        # Standby is ready: the first request starts it (and waits for it).
        "ui": {"url": ui_url(state), "ready": sp.ready.get(ui_part.name, False) or ui_standby, "standby": ui_standby},
        "clusters": clusters,
    }
