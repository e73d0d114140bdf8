"""Pods (kube's pkg/registry/core/pod), and the pod spec defaulting pod templates share."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from isthmus.apiserver.registry.defaulting import set_default
from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    col,
    dicts,
    dig,
    human_duration,
    name_of,
    parse_time,
)

Obj = dict[str, Any]


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    set_default(probe, "timeoutSeconds", 1)
    set_default(probe, "periodSeconds", 10)
    set_default(probe, "successThreshold", 1)
    set_default(probe, "failureThreshold", 3)
    for handler in ("httpGet",):
        h = probe.get(handler)
        if isinstance(h, dict):
            set_default(h, "path", "/")
            set_default(h, "scheme", "HTTP")


def _default_container(c: Obj) -> None:
    # SetDefaults_Container: imagePullPolicy from the tag, termination message defaults.
    image = c.get("image")
    if c.get("imagePullPolicy") in (None, "") and isinstance(image, str):
        last = image.rsplit("/", 1)[-1]
        tag = last.split("@", 1)[0].split(":", 1)[1] if ":" in last.split("@", 1)[0] else ""
        digest = "@" in last
        c["imagePullPolicy"] = "Always" if (not digest and tag in ("", "latest")) else "IfNotPresent"
    set_default(c, "terminationMessagePath", "/dev/termination-log")
    set_default(c, "terminationMessagePolicy", "File")
    for port in dicts(c.get("ports")):
        set_default(port, "protocol", "TCP")
    for env in dicts(c.get("env")):
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env.get("valueFrom"), dict) else None
        if isinstance(ref, dict):
            set_default(ref, "apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(probe))
    # SetDefaults_Pod: requests default to limits for resources that only set a limit.
    res = c.get("resources")
    if isinstance(res, dict) and isinstance(res.get("limits"), dict):
        requests: Obj = res["requests"] if isinstance(res.get("requests"), dict) else {}
        for name, qty in res["limits"].items():
            requests.setdefault(name, qty)
        if requests:
            res["requests"] = requests


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec (+ containers, volumes): what every Pod and pod template gets."""
    set_default(spec, "dnsPolicy", "ClusterFirst")
    set_default(spec, "restartPolicy", "Always")
    set_default(spec, "terminationGracePeriodSeconds", 30)
    set_default(spec, "schedulerName", "default-scheduler")
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in dicts(spec.get(key)):
            _default_container(c)
    for vol in dicts(spec.get("volumes")):
        for src in ("secret", "configMap", "downwardAPI", "projected"):
            if isinstance(vol.get(src), dict):
                set_default(vol[src], "defaultMode", 420)
        if not any(k for k in vol if k != "name"):
            vol["emptyDir"] = {}  # SetDefaults_Volume: a volume without a source is an emptyDir


# ---------------------------------------------------------------- admission and status on create

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def default_toleration_seconds(spec: Obj) -> None:
    """kube's DefaultTolerationSeconds admission plugin (on by default): a new pod tolerates the
    not-ready and unreachable NoExecute taints for 300 s unless it already tolerates them."""
    tolerations = spec.get("tolerations")
    tolerations = tolerations if isinstance(tolerations, list) else []

    def tolerated(taint: str) -> bool:
        return any(isinstance(t, dict) and t.get("key", "") in ("", taint) and t.get("effect", "") in ("", "NoExecute")
                   for t in tolerations)

    added = [{"key": taint, "operator": "Exists", "effect": "NoExecute",
              "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}
             for taint in (NOT_READY_TAINT, UNREACHABLE_TAINT) if not tolerated(taint)]
    if added:
        spec["tolerations"] = [*tolerations, *added]


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))((?:[KMGTPE]i)|[numkMGTPE]?|[eE][+-]?\d+)$")


def parse_quantity(q: Any) -> Decimal | None:
    """A resource.Quantity's value ("100m", "1Gi", 0.5), None if it is not one."""
    if isinstance(q, bool):
        return None
    if isinstance(q, (int, float)):
        return Decimal(str(q))
    m = _QUANTITY.fullmatch(str(q).strip()) if isinstance(q, str) else None
    if m is None:
        return None
    number, suffix = Decimal(m.group(1)), m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * Decimal(10) ** int(suffix[1:])


_QOS_RESOURCES = ("cpu", "memory")


def pod_qos(spec: Obj) -> str:
    """kube's qos.GetPodQOS (pkg/apis/core/helper/qos): BestEffort, Burstable or Guaranteed, from the
    cpu/memory requests and limits of the containers and init containers. Requests a container
    leaves out default to its limits (SetDefaults_Pod runs before kube computes the class)."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for c in [*dicts(spec.get("containers")), *dicts(spec.get("initContainers"))]:
        res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
        assert isinstance(res, dict)
        lim = res.get("limits") if isinstance(res.get("limits"), dict) else {}
        req = res.get("requests") if isinstance(res.get("requests"), dict) else {}
        assert isinstance(lim, dict) and isinstance(req, dict)
        req = {**lim, **req}
        for name in _QOS_RESOURCES:
            value = parse_quantity(req.get(name))
            if value is not None and value != 0:
                requests[name] = requests.get(name, Decimal(0)) + value
        found = set()
        for name in _QOS_RESOURCES:
            value = parse_quantity(lim.get(name))
            if value is not None and value != 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + value
        if found != set(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and len(requests) == len(limits) and all(limits.get(n) == v for n, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def default_pod(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)


def default_template(spec: Obj) -> None:
    tmpl = spec.get("template")
    if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict):
        default_pod_spec(tmpl["spec"])


def _pod(obj: Obj, now: float) -> list[Any]:
    """printPod: READY, STATUS (the reason kubectl shows) and RESTARTS with the last restart's age."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(spec, dict) and isinstance(status, dict)
    restarts = 0
    last_restart: float | None = None
    total = len(dicts(spec.get("containers")))
    ready = 0
    reason = str(status.get("reason") or status.get("phase") or "")

    def note_restart(cs: Obj) -> None:
        nonlocal restarts, last_restart
        restarts += int(cs.get("restartCount") or 0)
        finished = parse_time(dig(cs, "lastState", "terminated", "finishedAt"))
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished

    sidecars = {
        str(c.get("name")) for c in dicts(spec.get("initContainers")) if c.get("restartPolicy") == "Always"
    }
    total += len(sidecars)
    initializing = False
    init_statuses = dicts(status.get("initContainerStatuses"))
    n_init = len(dicts(spec.get("initContainers")))
    for i, cs in enumerate(init_statuses):
        note_restart(cs)
        name = str(cs.get("name"))
        if name in sidecars and cs.get("started") and cs.get("ready"):
            ready += 1
        term = dig(cs, "state", "terminated")
        waiting = dig(cs, "state", "waiting")
        if isinstance(term, dict) and term.get("exitCode") == 0:
            continue
        if name in sidecars and cs.get("started"):
            continue
        if isinstance(term, dict):
            if term.get("reason"):
                reason = f"Init:{term['reason']}"
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode')}"
        elif isinstance(waiting, dict) and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{n_init}"
        initializing = True
        break

    if not initializing:
        restarts, last_restart = 0, None  # kube counts only regular containers once initialized
        has_running = False
        for cs in reversed(dicts(status.get("containerStatuses"))):
            note_restart(cs)
            waiting = dig(cs, "state", "waiting")
            term = dig(cs, "state", "terminated")
            if isinstance(waiting, dict) and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif isinstance(term, dict) and term.get("reason"):
                reason = str(term["reason"])
            elif isinstance(term, dict):
                reason = (
                    f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}"
                )
            elif cs.get("ready") and isinstance(dig(cs, "state", "running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_cond = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in dicts(status.get("conditions"))
            )
            reason = "Running" if ready_cond else "NotReady"

    if dig(obj, "metadata", "deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"

    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"
    gates = dicts(spec.get("readinessGates"))
    gates_text = "<none>"
    if gates:
        true = {str(c.get("type")) for c in dicts(status.get("conditions")) if c.get("status") == "True"}
        gates_text = f"{sum(1 for g in gates if g.get('conditionType') in true)}/{len(gates)}"
    return [
        name_of(obj),
        f"{ready}/{total}",
        reason,
        restarts_text,
        age(obj, now),
        str(status.get("podIP") or "") or "<none>",
        str(spec.get("nodeName") or "") or "<none>",
        str(status.get("nominatedNodeName") or "") or "<none>",
        gates_text,
    ]


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
    col("Status", desc="The aggregate status of the containers in this pod."),
    col(
        "Restarts",
        desc="The number of times the containers in this pod have been restarted and when the "
        "last container in this pod has restarted.",
    ),
    AGE_COLUMN,
    col(
        "IP",
        desc="IP address allocated to the pod. Routable at least within the cluster.",
        priority=1,
    ),
    col("Node", desc="NodeName is a request to schedule this pod onto a specific node.", priority=1),
    col(
        "Nominated Node",
        desc="nominatedNodeName is set when this pod preempts other pods on the node.",
        priority=1,
    ),
    col(
        "Readiness Gates",
        desc="If specified, all readiness gates will be evaluated for pod readiness.",
        priority=1,
    ),
]


class PodStrategy(Strategy):
    field_selectors = fields(
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )

    def default(self, obj: Obj) -> None:
        default_pod(obj)

    def deletion_grace(self, obj: Obj, options: Obj) -> int:
        """kube's pod CheckGracefulDelete: a Pod bound to a node and not finished stays, terminating,
        for its grace period (DeleteOptions', else spec.terminationGracePeriodSeconds, else 30) so
        the kubelet stops its containers — whose ServiceAccount tokens stay valid meanwhile — and
        then deletes it with grace 0. An unbound or finished Pod goes at once."""
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return max(0, int(grace))

    def prepare_for_create(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_toleration_seconds(spec)

    def initial_status(self, obj: Obj) -> Obj | None:
        # kube's podStrategy.PrepareForCreate: Pending, with the QoS class of its resources.
        spec = obj.get("spec")
        return {"phase": "Pending", "qosClass": pod_qos(spec if isinstance(spec, dict) else {})}

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _pod(obj, now)
