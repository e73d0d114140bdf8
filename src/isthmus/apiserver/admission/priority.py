"""kube-apiserver's Priority admission plugin (plugin/pkg/admission/priority) and the built-in
PriorityClasses (pkg/apis/scheduling: SystemPriorityClasses).

A new Pod gets spec.priority and spec.preemptionPolicy from its PriorityClass, or from the
globalDefault class (none: priority 0, PreemptLowerPriority); a class that does not exist, or a
client-set value that disagrees, refuses it. Only one class may be the global default, and the
system classes cannot be deleted.
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.apimachinery import errors

Obj = dict[str, Any]

GROUP, PLURAL = "scheduling.k8s.io", "priorityclasses"
SYSTEM_PREFIX = "system-"
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"
SYSTEM_PRIORITY_CLASSES: tuple[Obj, ...] = (
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
     "metadata": {"name": "system-node-critical"}, "value": 2000001000,
     "description": "Used for system critical pods that must not be moved from their current node."},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
     "metadata": {"name": "system-cluster-critical"}, "value": 2000000000,
     "description": "Used for system critical pods that must run in the cluster, but can be moved to another "
                    "node if necessary."},
)
SYSTEM_NAMES = frozenset(pc["metadata"]["name"] for pc in SYSTEM_PRIORITY_CLASSES)


def known_system_class_error(name: str, value: Any, global_default: bool) -> str | None:
    """IsKnownSystemPriorityClass's error, None when `name` is a system class as defined."""
    for pc in SYSTEM_PRIORITY_CLASSES:
        if pc["metadata"]["name"] == name:
            if pc["value"] != value:
                return f"value of {name} PriorityClass must be {pc['value']}"
            if global_default:
                return f"globalDefault of {name} PriorityClass must be false"
            return None
    return f"{name} is not a known system priority class"


def default_class(classes: list[Obj]) -> Obj | None:
    """The globalDefault class; with several (created concurrently), the lowest value, as kube."""
    defaults = [pc for pc in classes if pc.get("globalDefault") is True]
    return min(defaults, key=lambda pc: int(pc.get("value") or 0)) if defaults else None


class PriorityAdmission:
    def __init__(self, admission: Any) -> None:
        self.admission = admission

    def _classes(self) -> list[Obj]:
        return self.admission.lister(GROUP, PLURAL, "") if self.admission.lister is not None else []

    async def admit_pod(self, req: AdmissionRequest) -> None:
        if req.subresource or req.object is None or not isinstance(req.object.get("spec"), dict):
            return
        spec = req.object["spec"]
        if req.operation == "UPDATE":
            # Set on create; an update that leaves them out keeps them (validation refuses changes).
            old = (req.old_object or {}).get("spec") or {}
            for key in ("priority", "preemptionPolicy"):
                if spec.get(key) is None and old.get(key) is not None:
                    spec[key] = old[key]
            return
        if req.operation != "CREATE":
            return
        name = spec.get("priorityClassName") or ""
        if not name:
            pc = default_class(self._classes())
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
                priority, policy = int(pc.get("value") or 0), pc.get("preemptionPolicy")
            else:
                priority, policy = 0, DEFAULT_PREEMPTION_POLICY
        else:
            found = self.admission.reader(GROUP, PLURAL, "", name) if self.admission.reader is not None else None
            if found is None:
                raise errors.forbidden(f"no PriorityClass with name {name} was found", "", "pods", req.name)
            priority, policy = int(found.get("value") or 0), found.get("preemptionPolicy")
        given = spec.get("priority")
        if given is not None and given != priority:
            raise errors.forbidden(f"the integer value of priority ({given}) must not be provided in pod spec; "
                                   f"priority admission controller computed {priority} from the given PriorityClass "
                                   "name", "", "pods", req.name)
        spec["priority"] = priority
        if policy is not None:
            if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
                raise errors.forbidden(f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not "
                                       f"be provided in pod spec; priority admission controller computed {policy} "
                                       "from the given PriorityClass name", "", "pods", req.name)
            spec["preemptionPolicy"] = policy

    async def validate_class(self, req: AdmissionRequest) -> None:
        if req.subresource:
            return
        if req.operation == "DELETE":
            # kube's PriorityClass REST storage refuses deleting the system classes.
            if req.name in SYSTEM_NAMES:
                raise errors.forbidden("this is a system priority class and cannot be deleted", GROUP, PLURAL,
                                       req.name)
            return
        pc = req.object
        if pc is None or pc.get("globalDefault") is not True:
            return
        current = default_class([c for c in self._classes() if c["metadata"]["name"] != req.name]
                                if req.operation == "UPDATE" else self._classes())
        if current is not None:
            raise errors.forbidden(f"PriorityClass {current['metadata']['name']} is already marked as default. "
                                   "Only one default can exist", GROUP, PLURAL, req.name)


def install(admission: Any) -> None:
    plugin = PriorityAdmission(admission)
    admission.add_builtin_mutating("", "pods", plugin.admit_pod)
    admission.add_builtin_validating(GROUP, PLURAL, plugin.validate_class)
