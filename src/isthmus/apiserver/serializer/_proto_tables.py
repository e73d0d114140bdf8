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
    # Every other kind kube v1.32 serves (kubectl create sa/job/role/..., auth can-i, autoscale send
    # protobuf), generated the same way from k8s.io/api v0.32.9.
    ("k8s.io.api.core.v1.ServiceAccount", {1: ("metadata", 191, 8), 2: ("secrets", 87, 9), 3: ("imagePullSecrets", 75, 9), 4: ("automountServiceAccountToken", "bool", 12)}),  # 203
    ("k8s.io.api.core.v1.Endpoints", {1: ("metadata", 191, 8), 2: ("subsets", 205, 9)}),  # 204
    ("k8s.io.api.core.v1.EndpointSubset", {1: ("addresses", 206, 9), 2: ("notReadyAddresses", 206, 9), 3: ("ports", 207, 9)}),  # 205
    ("k8s.io.api.core.v1.EndpointAddress", {1: ("ip", "string", 0), 3: ("hostname", "string", 8), 4: ("nodeName", "string", 12), 2: ("targetRef", 87, 12)}),  # 206
    ("k8s.io.api.core.v1.EndpointPort", {1: ("name", "string", 8), 2: ("port", "int32", 0), 3: ("protocol", "string", 8), 4: ("appProtocol", "string", 12)}),  # 207
    ("k8s.io.api.core.v1.LimitRange", {1: ("metadata", 191, 8), 2: ("spec", 209, 8)}),  # 208
    ("k8s.io.api.core.v1.LimitRangeSpec", {1: ("limits", 210, 1)}),  # 209
    ("k8s.io.api.core.v1.LimitRangeItem", {1: ("type", "string", 0), 2: ("max", 183, 10), 3: ("min", 183, 10), 4: ("default", 183, 10), 5: ("defaultRequest", 183, 10), 6: ("maxLimitRequestRatio", 183, 10)}),  # 210
    ("k8s.io.api.core.v1.Node", {1: ("metadata", 191, 8), 2: ("spec", 212, 8), 3: ("status", 216, 8)}),  # 211
    ("k8s.io.api.core.v1.NodeSpec", {1: ("podCIDR", "string", 8), 7: ("podCIDRs", "string", 9), 3: ("providerID", "string", 8), 4: ("unschedulable", "bool", 8), 5: ("taints", 213, 9), 6: ("configSource", 214, 12), 2: ("externalID", "string", 8)}),  # 212
    ("k8s.io.api.core.v1.Taint", {1: ("key", "string", 0), 2: ("value", "string", 8), 3: ("effect", "string", 0), 4: ("timeAdded", 194, 12)}),  # 213
    ("k8s.io.api.core.v1.NodeConfigSource", {2: ("configMap", 215, 12)}),  # 214
    ("k8s.io.api.core.v1.ConfigMapNodeConfigSource", {1: ("namespace", "string", 0), 2: ("name", "string", 0), 3: ("uid", "string", 8), 4: ("resourceVersion", "string", 8), 5: ("kubeletConfigKey", "string", 0)}),  # 215
    ("k8s.io.api.core.v1.NodeStatus", {1: ("capacity", 183, 10), 2: ("allocatable", 183, 10), 3: ("phase", "string", 8), 4: ("conditions", 217, 9), 5: ("addresses", 218, 9), 6: ("daemonEndpoints", 219, 8), 7: ("nodeInfo", 221, 8), 8: ("images", 222, 9), 9: ("volumesInUse", "string", 9), 10: ("volumesAttached", 223, 9), 11: ("config", 224, 12), 12: ("runtimeHandlers", 225, 9), 13: ("features", 227, 12)}),  # 216
    ("k8s.io.api.core.v1.NodeCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastHeartbeatTime", 194, 8), 4: ("lastTransitionTime", 194, 8), 5: ("reason", "string", 8), 6: ("message", "string", 8)}),  # 217
    ("k8s.io.api.core.v1.NodeAddress", {1: ("type", "string", 0), 2: ("address", "string", 0)}),  # 218
    ("k8s.io.api.core.v1.NodeDaemonEndpoints", {1: ("kubeletEndpoint", 220, 8)}),  # 219
    ("k8s.io.api.core.v1.DaemonEndpoint", {1: ("Port", "int32", 0)}),  # 220
    ("k8s.io.api.core.v1.NodeSystemInfo", {1: ("machineID", "string", 0), 2: ("systemUUID", "string", 0), 3: ("bootID", "string", 0), 4: ("kernelVersion", "string", 0), 5: ("osImage", "string", 0), 6: ("containerRuntimeVersion", "string", 0), 7: ("kubeletVersion", "string", 0), 8: ("kubeProxyVersion", "string", 0), 9: ("operatingSystem", "string", 0), 10: ("architecture", "string", 0)}),  # 221
    ("k8s.io.api.core.v1.ContainerImage", {1: ("names", "string", 1), 2: ("sizeBytes", "int64", 8)}),  # 222
    ("k8s.io.api.core.v1.AttachedVolume", {1: ("name", "string", 0), 2: ("devicePath", "string", 0)}),  # 223
    ("k8s.io.api.core.v1.NodeConfigStatus", {1: ("assigned", 214, 12), 2: ("active", 214, 12), 3: ("lastKnownGood", 214, 12), 4: ("error", "string", 8)}),  # 224
    ("k8s.io.api.core.v1.NodeRuntimeHandler", {1: ("name", "string", 0), 2: ("features", 226, 12)}),  # 225
    ("k8s.io.api.core.v1.NodeRuntimeHandlerFeatures", {1: ("recursiveReadOnlyMounts", "bool", 12), 2: ("userNamespaces", "bool", 12)}),  # 226
    ("k8s.io.api.core.v1.NodeFeatures", {1: ("supplementalGroupsPolicy", "bool", 12)}),  # 227
    ("k8s.io.api.core.v1.PersistentVolume", {1: ("metadata", 191, 8), 2: ("spec", 229, 8), 3: ("status", 244, 8)}),  # 228
    ("k8s.io.api.core.v1.PersistentVolumeSpec", {1: ("capacity", 183, 10), 2: ("", 230, 16), 3: ("accessModes", "string", 9), 4: ("claimRef", 87, 12), 5: ("persistentVolumeReclaimPolicy", "string", 8), 6: ("storageClassName", "string", 8), 7: ("mountOptions", "string", 9), 8: ("volumeMode", "string", 12), 9: ("nodeAffinity", 243, 12), 10: ("volumeAttributesClassName", "string", 12)}),  # 229
    ("k8s.io.api.core.v1.PersistentVolumeSource", {1: ("gcePersistentDisk", 58, 12), 2: ("awsElasticBlockStore", 16, 12), 3: ("hostPath", 66, 12), 4: ("glusterfs", 231, 12), 5: ("nfs", 77, 12), 6: ("rbd", 232, 12), 7: ("iscsi", 234, 12), 8: ("cinder", 235, 12), 9: ("cephfs", 236, 12), 10: ("fc", 55, 12), 11: ("flocker", 57, 12), 12: ("flexVolume", 237, 12), 13: ("azureFile", 238, 12), 14: ("vsphereVolume", 155, 12), 15: ("quobyte", 118, 12), 16: ("azureDisk", 19, 12), 17: ("photonPersistentDisk", 94, 12), 18: ("portworxVolume", 113, 12), 19: ("scaleIO", 239, 12), 20: ("local", 240, 12), 21: ("storageos", 241, 12), 22: ("csi", 242, 12)}),  # 230
    ("k8s.io.api.core.v1.GlusterfsPersistentVolumeSource", {1: ("endpoints", "string", 0), 2: ("path", "string", 0), 3: ("readOnly", "bool", 8), 4: ("endpointsNamespace", "string", 12)}),  # 231
    ("k8s.io.api.core.v1.RBDPersistentVolumeSource", {1: ("monitors", "string", 1), 2: ("image", "string", 0), 3: ("fsType", "string", 8), 4: ("pool", "string", 8), 5: ("user", "string", 8), 6: ("keyring", "string", 8), 7: ("secretRef", 233, 12), 8: ("readOnly", "bool", 8)}),  # 232
    ("k8s.io.api.core.v1.SecretReference", {1: ("name", "string", 8), 2: ("namespace", "string", 8)}),  # 233
    ("k8s.io.api.core.v1.ISCSIPersistentVolumeSource", {1: ("targetPortal", "string", 0), 2: ("iqn", "string", 0), 3: ("lun", "int32", 0), 4: ("iscsiInterface", "string", 8), 5: ("fsType", "string", 8), 6: ("readOnly", "bool", 8), 7: ("portals", "string", 9), 8: ("chapAuthDiscovery", "bool", 8), 11: ("chapAuthSession", "bool", 8), 10: ("secretRef", 233, 12), 12: ("initiatorName", "string", 12)}),  # 234
    ("k8s.io.api.core.v1.CinderPersistentVolumeSource", {1: ("volumeID", "string", 0), 2: ("fsType", "string", 8), 3: ("readOnly", "bool", 8), 4: ("secretRef", 233, 12)}),  # 235
    ("k8s.io.api.core.v1.CephFSPersistentVolumeSource", {1: ("monitors", "string", 1), 2: ("path", "string", 8), 3: ("user", "string", 8), 4: ("secretFile", "string", 8), 5: ("secretRef", 233, 12), 6: ("readOnly", "bool", 8)}),  # 236
    ("k8s.io.api.core.v1.FlexPersistentVolumeSource", {1: ("driver", "string", 0), 2: ("fsType", "string", 8), 3: ("secretRef", 233, 12), 4: ("readOnly", "bool", 8), 5: ("options", "string", 10)}),  # 237
    ("k8s.io.api.core.v1.AzureFilePersistentVolumeSource", {1: ("secretName", "string", 0), 2: ("shareName", "string", 0), 3: ("readOnly", "bool", 8), 4: ("secretNamespace", "string", 4)}),  # 238
    ("k8s.io.api.core.v1.ScaleIOPersistentVolumeSource", {1: ("gateway", "string", 0), 2: ("system", "string", 0), 3: ("secretRef", 233, 4), 4: ("sslEnabled", "bool", 8), 5: ("protectionDomain", "string", 8), 6: ("storagePool", "string", 8), 7: ("storageMode", "string", 8), 8: ("volumeName", "string", 8), 9: ("fsType", "string", 8), 10: ("readOnly", "bool", 8)}),  # 239
    ("k8s.io.api.core.v1.LocalVolumeSource", {1: ("path", "string", 0), 2: ("fsType", "string", 12)}),  # 240
    ("k8s.io.api.core.v1.StorageOSPersistentVolumeSource", {1: ("volumeName", "string", 8), 2: ("volumeNamespace", "string", 8), 3: ("fsType", "string", 8), 4: ("readOnly", "bool", 8), 5: ("secretRef", 87, 12)}),  # 241
    ("k8s.io.api.core.v1.CSIPersistentVolumeSource", {1: ("driver", "string", 0), 2: ("volumeHandle", "string", 0), 3: ("readOnly", "bool", 8), 4: ("fsType", "string", 8), 5: ("volumeAttributes", "string", 10), 6: ("controllerPublishSecretRef", 233, 12), 7: ("nodeStageSecretRef", 233, 12), 8: ("nodePublishSecretRef", 233, 12), 9: ("controllerExpandSecretRef", 233, 12), 10: ("nodeExpandSecretRef", 233, 12)}),  # 242
    ("k8s.io.api.core.v1.VolumeNodeAffinity", {1: ("required", 83, 12)}),  # 243
    ("k8s.io.api.core.v1.PersistentVolumeStatus", {1: ("phase", "string", 8), 2: ("message", "string", 8), 3: ("reason", "string", 8), 4: ("lastPhaseTransitionTime", 194, 12)}),  # 244
    ("k8s.io.api.core.v1.PodTemplate", {1: ("metadata", 191, 8), 2: ("template", 111, 8)}),  # 245
    ("k8s.io.api.core.v1.ReplicationController", {1: ("metadata", 191, 8), 2: ("spec", 247, 8), 3: ("status", 248, 8)}),  # 246
    ("k8s.io.api.core.v1.ReplicationControllerSpec", {1: ("replicas", "int32", 12), 4: ("minReadySeconds", "int32", 8), 2: ("selector", "string", 10), 3: ("template", 111, 12)}),  # 247
    ("k8s.io.api.core.v1.ReplicationControllerStatus", {1: ("replicas", "int32", 0), 2: ("fullyLabeledReplicas", "int32", 8), 4: ("readyReplicas", "int32", 8), 5: ("availableReplicas", "int32", 8), 3: ("observedGeneration", "int64", 8), 6: ("conditions", 249, 9)}),  # 248
    ("k8s.io.api.core.v1.ReplicationControllerCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 249
    ("k8s.io.api.core.v1.ResourceQuota", {1: ("metadata", 191, 8), 2: ("spec", 251, 8), 3: ("status", 254, 8)}),  # 250
    ("k8s.io.api.core.v1.ResourceQuotaSpec", {1: ("hard", 183, 10), 2: ("scopes", "string", 9), 3: ("scopeSelector", 252, 12)}),  # 251
    ("k8s.io.api.core.v1.ScopeSelector", {1: ("matchExpressions", 253, 9)}),  # 252
    ("k8s.io.api.core.v1.ScopedResourceSelectorRequirement", {1: ("scopeName", "string", 0), 2: ("operator", "string", 0), 3: ("values", "string", 9)}),  # 253
    ("k8s.io.api.core.v1.ResourceQuotaStatus", {1: ("hard", 183, 10), 2: ("used", 183, 10)}),  # 254
    ("k8s.io.api.core.v1.Binding", {1: ("metadata", 191, 8), 2: ("target", 87, 0)}),  # 255
    ("k8s.io.api.admissionregistration.v1.MutatingWebhookConfiguration", {1: ("metadata", 191, 8), 2: ("webhooks", 257, 9)}),  # 256
    ("k8s.io.api.admissionregistration.v1.MutatingWebhook", {1: ("name", "string", 0), 2: ("clientConfig", 258, 0), 3: ("rules", 260, 9), 4: ("failurePolicy", "string", 12), 9: ("matchPolicy", "string", 12), 5: ("namespaceSelector", 187, 12), 11: ("objectSelector", 187, 12), 6: ("sideEffects", "string", 4), 7: ("timeoutSeconds", "int32", 12), 8: ("admissionReviewVersions", "string", 1), 10: ("reinvocationPolicy", "string", 12), 12: ("matchConditions", 262, 9)}),  # 257
    ("k8s.io.api.admissionregistration.v1.WebhookClientConfig", {3: ("url", "string", 12), 1: ("service", 259, 12), 2: ("caBundle", "bytes", 8)}),  # 258
    ("k8s.io.api.admissionregistration.v1.ServiceReference", {1: ("namespace", "string", 0), 2: ("name", "string", 0), 3: ("path", "string", 12), 4: ("port", "int32", 12)}),  # 259
    ("k8s.io.api.admissionregistration.v1.RuleWithOperations", {1: ("operations", "string", 9), 2: ("", 261, 16)}),  # 260
    ("k8s.io.api.admissionregistration.v1.Rule", {1: ("apiGroups", "string", 9), 2: ("apiVersions", "string", 9), 3: ("resources", "string", 9), 4: ("scope", "string", 12)}),  # 261
    ("k8s.io.api.admissionregistration.v1.MatchCondition", {1: ("name", "string", 0), 2: ("expression", "string", 0)}),  # 262
    ("k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicy", {1: ("metadata", 191, 8), 2: ("spec", 264, 8), 3: ("status", 271, 8)}),  # 263
    ("k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", {1: ("paramKind", 265, 12), 2: ("matchConstraints", 266, 12), 3: ("validations", 268, 9), 4: ("failurePolicy", "string", 12), 5: ("auditAnnotations", 269, 9), 6: ("matchConditions", 262, 9), 7: ("variables", 270, 9)}),  # 264
    ("k8s.io.api.admissionregistration.v1.ParamKind", {1: ("apiVersion", "string", 8), 2: ("kind", "string", 8)}),  # 265
    ("k8s.io.api.admissionregistration.v1.MatchResources", {1: ("namespaceSelector", 187, 12), 2: ("objectSelector", 187, 12), 3: ("resourceRules", 267, 9), 4: ("excludeResourceRules", 267, 9), 7: ("matchPolicy", "string", 12)}),  # 266
    ("k8s.io.api.admissionregistration.v1.NamedRuleWithOperations", {1: ("resourceNames", "string", 9), 2: ("", 260, 16)}),  # 267
    ("k8s.io.api.admissionregistration.v1.Validation", {1: ("expression", "string", 0), 2: ("message", "string", 8), 3: ("reason", "string", 12), 4: ("messageExpression", "string", 8)}),  # 268
    ("k8s.io.api.admissionregistration.v1.AuditAnnotation", {1: ("key", "string", 0), 2: ("valueExpression", "string", 0)}),  # 269
    ("k8s.io.api.admissionregistration.v1.Variable", {1: ("name", "string", 0), 2: ("expression", "string", 0)}),  # 270
    ("k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus", {1: ("observedGeneration", "int64", 8), 2: ("typeChecking", 272, 12), 3: ("conditions", 184, 9)}),  # 271
    ("k8s.io.api.admissionregistration.v1.TypeChecking", {1: ("expressionWarnings", 273, 9)}),  # 272
    ("k8s.io.api.admissionregistration.v1.ExpressionWarning", {2: ("fieldRef", "string", 0), 3: ("warning", "string", 0)}),  # 273
    ("k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding", {1: ("metadata", 191, 8), 2: ("spec", 275, 8)}),  # 274
    ("k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec", {1: ("policyName", "string", 8), 2: ("paramRef", 276, 12), 3: ("matchResources", 266, 12), 4: ("validationActions", "string", 9)}),  # 275
    ("k8s.io.api.admissionregistration.v1.ParamRef", {1: ("name", "string", 8), 2: ("namespace", "string", 8), 3: ("selector", 187, 12), 4: ("parameterNotFoundAction", "string", 12)}),  # 276
    ("k8s.io.api.admissionregistration.v1.ValidatingWebhookConfiguration", {1: ("metadata", 191, 8), 2: ("webhooks", 278, 9)}),  # 277
    ("k8s.io.api.admissionregistration.v1.ValidatingWebhook", {1: ("name", "string", 0), 2: ("clientConfig", 258, 0), 3: ("rules", 260, 9), 4: ("failurePolicy", "string", 12), 9: ("matchPolicy", "string", 12), 5: ("namespaceSelector", 187, 12), 10: ("objectSelector", 187, 12), 6: ("sideEffects", "string", 4), 7: ("timeoutSeconds", "int32", 12), 8: ("admissionReviewVersions", "string", 1), 11: ("matchConditions", 262, 9)}),  # 278
    ("k8s.io.api.apps.v1.ControllerRevision", {1: ("metadata", 191, 8), 2: ("data", 280, 8), 3: ("revision", "int64", 0)}),  # 279
    ("k8s.io.apimachinery.pkg.runtime.RawExtension", {}),  # 280
    ("k8s.io.api.apps.v1.DaemonSet", {1: ("metadata", 191, 8), 2: ("spec", 282, 8), 3: ("status", 285, 8)}),  # 281
    ("k8s.io.api.apps.v1.DaemonSetSpec", {1: ("selector", 187, 4), 2: ("template", 111, 0), 3: ("updateStrategy", 283, 8), 4: ("minReadySeconds", "int32", 8), 6: ("revisionHistoryLimit", "int32", 12)}),  # 282
    ("k8s.io.api.apps.v1.DaemonSetUpdateStrategy", {1: ("type", "string", 8), 2: ("rollingUpdate", 284, 12)}),  # 283
    ("k8s.io.api.apps.v1.RollingUpdateDaemonSet", {1: ("maxUnavailable", 195, 12), 2: ("maxSurge", 195, 12)}),  # 284
    ("k8s.io.api.apps.v1.DaemonSetStatus", {1: ("currentNumberScheduled", "int32", 0), 2: ("numberMisscheduled", "int32", 0), 3: ("desiredNumberScheduled", "int32", 0), 4: ("numberReady", "int32", 0), 5: ("observedGeneration", "int64", 8), 6: ("updatedNumberScheduled", "int32", 8), 7: ("numberAvailable", "int32", 8), 8: ("numberUnavailable", "int32", 8), 9: ("collisionCount", "int32", 12), 10: ("conditions", 286, 9)}),  # 285
    ("k8s.io.api.apps.v1.DaemonSetCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 286
    ("k8s.io.api.apps.v1.ReplicaSet", {1: ("metadata", 191, 8), 2: ("spec", 288, 8), 3: ("status", 289, 8)}),  # 287
    ("k8s.io.api.apps.v1.ReplicaSetSpec", {1: ("replicas", "int32", 12), 4: ("minReadySeconds", "int32", 8), 2: ("selector", 187, 4), 3: ("template", 111, 8)}),  # 288
    ("k8s.io.api.apps.v1.ReplicaSetStatus", {1: ("replicas", "int32", 0), 2: ("fullyLabeledReplicas", "int32", 8), 4: ("readyReplicas", "int32", 8), 5: ("availableReplicas", "int32", 8), 3: ("observedGeneration", "int64", 8), 6: ("conditions", 290, 9)}),  # 289
    ("k8s.io.api.apps.v1.ReplicaSetCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 290
    ("k8s.io.api.authorization.v1.LocalSubjectAccessReview", {1: ("metadata", 191, 8), 2: ("spec", 292, 0), 3: ("status", 299, 8)}),  # 291
    ("k8s.io.api.authorization.v1.SubjectAccessReviewSpec", {1: ("resourceAttributes", 293, 12), 2: ("nonResourceAttributes", 297, 12), 3: ("user", "string", 8), 4: ("groups", "string", 9), 5: ("extra", 298, 10), 6: ("uid", "string", 8)}),  # 292
    ("k8s.io.api.authorization.v1.ResourceAttributes", {1: ("namespace", "string", 8), 2: ("verb", "string", 8), 3: ("group", "string", 8), 4: ("version", "string", 8), 5: ("resource", "string", 8), 6: ("subresource", "string", 8), 7: ("name", "string", 8), 8: ("fieldSelector", 294, 12), 9: ("labelSelector", 296, 12)}),  # 293
    ("k8s.io.api.authorization.v1.FieldSelectorAttributes", {1: ("rawSelector", "string", 8), 2: ("requirements", 295, 9)}),  # 294
    ("k8s.io.apimachinery.pkg.apis.meta.v1.FieldSelectorRequirement", {1: ("key", "string", 0), 2: ("operator", "string", 0), 3: ("values", "string", 9)}),  # 295
    ("k8s.io.api.authorization.v1.LabelSelectorAttributes", {1: ("rawSelector", "string", 8), 2: ("requirements", 188, 9)}),  # 296
    ("k8s.io.api.authorization.v1.NonResourceAttributes", {1: ("path", "string", 8), 2: ("verb", "string", 8)}),  # 297
    ("k8s.io.api.authorization.v1.ExtraValue", {1: ("items", "string", 1)}),  # 298
    ("k8s.io.api.authorization.v1.SubjectAccessReviewStatus", {1: ("allowed", "bool", 0), 4: ("denied", "bool", 8), 2: ("reason", "string", 8), 3: ("evaluationError", "string", 8)}),  # 299
    ("k8s.io.api.authorization.v1.SelfSubjectAccessReview", {1: ("metadata", 191, 8), 2: ("spec", 301, 0), 3: ("status", 299, 8)}),  # 300
    ("k8s.io.api.authorization.v1.SelfSubjectAccessReviewSpec", {1: ("resourceAttributes", 293, 12), 2: ("nonResourceAttributes", 297, 12)}),  # 301
    ("k8s.io.api.authorization.v1.SelfSubjectRulesReview", {1: ("metadata", 191, 8), 2: ("spec", 303, 0), 3: ("status", 304, 8)}),  # 302
    ("k8s.io.api.authorization.v1.SelfSubjectRulesReviewSpec", {1: ("namespace", "string", 8)}),  # 303
    ("k8s.io.api.authorization.v1.SubjectRulesReviewStatus", {1: ("resourceRules", 305, 1), 2: ("nonResourceRules", 306, 1), 3: ("incomplete", "bool", 0), 4: ("evaluationError", "string", 8)}),  # 304
    ("k8s.io.api.authorization.v1.ResourceRule", {1: ("verbs", "string", 1), 2: ("apiGroups", "string", 9), 3: ("resources", "string", 9), 4: ("resourceNames", "string", 9)}),  # 305
    ("k8s.io.api.authorization.v1.NonResourceRule", {1: ("verbs", "string", 1), 2: ("nonResourceURLs", "string", 9)}),  # 306
    ("k8s.io.api.authorization.v1.SubjectAccessReview", {1: ("metadata", 191, 8), 2: ("spec", 292, 0), 3: ("status", 299, 8)}),  # 307
    ("k8s.io.api.autoscaling.v2.HorizontalPodAutoscaler", {1: ("metadata", 191, 8), 2: ("spec", 309, 8), 3: ("status", 322, 8)}),  # 308
    ("k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerSpec", {1: ("scaleTargetRef", 310, 0), 2: ("minReplicas", "int32", 12), 3: ("maxReplicas", "int32", 0), 4: ("metrics", 311, 9), 5: ("behavior", 319, 12)}),  # 309
    ("k8s.io.api.autoscaling.v2.CrossVersionObjectReference", {1: ("kind", "string", 0), 2: ("name", "string", 0), 3: ("apiVersion", "string", 8)}),  # 310
    ("k8s.io.api.autoscaling.v2.MetricSpec", {1: ("type", "string", 0), 2: ("object", 312, 12), 3: ("pods", 315, 12), 4: ("resource", 316, 12), 7: ("containerResource", 317, 12), 5: ("external", 318, 12)}),  # 311
    ("k8s.io.api.autoscaling.v2.ObjectMetricSource", {1: ("describedObject", 310, 0), 2: ("target", 313, 0), 3: ("metric", 314, 0)}),  # 312
    ("k8s.io.api.autoscaling.v2.MetricTarget", {1: ("type", "string", 0), 2: ("value", 183, 12), 3: ("averageValue", 183, 12), 4: ("averageUtilization", "int32", 12)}),  # 313
    ("k8s.io.api.autoscaling.v2.MetricIdentifier", {1: ("name", "string", 0), 2: ("selector", 187, 12)}),  # 314
    ("k8s.io.api.autoscaling.v2.PodsMetricSource", {1: ("metric", 314, 0), 2: ("target", 313, 0)}),  # 315
    ("k8s.io.api.autoscaling.v2.ResourceMetricSource", {1: ("name", "string", 0), 2: ("target", 313, 0)}),  # 316
    ("k8s.io.api.autoscaling.v2.ContainerResourceMetricSource", {1: ("name", "string", 0), 2: ("target", 313, 0), 3: ("container", "string", 0)}),  # 317
    ("k8s.io.api.autoscaling.v2.ExternalMetricSource", {1: ("metric", 314, 0), 2: ("target", 313, 0)}),  # 318
    ("k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerBehavior", {1: ("scaleUp", 320, 12), 2: ("scaleDown", 320, 12)}),  # 319
    ("k8s.io.api.autoscaling.v2.HPAScalingRules", {3: ("stabilizationWindowSeconds", "int32", 12), 1: ("selectPolicy", "string", 12), 2: ("policies", 321, 9)}),  # 320
    ("k8s.io.api.autoscaling.v2.HPAScalingPolicy", {1: ("type", "string", 0), 2: ("value", "int32", 0), 3: ("periodSeconds", "int32", 0)}),  # 321
    ("k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerStatus", {1: ("observedGeneration", "int64", 12), 2: ("lastScaleTime", 194, 12), 3: ("currentReplicas", "int32", 8), 4: ("desiredReplicas", "int32", 0), 5: ("currentMetrics", 323, 1), 6: ("conditions", 330, 9)}),  # 322
    ("k8s.io.api.autoscaling.v2.MetricStatus", {1: ("type", "string", 0), 2: ("object", 324, 12), 3: ("pods", 326, 12), 4: ("resource", 327, 12), 7: ("containerResource", 328, 12), 5: ("external", 329, 12)}),  # 323
    ("k8s.io.api.autoscaling.v2.ObjectMetricStatus", {1: ("metric", 314, 0), 2: ("current", 325, 0), 3: ("describedObject", 310, 0)}),  # 324
    ("k8s.io.api.autoscaling.v2.MetricValueStatus", {1: ("value", 183, 12), 2: ("averageValue", 183, 12), 3: ("averageUtilization", "int32", 12)}),  # 325
    ("k8s.io.api.autoscaling.v2.PodsMetricStatus", {1: ("metric", 314, 0), 2: ("current", 325, 0)}),  # 326
    ("k8s.io.api.autoscaling.v2.ResourceMetricStatus", {1: ("name", "string", 0), 2: ("current", 325, 0)}),  # 327
    ("k8s.io.api.autoscaling.v2.ContainerResourceMetricStatus", {1: ("name", "string", 0), 2: ("current", 325, 0), 3: ("container", "string", 0)}),  # 328
    ("k8s.io.api.autoscaling.v2.ExternalMetricStatus", {1: ("metric", 314, 0), 2: ("current", 325, 0)}),  # 329
    ("k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 330
    ("k8s.io.api.autoscaling.v1.HorizontalPodAutoscaler", {1: ("metadata", 191, 8), 2: ("spec", 332, 8), 3: ("status", 334, 8)}),  # 331
    ("k8s.io.api.autoscaling.v1.HorizontalPodAutoscalerSpec", {1: ("scaleTargetRef", 333, 0), 2: ("minReplicas", "int32", 12), 3: ("maxReplicas", "int32", 0), 4: ("targetCPUUtilizationPercentage", "int32", 12)}),  # 332
    ("k8s.io.api.autoscaling.v1.CrossVersionObjectReference", {1: ("kind", "string", 0), 2: ("name", "string", 0), 3: ("apiVersion", "string", 8)}),  # 333
    ("k8s.io.api.autoscaling.v1.HorizontalPodAutoscalerStatus", {1: ("observedGeneration", "int64", 12), 2: ("lastScaleTime", 194, 12), 3: ("currentReplicas", "int32", 0), 4: ("desiredReplicas", "int32", 0), 5: ("currentCPUUtilizationPercentage", "int32", 12)}),  # 334
    ("k8s.io.api.autoscaling.v1.Scale", {1: ("metadata", 191, 8), 2: ("spec", 336, 8), 3: ("status", 337, 8)}),  # 335
    ("k8s.io.api.autoscaling.v1.ScaleSpec", {1: ("replicas", "int32", 8)}),  # 336
    ("k8s.io.api.autoscaling.v1.ScaleStatus", {1: ("replicas", "int32", 0), 2: ("selector", "string", 8)}),  # 337
    ("k8s.io.api.batch.v1.CronJob", {1: ("metadata", 191, 8), 2: ("spec", 339, 8), 3: ("status", 348, 8)}),  # 338
    ("k8s.io.api.batch.v1.CronJobSpec", {1: ("schedule", "string", 0), 8: ("timeZone", "string", 12), 2: ("startingDeadlineSeconds", "int64", 12), 3: ("concurrencyPolicy", "string", 8), 4: ("suspend", "bool", 12), 5: ("jobTemplate", 340, 0), 6: ("successfulJobsHistoryLimit", "int32", 12), 7: ("failedJobsHistoryLimit", "int32", 12)}),  # 339
    ("k8s.io.api.batch.v1.JobTemplateSpec", {1: ("metadata", 191, 8), 2: ("spec", 341, 8)}),  # 340
    ("k8s.io.api.batch.v1.JobSpec", {1: ("parallelism", "int32", 12), 2: ("completions", "int32", 12), 3: ("activeDeadlineSeconds", "int64", 12), 11: ("podFailurePolicy", 342, 12), 16: ("successPolicy", 346, 12), 7: ("backoffLimit", "int32", 12), 12: ("backoffLimitPerIndex", "int32", 12), 13: ("maxFailedIndexes", "int32", 12), 4: ("selector", 187, 12), 5: ("manualSelector", "bool", 12), 6: ("template", 111, 0), 8: ("ttlSecondsAfterFinished", "int32", 12), 9: ("completionMode", "string", 12), 10: ("suspend", "bool", 12), 14: ("podReplacementPolicy", "string", 12), 15: ("managedBy", "string", 12)}),  # 341
    ("k8s.io.api.batch.v1.PodFailurePolicy", {1: ("rules", 343, 1)}),  # 342
    ("k8s.io.api.batch.v1.PodFailurePolicyRule", {1: ("action", "string", 0), 2: ("onExitCodes", 344, 12), 3: ("onPodConditions", 345, 9)}),  # 343
    ("k8s.io.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", {1: ("containerName", "string", 12), 2: ("operator", "string", 0), 3: ("values", "int32", 1)}),  # 344
    ("k8s.io.api.batch.v1.PodFailurePolicyOnPodConditionsPattern", {1: ("type", "string", 0), 2: ("status", "string", 0)}),  # 345
    ("k8s.io.api.batch.v1.SuccessPolicy", {1: ("rules", 347, 1)}),  # 346
    ("k8s.io.api.batch.v1.SuccessPolicyRule", {1: ("succeededIndexes", "string", 12), 2: ("succeededCount", "int32", 12)}),  # 347
    ("k8s.io.api.batch.v1.CronJobStatus", {1: ("active", 87, 9), 4: ("lastScheduleTime", 194, 12), 5: ("lastSuccessfulTime", 194, 12)}),  # 348
    ("k8s.io.api.batch.v1.Job", {1: ("metadata", 191, 8), 2: ("spec", 341, 8), 3: ("status", 350, 8)}),  # 349
    ("k8s.io.api.batch.v1.JobStatus", {1: ("conditions", 351, 9), 2: ("startTime", 194, 12), 3: ("completionTime", 194, 12), 4: ("active", "int32", 8), 5: ("succeeded", "int32", 8), 6: ("failed", "int32", 8), 11: ("terminating", "int32", 12), 7: ("completedIndexes", "string", 8), 10: ("failedIndexes", "string", 12), 8: ("uncountedTerminatedPods", 352, 12), 9: ("ready", "int32", 12)}),  # 350
    ("k8s.io.api.batch.v1.JobCondition", {1: ("type", "string", 0), 2: ("status", "string", 0), 3: ("lastProbeTime", 194, 8), 4: ("lastTransitionTime", 194, 8), 5: ("reason", "string", 8), 6: ("message", "string", 8)}),  # 351
    ("k8s.io.api.batch.v1.UncountedTerminatedPods", {1: ("succeeded", "string", 9), 2: ("failed", "string", 9)}),  # 352
    ("k8s.io.api.certificates.v1.CertificateSigningRequest", {1: ("metadata", 191, 8), 2: ("spec", 354, 0), 3: ("status", 356, 8)}),  # 353
    ("k8s.io.api.certificates.v1.CertificateSigningRequestSpec", {1: ("request", "bytes", 0), 7: ("signerName", "string", 0), 8: ("expirationSeconds", "int32", 12), 5: ("usages", "string", 9), 2: ("username", "string", 8), 3: ("uid", "string", 8), 4: ("groups", "string", 9), 6: ("extra", 355, 10)}),  # 354
    ("k8s.io.api.certificates.v1.ExtraValue", {1: ("items", "string", 1)}),  # 355
    ("k8s.io.api.certificates.v1.CertificateSigningRequestStatus", {1: ("conditions", 357, 9), 2: ("certificate", "bytes", 8)}),  # 356
    ("k8s.io.api.certificates.v1.CertificateSigningRequestCondition", {1: ("type", "string", 0), 6: ("status", "string", 0), 2: ("reason", "string", 8), 3: ("message", "string", 8), 4: ("lastUpdateTime", 194, 8), 5: ("lastTransitionTime", 194, 8)}),  # 357
    ("k8s.io.api.flowcontrol.v1.FlowSchema", {1: ("metadata", 191, 8), 2: ("spec", 359, 8), 3: ("status", 369, 8)}),  # 358
    ("k8s.io.api.flowcontrol.v1.FlowSchemaSpec", {1: ("priorityLevelConfiguration", 360, 0), 2: ("matchingPrecedence", "int32", 0), 3: ("distinguisherMethod", 361, 12), 4: ("rules", 362, 9)}),  # 359
    ("k8s.io.api.flowcontrol.v1.PriorityLevelConfigurationReference", {1: ("name", "string", 0)}),  # 360
    ("k8s.io.api.flowcontrol.v1.FlowDistinguisherMethod", {1: ("type", "string", 0)}),  # 361
    ("k8s.io.api.flowcontrol.v1.PolicyRulesWithSubjects", {1: ("subjects", 363, 1), 2: ("resourceRules", 367, 9), 3: ("nonResourceRules", 368, 9)}),  # 362
    ("k8s.io.api.flowcontrol.v1.Subject", {1: ("kind", "string", 0), 2: ("user", 364, 12), 3: ("group", 365, 12), 4: ("serviceAccount", 366, 12)}),  # 363
    ("k8s.io.api.flowcontrol.v1.UserSubject", {1: ("name", "string", 0)}),  # 364
    ("k8s.io.api.flowcontrol.v1.GroupSubject", {1: ("name", "string", 0)}),  # 365
    ("k8s.io.api.flowcontrol.v1.ServiceAccountSubject", {1: ("namespace", "string", 0), 2: ("name", "string", 0)}),  # 366
    ("k8s.io.api.flowcontrol.v1.ResourcePolicyRule", {1: ("verbs", "string", 1), 2: ("apiGroups", "string", 1), 3: ("resources", "string", 1), 4: ("clusterScope", "bool", 8), 5: ("namespaces", "string", 1)}),  # 367
    ("k8s.io.api.flowcontrol.v1.NonResourcePolicyRule", {1: ("verbs", "string", 1), 6: ("nonResourceURLs", "string", 1)}),  # 368
    ("k8s.io.api.flowcontrol.v1.FlowSchemaStatus", {1: ("conditions", 370, 9)}),  # 369
    ("k8s.io.api.flowcontrol.v1.FlowSchemaCondition", {1: ("type", "string", 8), 2: ("status", "string", 8), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 370
    ("k8s.io.api.flowcontrol.v1.PriorityLevelConfiguration", {1: ("metadata", 191, 8), 2: ("spec", 372, 8), 3: ("status", 377, 8)}),  # 371
    ("k8s.io.api.flowcontrol.v1.PriorityLevelConfigurationSpec", {1: ("type", "string", 0), 2: ("limited", 373, 12), 3: ("exempt", 376, 12)}),  # 372
    ("k8s.io.api.flowcontrol.v1.LimitedPriorityLevelConfiguration", {1: ("nominalConcurrencyShares", "int32", 4), 2: ("limitResponse", 374, 8), 3: ("lendablePercent", "int32", 12), 4: ("borrowingLimitPercent", "int32", 12)}),  # 373
    ("k8s.io.api.flowcontrol.v1.LimitResponse", {1: ("type", "string", 0), 2: ("queuing", 375, 12)}),  # 374
    ("k8s.io.api.flowcontrol.v1.QueuingConfiguration", {1: ("queues", "int32", 0), 2: ("handSize", "int32", 0), 3: ("queueLengthLimit", "int32", 0)}),  # 375
    ("k8s.io.api.flowcontrol.v1.ExemptPriorityLevelConfiguration", {1: ("nominalConcurrencyShares", "int32", 12), 2: ("lendablePercent", "int32", 12)}),  # 376
    ("k8s.io.api.flowcontrol.v1.PriorityLevelConfigurationStatus", {1: ("conditions", 378, 9)}),  # 377
    ("k8s.io.api.flowcontrol.v1.PriorityLevelConfigurationCondition", {1: ("type", "string", 8), 2: ("status", "string", 8), 3: ("lastTransitionTime", 194, 8), 4: ("reason", "string", 8), 5: ("message", "string", 8)}),  # 378
    ("k8s.io.api.networking.v1.NetworkPolicy", {1: ("metadata", 191, 8), 2: ("spec", 380, 8)}),  # 379
    ("k8s.io.api.networking.v1.NetworkPolicySpec", {1: ("podSelector", 187, 0), 2: ("ingress", 381, 9), 3: ("egress", 385, 9), 4: ("policyTypes", "string", 9)}),  # 380
    ("k8s.io.api.networking.v1.NetworkPolicyIngressRule", {1: ("ports", 382, 9), 2: ("from", 383, 9)}),  # 381
    ("k8s.io.api.networking.v1.NetworkPolicyPort", {1: ("protocol", "string", 12), 2: ("port", 195, 12), 3: ("endPort", "int32", 12)}),  # 382
    ("k8s.io.api.networking.v1.NetworkPolicyPeer", {1: ("podSelector", 187, 12), 2: ("namespaceSelector", 187, 12), 3: ("ipBlock", 384, 12)}),  # 383
    ("k8s.io.api.networking.v1.IPBlock", {1: ("cidr", "string", 0), 2: ("except", "string", 9)}),  # 384
    ("k8s.io.api.networking.v1.NetworkPolicyEgressRule", {1: ("ports", 382, 9), 2: ("to", 383, 9)}),  # 385
    ("k8s.io.api.node.v1.RuntimeClass", {1: ("metadata", 191, 8), 2: ("handler", "string", 0), 3: ("overhead", 387, 12), 4: ("scheduling", 388, 12)}),  # 386
    ("k8s.io.api.node.v1.Overhead", {1: ("podFixed", 183, 10)}),  # 387
    ("k8s.io.api.node.v1.Scheduling", {1: ("nodeSelector", "string", 10), 2: ("tolerations", 144, 9)}),  # 388
    ("k8s.io.api.policy.v1.PodDisruptionBudget", {1: ("metadata", 191, 8), 2: ("spec", 390, 8), 3: ("status", 391, 8)}),  # 389
    ("k8s.io.api.policy.v1.PodDisruptionBudgetSpec", {1: ("minAvailable", 195, 12), 2: ("selector", 187, 12), 3: ("maxUnavailable", 195, 12), 4: ("unhealthyPodEvictionPolicy", "string", 12)}),  # 390
    ("k8s.io.api.policy.v1.PodDisruptionBudgetStatus", {1: ("observedGeneration", "int64", 8), 2: ("disruptedPods", 194, 10), 3: ("disruptionsAllowed", "int32", 0), 4: ("currentHealthy", "int32", 0), 5: ("desiredHealthy", "int32", 0), 6: ("expectedPods", "int32", 0), 7: ("conditions", 184, 9)}),  # 391
    ("k8s.io.api.policy.v1.Eviction", {1: ("metadata", 191, 8), 2: ("deleteOptions", 185, 12)}),  # 392
    ("k8s.io.api.rbac.v1.ClusterRoleBinding", {1: ("metadata", 191, 8), 2: ("subjects", 394, 9), 3: ("roleRef", 395, 0)}),  # 393
    ("k8s.io.api.rbac.v1.Subject", {1: ("kind", "string", 0), 2: ("apiGroup", "string", 8), 3: ("name", "string", 0), 4: ("namespace", "string", 8)}),  # 394
    ("k8s.io.api.rbac.v1.RoleRef", {1: ("apiGroup", "string", 0), 2: ("kind", "string", 0), 3: ("name", "string", 0)}),  # 395
    ("k8s.io.api.rbac.v1.ClusterRole", {1: ("metadata", 191, 8), 2: ("rules", 397, 1), 3: ("aggregationRule", 398, 12)}),  # 396
    ("k8s.io.api.rbac.v1.PolicyRule", {1: ("verbs", "string", 1), 2: ("apiGroups", "string", 9), 3: ("resources", "string", 9), 4: ("resourceNames", "string", 9), 5: ("nonResourceURLs", "string", 9)}),  # 397
    ("k8s.io.api.rbac.v1.AggregationRule", {1: ("clusterRoleSelectors", 187, 9)}),  # 398
    ("k8s.io.api.rbac.v1.RoleBinding", {1: ("metadata", 191, 8), 2: ("subjects", 394, 9), 3: ("roleRef", 395, 0)}),  # 399
    ("k8s.io.api.rbac.v1.Role", {1: ("metadata", 191, 8), 2: ("rules", 397, 1)}),  # 400
    ("k8s.io.api.scheduling.v1.PriorityClass", {1: ("metadata", 191, 8), 2: ("value", "int32", 0), 3: ("globalDefault", "bool", 8), 4: ("description", "string", 8), 5: ("preemptionPolicy", "string", 12)}),  # 401
    ("k8s.io.api.storage.v1.CSIDriver", {1: ("metadata", 191, 8), 2: ("spec", 403, 0)}),  # 402
    ("k8s.io.api.storage.v1.CSIDriverSpec", {1: ("attachRequired", "bool", 12), 2: ("podInfoOnMount", "bool", 12), 3: ("volumeLifecycleModes", "string", 9), 4: ("storageCapacity", "bool", 12), 5: ("fsGroupPolicy", "string", 12), 6: ("tokenRequests", 404, 9), 7: ("requiresRepublish", "bool", 12), 8: ("seLinuxMount", "bool", 12)}),  # 403
    ("k8s.io.api.storage.v1.TokenRequest", {1: ("audience", "string", 0), 2: ("expirationSeconds", "int64", 12)}),  # 404
    ("k8s.io.api.storage.v1.CSINode", {1: ("metadata", 191, 8), 2: ("spec", 406, 0)}),  # 405
    ("k8s.io.api.storage.v1.CSINodeSpec", {1: ("drivers", 407, 1)}),  # 406
    ("k8s.io.api.storage.v1.CSINodeDriver", {1: ("name", "string", 0), 2: ("nodeID", "string", 0), 3: ("topologyKeys", "string", 1), 4: ("allocatable", 408, 12)}),  # 407
    ("k8s.io.api.storage.v1.VolumeNodeResources", {1: ("count", "int32", 12)}),  # 408
    ("k8s.io.api.storage.v1.CSIStorageCapacity", {1: ("metadata", 191, 8), 2: ("nodeTopology", 187, 12), 3: ("storageClassName", "string", 0), 4: ("capacity", 183, 12), 5: ("maximumVolumeSize", 183, 12)}),  # 409
    ("k8s.io.api.storage.v1.StorageClass", {1: ("metadata", 191, 8), 2: ("provisioner", "string", 0), 3: ("parameters", "string", 10), 4: ("reclaimPolicy", "string", 12), 5: ("mountOptions", "string", 9), 6: ("allowVolumeExpansion", "bool", 12), 7: ("volumeBindingMode", "string", 12), 8: ("allowedTopologies", 411, 9)}),  # 410
    ("k8s.io.api.core.v1.TopologySelectorTerm", {1: ("matchLabelExpressions", 412, 9)}),  # 411
    ("k8s.io.api.core.v1.TopologySelectorLabelRequirement", {1: ("key", "string", 0), 2: ("values", "string", 1)}),  # 412
    ("k8s.io.api.storage.v1.VolumeAttachment", {1: ("metadata", 191, 8), 2: ("spec", 414, 0), 3: ("status", 416, 8)}),  # 413
    ("k8s.io.api.storage.v1.VolumeAttachmentSpec", {1: ("attacher", "string", 0), 2: ("source", 415, 0), 3: ("nodeName", "string", 0)}),  # 414
    ("k8s.io.api.storage.v1.VolumeAttachmentSource", {1: ("persistentVolumeName", "string", 12), 2: ("inlineVolumeSpec", 229, 12)}),  # 415
    ("k8s.io.api.storage.v1.VolumeAttachmentStatus", {1: ("attached", "bool", 0), 2: ("attachmentMetadata", "string", 10), 3: ("attachError", 417, 12), 4: ("detachError", 417, 12)}),  # 416
    ("k8s.io.api.storage.v1.VolumeError", {1: ("time", 194, 8), 2: ("message", "string", 8)}),  # 417
    # authentication.k8s.io/v1 TokenRequest (kubectl create token sends it as protobuf), from the
    # same generated.proto and types.go.
    ("k8s.io.api.authentication.v1.TokenRequest", {1: ("metadata", 191, 8), 2: ("spec", 419, 0), 3: ("status", 421, 8)}),  # 418
    ("k8s.io.api.authentication.v1.TokenRequestSpec", {1: ("audiences", "string", 1), 4: ("expirationSeconds", "int64", 4), 3: ("boundObjectRef", 420, 4)}),  # 419
    ("k8s.io.api.authentication.v1.BoundObjectReference", {1: ("kind", "string", 8), 2: ("apiVersion", "string", 8), 3: ("name", "string", 8), 4: ("uid", "string", 8)}),  # 420
    ("k8s.io.api.authentication.v1.TokenRequestStatus", {1: ("token", "string", 0), 2: ("expirationTimestamp", 194, 0)}),  # 421
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
    "v1/ServiceAccount": 203,
    "v1/Endpoints": 204,
    "v1/LimitRange": 208,
    "v1/Node": 211,
    "v1/PersistentVolumeClaim": 88,
    "v1/PersistentVolume": 228,
    "v1/PodTemplate": 245,
    "v1/ReplicationController": 246,
    "v1/ResourceQuota": 250,
    "v1/Binding": 255,
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": 256,
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy": 263,
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding": 274,
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration": 277,
    "apps/v1/ControllerRevision": 279,
    "apps/v1/DaemonSet": 281,
    "apps/v1/ReplicaSet": 287,
    "authorization.k8s.io/v1/LocalSubjectAccessReview": 291,
    "authorization.k8s.io/v1/SelfSubjectAccessReview": 300,
    "authorization.k8s.io/v1/SelfSubjectRulesReview": 302,
    "authorization.k8s.io/v1/SubjectAccessReview": 307,
    "autoscaling/v2/HorizontalPodAutoscaler": 308,
    "autoscaling/v1/HorizontalPodAutoscaler": 331,
    "autoscaling/v1/Scale": 335,
    "batch/v1/CronJob": 338,
    "batch/v1/Job": 349,
    "certificates.k8s.io/v1/CertificateSigningRequest": 353,
    "flowcontrol.apiserver.k8s.io/v1/FlowSchema": 358,
    "flowcontrol.apiserver.k8s.io/v1/PriorityLevelConfiguration": 371,
    "networking.k8s.io/v1/NetworkPolicy": 379,
    "node.k8s.io/v1/RuntimeClass": 386,
    "policy/v1/PodDisruptionBudget": 389,
    "policy/v1/Eviction": 392,
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": 393,
    "rbac.authorization.k8s.io/v1/ClusterRole": 396,
    "rbac.authorization.k8s.io/v1/RoleBinding": 399,
    "rbac.authorization.k8s.io/v1/Role": 400,
    "scheduling.k8s.io/v1/PriorityClass": 401,
    "storage.k8s.io/v1/CSIDriver": 402,
    "storage.k8s.io/v1/CSINode": 405,
    "storage.k8s.io/v1/CSIStorageCapacity": 409,
    "storage.k8s.io/v1/StorageClass": 410,
    "storage.k8s.io/v1/VolumeAttachment": 413,
    "authentication.k8s.io/v1/TokenRequest": 418,
}
