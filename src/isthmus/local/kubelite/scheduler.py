"""Pods → Nodes: kube-scheduler v1.32's default profile in miniature.

A Pod with no ``spec.nodeName``, for ``default-scheduler`` (or no scheduler named) and without
schedulingGates, goes through kube's filters in kube's order — NodeUnschedulable, NodeName,
TaintToleration, NodeAffinity (nodeSelector and required node affinity), NodePorts,
NodeResourcesFit, PodTopologySpread, InterPodAffinity — then the Nodes left are scored as the
default profile weighs its plugins (TaintToleration 3, NodeAffinity 2, PodTopologySpread 2 with
kube's system default spreading for Pods of one controller, InterPodAffinity 2, NodeResourcesFit's
LeastAllocated 1, NodeResourcesBalancedAllocation 1), ties broken at random, and the Pod is bound
through the ``pods/binding`` subresource with the ``Scheduled`` Event. A Pod that fits nowhere gets
``PodScheduled=False`` reason ``Unschedulable`` and a ``FailedScheduling`` Warning with kube's
message ("0/3 nodes are available: ... preemption: ...") and is tried again when a Node or a Pod
changes, and after a backoff of 1 s doubling to 10 s, as kube's scheduling queue does.

Everything a decision reads is a pure function of plain dicts (the Pod, the Nodes, the Pods bound
to them) so each filter and score is unit-tested alone; :class:`Scheduler` is the thin controller.
Pods bound but not yet seen bound by the informer are remembered ("assumed", as kube's cache
does) so two Pods scheduled back to back see each other.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, Node, Pod, Service
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from isthmus.kube.helpers import is_not_found
from isthmus.local.kubelite.containers import ContainerConfigError, quantity
from isthmus.runtime import Controller, EventRecorder, Informer, Result, object_key, split_key

__all__ = [
    "DEFAULT_SCHEDULER",
    "SCHEDULER_COMPONENT",
    "FilterStatus",
    "NodeInfo",
    "Preemption",
    "Scheduler",
    "failure_message",
    "feasible",
    "filter_node",
    "node_matches_affinity",
    "pick",
    "preempt",
    "score_nodes",
    "select_victims",
    "tolerates",
    "wants_scheduling",
]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]

DEFAULT_SCHEDULER = "default-scheduler"
SCHEDULER_COMPONENT = "default-scheduler"
"""The Events' source, as kube-scheduler's default profile writes it."""

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

# kube's reasons, word for word (pkg/scheduler/framework/plugins/*).
ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_NODE_NAME = "node(s) didn't match the requested node name"
ERR_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
ERR_TOO_MANY_PODS = "Too many pods"
ERR_SPREAD = "node(s) didn't match pod topology spread constraints"
ERR_SPREAD_LABEL = ERR_SPREAD + " (missing required label)"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
NO_NODES = "no nodes available to schedule pods"
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_NEVER = "not eligible due to preemptionPolicy=Never."

# kube's non-zero defaults for a container without requests (scoring only, never fitting).
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
MAX_SCORE = 100

WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2, "InterPodAffinity": 2,
           "NodeResourcesFit": 1, "NodeResourcesBalancedAllocation": 1}
"""The default profile's score weights (ImageLocality is left out: every node has every image here)."""

# kube's system default spreading (PodTopologySpread's defaultingType System).
SYSTEM_DEFAULT_CONSTRAINTS = ((HOSTNAME, 3), (ZONE, 5))
SPREADING_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 10.0
ASSUMED_SECONDS = 30.0
"""How long a bound Pod counts as on its Node before the informer shows it (kube's assumed pod TTL)."""


# ---- labels, selectors, tolerations ---------------------------------------------------------------

def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _labels(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _name(obj: Obj) -> str:
    return str(_meta(obj).get("name") or "")


def _namespace(obj: Obj) -> str:
    return str(_meta(obj).get("namespace") or "default")


def label_selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector: None matches nothing (kube's labels.Nothing), {} everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = str(req.get("key")), req.get("operator"), list(req.get("values") or [])
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and key in labels and labels[key] in values):
            return False
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def _requirement_matches(expr: Obj, values: Mapping[str, str]) -> bool:
    """A NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""
    key, op, wanted = str(expr.get("key")), expr.get("operator"), list(expr.get("values") or [])
    present, value = key in values, values.get(key)
    if op == "In":
        return present and value in wanted
    if op == "NotIn":
        return not present or value not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, bound = int(str(value)), int(wanted[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _selector_term_matches(term: Obj, node: Obj) -> bool:
    """A NodeSelectorTerm: every expression and field; a term with neither matches nothing."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = _labels(node)
    return all(_requirement_matches(e, labels) for e in exprs) and all(
        e.get("key") == "metadata.name" and _requirement_matches(e, {"metadata.name": _name(node)}) for e in fields
    )


def node_matches_affinity(pod: Obj, node: Obj) -> bool:
    """nodeSelector (every label) and required node affinity (any term): kube's
    GetRequiredNodeAffinity(pod).Match(node)."""
    labels = _labels(node)
    if any(labels.get(k) != v for k, v in (_spec(pod).get("nodeSelector") or {}).items()):
        return False
    required = ((_spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(_selector_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """kube's Toleration.ToleratesTaint: an empty effect matches every effect, an empty key with
    Exists every key."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _untolerated(pod: Obj, node: Obj, effects: Iterable[str]) -> list[Obj]:
    tolerations = _spec(pod).get("tolerations") or []
    wanted = set(effects)
    return [
        t for t in _spec(node).get("taints") or []
        if t.get("effect") in wanted and not any(tolerates(tol, t) for tol in tolerations)
    ]


# ---- resources ------------------------------------------------------------------------------------

def _q(value: Any) -> Decimal:
    try:
        return quantity(value)
    except ContainerConfigError:
        return Decimal(0)


def _container_requests(c: Obj) -> dict[str, Decimal]:
    return {k: _q(v) for k, v in ((c.get("resources") or {}).get("requests") or {}).items()}


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """kube's PodRequests: the containers' sum, at least any init container's (sidecars, init
    containers that keep running, add to both), plus the Pod's overhead; cpu in cores."""
    spec = _spec(pod)
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in _container_requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    sidecars: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, Decimal(0)) + v
            continue
        for k, v in req.items():  # an init container runs beside the sidecars started before it
            init_max[k] = max(init_max.get(k, Decimal(0)), v + sidecars.get(k, Decimal(0)))
    for k, v in sidecars.items():
        total[k] = total.get(k, Decimal(0)) + v
    for k, v in init_max.items():
        total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + _q(v)
    return total


def _non_zero(pod: Obj) -> tuple[Decimal, Decimal]:
    """(cpu cores, memory bytes) with kube's defaults for containers that request neither."""
    cpu = mem = Decimal(0)
    for c in _spec(pod).get("containers") or []:
        req = _container_requests(c)
        cpu += req.get("cpu", Decimal(DEFAULT_MILLI_CPU) / 1000)
        mem += req.get("memory", Decimal(DEFAULT_MEMORY))
    return cpu, mem


def _allocatable(node: Obj) -> dict[str, Decimal]:
    return {k: _q(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}


@dataclass
class NodeInfo:
    """A Node and the Pods bound to it (terminal ones left out, as kube's cache leaves them)."""

    node: Obj
    pods: list[Obj] = field(default_factory=list)

    @property
    def name(self) -> str:
        return _name(self.node)

    @property
    def labels(self) -> Mapping[str, str]:
        return _labels(self.node)

    def requested(self) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for p in self.pods:
            for k, v in pod_requests(p).items():
                total[k] = total.get(k, Decimal(0)) + v
        return total


def build_node_infos(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[NodeInfo]:
    infos = {_name(n): NodeInfo(n) for n in nodes}
    for p in pods:
        info = infos.get(str(_spec(p).get("nodeName") or ""))
        if info is not None and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            info.pods.append(p)
    return sorted(infos.values(), key=lambda i: i.name)


# ---- filters --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FilterStatus:
    """Why a Node was rejected; ``unresolvable``: kube's UnschedulableAndUnresolvable (preemption
    cannot help there)."""

    reasons: tuple[str, ...]
    unresolvable: bool = False


def filter_unschedulable(pod: Obj, info: NodeInfo) -> FilterStatus | None:
    if not _spec(info.node).get("unschedulable"):
        return None
    taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    if any(tolerates(t, taint) for t in _spec(pod).get("tolerations") or []):
        return None
    return FilterStatus((ERR_UNSCHEDULABLE,), True)


def filter_node_name(pod: Obj, info: NodeInfo) -> FilterStatus | None:
    wanted = _spec(pod).get("nodeName")
    return FilterStatus((ERR_NODE_NAME,), True) if wanted and wanted != info.name else None


def filter_taints(pod: Obj, info: NodeInfo) -> FilterStatus | None:
    bad = _untolerated(pod, info.node, ("NoSchedule", "NoExecute"))
    if not bad:
        return None
    taint = bad[0]
    return FilterStatus((f"node(s) had untolerated taint {{{taint.get('key') or ''}: {taint.get('value') or ''}}}",), True)


def filter_node_affinity(pod: Obj, info: NodeInfo) -> FilterStatus | None:
    return None if node_matches_affinity(pod, info.node) else FilterStatus((ERR_NODE_AFFINITY,), True)


def _host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    """The host ports a Pod takes (a hostNetwork Pod's too: the apiserver defaults their ``hostPort``
    to ``containerPort``, SetDefaults_Pod)."""
    out = []
    for c in [*(_spec(pod).get("initContainers") or []), *(_spec(pod).get("containers") or [])]:
        for p in c.get("ports") or []:
            port = int(p.get("hostPort") or 0)
            if port > 0:
                out.append((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), port))
    return out


def filter_ports(pod: Obj, info: NodeInfo) -> FilterStatus | None:
    """kube's HostPortInfo.CheckConflict: same protocol and port, and 0.0.0.0 on either side or the
    same address."""
    wanted = _host_ports(pod)
    if not wanted:
        return None
    used = [u for p in info.pods for u in _host_ports(p)]
    for ip, proto, port in wanted:
        for uip, uproto, uport in used:
            if proto == uproto and port == uport and (ip == uip or "0.0.0.0" in (ip, uip)):
                return FilterStatus((ERR_NODE_PORTS,))
    return None


def filter_resources(pod: Obj, info: NodeInfo) -> FilterStatus | None:
    """NodeResourcesFit: the Pod count, then every resource the Pod requests against what is left."""
    allocatable = _allocatable(info.node)
    reasons = []
    if len(info.pods) + 1 > allocatable.get("pods", Decimal(0)):
        reasons.append(ERR_TOO_MANY_PODS)
    requested = info.requested()
    for name, want in sorted(pod_requests(pod).items(), key=lambda kv: _RESOURCE_ORDER.get(kv[0], 9)):
        if want > 0 and want > allocatable.get(name, Decimal(0)) - requested.get(name, Decimal(0)):
            reasons.append(f"Insufficient {name}")
    return FilterStatus(tuple(reasons)) if reasons else None


_RESOURCE_ORDER = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}


# ---- pod (anti-)affinity --------------------------------------------------------------------------

def _affinity_selector(term: Obj, owner: Obj) -> Obj | None:
    """The term's labelSelector with matchLabelKeys / mismatchLabelKeys folded in from the Pod that
    owns the term (what kube-apiserver v1.31+ writes into the selector at creation)."""
    selector = term.get("labelSelector")
    keys, mismatch = term.get("matchLabelKeys") or [], term.get("mismatchLabelKeys") or []
    if selector is None or not (keys or mismatch):
        return selector
    labels = _labels(owner)
    exprs = list(selector.get("matchExpressions") or [])
    exprs += [{"key": k, "operator": "In", "values": [labels[k]]} for k in keys if k in labels]
    exprs += [{"key": k, "operator": "NotIn", "values": [labels[k]]} for k in mismatch if k in labels]
    return {**selector, "matchExpressions": exprs}


def term_matches(term: Obj, owner: Obj, other: Obj, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """kube's AffinityTerm.Matches: ``other`` is in the term's namespaces (listed, selected, or the
    owner's own when neither is given) and its labels match the selector."""
    namespaces = term.get("namespaces") or []
    ns_selector = term.get("namespaceSelector")
    ns = _namespace(other)
    if not namespaces and ns_selector is None:
        in_ns = ns == _namespace(owner)
    else:
        in_ns = ns in namespaces or (
            ns_selector is not None and label_selector_matches(ns_selector, namespace_labels.get(ns, {}))
        )
    return in_ns and label_selector_matches(_affinity_selector(term, owner), _labels(other))


def _pod_affinity(pod: Obj, kind: str, when: str) -> list[Obj]:
    return list(((_spec(pod).get("affinity") or {}).get(kind) or {}).get(when) or [])


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _same_domain(key: str, a: NodeInfo, b: NodeInfo) -> bool:
    return key in a.labels and key in b.labels and a.labels[key] == b.labels[key]


def filter_inter_pod_affinity(
    pod: Obj, info: NodeInfo, infos: Sequence[NodeInfo], namespace_labels: Mapping[str, Mapping[str, str]],
) -> FilterStatus | None:
    """Required pod affinity, the Pod's anti-affinity, then existing Pods' anti-affinity, in kube's order."""
    affinity = _pod_affinity(pod, "podAffinity", REQUIRED)
    if affinity:
        if any(t.get("topologyKey") not in info.labels for t in affinity):
            return FilterStatus((ERR_AFFINITY,), True)
        # kube's affinityCounts: existing Pods matching a term, per domain of their Node.
        counted = [(term, o) for term in affinity for o in infos if str(term.get("topologyKey")) in o.labels
                   for p in o.pods if term_matches(term, pod, p, namespace_labels)]
        exist = all(any(t is term and _same_domain(str(term["topologyKey"]), o, info) for t, o in counted)
                    for term in affinity)
        # The first Pod of a group that selects itself may go anywhere the keys exist (kube).
        first = not counted and all(term_matches(t, pod, pod, namespace_labels) for t in affinity)
        if not exist and not first:
            return FilterStatus((ERR_AFFINITY,), True)
    for term in _pod_affinity(pod, "podAntiAffinity", REQUIRED):
        key = str(term.get("topologyKey"))
        if any(_same_domain(key, o, info) and any(term_matches(term, pod, p, namespace_labels) for p in o.pods)
               for o in infos):
            return FilterStatus((ERR_ANTI_AFFINITY,))
    for o in infos:
        for p in o.pods:
            for term in _pod_affinity(p, "podAntiAffinity", REQUIRED):
                if _same_domain(str(term.get("topologyKey")), o, info) and term_matches(term, p, pod, namespace_labels):
                    return FilterStatus((ERR_EXISTING_ANTI_AFFINITY,))
    return None


# ---- topology spread ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Constraint:
    key: str
    max_skew: int
    selector: Obj | None
    min_domains: int = 1
    affinity_policy: str = "Honor"
    taints_policy: str = "Ignore"
    services: tuple[Mapping[str, str], ...] = ()
    """System defaults: the selectors of the Services selecting the Pod, all of which count."""


def _constraints(pod: Obj, action: str) -> list[_Constraint]:
    out = []
    labels = _labels(pod)
    for c in _spec(pod).get("topologySpreadConstraints") or []:
        if (c.get("whenUnsatisfiable") or "DoNotSchedule") != action:
            continue
        selector = c.get("labelSelector")
        keys = [k for k in c.get("matchLabelKeys") or [] if k in labels]
        if selector is not None and keys:
            exprs = [*(selector.get("matchExpressions") or []),
                     *({"key": k, "operator": "In", "values": [labels[k]]} for k in keys)]
            selector = {**selector, "matchExpressions": exprs}
        out.append(_Constraint(
            str(c.get("topologyKey")), int(c.get("maxSkew") or 1), selector, int(c.get("minDomains") or 1),
            str(c.get("nodeAffinityPolicy") or "Honor"), str(c.get("nodeTaintsPolicy") or "Ignore"),
        ))
    return out


def _controller_of(pod: Obj) -> tuple[str, str] | None:
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in SPREADING_OWNERS:
            return str(ref.get("kind")), str(ref.get("uid") or ref.get("name"))
    return None


def _service_selectors(pod: Obj, services: Iterable[Obj]) -> tuple[Mapping[str, str], ...]:
    """The selectors of the Services of the Pod's namespace that select it (kube's DefaultSelector)."""
    labels = _labels(pod)
    out = []
    for svc in services:
        selector = _spec(svc).get("selector") or {}
        if _namespace(svc) == _namespace(pod) and selector and all(labels.get(k) == v for k, v in selector.items()):
            out.append(selector)
    return tuple(out)


def _system_default_constraints(pod: Obj, services: Iterable[Obj] = ()) -> list[_Constraint]:
    """kube's default spreading (ScheduleAnyway, hostname maxSkew 3, zone maxSkew 5) for a Pod that
    a Service selects or a controller owns. kube counts the Pods matching every one of the
    selectors of those Services, ReplicaSets and StatefulSets; here the Services' selectors and, for
    the controller, the Pods it owns (its selector's, a ReplicaSet's pod-template-hash included)."""
    selectors = _service_selectors(pod, services)
    if not selectors and _controller_of(pod) is None:
        return []
    return [_Constraint(key, skew, None, services=selectors) for key, skew in SYSTEM_DEFAULT_CONSTRAINTS]


def _spread_counts(pod: Obj, constraint: _Constraint, other: Obj) -> bool:
    """Whether ``other`` counts for the constraint: same namespace, not terminating, selected."""
    if _namespace(other) != _namespace(pod) or _meta(other).get("deletionTimestamp"):
        return False
    if constraint.selector is None:  # system default: the Pods of the same Services and controller
        labels = _labels(other)
        controller = _controller_of(pod)
        return (controller is None or _controller_of(other) == controller) and all(
            all(labels.get(k) == v for k, v in sel.items()) for sel in constraint.services
        )
    return label_selector_matches(constraint.selector, _labels(other))


def _spread_eligible(pod: Obj, c: _Constraint, info: NodeInfo) -> bool:
    if c.affinity_policy == "Honor" and not node_matches_affinity(pod, info.node):
        return False
    return not (c.taints_policy == "Honor" and _untolerated(pod, info.node, ("NoSchedule", "NoExecute")))


def filter_topology_spread(pod: Obj, info: NodeInfo, infos: Sequence[NodeInfo]) -> FilterStatus | None:
    constraints = _constraints(pod, "DoNotSchedule")
    if not constraints:
        return None
    if any(c.key not in info.labels for c in constraints):
        return FilterStatus((ERR_SPREAD_LABEL,), True)
    for c in constraints:
        domains: dict[str, int] = {}
        for o in infos:
            if all(k.key in o.labels for k in constraints) and _spread_eligible(pod, c, o):
                domains.setdefault(o.labels[c.key], 0)
                domains[o.labels[c.key]] += sum(_spread_counts(pod, c, p) for p in o.pods)
        minimum = min(domains.values()) if domains else 0
        if len(domains) < c.min_domains:
            minimum = 0
        self_match = 1 if c.selector is not None and label_selector_matches(c.selector, _labels(pod)) else 0
        if domains.get(info.labels[c.key], 0) + self_match - minimum > c.max_skew:
            return FilterStatus((ERR_SPREAD,))
    return None


# ---- the filter pass ------------------------------------------------------------------------------

def filter_node(
    pod: Obj, info: NodeInfo, infos: Sequence[NodeInfo],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> FilterStatus | None:
    """kube's RunFilterPlugins: the first plugin to reject the Node decides."""
    ns_labels = namespace_labels or {}
    for check in (filter_unschedulable, filter_node_name, filter_taints, filter_node_affinity, filter_ports,
                  filter_resources):
        status = check(pod, info)
        if status is not None:
            return status
    return filter_topology_spread(pod, info, infos) or filter_inter_pod_affinity(pod, info, infos, ns_labels)


def feasible(
    pod: Obj, infos: Sequence[NodeInfo], namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    nominated: Mapping[str, Sequence[Obj]] | None = None,
) -> tuple[list[NodeInfo], dict[str, FilterStatus]]:
    """The Nodes that pass every filter, and why each other one did not. ``nominated``: Pods
    waiting for a Node their preemption freed (``status.nominatedNodeName``); as kube's
    RunFilterPluginsWithNominatedPods, those of at least this Pod's priority hold their room, the
    Pod having to fit both with and without them."""
    ok, failed = [], {}
    for info in infos:
        extra = [p for p in (nominated or {}).get(info.name, ())
                 if _priority(p) >= _priority(pod) and (_namespace(p), _name(p)) != (_namespace(pod), _name(pod))]
        status = None
        if extra:
            snapshot, crowded = _without(infos, info.name, [*info.pods, *extra])
            status = filter_node(pod, crowded, snapshot, namespace_labels)
        if status is None:
            status = filter_node(pod, info, infos, namespace_labels)
        if status is None:
            ok.append(info)
        else:
            failed[info.name] = status
    return ok, failed


# ---- scores ---------------------------------------------------------------------------------------

def _normalize(scores: dict[str, float], *, reverse: bool = False) -> dict[str, int]:
    """kube's DefaultNormalizeScore."""
    top = max(scores.values(), default=0)
    if top == 0:
        return {n: MAX_SCORE if reverse else 0 for n in scores}
    out = {n: int(MAX_SCORE * s // top) for n, s in scores.items()}
    return {n: MAX_SCORE - s for n, s in out.items()} if reverse else out


def score_taints(pod: Obj, nodes: Sequence[NodeInfo]) -> dict[str, int]:
    """TaintToleration: fewer untolerated PreferNoSchedule taints, higher."""
    return _normalize({i.name: len(_untolerated(pod, i.node, ("PreferNoSchedule",))) for i in nodes}, reverse=True)


def score_node_affinity(pod: Obj, nodes: Sequence[NodeInfo]) -> dict[str, int]:
    preferred = ((_spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(PREFERRED) or []
    raw = {
        i.name: float(sum(int(t.get("weight") or 0) for t in preferred
                          if _selector_term_matches(t.get("preference") or {}, i.node)))
        for i in nodes
    }
    return _normalize(raw)


def score_least_allocated(pod: Obj, nodes: Sequence[NodeInfo]) -> dict[str, int]:
    """NodeResourcesFit's LeastAllocated over cpu and memory (weight 1 each), with non-zero requests."""
    cpu, mem = _non_zero(pod)
    out = {}
    for i in nodes:
        alloc = _allocatable(i.node)
        used = [_non_zero(p) for p in i.pods]
        total = 0
        for k, want, have in (("cpu", cpu, sum((u[0] for u in used), Decimal(0))),
                              ("memory", mem, sum((u[1] for u in used), Decimal(0)))):
            cap = alloc.get(k, Decimal(0))
            req = want + have
            total += 0 if cap == 0 or req > cap else int((cap - req) * MAX_SCORE / cap)
        out[i.name] = total // 2
    return out


def score_balanced(pod: Obj, nodes: Sequence[NodeInfo]) -> dict[str, int]:
    """NodeResourcesBalancedAllocation: 100 * (1 - the spread of the cpu and memory fractions)."""
    want = pod_requests(pod)
    out = {}
    for i in nodes:
        alloc, used = _allocatable(i.node), i.requested()
        fractions = []
        for k in ("cpu", "memory"):
            cap = alloc.get(k, Decimal(0))
            if cap > 0:
                fractions.append(min(1.0, float((used.get(k, Decimal(0)) + want.get(k, Decimal(0))) / cap)))
        std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
        out[i.name] = int((1 - std) * MAX_SCORE)
    return out


def score_topology_spread(
    pod: Obj, nodes: Sequence[NodeInfo], infos: Sequence[NodeInfo], services: Iterable[Obj] = (),
) -> dict[str, int]:
    """PodTopologySpread's score: fewer matching Pods in the Node's domains, higher (ScheduleAnyway
    constraints, or kube's system defaults for a Pod with none)."""
    explicit = bool(_spec(pod).get("topologySpreadConstraints"))
    constraints = _constraints(pod, "ScheduleAnyway") if explicit else _system_default_constraints(pod, services)
    if not constraints:
        return {i.name: 0 for i in nodes}
    ignored = {i.name for i in nodes if explicit and any(c.key not in i.labels for c in constraints)}
    raw: dict[str, int] = {}
    for i in nodes:
        if i.name in ignored:
            continue
        score = 0.0
        for c in constraints:
            if c.key not in i.labels:
                continue
            domains = {o.labels[c.key] for o in nodes if c.key in o.labels and o.name not in ignored}
            weight = math.log(len(domains) + 2)
            count = sum(_spread_counts(pod, c, p) for o in infos if c.key in o.labels
                        and o.labels[c.key] == i.labels[c.key] and _spread_eligible(pod, c, o) for p in o.pods)
            score += count * weight + (c.max_skew - 1)
        raw[i.name] = round(score)
    top, low = max(raw.values(), default=0), min(raw.values(), default=0)
    out = {}
    for i in nodes:
        if i.name in ignored:
            out[i.name] = 0
        elif top == 0:
            out[i.name] = MAX_SCORE
        else:
            out[i.name] = MAX_SCORE * (top + low - raw[i.name]) // top
    return out


def score_inter_pod_affinity(
    pod: Obj, nodes: Sequence[NodeInfo], infos: Sequence[NodeInfo],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, int]:
    """InterPodAffinity's score: the Pod's preferred terms over existing Pods, and existing Pods'
    required (weight 1) and preferred terms over the Pod, summed per topology domain."""
    ns_labels = namespace_labels or {}
    domains: dict[tuple[str, str], float] = {}

    def add(key: str, info: NodeInfo, weight: float) -> None:
        if key in info.labels:
            domains[(key, info.labels[key])] = domains.get((key, info.labels[key]), 0.0) + weight

    mine = [(t.get("podAffinityTerm") or {}, int(t.get("weight") or 0)) for t in _pod_affinity(pod, "podAffinity", PREFERRED)]
    mine += [(t.get("podAffinityTerm") or {}, -int(t.get("weight") or 0))
             for t in _pod_affinity(pod, "podAntiAffinity", PREFERRED)]
    for o in infos:
        for p in o.pods:
            for term, weight in mine:
                if term_matches(term, pod, p, ns_labels):
                    add(str(term.get("topologyKey")), o, weight)
            theirs = [(t, 1) for t in _pod_affinity(p, "podAffinity", REQUIRED)]
            theirs += [(t.get("podAffinityTerm") or {}, int(t.get("weight") or 0))
                       for t in _pod_affinity(p, "podAffinity", PREFERRED)]
            theirs += [(t.get("podAffinityTerm") or {}, -int(t.get("weight") or 0))
                       for t in _pod_affinity(p, "podAntiAffinity", PREFERRED)]
            for term, weight in theirs:
                if term_matches(term, p, pod, ns_labels):
                    add(str(term.get("topologyKey")), o, weight)
    raw = {i.name: sum(w for (k, v), w in domains.items() if i.labels.get(k) == v) for i in nodes}
    top, low = max(raw.values(), default=0.0), min(raw.values(), default=0.0)
    diff = top - low
    return {n: int(MAX_SCORE * (s - low) / diff) if diff > 0 else 0 for n, s in raw.items()}


def score_nodes(
    pod: Obj, nodes: Sequence[NodeInfo], infos: Sequence[NodeInfo],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None, services: Iterable[Obj] = (),
) -> dict[str, int]:
    """Every feasible Node's weighted sum of the default profile's scores."""
    parts = {
        "TaintToleration": score_taints(pod, nodes),
        "NodeAffinity": score_node_affinity(pod, nodes),
        "PodTopologySpread": score_topology_spread(pod, nodes, infos, services),
        "InterPodAffinity": score_inter_pod_affinity(pod, nodes, infos, namespace_labels),
        "NodeResourcesFit": score_least_allocated(pod, nodes),
        "NodeResourcesBalancedAllocation": score_balanced(pod, nodes),
    }
    return {i.name: sum(WEIGHTS[k] * s.get(i.name, 0) for k, s in parts.items()) for i in nodes}


def pick(scores: Mapping[str, int], rng: random.Random | None = None) -> str:
    """The highest score; among equals one at random (kube's selectHost)."""
    top = max(scores.values())
    return (rng or random).choice(sorted(n for n, s in scores.items() if s == top))


# ---- the outcome ----------------------------------------------------------------------------------

def _histogram(reasons: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    return ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))


def fit_error(total: int, failed: Mapping[str, FilterStatus]) -> str:
    """kube's FitError text without its PostFilter part: "0/N nodes are available: <reasons>."."""
    if total == 0:
        return NO_NODES
    return f"0/{total} nodes are available: {_histogram(r for s in failed.values() for r in s.reasons)}."


def _priority(pod: Obj) -> int:
    return int(_spec(pod).get("priority") or 0)


def _more_important(pod: Obj) -> tuple[int, str]:
    """kube's MoreImportantPod as a sort key: higher priority, then started earlier."""
    return (-_priority(pod), str((pod.get("status") or {}).get("startTime") or "~"))


@dataclass(frozen=True)
class Preemption:
    """What DefaultPreemption found: a Node and the Pods to evict there, or why not (per Node)."""

    node: str | None
    victims: tuple[Obj, ...] = ()
    statuses: Mapping[str, FilterStatus] = field(default_factory=dict)
    message: str = ""


def _without(infos: Sequence[NodeInfo], node: str, pods: list[Obj]) -> tuple[list[NodeInfo], NodeInfo]:
    """The snapshot with ``node`` holding only ``pods``."""
    out, mine = [], NodeInfo({})
    for i in infos:
        if i.name == node:
            mine = NodeInfo(i.node, list(pods))
            out.append(mine)
        else:
            out.append(i)
    return out, mine


def _violating(pods: Sequence[Obj], pdbs: Sequence[Obj]) -> list[bool]:
    """kube's filterPodsWithPDBViolation: whether evicting each Pod (in this order) would take a
    PodDisruptionBudget of its namespace that selects it below zero disruptions allowed."""
    allowed = [int((b.get("status") or {}).get("disruptionsAllowed") or 0) for b in pdbs]
    out = []
    for p in pods:
        violates = False
        for i, b in enumerate(pdbs):
            selector = _spec(b).get("selector")
            if _namespace(b) != _namespace(p) or not selector or not label_selector_matches(selector, _labels(p)):
                continue
            if _name(p) in ((b.get("status") or {}).get("disruptedPods") or {}):
                continue  # already counted by the disruption controller
            allowed[i] -= 1
            violates = violates or allowed[i] < 0
        out.append(violates)
    return out


def select_victims(
    pod: Obj, info: NodeInfo, infos: Sequence[NodeInfo], namespace_labels: Mapping[str, Mapping[str, str]],
    pdbs: Sequence[Obj] = (),
) -> tuple[list[Obj], int, FilterStatus | None]:
    """kube's selectVictimsOnNode: take away every Pod of lower priority; if the Pod fits then, put
    back as many as still let it fit, those whose eviction would violate a PodDisruptionBudget
    first, each group most important first. (victims, budgets violated, None) or ([], 0, why not)."""
    mine = _priority(pod)
    lower = sorted((p for p in info.pods if _priority(p) < mine), key=_more_important)
    if not lower:
        return [], 0, FilterStatus((NO_VICTIMS,), True)
    kept = [p for p in info.pods if _priority(p) >= mine]
    snapshot, node = _without(infos, info.name, kept)
    status = filter_node(pod, node, snapshot, namespace_labels)
    if status is not None:
        return [], 0, status
    flags = _violating(lower, pdbs)
    ordered = [(p, True) for p, v in zip(lower, flags, strict=True) if v]
    ordered += [(p, False) for p, v in zip(lower, flags, strict=True) if not v]
    victims, violations = [], 0
    for p, violating in ordered:
        snapshot, node = _without(infos, info.name, [*kept, p])
        if filter_node(pod, node, snapshot, namespace_labels) is None:
            kept.append(p)
        else:
            victims.append(p)
            violations += violating
    return victims, violations, None


def _terminating_by_preemption(pod: Obj) -> bool:
    """kube's podTerminatingByPreemption: being deleted, marked by a scheduler's preemption."""
    return bool(_meta(pod).get("deletionTimestamp")) and any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def preempt(
    pod: Obj, infos: Sequence[NodeInfo], failed: Mapping[str, FilterStatus],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None, pdbs: Sequence[Obj] = (),
) -> Preemption:
    """kube's DefaultPreemption PostFilter: the Node where evicting lower-priority Pods lets the Pod
    fit at the least cost (fewest PodDisruptionBudgets violated, then the lowest top priority,
    sum and count of victims), or kube's message saying why there is none."""
    ns_labels = namespace_labels or {}
    if (_spec(pod).get("preemptionPolicy") or "PreemptLowerPriority") == "Never":
        return Preemption(None, message=f"preemption: {PREEMPTION_NEVER}")
    nominated = str((pod.get("status") or {}).get("nominatedNodeName") or "")
    on_nominated = next((i for i in infos if i.name == nominated), None)
    if on_nominated is not None and not (failed.get(nominated) and failed[nominated].unresolvable) and any(
        _terminating_by_preemption(p) and _priority(p) < _priority(pod) for p in on_nominated.pods
    ):
        return Preemption(None, message="preemption: not eligible due to a terminating pod on the nominated node.")
    statuses: dict[str, FilterStatus] = {}
    candidates: list[tuple[tuple[int, int, int, int], str, list[Obj]]] = []
    for info in infos:
        status = failed.get(info.name)
        if status is None or status.unresolvable:
            statuses[info.name] = FilterStatus((PREEMPTION_NOT_HELPFUL,), True)
            continue
        victims, violations, why = select_victims(pod, info, infos, ns_labels, pdbs)
        if why is not None:
            statuses[info.name] = why
            continue
        prios = [_priority(v) for v in victims]
        candidates.append(((violations, max(prios, default=0), sum(prios), len(prios)), info.name, victims))
    if candidates:
        _, node, victims = min(candidates, key=lambda c: (c[0], c[1]))
        return Preemption(node, tuple(victims))
    return Preemption(None, statuses=statuses,
                      message=f"preemption: {fit_error(len(infos), statuses)}")


def failure_message(pod: Obj, total: int, failed: Mapping[str, FilterStatus],
                    preemption: Preemption | None = None) -> str:
    """kube's FitError text: "0/N nodes are available: <reasons>. preemption: 0/N nodes are
    available: <why preemption does not help>." (no PostFilter part when preemption found room)."""
    if total == 0:
        return NO_NODES
    msg = fit_error(total, failed)
    post = preemption.message if preemption is not None else ""
    return f"{msg} {post}" if post else msg


def wants_scheduling(pod: Obj) -> bool:
    """Ours to place: unbound, for the default scheduler, no scheduling gates, not finished or
    being deleted."""
    spec = _spec(pod)
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
        and not spec.get("schedulingGates")
        and not _meta(pod).get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )


# ---- the controller -------------------------------------------------------------------------------

def _node_changed(old: Any | None, new: Any) -> bool:
    """Node events that can make a Pod fit (kube's queueing hints): not the kubelet's heartbeats."""
    if old is None:
        return True
    a, b = old.to_dict(), new.to_dict()
    return bool(
        _labels(a) != _labels(b) or a.get("spec") != b.get("spec")
        or (a.get("status") or {}).get("allocatable") != (b.get("status") or {}).get("allocatable")
    )


PENDING_INDEX = "scheduler-pending"
PENDING = "pending"


def _pending_index(pod: Any) -> list[str]:
    """The Pods waiting for this scheduler, as an index: every bound Pod's event wakes them, and
    scanning every Pod for them each time would cost O(Pods²) when the informer starts."""
    spec, meta, status = getattr(pod, "spec", None), getattr(pod, "metadata", None), getattr(pod, "status", None)
    if spec is None or spec.nodeName or (spec.schedulerName or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
        return []
    if spec.schedulingGates or (meta is not None and meta.deletionTimestamp is not None):
        return []
    return [] if status is not None and status.phase in ("Succeeded", "Failed") else [PENDING]


def _pod_changed(old: Any | None, new: Any) -> bool:
    """Pod events that matter: any of an unbound Pod; of a bound one only what can free or take room
    (added, deleted, bound, relabelled, finished), not the kubelet's status updates."""
    if old is None:
        return True
    a, b = old.to_dict(), new.to_dict()
    if not _spec(b).get("nodeName"):
        return True
    return bool(
        _spec(a).get("nodeName") != _spec(b).get("nodeName") or _labels(a) != _labels(b)
        or (a.get("status") or {}).get("phase") != (b.get("status") or {}).get("phase")
        or _meta(a).get("deletionTimestamp") != _meta(b).get("deletionTimestamp")
    )


class BindingError(Exception):
    """The apiserver refused a Binding for a reason that a retry may cure."""


class Scheduler:
    """kube-scheduler for one cluster: one worker, so every decision sees the ones before it."""

    def __init__(
        self,
        client: AsyncClient,
        pods: Informer[Pod],
        nodes: Informer[Node],
        recorder: EventRecorder | None = None,
        *,
        namespaces: Informer[Namespace] | None = None,
        pdbs: Informer[PodDisruptionBudget] | None = None,
        services: Informer[Service] | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """recorder: kube-lite's; the scheduler writes through its ``default-scheduler`` child (the
        Events' source, as kube's), or through a recorder of its own when none is given.
        namespaces: for pod affinity terms' namespaceSelector (without it a selector other than
        {} matches no namespace but the listed ones); pdbs: PodDisruptionBudgets, weighed when
        choosing whom to preempt (without them none is); services: for kube's default spreading of
        the Pods a Service selects (without them only the Pods of one controller are spread)."""
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.namespaces = namespaces
        self.pdbs = pdbs
        self.services = services
        self._own_recorder = recorder is None
        self.recorder: EventRecorder = (
            EventRecorder(client, SCHEDULER_COMPONENT, host="") if recorder is None
            else recorder if recorder.component == SCHEDULER_COMPONENT else recorder.child(SCHEDULER_COMPONENT)
        )
        self.rng = rng or random.Random()
        self.clock = clock
        self._assumed: dict[str, tuple[str, float, Obj]] = {}
        self.controller = Controller(
            "kubelite-scheduler", self.reconcile, workers=1, backoff_base=BACKOFF_INITIAL, backoff_cap=BACKOFF_MAX,
        )
        with contextlib.suppress(ValueError):  # another Scheduler on this shared informer added it
            pods.add_indexer(PENDING_INDEX, _pending_index)
        self.controller.watch(pods, self._pod_keys, predicate=_pod_changed)
        self.controller.watch(nodes, lambda _n: self._pending_keys(), predicate=_node_changed, initial=False)

    async def run(self) -> None:
        try:
            await self.controller.run()
        finally:
            if self._own_recorder:
                with contextlib.suppress(Exception):
                    await self.recorder.aclose()

    def _pending_keys(self) -> list[str]:
        return self.pods.cache.index_keys(PENDING_INDEX, PENDING)

    def _pod_keys(self, pod: Any) -> list[str]:
        """The Pod itself when unbound; a bound Pod's change (gone, relabelled, finished) may make
        room for every pending one (kube's AssignedPod events)."""
        data = pod.to_dict()
        if not _spec(data).get("nodeName"):
            return [object_key(pod)]
        self._assumed.pop(object_key(pod), None)
        return self._pending_keys()

    def _snapshot(self) -> list[NodeInfo]:
        now = self.clock()
        pods = {object_key(p): p.to_dict() for p in self.pods.cache.list()}
        for key, (node, since, data) in list(self._assumed.items()):
            seen = pods.get(key)
            if seen is None or _spec(seen).get("nodeName") or now - since > ASSUMED_SECONDS:
                del self._assumed[key]
            else:
                pods[key] = {**data, "spec": {**_spec(data), "nodeName": node}}
        return build_node_infos((n.to_dict() for n in self.nodes.cache.list()), pods.values())

    def _namespace_labels(self) -> dict[str, Mapping[str, str]]:
        if self.namespaces is None:
            return {}
        return {_name(d): _labels(d) for d in (n.to_dict() for n in self.namespaces.cache.list())}

    def _nominated(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {}
        for key in self._pending_keys():
            p = self.pods.cache.get(key)
            data = p.to_dict() if p is not None else {}
            node = (data.get("status") or {}).get("nominatedNodeName")
            if node:
                out.setdefault(str(node), []).append(data)
        return out

    async def reconcile(self, key: str) -> Result | None:
        obj = self.pods.cache.get(key)
        if obj is None or key in self._assumed:
            return None
        pod = obj.to_dict()
        if not wants_scheduling(pod):
            return None
        infos = self._snapshot()
        ns_labels = self._namespace_labels()
        ok, failed = feasible(pod, infos, ns_labels, self._nominated())
        if not ok:
            budgets = [b.to_dict() for b in self.pdbs.cache.list()] if self.pdbs is not None else []
            preemption = preempt(pod, infos, failed, ns_labels, budgets)
            if preemption.node is not None:
                await self._evict(pod, preemption)
            await self._unschedulable(obj, pod, failure_message(pod, len(infos), failed, preemption),
                                      nominate=preemption.node)
            return Result(requeue=True)
        if len(ok) == 1:
            return await self._bind(obj, pod, ok[0].name)
        services = [svc.to_dict() for svc in self.services.cache.list()] if self.services is not None else []
        node = pick(score_nodes(pod, ok, infos, ns_labels, services), self.rng)
        return await self._bind(obj, pod, node)

    async def _bind(self, obj: Pod, pod: Obj, node: str) -> Result | None:
        ns, name = _namespace(pod), _name(pod)
        binding = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": _meta(pod).get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # kube-apiserver answers a Binding with a Status, which lightkube's create() cannot decode
        # as a Binding: the request goes through the client's own transport instead.
        inner = self.client._client._client
        resp = await inner.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", json=binding)
        if resp.status_code in (404, 409):  # gone, or bound meanwhile (by someone else): nothing to do
            log.info("pod not bound", extra={"pod": f"{ns}/{name}", "node": node, "status": resp.status_code})
            return None
        if resp.status_code >= 300:
            raise BindingError(f"binding {ns}/{name} to {node}: {resp.status_code} {resp.text[:300]}")
        self._assumed[object_key(obj)] = (node, self.clock(), pod)
        log.info("pod scheduled", extra={"pod": f"{ns}/{name}", "node": node})
        self.recorder.normal(obj, "Scheduled", f"Successfully assigned {ns}/{name} to {node}")
        return None

    async def _evict(self, pod: Obj, preemption: Preemption) -> None:
        """kube's preemption: each victim gets ``DisruptionTarget`` (PreemptionByScheduler), a
        ``Preempted`` Event, and is deleted with its grace period."""
        uid = _meta(pod).get("uid")
        for victim in preemption.victims:
            ns, name = _namespace(victim), _name(victim)
            conditions = [c for c in (victim.get("status") or {}).get("conditions") or []
                          if c.get("type") != "DisruptionTarget"]
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                               "message": f"{SCHEDULER_COMPONENT}: preempting to accommodate a higher priority pod",
                               "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            try:
                await self.client.patch(Pod.Status, name, {"status": {"conditions": conditions}}, namespace=ns,
                                        patch_type=PatchType.MERGE, field_manager=SCHEDULER_COMPONENT)
                await self.client.delete(Pod, name, namespace=ns)
            except ApiError as e:
                if not is_not_found(e):
                    raise
                continue
            cached = self.pods.cache.get(f"{ns}/{name}")
            if cached is not None:
                self.recorder.normal(cached, "Preempted", f"Preempted by pod {uid} on node {preemption.node}")
            log.info("pod preempted", extra={"pod": f"{ns}/{name}", "by": f"{_namespace(pod)}/{_name(pod)}",
                                             "node": preemption.node})

    async def _unschedulable(self, obj: Pod, pod: Obj, message: str, *, nominate: str | None = None) -> None:
        ns, name = split_key(object_key(obj))
        self.recorder.warning(obj, "FailedScheduling", message)
        status = pod.get("status") or {}
        conditions = [c for c in status.get("conditions") or []]
        old = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if (old is not None and old.get("status") == "False" and old.get("message") == message
                and (nominate is None or status.get("nominatedNodeName") == nominate)):
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": now if old is None or old.get("status") != "False"
                     else old.get("lastTransitionTime")}
        conditions = [c for c in conditions if c.get("type") != "PodScheduled"] + [condition]
        patch: dict[str, Any] = {"conditions": conditions}
        if nominate is not None:
            patch["nominatedNodeName"] = nominate
        try:
            await self.client.patch(
                Pod.Status, name, {"status": patch}, namespace=ns,
                patch_type=PatchType.MERGE, field_manager=SCHEDULER_COMPONENT,
            )
        except ApiError as e:
            if not is_not_found(e):
                raise
        log.info("pod unschedulable", extra={"pod": f"{ns}/{name}", "reason": message})
