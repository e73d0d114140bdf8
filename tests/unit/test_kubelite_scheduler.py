"""kube-lite's scheduler, filter by filter and score by score (pure functions over plain dicts)."""

from __future__ import annotations

import random
from typing import Any

from lightkube.resources.core_v1 import Pod

from isthmus.local.kubelite.scheduler import (
    FilterStatus,
    NodeInfo,
    _pending_index,
    build_node_infos,
    failure_message,
    feasible,
    filter_inter_pod_affinity,
    filter_node,
    filter_ports,
    filter_resources,
    filter_taints,
    filter_topology_spread,
    filter_unschedulable,
    node_matches_affinity,
    pick,
    pod_requests,
    preempt,
    score_balanced,
    score_inter_pod_affinity,
    score_least_allocated,
    score_node_affinity,
    score_nodes,
    score_taints,
    score_topology_spread,
    tolerates,
    wants_scheduling,
)

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def node(name: str, *, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
         unschedulable: bool = False, cpu: str = "4", memory: str = "8Gi", pods: str = "110") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {HOST: name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}},
    }


def pod(name: str, *, ns: str = "default", labels: dict[str, str] | None = None, node_name: str = "",
        cpu: str | None = None, memory: str | None = None, owner: str | None = None, **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if requests:
        container["resources"] = {"requests": requests}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": owner,
                                    "controller": True}]
    body: dict[str, Any] = {"metadata": meta, "spec": {"containers": [container], **spec}, "status": {"phase": "Pending"}}
    if node_name:
        body["spec"]["nodeName"] = node_name
        body["status"]["phase"] = "Running"
    return body


def infos(nodes: list[dict[str, Any]], pods: tuple[dict[str, Any], ...] | list[dict[str, Any]] = ()) -> list[NodeInfo]:
    return build_node_infos(nodes, pods)


def anti(app: str, key: str = HOST) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


# ---- filters ------------------------------------------------------------------------------------

def test_which_pods_are_scheduled() -> None:
    assert wants_scheduling(pod("a"))
    assert wants_scheduling(pod("a", schedulerName="default-scheduler"))
    assert not wants_scheduling(pod("a", schedulerName="my-scheduler"))
    assert not wants_scheduling(pod("a", schedulingGates=[{"name": "wait"}]))
    assert not wants_scheduling(pod("a", node_name="n1"))
    done = pod("a")
    done["status"]["phase"] = "Succeeded"
    assert not wants_scheduling(done)


def test_pending_index_agrees_with_wants_scheduling() -> None:
    gone = pod("gone")
    gone["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    failed = pod("failed")
    failed["status"]["phase"] = "Failed"
    cases = [pod("a"), pod("b", schedulerName="other"), pod("c", schedulingGates=[{"name": "g"}]),
             pod("d", node_name="n1"), gone, failed]
    for p in cases:
        assert bool(_pending_index(Pod.from_dict(p))) == wants_scheduling(p), p["metadata"]["name"]


def test_cordoned_node_refuses_unless_tolerated() -> None:
    [info] = infos([node("n1", unschedulable=True)])
    assert filter_unschedulable(pod("a"), info) == FilterStatus(("node(s) were unschedulable",), True)
    tolerant = pod("a", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                      "effect": "NoSchedule"}])
    assert filter_unschedulable(tolerant, info) is None


def test_toleration_semantics() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    assert tolerates({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, taint)
    assert tolerates({"key": "dedicated", "value": "gpu"}, taint)  # Equal by default, any effect
    assert not tolerates({"key": "dedicated", "value": "cpu"}, taint)
    assert tolerates({"key": "dedicated", "operator": "Exists"}, taint)
    assert tolerates({"operator": "Exists"}, taint)  # empty key + Exists: everything
    assert not tolerates({"operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)


def test_taints_name_the_first_untolerated_one() -> None:
    [info] = infos([node("n1", taints=[{"key": "soft", "effect": "PreferNoSchedule"},
                                        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])])
    assert filter_taints(pod("a"), info) == FilterStatus(("node(s) had untolerated taint {dedicated: gpu}",), True)
    ok = pod("a", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert filter_taints(ok, info) is None
    [noexec] = infos([node("n1", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])])
    assert filter_taints(pod("a"), noexec) == FilterStatus(
        ("node(s) had untolerated taint {node.kubernetes.io/unreachable: }",), True)


def test_node_selector_and_required_affinity_operators() -> None:
    n = node("n1", labels={"disk": "ssd", "gen": "5"})
    assert node_matches_affinity(pod("a", nodeSelector={"disk": "ssd"}), n)
    assert not node_matches_affinity(pod("a", nodeSelector={"disk": "hdd"}), n)

    def req(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        term: dict[str, Any] = {"matchExpressions": list(exprs)} if exprs else {}
        if fields:
            term["matchFields"] = fields
        return pod("a", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}})

    assert node_matches_affinity(req({"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}), n)
    assert not node_matches_affinity(req({"key": "disk", "operator": "NotIn", "values": ["ssd"]}), n)
    assert node_matches_affinity(req({"key": "disk", "operator": "Exists"}), n)
    assert node_matches_affinity(req({"key": "gpu", "operator": "DoesNotExist"}), n)
    assert node_matches_affinity(req({"key": "gen", "operator": "Gt", "values": ["4"]}), n)
    assert not node_matches_affinity(req({"key": "gen", "operator": "Lt", "values": ["5"]}), n)
    assert node_matches_affinity(req(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}]), n)
    assert not node_matches_affinity(req(fields=[{"key": "metadata.name", "operator": "In", "values": ["n2"]}]), n)
    assert not node_matches_affinity(req(), n)  # an empty term matches nothing


def test_host_ports_conflict_on_same_protocol_and_address() -> None:
    def with_port(name: str, port: int, proto: str = "TCP", ip: str = "", on: str = "") -> dict[str, Any]:
        p = pod(name, node_name=on)
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port, "protocol": proto,
                                                **({"hostIP": ip} if ip else {})}]
        return p

    [info] = infos([node("n1")], [with_port("old", 8080, on="n1")])
    assert filter_ports(with_port("new", 8080), info) == FilterStatus(
        ("node(s) didn't have free ports for the requested pod ports",))
    assert filter_ports(with_port("new", 8080, "UDP"), info) is None
    assert filter_ports(with_port("new", 8081), info) is None
    [two] = infos([node("n1")], [with_port("old", 8080, ip="127.0.0.2", on="n1")])
    assert filter_ports(with_port("new", 8080, ip="127.0.0.3"), two) is None
    assert filter_ports(with_port("new", 8080), two) is not None  # 0.0.0.0 takes every address


def test_host_network_ports_are_host_ports() -> None:
    from isthmus.apiserver.registry.pod import default_pod

    def hostnet(name: str, on: str = "") -> dict[str, Any]:
        p = pod(name, node_name=on, hostNetwork=True)
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 9180}]
        default_pod(p)  # as the apiserver serves it: hostPort defaulted to containerPort
        return p

    [info] = infos([node("n1")], [hostnet("pools-1", on="n1")])
    assert filter_ports(hostnet("pools-2"), info) == FilterStatus(
        ("node(s) didn't have free ports for the requested pod ports",))
    assert filter_ports(pod("plain"), info) is None


def test_resources_fit_counts_pods_on_the_node() -> None:
    [info] = infos([node("n1", cpu="2", memory="1Gi", pods="2")], [pod("x", cpu="1500m", node_name="n1")])
    assert filter_resources(pod("a", cpu="500m"), info) is None
    assert filter_resources(pod("a", cpu="600m", memory="2Gi"), info) == FilterStatus(
        ("Insufficient cpu", "Insufficient memory"))
    [full] = infos([node("n1", pods="1")], [pod("x", node_name="n1")])
    assert filter_resources(pod("a"), full) == FilterStatus(("Too many pods",))
    finished = pod("x", cpu="2", node_name="n1")
    finished["status"]["phase"] = "Succeeded"
    [freed] = infos([node("n1", cpu="2")], [finished])
    assert filter_resources(pod("a", cpu="2"), freed) is None  # a finished Pod holds nothing


def test_pod_requests_init_containers_and_overhead() -> None:
    p = pod("a", cpu="1")
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}},
                                   {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}]
    p["spec"]["overhead"] = {"cpu": "100m"}
    assert float(pod_requests(p)["cpu"]) == 3.1  # max(1 + 0.5 sidecar, 3) + overhead


def test_pod_anti_affinity_spreads_by_hostname() -> None:
    nodes = [node("n1"), node("n2")]
    placed = infos(nodes, [pod("web-1", labels={"app": "web"}, node_name="n1", affinity=anti("web"))])
    new = pod("web-2", labels={"app": "web"}, affinity=anti("web"))
    ok, failed = feasible(new, placed)
    assert [i.name for i in ok] == ["n2"]
    # The Pod's own rule rejects n1 (its term matches web-1), in kube's wording.
    assert failed == {"n1": FilterStatus(("node(s) didn't match pod anti-affinity rules",))}


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    placed = infos([node("n1"), node("n2")], [pod("guard", labels={"app": "guard"}, node_name="n1",
                                                  affinity=anti("web"))])
    ok, failed = feasible(pod("web-1", labels={"app": "web"}), placed)
    assert [i.name for i in ok] == ["n2"]
    assert failed["n1"].reasons == ("node(s) didn't satisfy existing pods anti-affinity rules",)


def test_anti_affinity_namespaces() -> None:
    placed = infos([node("n1")], [pod("web-1", ns="other", labels={"app": "web"}, node_name="n1")])
    [info] = placed
    # By default a term looks only in the Pod's own namespace.
    assert filter_inter_pod_affinity(pod("w", labels={"app": "web"}, affinity=anti("web")), info, placed, {}) is None
    term = anti("web")
    term["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaces"] = ["other"]
    assert filter_inter_pod_affinity(pod("w", affinity=term), info, placed, {}) is not None
    term["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0].pop("namespaces")
    term["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaceSelector"] = {
        "matchLabels": {"team": "a"}}
    assert filter_inter_pod_affinity(pod("w", affinity=term), info, placed, {"other": {"team": "a"}}) is not None
    assert filter_inter_pod_affinity(pod("w", affinity=term), info, placed, {"other": {"team": "b"}}) is None


def test_required_pod_affinity_and_the_first_pod() -> None:
    nodes = [node("n1", labels={ZONE: "a"}), node("n2", labels={ZONE: "b"})]
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}
    with_db = infos(nodes, [pod("db", labels={"app": "db"}, node_name="n2")])
    ok, failed = feasible(pod("app", affinity=aff), with_db)
    assert [i.name for i in ok] == ["n2"]
    assert failed["n1"] == FilterStatus(("node(s) didn't match pod affinity rules",), True)
    # No db anywhere: a Pod that is itself a db may start the group; another may not.
    empty = infos(nodes)
    assert len(feasible(pod("db-0", labels={"app": "db"}, affinity=aff), empty)[0]) == 2
    assert feasible(pod("app", affinity=aff), empty)[0] == []


def test_match_label_keys_narrow_the_selector() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST,
            "matchLabelKeys": ["pod-template-hash"]}
    placed = infos([node("n1")], [pod("old", labels={"app": "web", "pod-template-hash": "v1"}, node_name="n1")])
    new = pod("new", labels={"app": "web", "pod-template-hash": "v2"},
              affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    assert filter_inter_pod_affinity(new, placed[0], placed, {}) is None  # another revision: not counted


def spread(key: str, skew: int = 1, when: str = "DoNotSchedule", **extra: Any) -> list[dict[str, Any]]:
    return [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
             "labelSelector": {"matchLabels": {"app": "web"}}, **extra}]


def test_topology_spread_max_skew_over_zones() -> None:
    nodes = [node("a1", labels={ZONE: "a"}), node("a2", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"})]
    placed = infos(nodes, [pod("w1", labels={"app": "web"}, node_name="a1")])
    new = pod("w2", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE))
    ok, failed = feasible(new, placed)
    assert [i.name for i in ok] == ["b1"]
    assert failed == {n: FilterStatus(("node(s) didn't match pod topology spread constraints",))
                      for n in ("a1", "a2")}
    # A node without the key is refused for good.
    [bare] = infos([node("x")])
    assert filter_topology_spread(new, bare, [bare]) == FilterStatus(
        ("node(s) didn't match pod topology spread constraints (missing required label)",), True)


def test_topology_spread_min_domains_and_policies() -> None:
    nodes = [node("a1", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"}, taints=[{"key": "t", "effect": "NoSchedule"}])]
    placed = infos(nodes, [pod("w1", labels={"app": "web"}, node_name="a1"),
                           pod("w0", labels={"app": "web"}, node_name="b1")])
    # minDomains 3 with 2 domains: the global minimum counts as 0, so skew 1+1-0 > 1 everywhere.
    new = pod("w2", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE, minDomains=3))
    assert filter_topology_spread(new, placed[0], placed) is not None
    # nodeTaintsPolicy Honor: the tainted zone b is not a domain, a (1 pod) is the minimum.
    honor = pod("w2", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE, nodeTaintsPolicy="Honor"))
    assert filter_topology_spread(honor, placed[0], placed) is None
    # nodeAffinityPolicy Honor (the default): a node the Pod may not use is no domain.
    pinned = pod("w2", labels={"app": "web"}, nodeSelector={ZONE: "a"},
                 topologySpreadConstraints=spread(ZONE))
    assert filter_topology_spread(pinned, placed[0], placed) is None


def test_filter_order_first_rejection_decides() -> None:
    n = node("n1", unschedulable=True, taints=[{"key": "x", "effect": "NoSchedule"}])
    [info] = infos([n])
    assert filter_node(pod("a", nodeSelector={"no": "match"}), info, [info]) == FilterStatus(
        ("node(s) were unschedulable",), True)


# ---- scores -------------------------------------------------------------------------------------

def test_prefer_no_schedule_taints_score_lower() -> None:
    nodes = infos([node("n1", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), node("n2")])
    assert score_taints(pod("a"), nodes) == {"n1": 0, "n2": 100}
    tolerant = pod("a", tolerations=[{"key": "soft", "operator": "Exists"}])
    assert score_taints(tolerant, nodes) == {"n1": 100, "n2": 100}


def test_preferred_node_affinity() -> None:
    nodes = infos([node("n1", labels={"disk": "ssd"}), node("n2")])
    p = pod("a", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 30, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}})
    assert score_node_affinity(p, nodes) == {"n1": 100, "n2": 0}


def test_least_allocated_and_balanced() -> None:
    nodes = infos([node("n1", cpu="2", memory="2Gi"), node("n2", cpu="2", memory="2Gi")],
                  [pod("x", cpu="1", memory="1Gi", node_name="n1")])
    least = score_least_allocated(pod("a", cpu="500m", memory="512Mi"), nodes)
    assert least["n2"] > least["n1"]
    assert least == {"n1": 25, "n2": 75}
    skewed = infos([node("n1", cpu="2", memory="2Gi")], [pod("x", cpu="2", node_name="n1")])
    assert score_balanced(pod("a", memory="1Gi"), skewed) == {"n1": 75}  # |1 - 0.5| / 2


def test_system_default_spreading_of_a_replicaset() -> None:
    nodes = [node("n1"), node("n2")]
    placed = infos(nodes, [pod("web-1", owner="rs1", node_name="n1")])
    scores = score_topology_spread(pod("web-2", owner="rs1"), placed, placed)
    assert scores["n2"] > scores["n1"]
    # A Pod of no controller is not spread by default.
    assert score_topology_spread(pod("lone"), placed, placed) == {"n1": 0, "n2": 0}


def test_system_default_spreading_of_a_service() -> None:
    nodes = [node("n1"), node("n2")]
    placed = infos(nodes, [pod("api-1", labels={"app": "api"}, node_name="n1"),
                           pod("other", labels={"app": "other"}, node_name="n2")])
    svc = {"metadata": {"name": "api", "namespace": "default"}, "spec": {"selector": {"app": "api"}}}
    # No controller: only a Service selecting the Pod makes kube spread it.
    assert score_topology_spread(pod("api-2", labels={"app": "api"}), placed, placed) == {"n1": 0, "n2": 0}
    scores = score_topology_spread(pod("api-2", labels={"app": "api"}), placed, placed, [svc])
    assert scores["n2"] > scores["n1"]
    elsewhere = {**svc, "metadata": {"name": "api", "namespace": "other"}}
    assert score_topology_spread(pod("api-2", labels={"app": "api"}), placed, placed, [elsewhere]) == {
        "n1": 0, "n2": 0}


def test_schedule_anyway_spread_scores() -> None:
    nodes = [node("a1", labels={ZONE: "a"}), node("b1", labels={ZONE: "b"})]
    placed = infos(nodes, [pod("w1", labels={"app": "web"}, node_name="a1")])
    p = pod("w2", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE, when="ScheduleAnyway"))
    assert filter_topology_spread(p, placed[0], placed) is None  # not a filter
    s = score_topology_spread(p, placed, placed)
    assert s["b1"] == 100 and s["a1"] < 100


def test_preferred_pod_affinity_and_anti_affinity() -> None:
    nodes = [node("n1"), node("n2")]
    placed = infos(nodes, [pod("cache", labels={"app": "cache"}, node_name="n1")])

    def preferred(kind: str) -> dict[str, Any]:
        return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST}}]}}

    assert score_inter_pod_affinity(pod("a", affinity=preferred("podAffinity")), placed, placed) == {"n1": 100, "n2": 0}
    assert score_inter_pod_affinity(pod("a", affinity=preferred("podAntiAffinity")), placed, placed) == {
        "n1": 0, "n2": 100}


def test_two_replicas_land_on_two_nodes_without_rules() -> None:
    nodes = [node("n1"), node("n2")]
    placed = infos(nodes, [pod("web-1", owner="rs1", node_name="n1")])
    new = pod("web-2", owner="rs1")
    for seed in range(20):  # no tie to break: spreading decides
        assert pick(score_nodes(new, placed, placed), random.Random(seed)) == "n2"


def test_ties_are_broken_at_random() -> None:
    seen = {pick({"n1": 10, "n2": 10, "n3": 5}, random.Random(seed)) for seed in range(50)}
    assert seen == {"n1", "n2"}


# ---- the message --------------------------------------------------------------------------------

def message(p: dict[str, Any], infos_: list[NodeInfo]) -> str:
    ok, failed = feasible(p, infos_)
    assert not ok
    return failure_message(p, len(infos_), failed, preempt(p, infos_, failed))


def test_failure_message_as_kube_writes_it() -> None:
    placed = infos([node("n1", unschedulable=True), node("n2")],
                   [pod("web-1", labels={"app": "web"}, node_name="n2")])
    assert message(pod("web-2", labels={"app": "web"}, affinity=anti("web")), placed) == (
        "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 1 node(s) were unschedulable. "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    tainted = infos([node(n, taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
                     for n in ("n1", "n2", "n3")])
    assert message(pod("a"), tainted) == (
        "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    full = infos([node("n1", cpu="1")], [pod("x", cpu="1", node_name="n1")])
    assert message(pod("a", cpu="1", preemptionPolicy="Never", priority=10), full) == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )
    assert failure_message(pod("a"), 0, {}) == "no nodes available to schedule pods"


def test_preemption_evicts_the_fewest_least_important_pods() -> None:
    def low(name: str, prio: int, on: str, cpu: str = "1") -> dict[str, Any]:
        return pod(name, cpu=cpu, node_name=on, priority=prio)

    nodes = [node("n1", cpu="2"), node("n2", cpu="2")]
    placed = infos(nodes, [low("a", 5, "n1"), low("b", 1, "n1"), low("c", 100, "n2"), low("d", 100, "n2")])
    important = pod("vip", cpu="1", priority=50)
    ok, failed = feasible(important, placed)
    assert not ok
    result = preempt(important, placed, failed)
    assert result.node == "n1"
    assert [v["metadata"]["name"] for v in result.victims] == ["b"]  # a (more important) is put back
    # Found room: the message has no preemption part.
    assert failure_message(important, 2, failed, result) == "0/2 nodes are available: 2 Insufficient cpu."


def test_preemption_that_cannot_help_says_why() -> None:
    placed = infos([node("n1", cpu="2")], [pod("a", cpu="1", node_name="n1", priority=0),
                                           pod("b", cpu="1", node_name="n1", priority=100)])
    big = pod("big", cpu="2", priority=50)
    # Taking away the lower-priority Pod is not enough: the filter's own reason is given.
    assert message(big, placed) == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient cpu."
    )
    same = pod("same", cpu="1", priority=0)  # equal priority: nobody to preempt
    assert message(same, placed).endswith("preemption: 0/1 nodes are available: 1 No preemption victims found "
                                          "for incoming pod.")


def test_no_second_preemption_while_victims_terminate() -> None:
    dying = pod("old", cpu="2", node_name="n1", priority=0)
    dying["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    dying["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    placed = infos([node("n1", cpu="2")], [dying])
    vip = pod("vip", cpu="1", priority=10)
    vip["status"]["nominatedNodeName"] = "n1"
    assert message(vip, placed) == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to a terminating pod on the nominated node."
    )
    # A Pod going away for another reason is no preemption of ours: preempting goes on.
    dying["status"]["conditions"] = []
    assert preempt(vip, placed, feasible(vip, placed)[1]).node == "n1"


def test_nominated_pods_hold_their_room() -> None:
    placed = infos([node("n1", cpu="2"), node("n2", cpu="2")], [pod("x", cpu="1", node_name="n2")])
    waiting = pod("vip", cpu="2", priority=100)
    waiting["status"]["nominatedNodeName"] = "n1"
    nominated = {"n1": [waiting]}
    ok, failed = feasible(pod("small", cpu="1", priority=0), placed, nominated=nominated)
    assert [i.name for i in ok] == ["n2"]
    assert failed["n1"].reasons == ("Insufficient cpu",)
    # A Pod more important than the nominated one does not give way; the nominated one ignores itself.
    assert [i.name for i in feasible(pod("vvip", cpu="1", priority=1000), placed, nominated=nominated)[0]] == [
        "n1", "n2"]
    assert [i.name for i in feasible(waiting, placed, nominated=nominated)[0]] == ["n1"]


def test_preemption_spares_pods_a_budget_protects() -> None:
    nodes = [node("n1", cpu="1"), node("n2", cpu="1")]
    placed = infos(nodes, [pod("guarded", cpu="1", node_name="n1", priority=0, labels={"app": "db"}),
                           pod("free", cpu="1", node_name="n2", priority=5, labels={"app": "batch"})])
    vip = pod("vip", cpu="1", priority=100)
    failed = feasible(vip, placed)[1]
    # Without budgets the cheapest victim (priority 0) goes; with one protecting it, the other.
    assert preempt(vip, placed, failed).node == "n1"
    budget = {"metadata": {"name": "db", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": 0}}
    result = preempt(vip, placed, failed, pdbs=[budget])
    assert result.node == "n2" and [v["metadata"]["name"] for v in result.victims] == ["free"]
