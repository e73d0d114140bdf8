"""GENERATED - do not edit. Protobuf message tables for the Kubernetes wire format (kube v1.32).

Generated from the kube v1.32 (k8s.io/api and k8s.io/apimachinery v0.32.9) generated.proto wire
definitions -- the field numbers and proto types are the protocol -- joined with the JSON
names, omitempty/pointer/inline-ness read from the Go struct tags of the same packages (types.go),
by a throwaway script that parsed those files and printed this module. Only the messages
reachable from ROOTS are listed.

MESSAGES[i] = (full proto name, {field number: (json name, type, flags)}) where type is a
scalar name (string, bytes, int32, int64, bool) or an int index into MESSAGES; for a map field
type is the map value type (keys are always strings). json name is "" for inline (embedded) fields.
"""

from __future__ import annotations

from typing import Final

REPEATED: Final = 1
MAP: Final = 2
POINTER: Final = 4
OMITEMPTY: Final = 8
INLINE: Final = 16

Field = tuple[str, str | int, int]

MESSAGES: Final[tuple[tuple[str, dict[int, Field]], ...]] = (
    ("k8s.io.api.apps.v1.Deployment", {1: ("metadata", 191, 8), 2: ("spec", 2, 8), 3: ("status", 3, 8)}),  # 0
    ("k8s.io.api.apps.v1.DeploymentCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 4: ("reason", "string", 8), 5: ("message", "string", 8), 6: ("lastUpdateTime", 194, 8), 7: ("lastTransitionTime", 194, 8)}),  # 1
    ("k8s.io.api.apps.v1.DeploymentSpec", {1: ("replicas", "int32", 12), 2: ("selector", 187, 4), 3: ("template", 111, 0), 4: ("strategy", 4, 8), 5: ("minReadySeconds", "int32", 8), 6: ("revisionHistoryLimit", "int32", 12), 7: ("paused", "bool", 8), 9: ("progressDeadlineSeconds", "int32", 12)}),  # 2
    ("k8s.io.api.apps.v1.DeploymentStatus", {1: ("observedGeneration", "int64", 8), 2: ("replicas", "int32", 8), 3: ("updatedReplicas", "int32", 8), 4: ("availableReplicas", "int32", 8), 5: ("unavailableReplicas", "int32", 8), 6: ("conditions", 1, 9), 7: ("readyReplicas", "int32", 8), 8: ("collisionCount", "int32", 12)}),  # 3
    ("k8s.io.api.apps.v1.DeploymentStrategy", {1: ("type", "string", 8), 2: ("rollingUpdate", 5, 12)}),  # 4
    ("k8s.io.api.apps.v1.RollingUpdateDeployment", {1: ("maxUnavailable", 195, 12), 2: ("maxSurge", 195, 12)}),  # 5
    ("k8s.io.api.apps.v1.RollingUpdateStatefulSetStrategy", {1: ("partition", "int32", 12), 2: ("maxUnavailable", 195, 12)}),  # 6
    ("k8s.io.api.apps.v1.StatefulSet", {1: ("metadata", 191, 8), 2: ("spec", 11, 8), 3: ("status", 12, 8)}),  # 7
    ("k8s.io.api.apps.v1.StatefulSetCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 8
    ("k8s.io.api.apps.v1.StatefulSetOrdinals", {1: ("start", "int32", 0)}),  # 9
    ("k8s.io.api.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy", {1: ("whenDeleted", "string", 8), 2: ("whenScaled", "string", 8)}),  # 10
    ("k8s.io.api.apps.v1.StatefulSetSpec", {1: ("replicas", "int32", 12), 2: ("selector", 187, 4), 3: ("template", 111, 0), 4: ("volumeClaimTemplates", 88, 9), 5: ("serviceName", "string", 0), 6: ("podManagementPolicy", "string", 8), 7: ("updateStrategy", 13, 8), 8: ("revisionHistoryLimit", "int32", 12), 9: ("minReadySeconds", "int32", 8), 10: ("persistentVolumeClaimRetentionPolicy", 10, 12), 11: ("ordinals", 9, 12)}),  # 11
    ("k8s.io.api.apps.v1.StatefulSetStatus", {1: ("observedGeneration", "int64", 8), 2: ("replicas", "int32", 0), 3: ("readyReplicas", "int32", 8), 4: ("currentReplicas", "int32", 8), 5: ("updatedReplicas", "int32", 8), 6: ("currentRevision", "string", 8), 7: ("updateRevision", "string", 8), 9: ("collisionCount", "int32", 12), 10: ("conditions", 8, 9), 11: ("availableReplicas", "int32", 0)}),  # 12
    ("k8s.io.api.apps.v1.StatefulSetUpdateStrategy", {1: ("type", "string", 8), 2: ("rollingUpdate", 6, 12)}),  # 13
    ("k8s.io.api.coordination.v1.Lease", {1: ("metadata", 191, 8), 2: ("spec", 15, 8)}),  # 14
    ("k8s.io.api.coordination.v1.LeaseSpec", {1: ("holderIdentity", "string", 12), 2: ("leaseDurationSeconds", "int32", 12), 3: ("acquireTime", 190, 12), 4: ("renewTime", 190, 12), 5: ("leaseTransitions", "int32", 12), 6: ("strategy", "string", 12), 7: ("preferredHolder", "string", 12)}),  # 15
    ("k8s.io.api.core.v1.AWSElasticBlockStoreVolumeSource", {1: ("volumeID", "string", 0), 2: ("fsType", "string", 8), 3: ("partition", "int32", 8), 4: ("readOnly", "bool", 8)}),  # 16
    ("k8s.io.api.core.v1.Affinity", {1: ("nodeAffinity", 82, 12), 2: ("podAffinity", 96, 12), 3: ("podAntiAffinity", 98, 12)}),  # 17
    ("k8s.io.api.core.v1.AppArmorProfile", {1: ("type", "string", 0), 2: ("localhostProfile", "string", 12)}),  # 18
    ("k8s.io.api.core.v1.AzureDiskVolumeSource", {1: ("diskName", "string", 0), 2: ("diskURI", "string", 0), 3: ("cachingMode", "string", 12), 4: ("fsType", "string", 12), 5: ("readOnly", "bool", 12), 6: ("kind", "string", 12)}),  # 19
    ("k8s.io.api.core.v1.AzureFileVolumeSource", {1: ("secretName", "string", 0), 2: ("shareName", "string", 0), 3: ("readOnly", "bool", 8)}),  # 20
    ("k8s.io.api.core.v1.CSIVolumeSource", {1: ("driver", "string", 0), 2: ("readOnly", "bool", 12), 3: ("fsType", "string", 12), 4: ("volumeAttributes", "string", 10), 5: ("nodePublishSecretRef", 75, 12)}),  # 21
    ("k8s.io.api.core.v1.Capabilities", {1: ("add", "string", 9), 2: ("drop", "string", 9)}),  # 22
    ("k8s.io.api.core.v1.CephFSVolumeSource", {1: ("monitors", "string", 1), 2: ("path", "string", 8), 3: ("user", "string", 8), 4: ("secretFile", "string", 8), 5: ("secretRef", 75, 12), 6: ("readOnly", "bool", 8)}),  # 23
    ("k8s.io.api.core.v1.CinderVolumeSource", {1: ("volumeID", "string", 0), 2: ("fsType", "string", 8), 3: ("readOnly", "bool", 8), 4: ("secretRef", 75, 12)}),  # 24
    ("k8s.io.api.core.v1.ClientIPConfig", {1: ("timeoutSeconds", "int32", 12)}),  # 25
    ("k8s.io.api.core.v1.ClusterTrustBundleProjection", {1: ("name", "string", 12), 2: ("signerName", "string", 12), 3: ("labelSelector", 187, 12), 4: ("path", "string", 0), 5: ("optional", "bool", 12)}),  # 26
    ("k8s.io.api.core.v1.ConfigMap", {1: ("metadata", 191, 8), 2: ("data", "string", 10), 3: ("binaryData", "bytes", 10), 4: ("immutable", "bool", 12)}),  # 27
    ("k8s.io.api.core.v1.ConfigMapEnvSource", {1: ("", 75, 16), 2: ("optional", "bool", 12)}),  # 28
    ("k8s.io.api.core.v1.ConfigMapKeySelector", {1: ("", 75, 16), 2: ("key", "string", 0), 3: ("optional", "bool", 12)}),  # 29
    ("k8s.io.api.core.v1.ConfigMapProjection", {1: ("", 75, 16), 2: ("items", 69, 9), 4: ("optional", "bool", 12)}),  # 30
    ("k8s.io.api.core.v1.ConfigMapVolumeSource", {1: ("", 75, 16), 2: ("items", 69, 9), 3: ("defaultMode", "int32", 12), 4: ("optional", "bool", 12)}),  # 31
    ("k8s.io.api.core.v1.Container", {1: ("name", "string", 0), 2: ("image", "string", 8), 3: ("command", "string", 9), 4: ("args", "string", 9), 5: ("workingDir", "string", 8), 6: ("ports", 33, 9), 7: ("env", 46, 9), 8: ("resources", 123, 8), 9: ("volumeMounts", 150, 9), 10: ("livenessProbe", 115, 12), 11: ("readinessProbe", 115, 12), 12: ("lifecycle", 70, 12), 13: ("terminationMessagePath", "string", 8), 14: ("imagePullPolicy", "string", 8), 15: ("securityContext", 133, 12), 16: ("stdin", "bool", 8), 17: ("stdinOnce", "bool", 8), 18: ("tty", "bool", 8), 19: ("envFrom", 45, 9), 20: ("terminationMessagePolicy", "string", 8), 21: ("volumeDevices", 149, 9), 22: ("startupProbe", 115, 12), 23: ("resizePolicy", 34, 9), 24: ("restartPolicy", "string", 12)}),  # 32
    ("k8s.io.api.core.v1.ContainerPort", {1: ("name", "string", 8), 2: ("hostPort", "int32", 8), 3: ("containerPort", "int32", 0), 4: ("protocol", "string", 8), 5: ("hostIP", "string", 8)}),  # 33
    ("k8s.io.api.core.v1.ContainerResizePolicy", {1: ("resourceName", "string", 0), 2: ("restartPolicy", "string", 0)}),  # 34
    ("k8s.io.api.core.v1.ContainerState", {1: ("waiting", 38, 12), 2: ("running", 36, 12), 3: ("terminated", 37, 12)}),  # 35
    ("k8s.io.api.core.v1.ContainerStateRunning", {1: ("startedAt", 194, 8)}),  # 36
    ("k8s.io.api.core.v1.ContainerStateTerminated", {1: ("exitCode", "int32", 0), 2: ("signal", "int32", 8), 3: ("reason", "string", 8), 4: ("message", "string", 8), 5: ("startedAt", 194, 8), 6: ("finishedAt", 194, 8), 7: ("containerID", "string", 8)}),  # 37
    ("k8s.io.api.core.v1.ContainerStateWaiting", {1: ("reason", "string", 8), 2: ("message", "string", 8)}),  # 38
    ("k8s.io.api.core.v1.ContainerStatus", {1: ("name", "string", 0), 2: ("state", 35, 8), 3: ("lastState", 35, 8), 4: ("ready", "bool", 0), 5: ("restartCount", "int32", 0), 6: ("image", "string", 0), 7: ("imageID", "string", 0), 8: ("containerID", "string", 8), 9: ("started", "bool", 12), 10: ("allocatedResources", 183, 10), 11: ("resources", 123, 12), 12: ("volumeMounts", 151, 9), 13: ("user", 40, 12), 14: ("allocatedResourcesStatus", 124, 9)}),  # 39
    ("k8s.io.api.core.v1.ContainerUser", {1: ("linux", 72, 12)}),  # 40
    ("k8s.io.api.core.v1.DownwardAPIProjection", {1: ("items", 42, 9)}),  # 41
    ("k8s.io.api.core.v1.DownwardAPIVolumeFile", {1: ("path", "string", 0), 2: ("fieldRef", 86, 12), 3: ("resourceFieldRef", 121, 12), 4: ("mode", "int32", 12)}),  # 42
    ("k8s.io.api.core.v1.DownwardAPIVolumeSource", {1: ("items", 42, 9), 2: ("defaultMode", "int32", 12)}),  # 43
    ("k8s.io.api.core.v1.EmptyDirVolumeSource", {1: ("medium", "string", 8), 2: ("sizeLimit", 183, 12)}),  # 44
    ("k8s.io.api.core.v1.EnvFromSource", {1: ("prefix", "string", 8), 2: ("configMapRef", 28, 12), 3: ("secretRef", 129, 12)}),  # 45
    ("k8s.io.api.core.v1.EnvVar", {1: ("name", "string", 0), 2: ("value", "string", 8), 3: ("valueFrom", 47, 12)}),  # 46
    ("k8s.io.api.core.v1.EnvVarSource", {1: ("fieldRef", 86, 12), 2: ("resourceFieldRef", 121, 12), 3: ("configMapKeyRef", 29, 12), 4: ("secretKeyRef", 130, 12)}),  # 47
    ("k8s.io.api.core.v1.EphemeralContainer", {1: ("", 49, 16), 2: ("targetContainerName", "string", 8)}),  # 48
    ("k8s.io.api.core.v1.EphemeralContainerCommon", {1: ("name", "string", 0), 2: ("image", "string", 8), 3: ("command", "string", 9), 4: ("args", "string", 9), 5: ("workingDir", "string", 8), 6: ("ports", 33, 9), 7: ("env", 46, 9), 8: ("resources", 123, 8), 9: ("volumeMounts", 150, 9), 10: ("livenessProbe", 115, 12), 11: ("readinessProbe", 115, 12), 12: ("lifecycle", 70, 12), 13: ("terminationMessagePath", "string", 8), 14: ("imagePullPolicy", "string", 8), 15: ("securityContext", 133, 12), 16: ("stdin", "bool", 8), 17: ("stdinOnce", "bool", 8), 18: ("tty", "bool", 8), 19: ("envFrom", 45, 9), 20: ("terminationMessagePolicy", "string", 8), 21: ("volumeDevices", 149, 9), 22: ("startupProbe", 115, 12), 23: ("resizePolicy", 34, 9), 24: ("restartPolicy", "string", 12)}),  # 49
    ("k8s.io.api.core.v1.EphemeralVolumeSource", {1: ("volumeClaimTemplate", 92, 12)}),  # 50
    ("k8s.io.api.core.v1.Event", {1: ("metadata", 191, 0), 2: ("involvedObject", 87, 0), 3: ("reason", "string", 8), 4: ("message", "string", 8), 5: ("source", 53, 8), 6: ("firstTimestamp", 194, 8), 7: ("lastTimestamp", 194, 8), 8: ("count", "int32", 8), 9: ("type", "string", 8), 10: ("eventTime", 190, 8), 11: ("series", 52, 12), 12: ("action", "string", 8), 13: ("related", 87, 12), 14: ("reportingComponent", "string", 0), 15: ("reportingInstance", "string", 0)}),  # 51
    ("k8s.io.api.core.v1.EventSeries", {1: ("count", "int32", 8), 2: ("lastObservedTime", 190, 8)}),  # 52
    ("k8s.io.api.core.v1.EventSource", {1: ("component", "string", 8), 2: ("host", "string", 8)}),  # 53
    ("k8s.io.api.core.v1.ExecAction", {1: ("command", "string", 9)}),  # 54
    ("k8s.io.api.core.v1.FCVolumeSource", {1: ("targetWWNs", "string", 9), 2: ("lun", "int32", 12), 3: ("fsType", "string", 8), 4: ("readOnly", "bool", 8), 5: ("wwids", "string", 9)}),  # 55
    ("k8s.io.api.core.v1.FlexVolumeSource", {1: ("driver", "string", 0), 2: ("fsType", "string", 8), 3: ("secretRef", 75, 12), 4: ("readOnly", "bool", 8), 5: ("options", "string", 10)}),  # 56
    ("k8s.io.api.core.v1.FlockerVolumeSource", {1: ("datasetName", "string", 8), 2: ("datasetUUID", "string", 8)}),  # 57
    ("k8s.io.api.core.v1.GCEPersistentDiskVolumeSource", {1: ("pdName", "string", 0), 2: ("fsType", "string", 8), 3: ("partition", "int32", 8), 4: ("readOnly", "bool", 8)}),  # 58
    ("k8s.io.api.core.v1.GRPCAction", {1: ("port", "int32", 0), 2: ("service", "string", 4)}),  # 59
    ("k8s.io.api.core.v1.GitRepoVolumeSource", {1: ("repository", "string", 0), 2: ("revision", "string", 8), 3: ("directory", "string", 8)}),  # 60
    ("k8s.io.api.core.v1.GlusterfsVolumeSource", {1: ("endpoints", "string", 0), 2: ("path", "string", 0), 3: ("readOnly", "bool", 8)}),  # 61
    ("k8s.io.api.core.v1.HTTPGetAction", {1: ("path", "string", 8), 2: ("port", 195, 0), 3: ("host", "string", 8), 4: ("scheme", "string", 8), 5: ("httpHeaders", 63, 9)}),  # 62
    ("k8s.io.api.core.v1.HTTPHeader", {1: ("name", "string", 0), 2: ("value", "string", 0)}),  # 63
    ("k8s.io.api.core.v1.HostAlias", {1: ("ip", "string", 0), 2: ("hostnames", "string", 9)}),  # 64
    ("k8s.io.api.core.v1.HostIP", {1: ("ip", "string", 0)}),  # 65
    ("k8s.io.api.core.v1.HostPathVolumeSource", {1: ("path", "string", 0), 2: ("type", "string", 12)}),  # 66
    ("k8s.io.api.core.v1.ISCSIVolumeSource", {1: ("targetPortal", "string", 0), 2: ("iqn", "string", 0), 3: ("lun", "int32", 0), 4: ("iscsiInterface", "string", 8), 5: ("fsType", "string", 8), 6: ("readOnly", "bool", 8), 7: ("portals", "string", 9), 8: ("chapAuthDiscovery", "bool", 8), 10: ("secretRef", 75, 12), 11: ("chapAuthSession", "bool", 8), 12: ("initiatorName", "string", 12)}),  # 67
    ("k8s.io.api.core.v1.ImageVolumeSource", {1: ("reference", "string", 8), 2: ("pullPolicy", "string", 8)}),  # 68
    ("k8s.io.api.core.v1.KeyToPath", {1: ("key", "string", 0), 2: ("path", "string", 0), 3: ("mode", "int32", 12)}),  # 69
    ("k8s.io.api.core.v1.Lifecycle", {1: ("postStart", 71, 12), 2: ("preStop", 71, 12)}),  # 70
    ("k8s.io.api.core.v1.LifecycleHandler", {1: ("exec", 54, 12), 2: ("httpGet", 62, 12), 3: ("tcpSocket", 143, 12), 4: ("sleep", 140, 12)}),  # 71
    ("k8s.io.api.core.v1.LinuxContainerUser", {1: ("uid", "int64", 0), 2: ("gid", "int64", 0), 3: ("supplementalGroups", "int64", 9)}),  # 72
    ("k8s.io.api.core.v1.LoadBalancerIngress", {1: ("ip", "string", 8), 2: ("hostname", "string", 8), 3: ("ipMode", "string", 12), 4: ("ports", 112, 9)}),  # 73
    ("k8s.io.api.core.v1.LoadBalancerStatus", {1: ("ingress", 73, 9)}),  # 74
    ("k8s.io.api.core.v1.LocalObjectReference", {1: ("name", "string", 8)}),  # 75
    ("k8s.io.api.core.v1.ModifyVolumeStatus", {1: ("targetVolumeAttributesClassName", "string", 8), 2: ("status", "string", 0)}),  # 76
    ("k8s.io.api.core.v1.NFSVolumeSource", {1: ("server", "string", 0), 2: ("path", "string", 0), 3: ("readOnly", "bool", 8)}),  # 77
    ("k8s.io.api.core.v1.Namespace", {1: ("metadata", 191, 8), 2: ("spec", 80, 8), 3: ("status", 81, 8)}),  # 78
    ("k8s.io.api.core.v1.NamespaceCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 4: ("lastTransitionTime", 194, 8), 5: ("reason", "string", 8), 6: ("message", "string", 8)}),  # 79
    ("k8s.io.api.core.v1.NamespaceSpec", {1: ("finalizers", "string", 9)}),  # 80
    ("k8s.io.api.core.v1.NamespaceStatus", {1: ("phase", "string", 8), 2: ("conditions", 79, 9)}),  # 81
    ("k8s.io.api.core.v1.NodeAffinity", {1: ("requiredDuringSchedulingIgnoredDuringExecution", 83, 12), 2: ("preferredDuringSchedulingIgnoredDuringExecution", 114, 9)}),  # 82
    ("k8s.io.api.core.v1.NodeSelector", {1: ("nodeSelectorTerms", 85, 1)}),  # 83
    ("k8s.io.api.core.v1.NodeSelectorRequirement", {1: ("key", "string", 0), 2: ("operator", "string", 0), 3: ("values", "string", 9)}),  # 84
    ("k8s.io.api.core.v1.NodeSelectorTerm", {1: ("matchExpressions", 84, 9), 2: ("matchFields", 84, 9)}),  # 85
    ("k8s.io.api.core.v1.ObjectFieldSelector", {1: ("apiVersion", "string", 8), 2: ("fieldPath", "string", 0)}),  # 86
    ("k8s.io.api.core.v1.ObjectReference", {1: ("kind", "string", 8), 2: ("namespace", "string", 8), 3: ("name", "string", 8), 4: ("uid", "string", 8), 5: ("apiVersion", "string", 8), 6: ("resourceVersion", "string", 8), 7: ("fieldPath", "string", 8)}),  # 87
    ("k8s.io.api.core.v1.PersistentVolumeClaim", {1: ("metadata", 191, 8), 2: ("spec", 90, 8), 3: ("status", 91, 8)}),  # 88
    ("k8s.io.api.core.v1.PersistentVolumeClaimCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastProbeTime", 194, 8), 4: ("lastTransitionTime", 194, 8), 5: ("reason", "string", 8), 6: ("message", "string", 8)}),  # 89
    ("k8s.io.api.core.v1.PersistentVolumeClaimSpec", {1: ("accessModes", "string", 9), 2: ("resources", 153, 8), 3: ("volumeName", "string", 8), 4: ("selector", 187, 12), 5: ("storageClassName", "string", 12), 6: ("volumeMode", "string", 12), 7: ("dataSource", 146, 12), 8: ("dataSourceRef", 147, 12), 9: ("volumeAttributesClassName", "string", 12)}),  # 90
    ("k8s.io.api.core.v1.PersistentVolumeClaimStatus", {1: ("phase", "string", 8), 2: ("accessModes", "string", 9), 3: ("capacity", 183, 10), 4: ("conditions", 89, 9), 5: ("allocatedResources", 183, 10), 7: ("allocatedResourceStatuses", "string", 10), 8: ("currentVolumeAttributesClassName", "string", 12), 9: ("modifyVolumeStatus", 76, 12)}),  # 91
    ("k8s.io.api.core.v1.PersistentVolumeClaimTemplate", {1: ("metadata", 191, 8), 2: ("spec", 90, 0)}),  # 92
    ("k8s.io.api.core.v1.PersistentVolumeClaimVolumeSource", {1: ("claimName", "string", 0), 2: ("readOnly", "bool", 8)}),  # 93
    ("k8s.io.api.core.v1.PhotonPersistentDiskVolumeSource", {1: ("pdID", "string", 0), 2: ("fsType", "string", 8)}),  # 94
    ("k8s.io.api.core.v1.Pod", {1: ("metadata", 191, 8), 2: ("spec", 109, 8), 3: ("status", 110, 8)}),  # 95
    ("k8s.io.api.core.v1.PodAffinity", {1: ("requiredDuringSchedulingIgnoredDuringExecution", 97, 9), 2: ("preferredDuringSchedulingIgnoredDuringExecution", 156, 9)}),  # 96
    ("k8s.io.api.core.v1.PodAffinityTerm", {1: ("labelSelector", 187, 12), 2: ("namespaces", "string", 9), 3: ("topologyKey", "string", 0), 4: ("namespaceSelector", 187, 12), 5: ("matchLabelKeys", "string", 9), 6: ("mismatchLabelKeys", "string", 9)}),  # 97
    ("k8s.io.api.core.v1.PodAntiAffinity", {1: ("requiredDuringSchedulingIgnoredDuringExecution", 97, 9), 2: ("preferredDuringSchedulingIgnoredDuringExecution", 156, 9)}),  # 98
    ("k8s.io.api.core.v1.PodCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastProbeTime", 194, 8), 4: ("lastTransitionTime", 194, 8), 5: ("reason", "string", 8), 6: ("message", "string", 8)}),  # 99
    ("k8s.io.api.core.v1.PodDNSConfig", {1: ("nameservers", "string", 9), 2: ("searches", "string", 9), 3: ("options", 101, 9)}),  # 100
    ("k8s.io.api.core.v1.PodDNSConfigOption", {1: ("name", "string", 8), 2: ("value", "string", 12)}),  # 101
    ("k8s.io.api.core.v1.PodIP", {1: ("ip", "string", 0)}),  # 102
    ("k8s.io.api.core.v1.PodOS", {1: ("name", "string", 0)}),  # 103
    ("k8s.io.api.core.v1.PodReadinessGate", {1: ("conditionType", "string", 0)}),  # 104
    ("k8s.io.api.core.v1.PodResourceClaim", {1: ("name", "string", 0), 3: ("resourceClaimName", "string", 12), 4: ("resourceClaimTemplateName", "string", 12)}),  # 105
    ("k8s.io.api.core.v1.PodResourceClaimStatus", {1: ("name", "string", 0), 2: ("resourceClaimName", "string", 12)}),  # 106
    ("k8s.io.api.core.v1.PodSchedulingGate", {1: ("name", "string", 0)}),  # 107
    ("k8s.io.api.core.v1.PodSecurityContext", {1: ("seLinuxOptions", 125, 12), 2: ("runAsUser", "int64", 12), 3: ("runAsNonRoot", "bool", 12), 4: ("supplementalGroups", "int64", 9), 5: ("fsGroup", "int64", 12), 6: ("runAsGroup", "int64", 12), 7: ("sysctls", 142, 9), 8: ("windowsOptions", 157, 12), 9: ("fsGroupChangePolicy", "string", 12), 10: ("seccompProfile", 127, 12), 11: ("appArmorProfile", 18, 12), 12: ("supplementalGroupsPolicy", "string", 12), 13: ("seLinuxChangePolicy", "string", 12)}),  # 108
    ("k8s.io.api.core.v1.PodSpec", {1: ("volumes", 148, 9), 2: ("containers", 32, 1), 3: ("restartPolicy", "string", 8), 4: ("terminationGracePeriodSeconds", "int64", 12), 5: ("activeDeadlineSeconds", "int64", 12), 6: ("dnsPolicy", "string", 8), 7: ("nodeSelector", "string", 10), 8: ("serviceAccountName", "string", 8), 9: ("serviceAccount", "string", 8), 10: ("nodeName", "string", 8), 11: ("hostNetwork", "bool", 8), 12: ("hostPID", "bool", 8), 13: ("hostIPC", "bool", 8), 14: ("securityContext", 108, 12), 15: ("imagePullSecrets", 75, 9), 16: ("hostname", "string", 8), 17: ("subdomain", "string", 8), 18: ("affinity", 17, 12), 19: ("schedulerName", "string", 8), 20: ("initContainers", 32, 9), 21: ("automountServiceAccountToken", "bool", 12), 22: ("tolerations", 144, 9), 23: ("hostAliases", 64, 9), 24: ("priorityClassName", "string", 8), 25: ("priority", "int32", 12), 26: ("dnsConfig", 100, 12), 27: ("shareProcessNamespace", "bool", 12), 28: ("readinessGates", 104, 9), 29: ("runtimeClassName", "string", 12), 30: ("enableServiceLinks", "bool", 12), 31: ("preemptionPolicy", "string", 12), 32: ("overhead", 183, 10), 33: ("topologySpreadConstraints", 145, 9), 34: ("ephemeralContainers", 48, 9), 35: ("setHostnameAsFQDN", "bool", 12), 36: ("os", 103, 12), 37: ("hostUsers", "bool", 12), 38: ("schedulingGates", 107, 9), 39: ("resourceClaims", 105, 9), 40: ("resources", 123, 12)}),  # 109
    ("k8s.io.api.core.v1.PodStatus", {1: ("phase", "string", 8), 2: ("conditions", 99, 9), 3: ("message", "string", 8), 4: ("reason", "string", 8), 5: ("hostIP", "string", 8), 6: ("podIP", "string", 8), 7: ("startTime", 194, 12), 8: ("containerStatuses", 39, 9), 9: ("qosClass", "string", 8), 10: ("initContainerStatuses", 39, 9), 11: ("nominatedNodeName", "string", 8), 12: ("podIPs", 102, 9), 13: ("ephemeralContainerStatuses", 39, 9), 14: ("resize", "string", 8), 15: ("resourceClaimStatuses", 106, 9), 16: ("hostIPs", 65, 9)}),  # 110
    ("k8s.io.api.core.v1.PodTemplateSpec", {1: ("metadata", 191, 8), 2: ("spec", 109, 8)}),  # 111
    ("k8s.io.api.core.v1.PortStatus", {1: ("port", "int32", 0), 2: ("protocol", "string", 0), 3: ("error", "string", 12)}),  # 112
    ("k8s.io.api.core.v1.PortworxVolumeSource", {1: ("volumeID", "string", 0), 2: ("fsType", "string", 8), 3: ("readOnly", "bool", 8)}),  # 113
    ("k8s.io.api.core.v1.PreferredSchedulingTerm", {1: ("weight", "int32", 0), 2: ("preference", 85, 0)}),  # 114
    ("k8s.io.api.core.v1.Probe", {1: ("", 116, 16), 2: ("initialDelaySeconds", "int32", 8), 3: ("timeoutSeconds", "int32", 8), 4: ("periodSeconds", "int32", 8), 5: ("successThreshold", "int32", 8), 6: ("failureThreshold", "int32", 8), 7: ("terminationGracePeriodSeconds", "int64", 12)}),  # 115
    ("k8s.io.api.core.v1.ProbeHandler", {1: ("exec", 54, 12), 2: ("httpGet", 62, 12), 3: ("tcpSocket", 143, 12), 4: ("grpc", 59, 12)}),  # 116
    ("k8s.io.api.core.v1.ProjectedVolumeSource", {1: ("sources", 152, 1), 2: ("defaultMode", "int32", 12)}),  # 117
    ("k8s.io.api.core.v1.QuobyteVolumeSource", {1: ("registry", "string", 0), 2: ("volume", "string", 0), 3: ("readOnly", "bool", 8), 4: ("user", "string", 8), 5: ("group", "string", 8), 6: ("tenant", "string", 8)}),  # 118
    ("k8s.io.api.core.v1.RBDVolumeSource", {1: ("monitors", "string", 1), 2: ("image", "string", 0), 3: ("fsType", "string", 8), 4: ("pool", "string", 8), 5: ("user", "string", 8), 6: ("keyring", "string", 8), 7: ("secretRef", 75, 12), 8: ("readOnly", "bool", 8)}),  # 119
    ("k8s.io.api.core.v1.ResourceClaim", {1: ("name", "string", 0), 2: ("request", "string", 8)}),  # 120
    ("k8s.io.api.core.v1.ResourceFieldSelector", {1: ("containerName", "string", 8), 2: ("resource", "string", 0), 3: ("divisor", 183, 8)}),  # 121
    ("k8s.io.api.core.v1.ResourceHealth", {1: ("resourceID", "string", 0), 2: ("health", "string", 8)}),  # 122
    ("k8s.io.api.core.v1.ResourceRequirements", {1: ("limits", 183, 10), 2: ("requests", 183, 10), 3: ("claims", 120, 9)}),  # 123
    ("k8s.io.api.core.v1.ResourceStatus", {1: ("name", "string", 0), 2: ("resources", 122, 9)}),  # 124
    ("k8s.io.api.core.v1.SELinuxOptions", {1: ("user", "string", 8), 2: ("role", "string", 8), 3: ("type", "string", 8), 4: ("level", "string", 8)}),  # 125
    ("k8s.io.api.core.v1.ScaleIOVolumeSource", {1: ("gateway", "string", 0), 2: ("system", "string", 0), 3: ("secretRef", 75, 4), 4: ("sslEnabled", "bool", 8), 5: ("protectionDomain", "string", 8), 6: ("storagePool", "string", 8), 7: ("storageMode", "string", 8), 8: ("volumeName", "string", 8), 9: ("fsType", "string", 8), 10: ("readOnly", "bool", 8)}),  # 126
    ("k8s.io.api.core.v1.SeccompProfile", {1: ("type", "string", 0), 2: ("localhostProfile", "string", 12)}),  # 127
    ("k8s.io.api.core.v1.Secret", {1: ("metadata", 191, 8), 2: ("data", "bytes", 10), 3: ("type", "string", 8), 4: ("stringData", "string", 10), 5: ("immutable", "bool", 12)}),  # 128
    ("k8s.io.api.core.v1.SecretEnvSource", {1: ("", 75, 16), 2: ("optional", "bool", 12)}),  # 129
    ("k8s.io.api.core.v1.SecretKeySelector", {1: ("", 75, 16), 2: ("key", "string", 0), 3: ("optional", "bool", 12)}),  # 130
    ("k8s.io.api.core.v1.SecretProjection", {1: ("", 75, 16), 2: ("items", 69, 9), 4: ("optional", "bool", 12)}),  # 131
    ("k8s.io.api.core.v1.SecretVolumeSource", {1: ("secretName", "string", 8), 2: ("items", 69, 9), 3: ("defaultMode", "int32", 12), 4: ("optional", "bool", 12)}),  # 132
    ("k8s.io.api.core.v1.SecurityContext", {1: ("capabilities", 22, 12), 2: ("privileged", "bool", 12), 3: ("seLinuxOptions", 125, 12), 4: ("runAsUser", "int64", 12), 5: ("runAsNonRoot", "bool", 12), 6: ("readOnlyRootFilesystem", "bool", 12), 7: ("allowPrivilegeEscalation", "bool", 12), 8: ("runAsGroup", "int64", 12), 9: ("procMount", "string", 12), 10: ("windowsOptions", 157, 12), 11: ("seccompProfile", 127, 12), 12: ("appArmorProfile", 18, 12)}),  # 133
    ("k8s.io.api.core.v1.Service", {1: ("metadata", 191, 8), 2: ("spec", 137, 8), 3: ("status", 138, 8)}),  # 134
    ("k8s.io.api.core.v1.ServiceAccountTokenProjection", {1: ("audience", "string", 8), 2: ("expirationSeconds", "int64", 12), 3: ("path", "string", 0)}),  # 135
    ("k8s.io.api.core.v1.ServicePort", {1: ("name", "string", 8), 2: ("protocol", "string", 8), 3: ("port", "int32", 0), 4: ("targetPort", 195, 8), 5: ("nodePort", "int32", 8), 6: ("appProtocol", "string", 12)}),  # 136
    ("k8s.io.api.core.v1.ServiceSpec", {1: ("ports", 136, 9), 2: ("selector", "string", 10), 3: ("clusterIP", "string", 8), 4: ("type", "string", 8), 5: ("externalIPs", "string", 9), 7: ("sessionAffinity", "string", 8), 8: ("loadBalancerIP", "string", 8), 9: ("loadBalancerSourceRanges", "string", 9), 10: ("externalName", "string", 8), 11: ("externalTrafficPolicy", "string", 8), 12: ("healthCheckNodePort", "int32", 8), 13: ("publishNotReadyAddresses", "bool", 8), 14: ("sessionAffinityConfig", 139, 12), 17: ("ipFamilyPolicy", "string", 12), 18: ("clusterIPs", "string", 9), 19: ("ipFamilies", "string", 9), 20: ("allocateLoadBalancerNodePorts", "bool", 12), 21: ("loadBalancerClass", "string", 12), 22: ("internalTrafficPolicy", "string", 12), 23: ("trafficDistribution", "string", 12)}),  # 137
    ("k8s.io.api.core.v1.ServiceStatus", {1: ("loadBalancer", 74, 8), 2: ("conditions", 184, 9)}),  # 138
    ("k8s.io.api.core.v1.SessionAffinityConfig", {1: ("clientIP", 25, 12)}),  # 139
    ("k8s.io.api.core.v1.SleepAction", {1: ("seconds", "int64", 0)}),  # 140
    ("k8s.io.api.core.v1.StorageOSVolumeSource", {1: ("volumeName", "string", 8), 2: ("volumeNamespace", "string", 8), 3: ("fsType", "string", 8), 4: ("readOnly", "bool", 8), 5: ("secretRef", 75, 12)}),  # 141
    ("k8s.io.api.core.v1.Sysctl", {1: ("name", "string", 0), 2: ("value", "string", 0)}),  # 142
    ("k8s.io.api.core.v1.TCPSocketAction", {1: ("port", 195, 0), 2: ("host", "string", 8)}),  # 143
    ("k8s.io.api.core.v1.Toleration", {1: ("key", "string", 8), 2: ("operator", "string", 8), 3: ("value", "string", 8), 4: ("effect", "string", 8), 5: ("tolerationSeconds", "int64", 12)}),  # 144
    ("k8s.io.api.core.v1.TopologySpreadConstraint", {1: ("maxSkew", "int32", 0), 2: ("topologyKey", "string", 0), 3: ("whenUnsatisfiable", "string", 0), 4: ("labelSelector", 187, 12), 5: ("minDomains", "int32", 12), 6: ("nodeAffinityPolicy", "string", 12), 7: ("nodeTaintsPolicy", "string", 12), 8: ("matchLabelKeys", "string", 9)}),  # 145
    ("k8s.io.api.core.v1.TypedLocalObjectReference", {1: ("apiGroup", "string", 4), 2: ("kind", "string", 0), 3: ("name", "string", 0)}),  # 146
    ("k8s.io.api.core.v1.TypedObjectReference", {1: ("apiGroup", "string", 4), 2: ("kind", "string", 0), 3: ("name", "string", 0), 4: ("namespace", "string", 12)}),  # 147
    ("k8s.io.api.core.v1.Volume", {1: ("name", "string", 0), 2: ("", 154, 16)}),  # 148
    ("k8s.io.api.core.v1.VolumeDevice", {1: ("name", "string", 0), 2: ("devicePath", "string", 0)}),  # 149
    ("k8s.io.api.core.v1.VolumeMount", {1: ("name", "string", 0), 2: ("readOnly", "bool", 8), 3: ("mountPath", "string", 0), 4: ("subPath", "string", 8), 5: ("mountPropagation", "string", 12), 6: ("subPathExpr", "string", 8), 7: ("recursiveReadOnly", "string", 12)}),  # 150
    ("k8s.io.api.core.v1.VolumeMountStatus", {1: ("name", "string", 0), 2: ("mountPath", "string", 0), 3: ("readOnly", "bool", 8), 4: ("recursiveReadOnly", "string", 12)}),  # 151
    ("k8s.io.api.core.v1.VolumeProjection", {1: ("secret", 131, 12), 2: ("downwardAPI", 41, 12), 3: ("configMap", 30, 12), 4: ("serviceAccountToken", 135, 12), 5: ("clusterTrustBundle", 26, 12)}),  # 152
    ("k8s.io.api.core.v1.VolumeResourceRequirements", {1: ("limits", 183, 10), 2: ("requests", 183, 10)}),  # 153
    ("k8s.io.api.core.v1.VolumeSource", {1: ("hostPath", 66, 12), 2: ("emptyDir", 44, 12), 3: ("gcePersistentDisk", 58, 12), 4: ("awsElasticBlockStore", 16, 12), 5: ("gitRepo", 60, 12), 6: ("secret", 132, 12), 7: ("nfs", 77, 12), 8: ("iscsi", 67, 12), 9: ("glusterfs", 61, 12), 10: ("persistentVolumeClaim", 93, 12), 11: ("rbd", 119, 12), 12: ("flexVolume", 56, 12), 13: ("cinder", 24, 12), 14: ("cephfs", 23, 12), 15: ("flocker", 57, 12), 16: ("downwardAPI", 43, 12), 17: ("fc", 55, 12), 18: ("azureFile", 20, 12), 19: ("configMap", 31, 12), 20: ("vsphereVolume", 155, 12), 21: ("quobyte", 118, 12), 22: ("azureDisk", 19, 12), 23: ("photonPersistentDisk", 94, 12), 24: ("portworxVolume", 113, 12), 25: ("scaleIO", 126, 12), 26: ("projected", 117, 12), 27: ("storageos", 141, 12), 28: ("csi", 21, 12), 29: ("ephemeral", 50, 12), 30: ("image", 68, 12)}),  # 154
    ("k8s.io.api.core.v1.VsphereVirtualDiskVolumeSource", {1: ("volumePath", "string", 0), 2: ("fsType", "string", 8), 3: ("storagePolicyName", "string", 8), 4: ("storagePolicyID", "string", 8)}),  # 155
    ("k8s.io.api.core.v1.WeightedPodAffinityTerm", {1: ("weight", "int32", 0), 2: ("podAffinityTerm", 97, 0)}),  # 156
    ("k8s.io.api.core.v1.WindowsSecurityContextOptions", {1: ("gmsaCredentialSpecName", "string", 12), 2: ("gmsaCredentialSpec", "string", 12), 3: ("runAsUserName", "string", 12), 4: ("hostProcess", "bool", 12)}),  # 157
    ("k8s.io.api.discovery.v1.Endpoint", {1: ("addresses", "string", 1), 2: ("conditions", 159, 8), 3: ("hostname", "string", 12), 4: ("targetRef", 87, 12), 5: ("deprecatedTopology", "string", 10), 6: ("nodeName", "string", 12), 7: ("zone", "string", 12), 8: ("hints", 160, 12)}),  # 158
    ("k8s.io.api.discovery.v1.EndpointConditions", {1: ("ready", "bool", 12), 2: ("serving", "bool", 12), 3: ("terminating", "bool", 12)}),  # 159
    ("k8s.io.api.discovery.v1.EndpointHints", {1: ("forZones", 163, 9)}),  # 160
    ("k8s.io.api.discovery.v1.EndpointPort", {1: ("name", "string", 12), 2: ("protocol", "string", 12), 3: ("port", "int32", 12), 4: ("appProtocol", "string", 12)}),  # 161
    ("k8s.io.api.discovery.v1.EndpointSlice", {1: ("metadata", 191, 8), 2: ("endpoints", 158, 1), 3: ("ports", 161, 1), 4: ("addressType", "string", 0)}),  # 162
    ("k8s.io.api.discovery.v1.ForZone", {1: ("name", "string", 0)}),  # 163
    ("k8s.io.api.events.v1.Event", {1: ("metadata", 191, 0), 2: ("eventTime", 190, 0), 3: ("series", 165, 12), 4: ("reportingController", "string", 8), 5: ("reportingInstance", "string", 8), 6: ("action", "string", 8), 7: ("reason", "string", 8), 8: ("regarding", 87, 8), 9: ("related", 87, 12), 10: ("note", "string", 8), 11: ("type", "string", 8), 12: ("deprecatedSource", 53, 8), 13: ("deprecatedFirstTimestamp", 194, 8), 14: ("deprecatedLastTimestamp", 194, 8), 15: ("deprecatedCount", "int32", 8)}),  # 164
    ("k8s.io.api.events.v1.EventSeries", {1: ("count", "int32", 0), 2: ("lastObservedTime", 190, 0)}),  # 165
    ("k8s.io.api.networking.v1.HTTPIngressPath", {1: ("path", "string", 8), 2: ("backend", 169, 0), 3: ("pathType", "string", 4)}),  # 166
    ("k8s.io.api.networking.v1.HTTPIngressRuleValue", {1: ("paths", 166, 1)}),  # 167
    ("k8s.io.api.networking.v1.Ingress", {1: ("metadata", 191, 8), 2: ("spec", 179, 8), 3: ("status", 180, 8)}),  # 168
    ("k8s.io.api.networking.v1.IngressBackend", {3: ("resource", 146, 12), 4: ("service", 178, 12)}),  # 169
    ("k8s.io.api.networking.v1.IngressClass", {1: ("metadata", 191, 8), 2: ("spec", 172, 8)}),  # 170
    ("k8s.io.api.networking.v1.IngressClassParametersReference", {1: ("apiGroup", "string", 12), 2: ("kind", "string", 0), 3: ("name", "string", 0), 4: ("scope", "string", 4), 5: ("namespace", "string", 12)}),  # 171
    ("k8s.io.api.networking.v1.IngressClassSpec", {1: ("controller", "string", 8), 2: ("parameters", 171, 12)}),  # 172
    ("k8s.io.api.networking.v1.IngressLoadBalancerIngress", {1: ("ip", "string", 8), 2: ("hostname", "string", 8), 4: ("ports", 175, 9)}),  # 173
    ("k8s.io.api.networking.v1.IngressLoadBalancerStatus", {1: ("ingress", 173, 9)}),  # 174
    ("k8s.io.api.networking.v1.IngressPortStatus", {1: ("port", "int32", 0), 2: ("protocol", "string", 0), 3: ("error", "string", 12)}),  # 175
    ("k8s.io.api.networking.v1.IngressRule", {1: ("host", "string", 8), 2: ("", 177, 16)}),  # 176
    ("k8s.io.api.networking.v1.IngressRuleValue", {1: ("http", 167, 12)}),  # 177
    ("k8s.io.api.networking.v1.IngressServiceBackend", {1: ("name", "string", 0), 2: ("port", 182, 8)}),  # 178
    ("k8s.io.api.networking.v1.IngressSpec", {1: ("defaultBackend", 169, 12), 2: ("tls", 181, 9), 3: ("rules", 176, 9), 4: ("ingressClassName", "string", 12)}),  # 179
    ("k8s.io.api.networking.v1.IngressStatus", {1: ("loadBalancer", 174, 8)}),  # 180
    ("k8s.io.api.networking.v1.IngressTLS", {1: ("hosts", "string", 9), 2: ("secretName", "string", 8)}),  # 181
    ("k8s.io.api.networking.v1.ServiceBackendPort", {1: ("name", "string", 8), 2: ("number", "int32", 8)}),  # 182
    ("k8s.io.apimachinery.pkg.api.resource.Quantity", {1: ("string", "string", 0)}),  # 183
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Condition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("observedGeneration", "int64", 8), 4: ("lastTransitionTime", 194, 0), 5: ("reason", "string", 0), 6: ("message", "string", 0)}),  # 184
    ("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions", {1: ("gracePeriodSeconds", "int64", 12), 2: ("preconditions", 193, 12), 3: ("orphanDependents", "bool", 12), 4: ("propagationPolicy", "string", 12), 5: ("dryRun", "string", 9), 6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "bool", 12)}),  # 185
    ("k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1", {1: ("Raw", "bytes", 0)}),  # 186
    ("k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelector", {1: ("matchLabels", "string", 10), 2: ("matchExpressions", 188, 9)}),  # 187
    ("k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", {1: ("key", "string", 0), 2: ("operator", "string", 0), 3: ("values", "string", 9)}),  # 188
    ("k8s.io.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry", {1: ("manager", "string", 8), 2: ("operation", "string", 8), 3: ("apiVersion", "string", 8), 4: ("time", 194, 12), 6: ("fieldsType", "string", 8), 7: ("fieldsV1", 186, 12), 8: ("subresource", "string", 8)}),  # 189
    ("k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime", {1: ("seconds", "int64", 0), 2: ("nanos", "int32", 0)}),  # 190
    ("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta", {1: ("name", "string", 8), 2: ("generateName", "string", 8), 3: ("namespace", "string", 8), 4: ("selfLink", "string", 8), 5: ("uid", "string", 8), 6: ("resourceVersion", "string", 8), 7: ("generation", "int64", 8), 8: ("creationTimestamp", 194, 8), 9: ("deletionTimestamp", 194, 12), 10: ("deletionGracePeriodSeconds", "int64", 12), 11: ("labels", "string", 10), 12: ("annotations", "string", 10), 13: ("ownerReferences", 192, 9), 14: ("finalizers", "string", 9), 17: ("managedFields", 189, 9)}),  # 191
    ("k8s.io.apimachinery.pkg.apis.meta.v1.OwnerReference", {1: ("kind", "string", 0), 3: ("name", "string", 0), 4: ("uid", "string", 0), 5: ("apiVersion", "string", 0), 6: ("controller", "bool", 12), 7: ("blockOwnerDeletion", "bool", 12)}),  # 192
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Preconditions", {1: ("uid", "string", 12), 2: ("resourceVersion", "string", 12)}),  # 193
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Time", {1: ("seconds", "int64", 0), 2: ("nanos", "int32", 0)}),  # 194
    ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", {1: ("type", "int64", 0), 2: ("intVal", "int32", 0), 3: ("strVal", "string", 0)}),  # 195
    # authentication.k8s.io/v1, from the same generated.proto and types.go (kubectl auth whoami
    # sends its SelfSubjectReview as protobuf). An ExtraValue decodes as {"items": [...]}, not
    # JSON's bare list: only the status carries one, and the server replaces every status.
    ("k8s.io.api.authentication.v1.SelfSubjectReview", {1: ("metadata", 191, 8), 2: ("status", 197, 8)}),  # 196
    ("k8s.io.api.authentication.v1.SelfSubjectReviewStatus", {1: ("userInfo", 200, 8)}),  # 197
    ("k8s.io.api.authentication.v1.TokenReview", {1: ("metadata", 191, 8), 2: ("spec", 199, 0), 3: ("status", 201, 8)}),  # 198
    ("k8s.io.api.authentication.v1.TokenReviewSpec", {1: ("token", "string", 8), 2: ("audiences", "string", 9)}),  # 199
    ("k8s.io.api.authentication.v1.UserInfo", {1: ("username", "string", 8), 2: ("uid", "string", 8), 3: ("groups", "string", 9), 4: ("extra", 202, 10)}),  # 200
    ("k8s.io.api.authentication.v1.TokenReviewStatus", {1: ("authenticated", "bool", 8), 2: ("user", 200, 8), 3: ("error", "string", 8), 4: ("audiences", "string", 9)}),  # 201
    ("k8s.io.api.authentication.v1.ExtraValue", {1: ("items", "string", 1)}),  # 202
)

# "apiVersion/kind" -> index into MESSAGES; "*/Kind" matches any apiVersion.
ROOTS: Final[dict[str, int]] = {
    "v1/Namespace": 78,
    "v1/Service": 134,
    "v1/Pod": 95,
    "v1/ConfigMap": 27,
    "v1/Secret": 128,
    "v1/Event": 51,
    "events.k8s.io/v1/Event": 164,
    "coordination.k8s.io/v1/Lease": 14,
    "discovery.k8s.io/v1/EndpointSlice": 162,
    "networking.k8s.io/v1/Ingress": 168,
    "networking.k8s.io/v1/IngressClass": 170,
    "apps/v1/Deployment": 0,
    "apps/v1/StatefulSet": 7,
    "*/DeleteOptions": 185,
    "authentication.k8s.io/v1/SelfSubjectReview": 196,
    "authentication.k8s.io/v1/TokenReview": 198,
}
