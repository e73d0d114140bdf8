"""Admission for `kubernetes.dcos.io/dklb-config`: the checks and defaults, pure.

The same functions serve the embedded apiserver's in-process plugin (`DklbConfig`, wired by the
CLI) and `isthmus webhook` on real clusters, so both answer alike:

- `validate` — the config parses strictly (unknown field, wrong type, bad value: named), every
  `.frontends[].servicePort` is a port of the Service, and on update `name`, `role` and `network`
  keep the value they were set to (the seed: changing them strands the old pool);
- `mutate` — the effective config, defaults filled, written back into the annotation, so what the
  translator will use is what `kubectl get -o yaml` shows (never `name`: the default pool name
  needs the cluster name). Idempotent; an invalid config is left for `validate` to reject.

Objects concerned: Services of type LoadBalancer, Ingresses of class edgelb (by the
`kubernetes.io/ingress.class` annotation or `spec.ingressClassName: edgelb`, the IngressClass
deploy/member/lb installs; admission cannot look IngressClasses up, so a default class is not
followed), and any Service or Ingress carrying the annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from isthmus.api.lb import (
    DKLB_CONFIG_ANNOTATION,
    EDGELB_INGRESS_CLASS,
    INGRESS_CLASS_ANNOTATION,
    ConfigError,
    immutable_changes,
    parse_ingress_config,
    parse_service_config,
)
from isthmus.runtime.webhook import AdmissionResponse

FIELD = f"metadata.annotations[{DKLB_CONFIG_ANNOTATION}]"
"""Where problems point (kube's field path form)."""


def _annotations(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def concerned(kind: str, obj: Mapping[str, Any] | None) -> bool:
    """Whether admission looks at this object at all (others pass untouched)."""
    if obj is None:
        return False
    if DKLB_CONFIG_ANNOTATION in _annotations(obj):
        return True
    spec = obj.get("spec") or {}
    if kind == "Ingress":
        cls = _annotations(obj).get(INGRESS_CLASS_ANNOTATION, spec.get("ingressClassName"))
        return bool(cls == EDGELB_INGRESS_CLASS)
    return kind == "Service" and spec.get("type") == "LoadBalancer"


def validate(kind: str, operation: str, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> list[str]:
    """Problems with the object's config (empty: allowed). `kind` is Service or Ingress."""
    if operation not in ("CREATE", "UPDATE") or not concerned(kind, obj):
        return []
    assert obj is not None
    annotations = _annotations(obj)
    problems: list[str] = []
    try:
        if kind == "Service":
            cfg = parse_service_config(annotations)
            ports = sorted({int(p["port"]) for p in (obj.get("spec") or {}).get("ports") or [] if p.get("port")})
            if cfg.cloud_provider_configuration is None:
                for i, f in enumerate(cfg.frontends):
                    if f.service_port not in ports:
                        problems.append(
                            f"frontends[{i}].servicePort: {f.service_port} is not a port of this Service "
                            f"(ports: {', '.join(map(str, ports)) or 'none'})"
                        )
        else:
            parse_ingress_config(annotations)
    except ConfigError as e:
        problems.append(str(e).removeprefix(f"invalid {DKLB_CONFIG_ANNOTATION}: "))
    if operation == "UPDATE" and old is not None:
        try:
            problems += [p.removeprefix(f"{DKLB_CONFIG_ANNOTATION}: ") for p in
                         immutable_changes(_annotations(old), annotations)]  # fmt: skip
        except ConfigError:
            pass  # the new config does not parse: reported above
    return problems


def defaulted(kind: str, annotations: Mapping[str, str]) -> str | None:
    """The annotation text with every default written out; None when it cannot be parsed (or
    would not change)."""
    text = annotations.get(DKLB_CONFIG_ANNOTATION, "")
    try:
        given = yaml.safe_load(text) if text.strip() else {}
        cfg = parse_service_config(annotations) if kind == "Service" else parse_ingress_config(annotations)
    except (ConfigError, yaml.YAMLError):
        return None
    if not isinstance(given, dict):
        return None
    full = cfg.to_dict()
    full["network"] = cfg.effective_network
    if not getattr(cfg, "proxy_protocol", False):
        full.pop("proxyProtocol", None)  # an opt-in: absent unless asked
    # The user's keys first, in their order, then the defaults.
    out = {k: full[k] for k in given if k in full}
    out.update({k: v for k, v in full.items() if k not in out})
    if out == given:
        return None
    return yaml.safe_dump(out, sort_keys=False)


def mutate(kind: str, operation: str, obj: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """JSONPatch operations writing the defaulted config into the annotation (none: nothing to do)."""
    if operation not in ("CREATE", "UPDATE") or not concerned(kind, obj):
        return []
    assert obj is not None
    annotations = _annotations(obj)
    new = defaulted(kind, annotations)
    if new is None:
        return []
    meta = obj.get("metadata") or {}
    if not meta.get("annotations"):
        return [{"op": "add", "path": "/metadata/annotations", "value": {DKLB_CONFIG_ANNOTATION: new}}]
    path = "/metadata/annotations/" + DKLB_CONFIG_ANNOTATION.replace("~", "~0").replace("/", "~1")
    op = "replace" if DKLB_CONFIG_ANNOTATION in annotations else "add"
    return [{"op": op, "path": path, "value": new}]


# --- `isthmus webhook` handlers (AdmissionReview v1) ---------------------------------------------

VALIDATE_PATH = "/lb/validate"
MUTATE_PATH = "/lb/mutate"


def _kind(request: Mapping[str, Any]) -> str | None:
    kind = (request.get("kind") or {}).get("kind")
    return kind if kind in ("Service", "Ingress") else None


async def review_validate(request: dict[str, Any]) -> AdmissionResponse:
    kind = _kind(request)
    if kind is None or request.get("subResource"):
        return AdmissionResponse()
    problems = validate(kind, request.get("operation", ""), request.get("object"), request.get("oldObject"))
    if not problems:
        return AdmissionResponse()
    return AdmissionResponse(allowed=False, code=422, message="; ".join(f"{FIELD}: {p}" for p in problems))


async def review_mutate(request: dict[str, Any]) -> AdmissionResponse:
    kind = _kind(request)
    if kind is None or request.get("subResource"):
        return AdmissionResponse()
    return AdmissionResponse(patch=mutate(kind, request.get("operation", ""), request.get("object")))


HANDLERS = {VALIDATE_PATH: review_validate, MUTATE_PATH: review_mutate}
"""What `isthmus webhook` serves for load balancing (deploy/member/webhook names these paths)."""
