"""Pods (kube's pkg/registry/core/pod), and the pod spec defaulting pod templates share."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from isthmus.apiserver.apimachinery import validation
from isthmus.apiserver.apimachinery.errors import cause, go_quote
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.registry.defaulting import set_default
from isthmus.apiserver.registry.godiff import Shape, cmp_diff
from isthmus.apiserver.registry.strategy import Cause, Strategy, fields
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


def default_host_network_ports(spec: Obj) -> None:
    """SetDefaults_Pod: a hostNetwork Pod's ports listen on the host, so an unset hostPort is its
    containerPort. Pods only: since v1.28 kube leaves pod templates alone (the
    DefaultHostNetworkHostPortsInPodTemplates gate, off), so a Deployment's template keeps hostPort unset."""
    if not spec.get("hostNetwork"):
        return
    for key in ("containers", "initContainers"):
        for c in dicts(spec.get(key)):
            for port in dicts(c.get("ports")):
                if not port.get("hostPort"):
                    port["hostPort"] = port.get("containerPort")


def default_pod(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)
        default_host_network_ports(spec)


def default_template(spec: Obj) -> None:
    tmpl = spec.get("template")
    if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict):
        default_pod_spec(tmpl["spec"])


# ---------------------------------------------------------------- update validation (ValidatePodUpdate)

# What kube v1.32 names in the Forbidden error (updatablePodSpecFieldsNoResources: in-place resize,
# InPlacePodVerticalScaling, is alpha and off there).
UPDATABLE_FIELDS = ",".join((
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
))
_MAX_INT32 = 2**31 - 1

# The internal core.PodSpec's field order (the diff lists fields so); hostNetwork and its kin sit in
# its SecurityContext there, listed here where a JSON PodSpec has them.
_POD_SPEC_ORDER = [
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
    "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName",
    "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
    "shareProcessNamespace", "hostUsers", "securityContext", "imagePullSecrets", "hostname", "subdomain",
    "setHostnameAsFQDN", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority",
    "preemptionPolicy", "dnsConfig", "readinessGates", "runtimeClassName", "overhead", "enableServiceLinks",
    "topologySpreadConstraints", "os", "schedulingGates", "resourceClaims", "resources",
]
_CONTAINER_ORDER = [
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe",
    "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
    "stdin", "stdinOnce", "tty",
]
_POD_SPEC_SHAPE = Shape(
    types={
        "volumes": "[]core.Volume", "initContainers": "[]core.Container", "containers": "[]core.Container",
        "ephemeralContainers": "[]core.EphemeralContainer", "tolerations": "[]core.Toleration",
        "ports": "[]core.ContainerPort", "env": "[]core.EnvVar", "volumeMounts": "[]core.VolumeMount",
        "resources": "core.ResourceRequirements", "securityContext": "&core.PodSecurityContext",
        "affinity": "&core.Affinity", "schedulingGates": "[]core.PodSchedulingGate",
        "imagePullSecrets": "[]core.LocalObjectReference", "nodeSelector": "map[string]string",
        "readinessGates": "[]core.PodReadinessGate", "hostAliases": "[]core.HostAlias",
    },
    maps=frozenset({"nodeSelector", "limits", "requests", "overhead", "labels", "matchLabels"}),
    pointers=frozenset({
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "automountServiceAccountToken", "priority",
        "preemptionPolicy", "runtimeClassName", "enableServiceLinks", "setHostnameAsFQDN", "hostUsers",
        "shareProcessNamespace", "tolerationSeconds", "defaultMode", "runAsUser", "runAsGroup", "runAsNonRoot",
        "privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "fsGroup", "optional",
    }),
    order={"core.PodSpec": _POD_SPEC_ORDER, "core.Container": _CONTAINER_ORDER,
           "core.EnvVar": ["name", "value", "valueFrom"],
           "core.Toleration": ["key", "operator", "value", "effect", "tolerationSeconds"],
           "core.ContainerPort": ["name", "hostPort", "containerPort", "protocol", "hostIP"]},
    # Go's zero values of plain (non-pointer) fields, as cmp prints an absent one
    zeros={**dict.fromkeys(("workingDir", "nodeName", "serviceAccountName", "hostname", "subdomain",
                            "schedulerName", "priorityClassName", "dnsPolicy", "imagePullPolicy",
                            "terminationMessagePath", "terminationMessagePolicy", "image", "name", "value"), '""'),
           **dict.fromkeys(("hostNetwork", "hostPID", "hostIPC", "stdin", "stdinOnce", "tty"), "false"),
           **dict.fromkeys(("hostPort", "containerPort"), "0"), "resources": "{}"},
)
_QUANTITY_MAPS = frozenset({"limits", "requests", "overhead"})


class _Quantity(str):
    """A resource.Quantity in the compared form: "1" and "1000m" are the same amount (Semantic.DeepEqual)."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            mine, theirs = parse_quantity(str(self)), parse_quantity(str(other))
            if mine is not None and theirs is not None:
                return mine == theirs
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


def semantic(value: Any, key: str = "") -> Any:
    """A JSON value as the Go object it decodes to, compared as apiequality.Semantic does: absent, null
    and Go's zero values ("", 0 of a plain int, false of a plain bool, empty lists and maps) alike."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if key in _QUANTITY_MAPS and isinstance(v, (str, int, float)) and not isinstance(v, bool):
                out[k] = _Quantity(str(v))
                continue
            sv = semantic(v, k)
            if sv is None or sv == "" or sv == [] or sv == {}:
                continue
            if (sv is False or (type(sv) is int and sv == 0)) and k not in _POD_SPEC_SHAPE.pointers:
                continue  # a pointer's false or 0 is a value, a plain field's is its absence
            out[k] = sv
        return out
    if isinstance(value, list):
        return [semantic(v, key) for v in value]
    return value


def _equal(a: Any, b: Any) -> bool:
    return bool(semantic(a) == semantic(b))


def _container_updates(new: list[Obj], old: list[Obj], path: str) -> tuple[list[Cause], bool]:
    """ValidateContainerUpdates: the same containers, each with an image (stop: nothing else is checked)."""
    if len(new) != len(old):
        return [validation.forbidden(path, "pod updates may not add or remove containers")], True
    out: list[Cause] = []
    for i, c in enumerate(new):
        image = c.get("image")
        image = image if isinstance(image, str) else ""
        if not image:
            out.append(validation.required(f"{path}[{i}].image"))
        if image.strip() != image:
            out.append(validation.invalid(f"{path}[{i}].image", image, "must not have leading or trailing whitespace"))
    return out, False


def _only_added_tolerations(new: list[Obj], old: list[Obj]) -> list[Cause]:
    """validateOnlyAddedTolerations: each old toleration is still there, its tolerationSeconds aside."""
    for was in old:
        if not any(_equal({**was, "tolerationSeconds": t.get("tolerationSeconds")}, t) for t in new):
            return [validation.forbidden("spec.tolerations",
                                         "existing toleration can not be modified except its tolerationSeconds")]
    return []


def _only_deleted_gates(new: list[Obj], old: list[Obj]) -> list[Cause]:
    """validateOnlyDeletedSchedulingGates: gates may go, none may come."""
    known = {str(g.get("name")) for g in old}
    return [validation.forbidden(f"spec.schedulingGates[{i}].name",
                                 f"only deletion is allowed, but found new scheduling gate '{g.get('name')}'")
            for i, g in enumerate(new) if str(g.get("name")) not in known]


def _node_selector_additions(new: Obj, old: Obj) -> list[Cause]:
    """validateNodeSelectorMutation: a gated Pod's nodeSelector may gain keys, not lose or change them
    (the new map printed as Go's %#v, keys sorted)."""
    if all(k in new and new[k] == v for k, v in old.items()):
        return []
    shown = ", ".join(f"{go_quote(str(k))}:{go_quote(str(v))}" for k, v in sorted(new.items()))
    return [cause("spec.nodeSelector", f"Invalid value: map[string]string{{{shown}}}: only additions to "
                                       "spec.nodeSelector are allowed (no mutations or deletions)")]


def _go_requirements(reqs: Any) -> str:
    """%#v of an internal []core.NodeSelectorRequirement."""
    if not isinstance(reqs, list) or not reqs:
        return "[]core.NodeSelectorRequirement(nil)"
    items = []
    for r in dicts(reqs):
        values = r.get("values")
        shown = ("[]string{" + ", ".join(go_quote(str(v)) for v in values) + "}"
                 if isinstance(values, list) and values else "[]string(nil)")
        items.append(f'core.NodeSelectorRequirement{{Key:{go_quote(str(r.get("key") or ""))}, '
                     f'Operator:{go_quote(str(r.get("operator") or ""))}, Values:{shown}}}')
    return "[]core.NodeSelectorRequirement{" + ", ".join(items) + "}"


def _go_term(term: Obj) -> str:
    return (f"core.NodeSelectorTerm{{MatchExpressions:{_go_requirements(term.get('matchExpressions'))}, "
            f"MatchFields:{_go_requirements(term.get('matchFields'))}}}")


def _node_affinity_additions(new: Any, old: Any) -> list[Cause]:
    """validateNodeAffinityMutation: while gated, required node affinity may only narrow — the same
    terms, each keeping its requirements in order and gaining more (preferred terms are free)."""
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    old_terms = dicts(dig(old, "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")) \
        if isinstance(old, dict) and isinstance(old.get("requiredDuringSchedulingIgnoredDuringExecution"), dict) \
        else None
    if old_terms is None:
        return []
    new_terms = dicts(dig(new, "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
    if old_terms and len(old_terms) != len(new_terms):
        shown = ("[]core.NodeSelectorTerm{" + ", ".join(_go_term(t) for t in new_terms) + "}"
                 if new_terms else "[]core.NodeSelectorTerm(nil)")
        return [cause(path, f"Invalid value: {shown}: no additions/deletions to non-empty NodeSelectorTerms list "
                            "are allowed")]
    out = []
    for i, (was, now) in enumerate(zip(old_terms, new_terms, strict=False)):
        kept = all(
            len(dicts(was.get(k))) <= len(dicts(now.get(k)))
            and all(_equal(a, b) for a, b in zip(dicts(was.get(k)), dicts(now.get(k)), strict=False))
            for k in ("matchExpressions", "matchFields"))
        if not kept:
            out.append(cause(f"{path}[{i}]", f"Invalid value: {_go_term(now)}: only additions are allowed (no "
                                             "mutations or deletions)"))
    return out


def validate_pod_update(new: Obj, old: Obj) -> list[Cause]:
    """kube's ValidatePodUpdate (v1.32): a Pod's spec is fixed once created but for the images, a
    shorter activeDeadlineSeconds, added tolerations, removed scheduling gates (and a gated Pod's
    added nodeSelector keys). Anything else is one Forbidden error carrying the cmp.Diff of the specs,
    as kube words it."""
    ns = new.get("spec") if isinstance(new.get("spec"), dict) else {}
    os_ = old.get("spec") if isinstance(old.get("spec"), dict) else {}
    assert isinstance(ns, dict) and isinstance(os_, dict)
    if ns == os_:
        return []  # the common case (status, metadata and binding writes), at the cost of one dict compare
    out: list[Cause] = []
    for key in ("containers", "initContainers"):
        errs, stop = _container_updates(dicts(ns.get(key)), dicts(os_.get(key)), f"spec.{key}")
        out += errs
        if stop:
            return out
    new_ads, old_ads = ns.get("activeDeadlineSeconds"), os_.get("activeDeadlineSeconds")
    if new_ads is not None:
        if not isinstance(new_ads, int) or new_ads < 0 or new_ads > _MAX_INT32:
            out.append(validation.invalid("spec.activeDeadlineSeconds", new_ads,
                                          f"must be between 0 and {_MAX_INT32}, inclusive"))
            return out
        if isinstance(old_ads, int) and old_ads < new_ads:
            out.append(validation.invalid("spec.activeDeadlineSeconds", new_ads,
                                          "must be less than or equal to previous value"))
            return out
    elif old_ads is not None:
        out.append(validation.invalid("spec.activeDeadlineSeconds", "null",
                                      "must not update from a positive integer to nil value"))
    out += _only_added_tolerations(dicts(ns.get("tolerations")), dicts(os_.get("tolerations")))
    out += _only_deleted_gates(dicts(ns.get("schedulingGates")), dicts(os_.get("schedulingGates")))
    if _equal(ns, os_):
        return out

    old_qos = str((old.get("status") or {}).get("qosClass") or "") or pod_qos(os_)
    if old_qos != pod_qos(ns):
        out.append(validation.invalid("metadata", str((new.get("status") or {}).get("qosClass") or ""),
                                      "Pod QoS is immutable"))
    munged: Obj = clone(ns)
    for key in ("containers", "initContainers"):
        for c, was in zip(dicts(munged.get(key)), dicts(os_.get(key)), strict=False):
            c["image"] = was.get("image")
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged.pop(key, None)
        if key in os_:
            munged[key] = clone(os_[key])
    old_grace = os_.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if dicts(os_.get("schedulingGates")):
        new_sel, old_sel = munged.get("nodeSelector") or {}, os_.get("nodeSelector") or {}
        if isinstance(new_sel, dict) and isinstance(old_sel, dict) and not _equal(new_sel, old_sel):
            out += _node_selector_additions(new_sel, old_sel)
            munged.pop("nodeSelector", None)
            if "nodeSelector" in os_:
                munged["nodeSelector"] = clone(os_["nodeSelector"])
        new_aff, old_aff = dig(munged, "affinity", "nodeAffinity"), dig(os_, "affinity", "nodeAffinity")
        if not _equal(new_aff, old_aff):
            out += _node_affinity_additions(new_aff, old_aff)
            affinity = munged.get("affinity") if isinstance(munged.get("affinity"), dict) else {}
            assert isinstance(affinity, dict)
            affinity.pop("nodeAffinity", None)
            if old_aff is not None:
                affinity["nodeAffinity"] = clone(old_aff)
            munged["affinity"] = affinity
    if not _equal(munged, os_):
        diff = cmp_diff("core.PodSpec", semantic(os_), semantic(munged), _POD_SPEC_SHAPE, _equal)
        out.append(validation.forbidden("spec", f"pod updates may not change fields other than {UPDATABLE_FIELDS}\n"
                                                f"{diff}"))
    return out


def carry_over_on_update(new: Obj, old: Obj) -> None:
    """What kube's admission plugins keep of the live Pod on an update that leaves it out: the Priority
    plugin its priority and preemptionPolicy, DefaultTolerationSeconds its not-ready/unreachable
    tolerations (both act on updates too), so a PUT of the Pod as first written is no change."""
    ns, os_ = new.get("spec"), old.get("spec")
    if not isinstance(ns, dict) or not isinstance(os_, dict):
        return
    for key in ("priority", "preemptionPolicy"):
        if ns.get(key) is None and os_.get(key) is not None:
            ns[key] = os_[key]
    default_toleration_seconds(ns)


SCHEDULING_GATED = {
    "type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": None,
    "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates",
}


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
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
           for c in dicts(status.get("conditions"))):
        reason = "SchedulingGated"

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
        return 1 if int(grace) < 0 else int(grace)  # kube: a negative period is 1 s, never "at once"

    def prepare_for_create(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_toleration_seconds(spec)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        carry_over_on_update(new, old)

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = validate_pod_update(new, old)
        if causes:
            # kube defaults what it reads back from etcd: a Pod stored before a default existed (a
            # hostNetwork Pod's hostPort) compares as defaulted, or no update of it could pass.
            was = clone(old)
            default_pod(was)
            causes = validate_pod_update(new, was)
        return causes

    def initial_status(self, obj: Obj) -> Obj | None:
        """kube's podStrategy.PrepareForCreate: Pending, with the QoS class of its resources, and a
        gated Pod says why it waits (applySchedulingGatedCondition)."""
        spec = obj.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        status: Obj = {"phase": "Pending", "qosClass": pod_qos(spec)}
        if dicts(spec.get("schedulingGates")):
            status["conditions"] = [dict(SCHEDULING_GATED)]
        return status

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _pod(obj, now)
