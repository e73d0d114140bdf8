"""Strategies of the built-in kinds that need little of their own (kube's pkg/registry/<group>/<kind>).

What kube's strategies and Go defaulting do for them: defaults (pkg/apis/*/v1/defaults.go), the
status a new object gets (PrepareForCreate resets it; Go's JSON encoding then writes every field
without `omitempty` as its zero value), and where the scale subresource reads and writes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from isthmus.apiserver.admission.priority import (
    HIGHEST_USER_DEFINABLE_PRIORITY,
    known_system_class_error,
)
from isthmus.apiserver.admission.priority import SYSTEM_PREFIX as SYSTEM_PRIORITY_PREFIX
from isthmus.apiserver.apimachinery.errors import cause, go_quote
from isthmus.apiserver.registry import poddisruptionbudget, printers
from isthmus.apiserver.registry.defaulting import ensure_dict, set_default
from isthmus.apiserver.registry.pod import default_template
from isthmus.apiserver.registry.strategy import Cause, ScaleStrategy, Strategy
from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    col,
    containers_images,
    dicts,
    dig,
    label_selector_string,
    name_of,
)

Obj = dict[str, Any]

# kubectl's columns (kube's pkg/printers/internalversion): ReplicaSets and Nodes.
REPLICASET_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Desired", "integer", "Number of desired pods."),
    col("Current", "integer", "Number of actual replicas."),
    col("Ready", "integer", "The number of ready replicas for this replica set."),
    AGE_COLUMN,
    col("Containers", desc="Names of each container in the template.", priority=1),
    col("Images", desc="Images referenced by each container in the template.", priority=1),
    col("Selector", desc="Label selector for pods.", priority=1),
]
NODE_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Status", desc="The status of the node"),
    col("Roles", desc="The roles of the node"),
    AGE_COLUMN,
    col("Version", desc="Kubelet Version reported by the node."),
    col("Internal-IP", desc="List of addresses reachable to the node.", priority=1),
    col("External-IP", desc="List of addresses reachable to the node.", priority=1),
    col("OS-Image", desc="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        priority=1),
    col("Kernel-Version", desc="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        priority=1),
    col("Container-Runtime", desc="Container runtime version reported by the node.", priority=1),
]


def _replicaset_row(obj: Obj, now: float) -> list[Any]:
    containers, images = containers_images(dig(obj, "spec", "template", "spec"))
    return [name_of(obj), int(dig(obj, "spec", "replicas") or 0), int(dig(obj, "status", "replicas") or 0),
            int(dig(obj, "status", "readyReplicas") or 0), age(obj, now), containers, images,
            label_selector_string(dig(obj, "spec", "selector"))]


def _node_row(obj: Obj, now: float) -> list[Any]:
    """printNode: Ready or NotReady (Unknown without the condition), roles from node-role labels."""
    status = [("Ready" if c.get("status") == "True" else "NotReady")
              for c in dicts(dig(obj, "status", "conditions")) if c.get("type") == "Ready"][:1] or ["Unknown"]
    if dig(obj, "spec", "unschedulable"):
        status.append("SchedulingDisabled")
    labels = dig(obj, "metadata", "labels") or {}
    roles = {k.removeprefix("node-role.kubernetes.io/") for k in labels if k.startswith("node-role.kubernetes.io/")}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    addresses = dicts(dig(obj, "status", "addresses"))

    def address(kind: str) -> str:
        return next((str(a.get("address")) for a in addresses if a.get("type") == kind), "<none>")

    info = dig(obj, "status", "nodeInfo") or {}
    return [name_of(obj), ",".join(status), ",".join(sorted(r for r in roles if r)) or "<none>", age(obj, now),
            info.get("kubeletVersion") or "", address("InternalIP"), address("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]

# apps/v1 and core/v1 scale subresources: spec.replicas, status.replicas, the selector of spec.selector.
REPLICAS_SCALE = ScaleStrategy("spec.replicas", "status.replicas", "spec.selector")


def _spec(obj: Obj) -> Obj | None:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else None


class ReplicaSetStrategy(Strategy):
    scale_strategy = REPLICAS_SCALE

    def default(self, obj: Obj) -> None:
        # apps/v1 SetDefaults_ReplicaSet
        spec = _spec(obj)
        if spec is not None:
            set_default(spec, "replicas", 1)
            default_template(spec)

    def initial_status(self, obj: Obj) -> Obj | None:
        # ReplicaSetStatus: replicas has no omitempty.
        return {"replicas": 0}

    def table_columns(self) -> list[Column]:
        return REPLICASET_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _replicaset_row(obj, now)


class ReplicationControllerStrategy(Strategy):
    scale_strategy = REPLICAS_SCALE

    def default(self, obj: Obj) -> None:
        # core/v1 SetDefaults_ReplicationController: selector and labels from the template's labels.
        spec = _spec(obj)
        if spec is None:
            return
        tmpl = spec.get("template")
        labels = ((tmpl.get("metadata") or {}).get("labels") or {}) if isinstance(tmpl, dict) else {}
        if labels:
            if not spec.get("selector"):
                spec["selector"] = dict(labels)
            meta = ensure_dict(obj, "metadata")
            if not meta.get("labels"):
                meta["labels"] = dict(labels)
        set_default(spec, "replicas", 1)
        default_template(spec)

    def initial_status(self, obj: Obj) -> Obj | None:
        # ReplicationControllerStatus: replicas has no omitempty.
        return {"replicas": 0}

    def table_columns(self) -> list[Column]:
        return printers.RC_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.rc_row(obj, now)


class DaemonSetStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # apps/v1 SetDefaults_DaemonSet
        spec = _spec(obj)
        if spec is None:
            return
        strategy = ensure_dict(spec, "updateStrategy")
        set_default(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            ru = ensure_dict(strategy, "rollingUpdate")
            set_default(ru, "maxUnavailable", 1)
            set_default(ru, "maxSurge", 0)
        set_default(spec, "revisionHistoryLimit", 10)
        default_template(spec)

    def initial_status(self, obj: Obj) -> Obj | None:
        # DaemonSetStatus: the four counters without omitempty.
        return {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                "numberReady": 0}

    def table_columns(self) -> list[Column]:
        return printers.DS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.ds_row(obj, now)


def default_job_spec(spec: Obj) -> None:
    """batch/v1 SetDefaults_Job (the parts that do not depend on feature gates being off)."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    set_default(spec, "parallelism", 1)
    set_default(spec, "backoffLimit", 6)
    set_default(spec, "completionMode", "NonIndexed")
    if spec.get("suspend") is None:
        spec["suspend"] = False
    if spec.get("podFailurePolicy") is None:
        set_default(spec, "podReplacementPolicy", "TerminatingOrFailed")
    else:
        set_default(spec, "podReplacementPolicy", "Failed")
    if spec.get("manualSelector") is None:
        spec["manualSelector"] = False
    default_template(spec)


def generate_job_selector(obj: Obj) -> None:
    """kube's Job PrepareForCreate (generateSelector): without manualSelector, the pods are selected
    by the job's uid, and the template carries the labels that select them."""
    spec = _spec(obj)
    if spec is None or spec.get("manualSelector") is True:
        return
    meta = obj.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    tmpl = ensure_dict(spec, "template")
    labels = ensure_dict(ensure_dict(tmpl, "metadata"), "labels")
    for key, value in (("batch.kubernetes.io/controller-uid", uid), ("batch.kubernetes.io/job-name", name),
                       ("controller-uid", uid), ("job-name", name)):
        labels.setdefault(key, value)
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


class JobStrategy(Strategy):
    def prepare_for_create(self, obj: Obj) -> None:
        generate_job_selector(obj)

    def default(self, obj: Obj) -> None:
        spec = _spec(obj)
        if spec is not None:
            default_job_spec(spec)

    def initial_status(self, obj: Obj) -> Obj | None:
        return {}  # JobStatus: every field omitempty

    def table_columns(self) -> list[Column]:
        return printers.JOB_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.job_row(obj, now)


class CronJobStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # batch/v1 SetDefaults_CronJob; the job template gets SetDefaults_Job's template defaults.
        spec = _spec(obj)
        if spec is None:
            return
        set_default(spec, "concurrencyPolicy", "Allow")
        if spec.get("suspend") is None:
            spec["suspend"] = False
        set_default(spec, "successfulJobsHistoryLimit", 3)
        set_default(spec, "failedJobsHistoryLimit", 1)
        job_spec = (spec.get("jobTemplate") or {}).get("spec") if isinstance(spec.get("jobTemplate"), dict) else None
        if isinstance(job_spec, dict):
            default_template(job_spec)

    def initial_status(self, obj: Obj) -> Obj | None:
        return {}

    def table_columns(self) -> list[Column]:
        return printers.CRONJOB_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.cronjob_row(obj, now)


class NodeStrategy(Strategy):
    # kube's nodeStrategy: "Nodes allow *all* fields, including status, to be set on create."
    keeps_status_on_create: ClassVar[bool] = True
    name_rule = "subdomain"

    def default(self, obj: Obj) -> None:
        # Go writes NodeStatus' struct fields whatever their tags: a new Node shows them zeroed.
        obj.setdefault("spec", {})
        status = ensure_dict(obj, "status")
        endpoints = ensure_dict(ensure_dict(status, "daemonEndpoints"), "kubeletEndpoint")
        endpoints.setdefault("Port", 0)
        info = ensure_dict(status, "nodeInfo")
        for key in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"):
            info.setdefault(key, "")

    def table_columns(self) -> list[Column]:
        return NODE_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _node_row(obj, now)


class PersistentVolumeStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # core/v1 SetDefaults_PersistentVolume
        spec = _spec(obj)
        if spec is not None:
            set_default(spec, "persistentVolumeReclaimPolicy", "Retain")
            set_default(spec, "volumeMode", "Filesystem")

    def initial_status(self, obj: Obj) -> Obj | None:
        return {"phase": "Pending"}

    def table_columns(self) -> list[Column]:
        return printers.PV_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.pv_row(obj, now)


class PersistentVolumeClaimStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # core/v1 SetDefaults_PersistentVolumeClaim
        spec = _spec(obj)
        if spec is not None:
            set_default(spec, "volumeMode", "Filesystem")

    def initial_status(self, obj: Obj) -> Obj | None:
        return {"phase": "Pending"}

    def table_columns(self) -> list[Column]:
        return printers.PVC_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.pvc_row(obj, now)


class CertificateSigningRequestStrategy(Strategy):
    # kube serves /approval apart (status.conditions only); here it is /status.
    subresource_aliases = {"approval": "status"}

    def initial_status(self, obj: Obj) -> Obj | None:
        return {}


class EmptyStatusStrategy(Strategy):
    """Kinds whose PrepareForCreate resets status to a struct of omitempty fields: `status: {}`."""

    def initial_status(self, obj: Obj) -> Obj | None:
        return {}


class HorizontalPodAutoscalerV2Strategy(Strategy):
    def initial_status(self, obj: Obj) -> Obj | None:
        return {"desiredReplicas": 0}  # v2: currentReplicas is omitempty, desiredReplicas is not

    def default(self, obj: Obj) -> None:
        # autoscaling/v2 SetDefaults_HorizontalPodAutoscaler: minReplicas 1, and an 80% CPU target
        # when no metric is given.
        spec = _spec(obj)
        if spec is None:
            return
        set_default(spec, "minReplicas", 1)
        if not spec.get("metrics"):
            spec["metrics"] = [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]

    def table_columns(self) -> list[Column]:
        return printers.HPA_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.hpa_row(obj, now)


class HorizontalPodAutoscalerV1Strategy(Strategy):
    def initial_status(self, obj: Obj) -> Obj | None:
        return {"currentReplicas": 0, "desiredReplicas": 0}

    def default(self, obj: Obj) -> None:
        spec = _spec(obj)
        if spec is not None:
            set_default(spec, "minReplicas", 1)


class PodDisruptionBudgetStrategy(Strategy):
    def initial_status(self, obj: Obj) -> Obj | None:
        return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def validate(self, obj: Obj) -> list[Cause]:
        return poddisruptionbudget.validate_spec(obj.get("spec"))

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        return poddisruptionbudget.validate_spec(new.get("spec")) + poddisruptionbudget.validate_status(
            new.get("status"))

    def table_columns(self) -> list[Column]:
        return printers.PDB_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.pdb_row(obj, now)


class VolumeAttachmentStrategy(Strategy):
    def initial_status(self, obj: Obj) -> Obj | None:
        return {"attached": False}


class StorageClassStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # storage/v1 SetDefaults_StorageClass
        set_default(obj, "reclaimPolicy", "Delete")
        set_default(obj, "volumeBindingMode", "Immediate")

    def table_columns(self) -> list[Column]:
        return printers.STORAGECLASS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.storageclass_row(obj, now)


class PriorityClassStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # scheduling/v1 SetDefaults_PriorityClass
        set_default(obj, "preemptionPolicy", "PreemptLowerPriority")

    def validate(self, obj: Obj) -> list[Cause]:
        """ValidatePriorityClass: `system-` names are the built-in classes only; user classes stay
        at or below 1000000000, so system pods always outrank them."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        value = obj.get("value")
        if name.startswith(SYSTEM_PRIORITY_PREFIX):
            err = known_system_class_error(name, value, obj.get("globalDefault") is True)
            if err is not None:
                return [cause("metadata.name", f"Forbidden: priority class names with '{SYSTEM_PRIORITY_PREFIX}' "
                              f"prefix are reserved for system use only. error: {err}", "FieldValueForbidden")]
        elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
            return [cause("value", "Forbidden: maximum allowed value of a user defined priority is "
                          f"{HIGHEST_USER_DEFINABLE_PRIORITY}", "FieldValueForbidden")]
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = []
        if new.get("value") != old.get("value"):
            causes.append(cause("value", "Forbidden: may not be changed in an update.", "FieldValueForbidden"))
        if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
            causes.append(cause("preemptionPolicy", f"Invalid value: {go_quote(str(new.get('preemptionPolicy')))}: "
                                "field is immutable"))
        return causes

    def table_columns(self) -> list[Column]:
        return printers.PRIORITYCLASS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.priorityclass_row(obj, now)


class ServiceAccountStrategy(Strategy):
    def table_columns(self) -> list[Column]:
        return printers.SERVICEACCOUNT_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return printers.serviceaccount_row(obj, now)


class PodTemplateStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        # kube's generated defaulters give a PodTemplate's pod spec SetDefaults_PodSpec and the rest
        default_template(obj)
