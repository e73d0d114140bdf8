"""Admission for `kubernetes.dcos.io/dklb-config`: the checks and defaults, pure.

The same functions serve the embedded apiserver's in-process plugin (`DklbConfig`, wired by the
CLI) and `isthmus webhook` on real clusters, so both answer alike:

- `validate` — the config parses strictly (unknown field, wrong type, bad value: named), every
  `.frontends[].servicePort` is a port of the Service, and on update `name`, `role` and `network`
  keep the value they were set to (the seed: changing them strands the old pool);
- `mutate` — the effective config, defaults filled, written back into the annotation, so what the
  translator will use is what `kubectl get -o yaml` shows (never `name`: the default pool name
  needs the cluster name). Idempotent; an invalid config is left for `validate` to reject.

Objects concerned: Services of `loadBalancerClass: isthmus.io/edgelb`; Ingresses of class edgelb
(by the `kubernetes.io/ingress.class` annotation or `spec.ingressClassName: edgelb`, the IngressClass
deploy/member/lb installs; admission cannot look IngressClasses up, so a default class is not
followed) and class-less Ingresses carrying the annotation. With the admin's opt-in
(`--lb-class-less-services`) class-less Services of type LoadBalancer, and class-less Services
carrying the annotation, too. A Service or Ingress of another class is never looked at: the
cluster's cloud controller, MetalLB or Cilium own those, and our webhook must neither change them
nor block them when it is down. deploy/components/lb's webhooks' matchConditions are this rule in CEL
(`MATCH_CONDITION`, `MATCH_CONDITION_CLASS_LESS`; a test holds them equal).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import yaml

from isthmus.api.lb import (
    DKLB_CONFIG_ANNOTATION,
    EDGELB_CONTROLLER,
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


def concerned(kind: str, obj: Mapping[str, Any] | None, class_less: bool = False) -> bool:
    """Whether admission looks at this object at all (others pass untouched). `class_less`: the
    admin's opt-in to class-less Services."""
    if obj is None:
        return False
    spec = obj.get("spec") or {}
    annotated = DKLB_CONFIG_ANNOTATION in _annotations(obj)
    if kind == "Ingress":
        annotations = _annotations(obj)
        if INGRESS_CLASS_ANNOTATION not in annotations and spec.get("ingressClassName") is None:
            return annotated
        return bool(annotations.get(INGRESS_CLASS_ANNOTATION, spec.get("ingressClassName")) == EDGELB_INGRESS_CLASS)
    if kind != "Service":
        return False
    cls = spec.get("loadBalancerClass")
    if cls is not None:
        return bool(cls == EDGELB_CONTROLLER)
    return class_less and (annotated or spec.get("type") == "LoadBalancer")


_INGRESS_CEL = (
    "(has(object.metadata.annotations) && 'kubernetes.io/ingress.class' in object.metadata.annotations)"
    " ? object.metadata.annotations['kubernetes.io/ingress.class'] == 'edgelb'"
    " : has(object.spec.ingressClassName) ? object.spec.ingressClassName == 'edgelb'"
    " : (has(object.metadata.annotations) && 'kubernetes.dcos.io/dklb-config' in object.metadata.annotations)"
)
MATCH_CONDITION = (
    "request.resource.resource == 'services'"
    " ? (has(object.spec.loadBalancerClass) && object.spec.loadBalancerClass == 'isthmus.io/edgelb')"
    f" : ({_INGRESS_CEL})"
)
"""`concerned` in CEL, for the webhooks' matchConditions (deploy/components/lb)."""
MATCH_CONDITION_CLASS_LESS = (
    "request.resource.resource == 'services'"
    " ? (has(object.spec.loadBalancerClass) ? object.spec.loadBalancerClass == 'isthmus.io/edgelb'"
    " : ((has(object.spec.type) && object.spec.type == 'LoadBalancer')"
    " || (has(object.metadata.annotations) && 'kubernetes.dcos.io/dklb-config' in object.metadata.annotations)))"
    f" : ({_INGRESS_CEL})"
)
"""`concerned` with the class-less opt-in, in CEL (deploy/components/lb/class-less)."""


def validate(kind: str, operation: str, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
             class_less: bool = False) -> list[str]:
    """Problems with the object's config (empty: allowed). `kind` is Service or Ingress."""
    if operation not in ("CREATE", "UPDATE") or not concerned(kind, obj, class_less):
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


def mutate(kind: str, operation: str, obj: Mapping[str, Any] | None, class_less: bool = False) -> list[dict[str, Any]]:
    """JSONPatch operations writing the defaulted config into the annotation (none: nothing to do)."""
    if operation not in ("CREATE", "UPDATE") or not concerned(kind, obj, class_less):
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


def handlers(class_less: bool = False) -> dict[str, Callable[[dict[str, Any]], Awaitable[AdmissionResponse]]]:
    """What `isthmus webhook` serves for load balancing (deploy/components/lb names these paths);
    `class_less`: its --lb-class-less-services."""

    async def review_validate(request: dict[str, Any]) -> AdmissionResponse:
        kind = _kind(request)
        if kind is None or request.get("subResource"):
            return AdmissionResponse()
        problems = validate(kind, request.get("operation", ""), request.get("object"), request.get("oldObject"),
                            class_less)
        if not problems:
            return AdmissionResponse()
        return AdmissionResponse(allowed=False, code=422, message="; ".join(f"{FIELD}: {p}" for p in problems))

    async def review_mutate(request: dict[str, Any]) -> AdmissionResponse:
        kind = _kind(request)
        if kind is None or request.get("subResource"):
            return AdmissionResponse()
        return AdmissionResponse(patch=mutate(kind, request.get("operation", ""), request.get("object"), class_less))

    return {VALIDATE_PATH: review_validate, MUTATE_PATH: review_mutate}


HANDLERS = handlers()
"""The handlers without the class-less opt-in."""
review_validate = HANDLERS[VALIDATE_PATH]
review_mutate = HANDLERS[MUTATE_PATH]
