"""In-process admission plugins of `isthmus apiserver`, kube-style names: capabilities' checks
served by the embedded apiserver itself (the apiserver package knows nothing of Isthmus; the CLI
wires them, as kube-apiserver compiles its plugins in).

- `DklbConfig` — `kubernetes.dcos.io/dklb-config` on Services of class isthmus.io/edgelb (class-less
  ones too with --lb-class-less-services) and Ingresses of class edgelb (`isthmus.lb.admission`):
  defaults written into the annotation (mutating), bad configs and changes to `name`, `role` or
  `network` refused with 422 Invalid naming the field (validating). On real clusters `isthmus
  webhook` serves the same checks.
- `MultiClusterService` — Karmada's MultiClusterService webhook (`isthmus.exposure.admission`): the
  permanent-id label (mutating), field errors as 422 Invalid (validating); on a real broker
  `isthmus webhook` serves the same.
- `Egress` — the egress kinds (`isthmus.egress.admission`): no raw source IP in an ExternalService,
  claims of its own namespace only, Services of other namespaces only when the author may get them,
  a claim's class must allow its namespace and hold its address; 422 Invalid naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION
from isthmus.api.mcsvc import PERMANENT_ID_LABEL
from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.admission.chain import Admission
from isthmus.apiserver.apimachinery import errors

DKLB_CONFIG = "DklbConfig"
MULTI_CLUSTER_SERVICE = "MultiClusterService"
EGRESS = "Egress"
_KINDS = {("", "services"): "Service", ("networking.k8s.io", "ingresses"): "Ingress"}


def _dklb(admission: Admission, class_less: bool = False) -> None:
    from isthmus.lb import admission as lb

    async def mutate(req: AdmissionRequest) -> None:
        kind = _KINDS[(req.resource.group, req.resource.plural)]
        if req.subresource or req.object is None:
            return
        new = lb.defaulted(kind, ((req.object.get("metadata") or {}).get("annotations") or {})) \
            if lb.concerned(kind, req.object, class_less) else None
        if new is not None:
            req.object.setdefault("metadata", {}).setdefault("annotations", {})[DKLB_CONFIG_ANNOTATION] = new

    async def validate(req: AdmissionRequest) -> None:
        kind = _KINDS[(req.resource.group, req.resource.plural)]
        if req.subresource:
            return
        problems = lb.validate(kind, req.operation, req.object, req.old_object, class_less)
        if problems:
            raise errors.invalid(req.resource.group, kind, req.name,
                                 [errors.cause(lb.FIELD, p) for p in problems])

    for group, plural in _KINDS:
        admission.add_mutating(group, plural, mutate)
        admission.add_validating(group, plural, validate)


def _mcsvc(admission: Admission) -> None:
    from isthmus.api.mcsvc import GROUP
    from isthmus.exposure import admission as mcsvc

    async def mutate(req: AdmissionRequest) -> None:
        if req.subresource or req.object is None:
            return
        for op in mcsvc.mutate(req.operation, req.object, req.old_object):
            if op["path"] == "/metadata/labels":
                req.object.setdefault("metadata", {})["labels"] = dict(op["value"])
            else:
                req.object.setdefault("metadata", {}).setdefault("labels", {})[PERMANENT_ID_LABEL] = op["value"]

    async def validate(req: AdmissionRequest) -> None:
        if req.subresource:
            return
        problems = mcsvc.validate(req.operation, req.object, req.old_object)
        if problems:
            raise errors.invalid(GROUP, mcsvc.KIND, req.name, [errors.cause(f, m) for f, m in problems])

    admission.add_mutating(GROUP, "multiclusterservices", mutate)
    admission.add_validating(GROUP, "multiclusterservices", validate)


def _egress(admission: Admission) -> None:
    from isthmus.api.egress import GROUP
    from isthmus.egress import admission as egress

    kinds = {"externalservices": "ExternalService", "sourceipclaims": "SourceIPClaim",
             "sourceipclasses": "SourceIPClass", "sourceips": "SourceIP"}

    async def validate(req: AdmissionRequest) -> None:
        if req.subresource or req.object is None or req.operation == "DELETE":
            return
        plural = req.resource.plural
        if plural == "externalservices":
            def can_see(ns: str, name: str) -> bool:
                return admission.can is None or admission.can(req.user_info, "get", "", "services", ns, name)

            problems = egress.validate_external_service(req.object, can_see)
        elif plural == "sourceipclaims":
            def class_of(name: str) -> dict[str, Any] | None:
                return admission.reader(GROUP, "sourceipclasses", "", name) if admission.reader else None

            problems = egress.validate_claim(req.operation, req.object, req.old_object, class_of)
        elif plural == "sourceipclasses":
            stored = admission.lister(GROUP, "sourceipclasses", "") if admission.lister else []
            problems = egress.validate_class(req.object, req.old_object, stored)
        else:
            problems = egress.validate_source_ip(req.object)
        if problems:
            raise errors.invalid(GROUP, kinds[plural], req.name, [errors.cause(f, m) for f, m in problems])

    for plural in kinds:
        admission.add_validating(GROUP, plural, validate)


PLUGINS: dict[str, Callable[[Admission], None]] = {DKLB_CONFIG: _dklb, MULTI_CLUSTER_SERVICE: _mcsvc, EGRESS: _egress}
"""Every in-process plugin by name; all are enabled unless `--disable-admission-plugins` names them."""


def build(disabled: list[str], lb_class_less: bool = False) -> Admission:
    """The enabled plugins; `lb_class_less`: DklbConfig also takes class-less LoadBalancer Services
    (`isthmus apiserver --lb-class-less-services`, as `isthmus webhook` has it)."""
    admission = Admission()
    for name, register in PLUGINS.items():
        if name == DKLB_CONFIG and name not in disabled:
            _dklb(admission, lb_class_less)
        elif name not in disabled:
            register(admission)
    return admission
