"""kube-apiserver's ServiceAccount admission plugin (plugin/pkg/admission/serviceaccount).

A new Pod runs as a ServiceAccount that exists (`default` unless named); unless the Pod or the
ServiceAccount opts out, every container and init container mounts the `kube-api-access-<random>`
projected volume (a bound token, the cluster CA and the namespace) at
/var/run/secrets/kubernetes.io/serviceaccount, and the ServiceAccount's imagePullSecrets are
copied when the Pod names none.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.jsoncopy import clone

Obj = dict[str, Any]

DEFAULT_SERVICE_ACCOUNT = "default"
VOLUME_PREFIX = "kube-api-access-"
MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# serviceaccount.WarnOnlyBoundTokenExpirationSeconds: kube's token lifetime for the projected volume.
TOKEN_EXPIRATION_SECONDS = 3607
# The `default` ServiceAccount comes from a controller shortly after its namespace: kube looks it up
# again up to 10 times, 100 to 200 ms apart, before refusing the Pod.
DEFAULT_ATTEMPTS = 10
# names.SimpleNameGenerator's alphabet; a volume name need not be unpredictable (kube uses math/rand).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def token_volume(name: str) -> Obj:
    """TokenVolumeSource: what kube mounts (defaultMode 0644 set explicitly, as kube does)."""
    return {"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}


def should_automount(service_account: Obj, spec: Obj) -> bool:
    """The Pod's automountServiceAccountToken wins, then the ServiceAccount's; default true."""
    if isinstance(spec.get("automountServiceAccountToken"), bool):
        return bool(spec["automountServiceAccountToken"])
    if isinstance(service_account.get("automountServiceAccountToken"), bool):
        return bool(service_account["automountServiceAccountToken"])
    return True


def mount_token(spec: Obj) -> None:
    """mountServiceAccountToken: reuse a kube-api-access-* volume the Pod has, else add one if a
    container mounts it; a container already mounting something at the path is left alone."""
    volumes: list[Any] = spec["volumes"] if isinstance(spec.get("volumes"), list) else []
    existing = next((v["name"] for v in volumes if isinstance(v, dict)
                     and str(v.get("name", "")).startswith(VOLUME_PREFIX)), None)
    name = existing or VOLUME_PREFIX + "".join(random.choices(NAME_ALPHABET, k=5))
    needed = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            mounts: list[Any] = c["volumeMounts"] if isinstance(c.get("volumeMounts"), list) else []
            if any(isinstance(m, dict) and m.get("mountPath") == MOUNT_PATH for m in mounts):
                continue
            c["volumeMounts"] = [*mounts, {"name": name, "readOnly": True, "mountPath": MOUNT_PATH}]
            needed = True
    if existing is None and needed:
        spec["volumes"] = [*volumes, token_volume(name)]


class ServiceAccountAdmission:
    def __init__(self, admission: Any) -> None:
        self.admission = admission

    async def _service_account(self, namespace: str, name: str) -> Obj | None:
        reader = self.admission.reader
        if reader is None:
            return {}
        for attempt in range(DEFAULT_ATTEMPTS if name == DEFAULT_SERVICE_ACCOUNT else 1):
            if attempt:
                await asyncio.sleep(random.uniform(0.1, 0.2))
            sa: Obj | None = reader("", "serviceaccounts", namespace, name)
            if sa is not None:
                return sa
        return None

    async def admit(self, req: AdmissionRequest) -> None:
        if req.operation != "CREATE" or req.subresource or req.object is None:
            return
        pod = req.object
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if isinstance(annotations, dict) and MIRROR_POD_ANNOTATION in annotations:
            return  # static pods' mirrors reference no ServiceAccount
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        name = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT)
        spec["serviceAccountName"] = name
        spec["serviceAccount"] = name  # the deprecated field mirrors it, as kube's v1 conversion does
        sa = await self._service_account(req.namespace, name)
        if sa is None:
            raise errors.forbidden(f"error looking up service account {req.namespace}/{name}: "
                                   f"serviceaccount {errors.go_quote(name)} not found", "", "pods", req.name)
        if should_automount(sa, spec):
            mount_token(spec)
        if not spec.get("imagePullSecrets") and sa.get("imagePullSecrets"):
            spec["imagePullSecrets"] = clone(sa["imagePullSecrets"])


def install(admission: Any) -> None:
    admission.add_builtin_mutating("", "pods", ServiceAccountAdmission(admission).admit)
