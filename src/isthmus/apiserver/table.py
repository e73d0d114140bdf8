"""meta.k8s.io/v1 Table responses (what `kubectl get` asks for).

Like kube-apiserver:
- built-in kinds get the columns of kube's printers (pkg/printers/internalversion), computed in Go
  there and here; the server always prints the wide columns, kubectl hides priority>0 ones;
- their Age cell is already humanized ("5m", "3d4h"), as kube's translateTimestampSince does;
- CRDs get Name + additionalPrinterColumns, or Name + Age when the version declares none
  (apiextensions' serveDefaultColumnsIfEmpty); `date` cells are humanized by the server too;
- CustomResourceDefinitions themselves use kube's default table convertor: Name, Created At (RFC3339).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from isthmus.apiserver.resources import ResourceInfo

Obj = dict[str, Any]
Column = dict[str, Any]

_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
    "It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def _col(name: str, typ: str = "string", desc: str = "", fmt: str = "", priority: int = 0) -> Column:
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


_NAME = _col("Name", "string", _NAME_DESC, "name")
_AGE = _col("Age", "string", _CREATED_DESC)


# ---------------------------------------------------------------- time


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _since(value: Any, now: float) -> str:
    """translateTimestampSince: '<unknown>' for a missing timestamp."""
    ts = _parse_time(value)
    if ts is None:
        return "<unknown>"
    return human_duration(now - ts)


def _g(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _list(val: Any) -> list[Any]:
    return val if isinstance(val, list) else []


def _dicts(val: Any) -> list[Obj]:
    return [x for x in _list(val) if isinstance(x, dict)]


def _age(obj: Obj, now: float) -> str:
    return _since(_g(obj, "metadata", "creationTimestamp"), now)


def _name(obj: Obj) -> str:
    return str(_g(obj, "metadata", "name") or "")


def _labels_string(selector: Any) -> str:
    if not isinstance(selector, dict) or not selector:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _label_selector_string(sel: Any) -> str:
    """metav1.LabelSelectorAsSelector(...).String(); an empty selector prints as <none>."""
    if not isinstance(sel, dict):
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for req in _dicts(sel.get("matchExpressions")):
        key, op, values = req.get("key", ""), req.get("operator", ""), sorted(req.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) if parts else "<none>"


def _containers_images(spec: Any) -> tuple[str, str]:
    cs = _dicts(_g(spec, "containers"))
    return ",".join(str(c.get("name", "")) for c in cs), ",".join(str(c.get("image", "")) for c in cs)


def _more(items: list[str], total: int, limit: int) -> str:
    text = ",".join(items)
    return f"{text} + {total - limit} more..." if total > limit else text


# ---------------------------------------------------------------- built-in printers


def _ns(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), str(_g(obj, "status", "phase") or ""), _age(obj, now)]


def _lb_addresses(ingress: Any, wide: bool = True) -> str:
    addrs = [str(i.get("ip") or i.get("hostname") or "") for i in _dicts(ingress)]
    addrs = [a for a in addrs if a]
    text = ",".join(addrs)
    if not wide and len(text) > 16:
        return text[:13] + "..."
    return text


def _service(obj: Obj, now: float) -> list[Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    stype = str(spec.get("type") or "")
    cluster_ip = str(spec.get("clusterIP") or "") or "<none>"
    external = [str(x) for x in _list(spec.get("externalIPs"))]
    if stype in ("ClusterIP", "NodePort"):
        ext = ",".join(external) if external else "<none>"
    elif stype == "LoadBalancer":
        lb = _lb_addresses(_g(obj, "status", "loadBalancer", "ingress"))
        parts = ([lb] if lb else []) + external
        ext = ",".join(parts) if parts else "<pending>"
    elif stype == "ExternalName":
        ext = str(spec.get("externalName") or "")
    else:
        ext = "<unknown>"
    ports = []
    for p in _dicts(spec.get("ports")):
        proto = p.get("protocol") or "TCP"
        if p.get("nodePort"):
            ports.append(f"{p.get('port')}:{p['nodePort']}/{proto}")
        else:
            ports.append(f"{p.get('port')}/{proto}")
    return [
        _name(obj),
        stype,
        cluster_ip,
        ext,
        ",".join(ports) or "<none>",
        _age(obj, now),
        _labels_string(spec.get("selector")),
    ]


def _pod(obj: Obj, now: float) -> list[Any]:
    """printPod: READY, STATUS (the reason kubectl shows) and RESTARTS with the last restart's age."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(spec, dict) and isinstance(status, dict)
    restarts = 0
    last_restart: float | None = None
    total = len(_dicts(spec.get("containers")))
    ready = 0
    reason = str(status.get("reason") or status.get("phase") or "")

    def note_restart(cs: Obj) -> None:
        nonlocal restarts, last_restart
        restarts += int(cs.get("restartCount") or 0)
        finished = _parse_time(_g(cs, "lastState", "terminated", "finishedAt"))
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished

    sidecars = {
        str(c.get("name")) for c in _dicts(spec.get("initContainers")) if c.get("restartPolicy") == "Always"
    }
    total += len(sidecars)
    initializing = False
    init_statuses = _dicts(status.get("initContainerStatuses"))
    n_init = len(_dicts(spec.get("initContainers")))
    for i, cs in enumerate(init_statuses):
        note_restart(cs)
        name = str(cs.get("name"))
        if name in sidecars and cs.get("started") and cs.get("ready"):
            ready += 1
        term = _g(cs, "state", "terminated")
        waiting = _g(cs, "state", "waiting")
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
        for cs in reversed(_dicts(status.get("containerStatuses"))):
            note_restart(cs)
            waiting = _g(cs, "state", "waiting")
            term = _g(cs, "state", "terminated")
            if isinstance(waiting, dict) and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif isinstance(term, dict) and term.get("reason"):
                reason = str(term["reason"])
            elif isinstance(term, dict):
                reason = (
                    f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}"
                )
            elif cs.get("ready") and isinstance(_g(cs, "state", "running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_cond = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in _dicts(status.get("conditions"))
            )
            reason = "Running" if ready_cond else "NotReady"

    if _g(obj, "metadata", "deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"

    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"
    gates = _dicts(spec.get("readinessGates"))
    gates_text = "<none>"
    if gates:
        true = {str(c.get("type")) for c in _dicts(status.get("conditions")) if c.get("status") == "True"}
        gates_text = f"{sum(1 for g in gates if g.get('conditionType') in true)}/{len(gates)}"
    return [
        _name(obj),
        f"{ready}/{total}",
        reason,
        restarts_text,
        _age(obj, now),
        str(status.get("podIP") or "") or "<none>",
        str(spec.get("nodeName") or "") or "<none>",
        str(status.get("nominatedNodeName") or "") or "<none>",
        gates_text,
    ]


def _deployment(obj: Obj, now: float) -> list[Any]:
    containers, images = _containers_images(_g(obj, "spec", "template", "spec"))
    desired = int(_g(obj, "spec", "replicas") or 0)
    st = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(st, dict)
    return [
        _name(obj),
        f"{int(st.get('readyReplicas') or 0)}/{desired}",
        int(st.get("updatedReplicas") or 0),
        int(st.get("availableReplicas") or 0),
        _age(obj, now),
        containers,
        images,
        _label_selector_string(_g(obj, "spec", "selector")),
    ]


def _statefulset(obj: Obj, now: float) -> list[Any]:
    containers, images = _containers_images(_g(obj, "spec", "template", "spec"))
    desired = int(_g(obj, "spec", "replicas") or 0)
    ready = int(_g(obj, "status", "readyReplicas") or 0)
    return [_name(obj), f"{ready}/{desired}", _age(obj, now), containers, images]


def _configmap(obj: Obj, now: float) -> list[Any]:
    n = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_name(obj), n, _age(obj, now)]


def _secret(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), str(obj.get("type") or ""), len(obj.get("data") or {}), _age(obj, now)]


def _endpointslice(obj: Obj, now: float) -> list[Any]:
    ports = _dicts(obj.get("ports"))
    if ports:
        shown = [
            str(p["port"]) if p.get("port") is not None else (str(p["name"]) if p.get("name") else "*")
            for p in ports[:3]
        ]
        ports_text = _more(shown, len(ports), 3)
    else:
        ports_text = "<unset>"
    addrs = [str(a) for e in _dicts(obj.get("endpoints")) for a in _list(e.get("addresses"))]
    endpoints_text = _more(addrs[:3], len(addrs), 3) if addrs else "<unset>"
    return [_name(obj), str(obj.get("addressType") or ""), ports_text, endpoints_text, _age(obj, now)]


def _lease(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), str(_g(obj, "spec", "holderIdentity") or ""), _age(obj, now)]


def _event_fields(obj: Obj) -> Obj:
    """events.k8s.io/v1 objects mapped to the core fields kube's event printer reads."""
    if "regarding" in obj or "note" in obj or "deprecatedCount" in obj:
        return {
            "involvedObject": obj.get("regarding") or {},
            "message": obj.get("note"),
            "firstTimestamp": obj.get("deprecatedFirstTimestamp"),
            "lastTimestamp": obj.get("deprecatedLastTimestamp"),
            "count": obj.get("deprecatedCount"),
            "source": obj.get("deprecatedSource") or {},
            "eventTime": obj.get("eventTime"),
            "series": obj.get("series"),
            "reportingComponent": obj.get("reportingController"),
            "reportingInstance": obj.get("reportingInstance"),
            "type": obj.get("type"),
            "reason": obj.get("reason"),
            "metadata": obj.get("metadata"),
        }
    return obj


def _event(raw: Obj, now: float) -> list[Any]:
    obj = _event_fields(raw)
    first = _since(obj.get("firstTimestamp"), now)
    if _parse_time(obj.get("firstTimestamp")) is None:
        first = _since(obj.get("eventTime"), now)
    last = (
        _since(obj.get("lastTimestamp"), now) if _parse_time(obj.get("lastTimestamp")) is not None else first
    )
    count = int(obj.get("count") or 0)
    series = obj.get("series")
    if isinstance(series, dict):
        last = _since(series.get("lastObservedTime"), now)
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    inv = obj.get("involvedObject") if isinstance(obj.get("involvedObject"), dict) else {}
    assert isinstance(inv, dict)
    kind = str(inv.get("kind") or "").lower()
    target = f"{kind}/{inv['name']}" if inv.get("name") else kind
    src = obj.get("source") if isinstance(obj.get("source"), dict) else {}
    assert isinstance(src, dict)
    if src.get("component"):
        source = str(src["component"]) + (f", {src['host']}" if src.get("host") else "")
    else:
        source = str(obj.get("reportingComponent") or "")
        if obj.get("reportingInstance"):
            source += f", {obj['reportingInstance']}"
    return [
        last,
        str(obj.get("type") or ""),
        str(obj.get("reason") or ""),
        target,
        str(inv.get("fieldPath") or ""),
        source,
        str(obj.get("message") or "").strip(),
        first,
        count,
        _name(raw),
    ]


def _ingress(obj: Obj, now: float) -> list[Any]:
    cls = str(_g(obj, "spec", "ingressClassName") or "") or "<none>"
    rules = _dicts(_g(obj, "spec", "rules"))
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(str(rule["host"]))
    hosts_text = "*" if not hosts else (",".join(hosts) + (f" + {len(rules) - 3} more..." if more else ""))
    address = _lb_addresses(_g(obj, "status", "loadBalancer", "ingress"))
    ports = "80, 443" if _list(_g(obj, "spec", "tls")) else "80"
    return [_name(obj), cls, hosts_text, address, ports, _age(obj, now)]


def _ingressclass(obj: Obj, now: float) -> list[Any]:
    params = _g(obj, "spec", "parameters")
    text = "<none>"
    if isinstance(params, dict):
        text = str(params.get("kind") or "")
        if params.get("apiGroup"):
            text += "." + str(params["apiGroup"])
        text += "/" + str(params.get("name") or "")
    return [_name(obj), str(_g(obj, "spec", "controller") or ""), text, _age(obj, now)]


def _crd(obj: Obj, now: float) -> list[Any]:
    ts = _parse_time(_g(obj, "metadata", "creationTimestamp"))
    created = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else None
    return [_name(obj), created]


_Printer = Callable[[Obj, float], list[Any]]

_BUILTIN: dict[tuple[str, str], tuple[list[Column], _Printer]] = {
    ("", "namespaces"): ([_NAME, _col("Status", desc="The status of the namespace"), _AGE], _ns),
    ("", "services"): (
        [
            _NAME,
            _col("Type", desc="The type of the service."),
            _col("Cluster-IP", desc="The IP address of the service."),
            _col("External-IP", desc="The external IP address of the service."),
            _col("Port(s)", desc="The ports the service listens on."),
            _AGE,
            _col(
                "Selector",
                desc="Route service traffic to pods with label keys and values matching this selector.",
                priority=1,
            ),
        ],
        _service,
    ),
    ("", "pods"): (
        [
            _NAME,
            _col("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
            _col("Status", desc="The aggregate status of the containers in this pod."),
            _col(
                "Restarts",
                desc="The number of times the containers in this pod have been restarted and when the "
                "last container in this pod has restarted.",
            ),
            _AGE,
            _col(
                "IP",
                desc="IP address allocated to the pod. Routable at least within the cluster.",
                priority=1,
            ),
            _col("Node", desc="NodeName is a request to schedule this pod onto a specific node.", priority=1),
            _col(
                "Nominated Node",
                desc="nominatedNodeName is set when this pod preempts other pods on the node.",
                priority=1,
            ),
            _col(
                "Readiness Gates",
                desc="If specified, all readiness gates will be evaluated for pod readiness.",
                priority=1,
            ),
        ],
        _pod,
    ),
    ("apps", "deployments"): (
        [
            _NAME,
            _col("Ready", desc="Number of the pod with ready state"),
            _col(
                "Up-to-date",
                "integer",
                "Total number of non-terminated pods targeted by this deployment that have "
                "the desired template spec.",
            ),
            _col(
                "Available",
                "integer",
                "Total number of available pods (ready for at least minReadySeconds) "
                "targeted by this deployment.",
            ),
            _AGE,
            _col("Containers", desc="Names of each container in the template.", priority=1),
            _col("Images", desc="Images referenced by each container in the template.", priority=1),
            _col(
                "Selector",
                desc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will "
                "be the ones affected by this deployment.",
                priority=1,
            ),
        ],
        _deployment,
    ),
    ("apps", "statefulsets"): (
        [
            _NAME,
            _col("Ready", desc="Number of the pod with ready state"),
            _AGE,
            _col("Containers", desc="Names of each container in the template.", priority=1),
            _col("Images", desc="Images referenced by each container in the template.", priority=1),
        ],
        _statefulset,
    ),
    ("", "configmaps"): (
        [_NAME, _col("Data", "integer", "Data contains the configuration data."), _AGE],
        _configmap,
    ),
    ("", "secrets"): (
        [
            _NAME,
            _col("Type", desc="Used to facilitate programmatic handling of secret data."),
            _col("Data", "integer", "Data contains the secret data."),
            _AGE,
        ],
        _secret,
    ),
    ("discovery.k8s.io", "endpointslices"): (
        [
            _NAME,
            _col("AddressType", desc="Type of address carried by this EndpointSlice."),
            _col("Ports", desc="Ports of this EndpointSlice."),
            _col("Endpoints", desc="Endpoints of this EndpointSlice."),
            _AGE,
        ],
        _endpointslice,
    ),
    ("coordination.k8s.io", "leases"): (
        [_NAME, _col("Holder", desc="The holder of the lease."), _AGE],
        _lease,
    ),
    ("networking.k8s.io", "ingresses"): (
        [
            _NAME,
            _col("Class", desc="The name of the IngressClass resource that should be used."),
            _col("Hosts", desc="Hosts that incoming requests are matched against before the ingress rule"),
            _col("Address", desc="Address is a list containing ingress points for the load-balancer"),
            _col("Ports", desc="Ports of TLS configurations that open"),
            _AGE,
        ],
        _ingress,
    ),
    ("networking.k8s.io", "ingressclasses"): (
        [
            _NAME,
            _col("Controller", desc="Controller that is responsible for handling this class"),
            _col("Parameters", desc="A reference to a resource with additional parameters"),
            _AGE,
        ],
        _ingressclass,
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        [
            _NAME,
            _col("Created At", "date", _CREATED_DESC),
        ],
        _crd,
    ),
}

_EVENT_COLUMNS = [
    _col("Last Seen", desc="Time when last this event was observed"),
    _col("Type", desc="Type of this event (Normal, Warning), new types could be added in the future."),
    _col("Reason", desc="The reason for this event."),
    _col("Object", desc="The object that this event is about."),
    _col("Subobject", desc="The subobject that this event is about.", priority=1),
    _col("Source", desc="The component reporting this event.", priority=1),
    _col("Message", desc="A human-readable description of the status of this operation."),
    _col("First Seen", desc="The time at which the event was first recorded.", priority=1),
    _col("Count", "integer", "The number of times this event has occurred.", priority=1),
    _col("Name", "string", _NAME_DESC, "name", priority=1),
]
_BUILTIN[("", "events")] = (_EVENT_COLUMNS, _event)
_BUILTIN[("events.k8s.io", "events")] = (_EVENT_COLUMNS, _event)


# ---------------------------------------------------------------- JSONPath (the subset CRD columns use)

_TOKEN = re.compile(r"""\.\.|\.(?P<field>[^.\[\]]+)|\[(?P<bracket>(?:'[^']*'|"[^"]*"|[^\]])*)\]""")
_FILTER = re.compile(r"""^\?\(\s*@((?:\.[\w\-/]+|\['[^']*'\])+)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*\)$""")


class JSONPath:
    """kube's JSONPath for printer columns: `.a.b`, `['a.b']`, `[0]`, `[-1]`, `[*]`, `[1:3]`, and filters
    `[?(@.type=="Ready")]`. Missing keys give no result (AllowMissingKeys)."""

    def __init__(self, expr: str) -> None:
        text = expr.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1].strip()
        if text.startswith("$"):
            text = text[1:]
        if text and not text.startswith((".", "[")):
            text = "." + text
        self.steps: list[tuple[str, Any]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ValueError(f"unrecognized column definition {expr!r}")
            pos = m.end()
            if m.group(0) == "..":
                self.steps.append(("recurse", None))
                # a following name is matched at any depth
                m2 = re.match(r"[^.\[\]]+", text[pos:])
                if m2:
                    self.steps.append(("field", m2.group(0)))
                    pos += m2.end()
            elif m.group("field") is not None:
                self.steps.append(("field", m.group("field")))
            else:
                self.steps.append(self._bracket(m.group("bracket").strip(), expr))

    @staticmethod
    def _bracket(inner: str, expr: str) -> tuple[str, Any]:
        if inner == "*":
            return ("all", None)
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            return ("field", inner[1:-1])
        if inner.startswith("?"):
            fm = _FILTER.match(inner)
            if fm is None:
                raise ValueError(f"unrecognized column definition {expr!r}")
            path = JSONPath(fm.group(1))
            literal: Any = None
            if fm.group(3) is not None:
                raw = fm.group(3).strip()
                if raw[:1] in "'\"":
                    literal = raw[1:-1]
                else:
                    try:
                        literal = json.loads(raw)
                    except ValueError:
                        literal = raw
            return ("filter", (path, fm.group(2), literal))
        if ":" in inner:
            parts = [p.strip() for p in inner.split(":")]
            nums = [int(p) if p else None for p in parts[:2]]
            return ("slice", (nums[0], nums[1] if len(nums) > 1 else None))
        try:
            return ("index", int(inner))
        except ValueError as exc:
            raise ValueError(f"unrecognized column definition {expr!r}") from exc

    def find(self, obj: Any) -> list[Any]:
        current = [obj]
        for op, arg in self.steps:
            nxt: list[Any] = []
            for v in current:
                nxt.extend(_step(v, op, arg))
            current = nxt
        return current


def _step(v: Any, op: str, arg: Any) -> list[Any]:
    if op == "field":
        return [v[arg]] if isinstance(v, dict) and arg in v else []
    if op == "index":
        if isinstance(v, list) and -len(v) <= arg < len(v):
            return [v[arg]]
        return []
    if op == "all":
        if isinstance(v, list):
            return list(v)
        return list(v.values()) if isinstance(v, dict) else []
    if op == "slice":
        return list(v[arg[0] : arg[1]]) if isinstance(v, list) else []
    if op == "recurse":
        out: list[Any] = []
        stack = [v]
        while stack:
            cur = stack.pop(0)
            out.append(cur)
            if isinstance(cur, dict):
                stack.extend(cur.values())
            elif isinstance(cur, list):
                stack.extend(cur)
        return out
    if op == "filter":
        path, cmp, literal = arg
        items = v if isinstance(v, list) else [v]
        return [item for item in items if _matches(path.find(item), cmp, literal)]
    return []


def _matches(found: list[Any], cmp: str | None, literal: Any) -> bool:
    if cmp is None:
        return bool(found)
    if not found:
        return False
    val = found[0]
    if cmp == "==":
        return bool(val == literal or str(val) == str(literal))
    if cmp == "!=":
        return bool(val != literal and str(val) != str(literal))
    try:
        a, b = float(val), float(literal)
    except (TypeError, ValueError):
        return False
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[cmp]


def _text(value: Any) -> str:
    """jsonpath PrintResults: maps and lists as compact JSON, scalars as Go's %v."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(col_type: str, value: Any, now: float) -> Any:
    """apiextensions' cellForJSONValue; `string` columns print anything."""
    if value is None:
        return None
    if col_type == "string":
        return _text(value)
    if col_type == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        return None
    if col_type == "number":
        if isinstance(value, bool):
            return None
        return float(value) if isinstance(value, (int, float)) else None
    if col_type == "boolean":
        return value if isinstance(value, bool) else None
    if col_type == "date":
        if not isinstance(value, str):
            return None
        ts = _parse_time(value)
        return "<invalid>" if ts is None else human_duration(now - ts)
    return None


def _crd_columns(info: ResourceInfo) -> tuple[list[Column], list[tuple[str, JSONPath | None]]]:
    cols = info.printer_columns or [
        {
            "name": "Age",
            "type": "date",
            "jsonPath": ".metadata.creationTimestamp",
            "description": _CREATED_DESC,
        }
    ]
    defs: list[Column] = [_NAME]
    paths: list[tuple[str, JSONPath | None]] = []
    for c in cols:
        jp = str(c.get("jsonPath") or "")
        try:
            path: JSONPath | None = JSONPath(jp)
        except ValueError:
            path = None
        desc = str(c.get("description") or f"Custom resource definition column (in JSONPath format): {jp}")
        defs.append(
            _col(
                str(c.get("name") or ""),
                str(c.get("type") or "string"),
                desc,
                str(c.get("format") or ""),
                int(c.get("priority") or 0),
            )
        )
        paths.append((str(c.get("type") or "string"), path))
    return defs, paths


# ---------------------------------------------------------------- public


def to_table(
    info: ResourceInfo,
    objects: list[dict[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    continue_token: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Columns: info.printer_columns (jsonPath evaluated on each object) or the kind's built-in columns,
    NAME first and AGE (date type from creationTimestamp); rows[].object is a PartialObjectMetadata
    (includeObject=Metadata), the full object (Object) or absent (None)."""
    t = time.time() if now is None else now
    builtin = _BUILTIN.get((info.group, info.plural)) if info.builtin and not info.printer_columns else None
    rows: list[dict[str, Any]] = []
    if builtin is not None:
        columns, printer = builtin
        columns = [dict(c) for c in columns]
        for obj in objects:
            rows.append({"cells": printer(obj, t)})
    else:
        columns, paths = _crd_columns(info)
        for obj in objects:
            cells: list[Any] = [_name(obj)]
            for col_type, path in paths:
                found = path.find(obj) if path is not None else []
                cells.append(_cell(col_type, found[0], t) if found else None)
            rows.append({"cells": cells})
    for row, obj in zip(rows, objects, strict=True):
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": rows,
    }
