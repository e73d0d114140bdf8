"""What admission plugins are told about a write (k8s.io/apiserver/pkg/admission's Attributes), and
the admission.k8s.io/v1 AdmissionRequest made of it for webhooks and CEL."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from isthmus.apiserver.apimachinery.meta import new_uid
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.registry.resources import ResourceInfo

Obj = dict[str, Any]


@dataclass
class AdmissionRequest:
    operation: str  # "CREATE" | "UPDATE" | "DELETE"
    resource: ResourceInfo
    subresource: str  # "" or "status"
    namespace: str
    name: str
    object: dict[str, Any] | None  # the object to store (mutating hooks edit it in place)
    old_object: dict[str, Any] | None
    user_info: UserInfo  # who sent the request, as authentication decided
    dry_run: bool = False
    # Warning headers of the response (a Warn binding's failures add theirs here).
    warnings: list[str] = field(default_factory=list)

    @property
    def user(self) -> str:
        """The requester's name (what hooks written before user_info existed read)."""
        return self.user_info.username


def admission_review_request(a: AdmissionRequest, matched: ResourceInfo) -> Obj:
    """kube's admissionv1.AdmissionRequest (every field present) for a write, as `matched` (the request's
    resource or an equivalent one) serves it: the `request` of an AdmissionReview and of CEL expressions."""
    def kind(i: ResourceInfo) -> Obj:
        return {"group": i.group, "version": i.version, "kind": i.kind}

    def gvr(i: ResourceInfo) -> Obj:
        return {"group": i.group, "version": i.version, "resource": i.plural}

    u = a.user_info
    namespace = a.name if a.resource.group == "" and a.resource.plural == "namespaces" else a.namespace
    options = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}.get(a.operation)
    return {
        "uid": new_uid(),
        "kind": kind(matched), "resource": gvr(matched), "subResource": a.subresource,
        "requestKind": kind(a.resource), "requestResource": gvr(a.resource), "requestSubResource": a.subresource,
        "name": a.name, "namespace": namespace, "operation": a.operation,
        "userInfo": {"username": u.username, "uid": u.uid, "groups": list(u.groups),
                     "extra": {k: list(v) for k, v in u.extra.items()}},
        "dryRun": a.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options} if options else None,
    }
