"""kubectl's columns for more built-in kinds (kube's pkg/printers/internalversion/printers.go).

Each entry is (columns, row function); the kinds' strategies (registry/workloads.py) print with
them. Wide columns have priority 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    as_list,
    col,
    containers_images,
    dicts,
    dig,
    human_duration,
    label_selector_string,
    labels_string,
    name_of,
    parse_time,
    since,
)

Obj = dict[str, Any]
Row = Callable[[Obj, float], list[Any]]

_WIDE_TEMPLATE = [
    col("Containers", desc="Names of each container in the template.", priority=1),
    col("Images", desc="Images referenced by each container in the template.", priority=1),
    col("Selector", desc="Label selector for pods.", priority=1),
]


def _int(obj: Obj, *path: str) -> int:
    v = dig(obj, *path)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _template_cells(obj: Obj, *template_path: str, selector: str) -> list[Any]:
    containers, images = containers_images(dig(obj, *template_path))
    return [containers, images, selector]


# ---------------------------------------------------------------- ReplicationController

RC_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Desired", "integer", "Number of desired pods."),
    col("Current", "integer", "Number of actual replicas."),
    col("Ready", "integer", "The number of ready replicas for this replication controller."),
    AGE_COLUMN, *_WIDE_TEMPLATE,
]


def rc_row(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), _int(obj, "spec", "replicas"), _int(obj, "status", "replicas"),
            _int(obj, "status", "readyReplicas"), age(obj, now),
            *_template_cells(obj, "spec", "template", "spec", selector=labels_string(dig(obj, "spec", "selector")))]


# ---------------------------------------------------------------- DaemonSet

DS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Desired", "integer", "The total number of nodes that should be running the daemon pod."),
    col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to "
        "run the daemon pod."),
    col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of "
        "the daemon pod running and ready."),
    col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more "
        "of the daemon pod running and available (ready for at least spec.minReadySeconds)"),
    col("Node Selector", desc="NodeSelector is a selector which must be true for the pod to fit on a node."),
    AGE_COLUMN, *_WIDE_TEMPLATE,
]


def ds_row(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), _int(obj, "status", "desiredNumberScheduled"), _int(obj, "status", "currentNumberScheduled"),
            _int(obj, "status", "numberReady"), _int(obj, "status", "updatedNumberScheduled"),
            _int(obj, "status", "numberAvailable"), labels_string(dig(obj, "spec", "template", "spec", "nodeSelector")),
            age(obj, now),
            *_template_cells(obj, "spec", "template", "spec",
                             selector=label_selector_string(dig(obj, "spec", "selector")))]


# ---------------------------------------------------------------- Job

JOB_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Status", desc="Status of the job."),
    col("Completions", desc="The completion status of the job."),
    col("Duration", desc="Time required to complete the job."),
    AGE_COLUMN, *_WIDE_TEMPLATE,
]


def _job_status(obj: Obj) -> str:
    """printJob's status: the last true terminal/suspend condition, else Running."""
    true = {c.get("type") for c in dicts(dig(obj, "status", "conditions")) if c.get("status") == "True"}
    for cond, text in (("Complete", "Complete"), ("Failed", "Failed"), ("FailureTarget", "FailureTarget"),
                       ("SuccessCriteriaMet", "SuccessCriteriaMet"), ("Suspended", "Suspended")):
        if cond in true:
            return text
    if dig(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    return "Running"


def job_row(obj: Obj, now: float) -> list[Any]:
    completions = dig(obj, "spec", "completions")
    succeeded = _int(obj, "status", "succeeded")
    if isinstance(completions, int):
        done = f"{succeeded}/{completions}"
    else:
        parallelism = _int(obj, "spec", "parallelism")
        done = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start, end = parse_time(dig(obj, "status", "startTime")), parse_time(dig(obj, "status", "completionTime"))
    duration = "" if start is None else human_duration((end if end is not None else now) - start)
    return [name_of(obj), _job_status(obj), done, duration, age(obj, now),
            *_template_cells(obj, "spec", "template", "spec",
                             selector=label_selector_string(dig(obj, "spec", "selector")))]


# ---------------------------------------------------------------- CronJob

CRONJOB_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Schedule", desc="The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    col("Timezone", desc="The time zone name for the given schedule, see "
        "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
    col("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions."),
    col("Active", "integer", "A list of pointers to currently running jobs."),
    col("Last Schedule", desc="Information when was the last time the job was successfully scheduled."),
    AGE_COLUMN,
    col("Containers", desc="Names of each container in the template.", priority=1),
    col("Images", desc="Images referenced by each container in the template.", priority=1),
    col("Selector", desc="Label selector for pods.", priority=1),
]


def cronjob_row(obj: Obj, now: float) -> list[Any]:
    last = dig(obj, "status", "lastScheduleTime")
    return [name_of(obj), str(dig(obj, "spec", "schedule") or ""), str(dig(obj, "spec", "timeZone") or "<none>"),
            bool(dig(obj, "spec", "suspend")), len(as_list(dig(obj, "status", "active"))),
            since(last, now) if last else "<none>", age(obj, now),
            *_template_cells(obj, "spec", "jobTemplate", "spec", "template", "spec",
                             selector=label_selector_string(dig(obj, "spec", "jobTemplate", "spec", "selector")))]


# ---------------------------------------------------------------- storage

_ACCESS = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _access_modes(modes: Any) -> str:
    return ",".join(_ACCESS.get(str(m), str(m)) for m in as_list(modes))


PVC_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Status", desc="Phase represents the current phase of PersistentVolumeClaim."),
    col("Volume", desc="VolumeName is the binding reference to the PersistentVolume backing this claim."),
    col("Capacity", desc="Capacity represents the actual resources of the underlying volume."),
    col("Access Modes", desc="AccessModes contains the actual access modes the volume backing the PVC has."),
    col("StorageClass", desc="StorageClassName is the name of the StorageClass required by the claim."),
    col("VolumeAttributesClass", desc="VolumeAttributesClassName is the name of the VolumeAttributesClass "
        "used by the claim."),
    AGE_COLUMN,
    col("VolumeMode", desc="VolumeMode defines what type of volume is required by the claim.", priority=1),
]


def pvc_row(obj: Obj, now: float) -> list[Any]:
    bound = bool(dig(obj, "spec", "volumeName"))
    capacity = str(dig(obj, "status", "capacity", "storage") or "") if bound else ""
    modes = _access_modes(dig(obj, "status", "accessModes")) if bound else ""
    phase = "Terminating" if dig(obj, "metadata", "deletionTimestamp") else str(dig(obj, "status", "phase") or "")
    return [name_of(obj), phase, str(dig(obj, "spec", "volumeName") or ""), capacity, modes,
            str(dig(obj, "spec", "storageClassName") or "<unset>"),
            str(dig(obj, "spec", "volumeAttributesClassName") or "<unset>"), age(obj, now),
            str(dig(obj, "spec", "volumeMode") or "<unset>")]


PV_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Capacity", desc="capacity is the description of the persistent volume's resources and capacity."),
    col("Access Modes", desc="accessModes contains all ways the volume can be mounted."),
    col("Reclaim Policy", desc="persistentVolumeReclaimPolicy defines what happens to a persistent volume "
        "when released from its claim."),
    col("Status", desc="phase indicates if a volume is available, bound to a claim, or released by a claim."),
    col("Claim", desc="claimRef is part of a bi-directional binding between PersistentVolume and "
        "PersistentVolumeClaim."),
    col("StorageClass", desc="storageClassName is the name of StorageClass to which this persistent volume "
        "belongs."),
    col("VolumeAttributesClass", desc="Name of VolumeAttributesClass to which this persistent volume belongs."),
    col("Reason", desc="reason is a brief CamelCase string that describes any failure."),
    AGE_COLUMN,
    col("VolumeMode", desc="volumeMode defines if a volume is intended to be used with a formatted filesystem "
        "or to remain in raw block state.", priority=1),
]


def pv_row(obj: Obj, now: float) -> list[Any]:
    ref = dig(obj, "spec", "claimRef")
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else ""
    phase = "Terminating" if dig(obj, "metadata", "deletionTimestamp") else str(dig(obj, "status", "phase") or "")
    return [name_of(obj), str(dig(obj, "spec", "capacity", "storage") or ""),
            _access_modes(dig(obj, "spec", "accessModes")),
            str(dig(obj, "spec", "persistentVolumeReclaimPolicy") or ""), phase, claim,
            str(dig(obj, "spec", "storageClassName") or ""),
            str(dig(obj, "spec", "volumeAttributesClassName") or "<unset>"), str(dig(obj, "status", "reason") or ""),
            age(obj, now), str(dig(obj, "spec", "volumeMode") or "<unset>")]


STORAGECLASS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Provisioner", desc="Provisioner indicates the type of the provisioner."),
    col("ReclaimPolicy", desc="Dynamically provisioned PersistentVolumes of this storage class are created with "
        "this reclaimPolicy. Defaults to Delete."),
    col("VolumeBindingMode", desc="VolumeBindingMode indicates how PersistentVolumeClaims should be provisioned "
        "and bound. When unset, VolumeBindingImmediate is used."),
    col("AllowVolumeExpansion", desc="AllowVolumeExpansion shows whether the storage class allow volume expand."),
    AGE_COLUMN,
]


def storageclass_row(obj: Obj, now: float) -> list[Any]:
    annotations = dig(obj, "metadata", "annotations") or {}
    default = any(annotations.get(k) == "true" for k in ("storageclass.kubernetes.io/is-default-class",
                                                          "storageclass.beta.kubernetes.io/is-default-class"))
    name = name_of(obj) + (" (default)" if default else "")
    return [name, str(obj.get("provisioner") or ""), str(obj.get("reclaimPolicy") or "Delete"),
            str(obj.get("volumeBindingMode") or "Immediate"), bool(obj.get("allowVolumeExpansion")), age(obj, now)]


# ---------------------------------------------------------------- policy, scheduling, core

PDB_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Min Available", desc="The minimum number of pods that must be available."),
    col("Max Unavailable", desc="The maximum number of pods that may be unavailable."),
    col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
    AGE_COLUMN,
]


def pdb_row(obj: Obj, now: float) -> list[Any]:
    def value(key: str) -> str:
        v = dig(obj, "spec", key)
        return "N/A" if v is None else str(v)

    return [name_of(obj), value("minAvailable"), value("maxUnavailable"), _int(obj, "status", "disruptionsAllowed"),
            age(obj, now)]


PRIORITYCLASS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Value", "integer", "The value of this priority class."),
    col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as "
        "the default priority."),
    AGE_COLUMN,
    col("PreemptionPolicy", desc="PreemptionPolicy is the Policy for preempting pods with lower priority."),
]


def priorityclass_row(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), _int(obj, "value"), bool(obj.get("globalDefault")), age(obj, now),
            str(obj.get("preemptionPolicy") or "")]


SERVICEACCOUNT_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using "
        "this ServiceAccount are allowed to use."),
    AGE_COLUMN,
]


def serviceaccount_row(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), len(as_list(obj.get("secrets"))), age(obj, now)]


HPA_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Reference", desc="Reference to the target resource."),
    col("Targets", desc="Targets of the metric."),
    col("MinPods", desc="MinReplicas is the lower limit for the number of replicas to which the autoscaler can "
        "scale down."),
    col("MaxPods", "integer", "MaxReplicas is the upper limit for the number of pods that can be set by the "
        "autoscaler."),
    col("Replicas", "integer", "CurrentReplicas is current number of replicas of pods managed by this autoscaler."),
    AGE_COLUMN,
]


def _hpa_target(spec_metric: Obj, current: list[Obj]) -> str:
    """formatHPAMetrics for Resource metrics (the only kind this server's users set); others: <unknown>."""
    res = spec_metric.get("resource") if spec_metric.get("type") == "Resource" else None
    if not isinstance(res, dict):
        return "<unknown>/<unknown>"
    name, target = str(res.get("name") or ""), res.get("target") or {}
    now_value = next((dig(c, "resource", "current") for c in current
                      if c.get("type") == "Resource" and dig(c, "resource", "name") == name), None)
    if target.get("averageUtilization") is not None:
        cur = (f"{now_value['averageUtilization']}%" if isinstance(now_value, dict)
               and now_value.get("averageUtilization") is not None else "<unknown>")
        return f"{name}: {cur}/{target['averageUtilization']}%"
    goal = target.get("averageValue") or target.get("value")
    cur = str(now_value.get("averageValue") or now_value.get("value")) if isinstance(now_value, dict) else "<unknown>"
    return f"{name}: {cur}/{goal}"


def hpa_row(obj: Obj, now: float) -> list[Any]:
    ref = dig(obj, "spec", "scaleTargetRef") or {}
    metrics = dicts(dig(obj, "spec", "metrics"))
    current = dicts(dig(obj, "status", "currentMetrics"))
    targets = [_hpa_target(m, current) for m in metrics]
    shown = ", ".join(targets[:2]) + (f" + {len(targets) - 2} more..." if len(targets) > 2 else "")
    min_pods = dig(obj, "spec", "minReplicas")
    return [name_of(obj), f"{ref.get('kind', '')}/{ref.get('name', '')}", shown or "<none>",
            "<unset>" if min_pods is None else str(min_pods), _int(obj, "spec", "maxReplicas"),
            _int(obj, "status", "currentReplicas"), age(obj, now)]


# ---------------------------------------------------------------- flowcontrol (API Priority and Fairness)

FLOWSCHEMA_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("PriorityLevel", desc="`name` is the name of the priority level configuration being referenced Required."),
    col("MatchingPrecedence", desc="`matchingPrecedence` is used to choose among the FlowSchemas that match a given "
        "request. The chosen FlowSchema is among those with the numerically lowest (which we take to be logically "
        "highest) MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the "
        "precedence is not specified, it will be set to 1000 as default."),
    col("DistinguisherMethod", desc="`distinguisherMethod` defines how to compute the flow distinguisher for "
        "requests that match this schema. `nil` specifies that the distinguisher is disabled and thus will always "
        "be the empty string."),
    AGE_COLUMN,
    col("MissingPL", desc="references a broken or non-existent PriorityLevelConfiguration"),
]


def flowschema_row(obj: Obj, now: float) -> list[Any]:
    """printFlowSchema: MissingPL is the Dangling condition's status, `?` before the APF controller
    has set one."""
    method = dig(obj, "spec", "distinguisherMethod", "type")
    dangling = next((str(c.get("status")) for c in dicts(dig(obj, "status", "conditions"))
                     if c.get("type") == "Dangling"), "?")
    return [name_of(obj), str(dig(obj, "spec", "priorityLevelConfiguration", "name") or ""),
            _int(obj, "spec", "matchingPrecedence"), str(method) if method else "<none>", age(obj, now), dangling]


PRIORITYLEVEL_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Type", desc="`type` indicates whether this priority level is subject to limitation on request execution. "
        "A value of `\"Exempt\"` means that requests of this priority level are not subject to a limit (and thus "
        "are never queued) and do not detract from the capacity made available to other priority levels.  A value "
        "of `\"Limited\"` means that (a) requests of this priority level _are_ subject to limits and (b) some of "
        "the server's limited capacity is made available exclusively to this priority level. Required."),
    col("NominalConcurrencyShares", desc="`nominalConcurrencyShares` (NCS) contributes to the computation of the "
        "NominalConcurrencyLimit (NominalCL) of this level."),
    col("Queues", desc="`queues` is the number of queues for this priority level. The queues exist independently "
        "at each apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding "
        "and thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default "
        "value of 64."),
    col("HandSize", desc="`handSize` is a small positive number that configures the shuffle sharding of requests "
        "into queues."),
    col("QueueLengthLimit", desc="`queueLengthLimit` is the maximum number of requests allowed to be waiting in a "
        "given queue of this priority level at a time; excess requests are rejected.  This value must be "
        "positive.  If not specified, it will be defaulted to 50."),
    AGE_COLUMN,
]


def prioritylevel_row(obj: Obj, now: float) -> list[Any]:
    """printPriorityLevelConfiguration: `<none>` for what an Exempt level (or one that rejects
    rather than queues) does not have."""
    cells: list[Any] = ["<none>"] * 4
    limited = dig(obj, "spec", "limited")
    if isinstance(limited, dict):
        cells[0] = _int(limited, "nominalConcurrencyShares")
        queuing = dig(limited, "limitResponse", "queuing")
        if isinstance(queuing, dict):
            cells[1:] = [_int(queuing, k) for k in ("queues", "handSize", "queueLengthLimit")]
    return [name_of(obj), str(dig(obj, "spec", "type") or ""), *cells, age(obj, now)]
