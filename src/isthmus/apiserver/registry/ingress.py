"""Ingresses and IngressClasses (networking.k8s.io): their columns, and their validation as kube's
pkg/apis/networking/validation words it (field paths and messages), so that what a real cluster
refuses (a backend Service named `web:a`, a path with `/../`) is refused here before any
controller builds a load balancer from it."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from isthmus.apiserver.apimachinery import validation as v
from isthmus.apiserver.apimachinery.errors import cause
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    as_list,
    col,
    dicts,
    dig,
    lb_addresses,
    name_of,
)

Obj = dict[str, Any]
Cause = dict[str, str]


def _ingress(obj: Obj, now: float) -> list[Any]:
    cls = str(dig(obj, "spec", "ingressClassName") or "") or "<none>"
    rules = dicts(dig(obj, "spec", "rules"))
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(str(rule["host"]))
    hosts_text = "*" if not hosts else (",".join(hosts) + (f" + {len(rules) - 3} more..." if more else ""))
    address = lb_addresses(dig(obj, "status", "loadBalancer", "ingress"))
    ports = "80, 443" if as_list(dig(obj, "spec", "tls")) else "80"
    return [name_of(obj), cls, hosts_text, address, ports, age(obj, now)]


def _ingressclass(obj: Obj, now: float) -> list[Any]:
    params = dig(obj, "spec", "parameters")
    text = "<none>"
    if isinstance(params, dict):
        text = str(params.get("kind") or "")
        if params.get("apiGroup"):
            text += "." + str(params["apiGroup"])
        text += "/" + str(params.get("name") or "")
    return [name_of(obj), str(dig(obj, "spec", "controller") or ""), text, age(obj, now)]


INGRESS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Class", desc="The name of the IngressClass resource that should be used."),
    col("Hosts", desc="Hosts that incoming requests are matched against before the ingress rule"),
    col("Address", desc="Address is a list containing ingress points for the load-balancer"),
    col("Ports", desc="Ports of TLS configurations that open"),
    AGE_COLUMN,
]

INGRESS_CLASS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Controller", desc="Controller that is responsible for handling this class"),
    col("Parameters", desc="A reference to a resource with additional parameters"),
    AGE_COLUMN,
]


# ---------------------------------------------------------------- validation

INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")  # sorted, as kube lists them
_BAD_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_BAD_PATH_SUFFIXES = ("/..", "/.")
PARAMETER_SCOPES = ("Cluster", "Namespace")


def _dicts(value: Any) -> list[Obj]:
    return [x if isinstance(x, dict) else {} for x in value] if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_ip(text: str) -> bool:
    """netutils.ParseIPSloppy: IPv4 (leading zeros allowed) or IPv6."""
    if ":" in text:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return False
        return True
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() and p.isascii() and int(p) <= 255 for p in parts)


def _host(path: str, host: str) -> list[Cause]:
    if "*" in host:
        return v.invalid_each(path, host, v.is_wildcard_dns1123_subdomain(host))
    return v.invalid_each(path, host, v.is_dns1123_subdomain(host))


class IngressOptions:
    """kube's IngressValidationOptions: what an update may keep because the stored object had it."""

    def __init__(self, old: Obj | None = None) -> None:
        spec = old.get("spec") if isinstance(old, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        self.invalid_secret_name = any(_secret_name(_str(t.get("secretName"))) for t in _dicts(spec.get("tls")))
        self.invalid_wildcard_rule = any(
            "*" in _str(r.get("host")) and _rule_value(r, "", IngressOptions()) for r in _dicts(spec.get("rules"))
        )
        # A Service name that is a DNS-1123 label but not a DNS-1035 one (`1web`) stays allowed.
        names = [_str(dig(spec, "defaultBackend", "service", "name"))] + [
            _str(dig(p, "backend", "service", "name"))
            for r in _dicts(spec.get("rules")) for p in _dicts(dig(r, "http", "paths"))
        ]
        self.relaxed_service_name = any(n and not v.is_dns1123_label(n) and v.is_dns1035_label(n) for n in names)


def _secret_name(name: str) -> list[str]:
    return v.is_dns1123_subdomain(name) if name else []


def validate_ingress_backend(backend: Obj, path: str, opts: IngressOptions) -> list[Cause]:
    resource, service = backend.get("resource"), backend.get("service")
    if resource is not None and service is not None:
        return [v.invalid(path, "", "cannot set both resource and service backends")]
    if isinstance(resource, dict):
        return validate_typed_local_object_reference(resource, f"{path}.resource")
    if not isinstance(service, dict):
        return [v.invalid(path, "", "resource or service backend is required")]
    errs: list[Cause] = []
    name = _str(service.get("name"))
    if not name:
        errs.append(v.required(f"{path}.service.name"))
    else:
        check = v.is_dns1123_label if opts.relaxed_service_name else v.is_dns1035_label  # ValidateServiceName
        errs += v.invalid_each(f"{path}.service.name", name, check(name))
    port = service.get("port")
    port = port if isinstance(port, dict) else {}
    port_name = _str(port.get("name"))
    number = port.get("number")
    number = number if isinstance(number, int) and not isinstance(number, bool) else 0
    if port_name and number:
        errs.append(v.invalid(path, "", "cannot set both port name & port number"))
    elif port_name:
        errs += [v.invalid(f"{path}.service.port.name", port_name, m) for m in v.is_valid_port_name(port_name)]
    elif number:
        errs += [v.invalid(f"{path}.service.port.number", number, m) for m in v.is_valid_port_num(number)]
    else:
        errs.append(v.required(path, "port name or number is required"))
    return errs


def validate_typed_local_object_reference(ref: Obj, path: str) -> list[Cause]:
    errs: list[Cause] = []
    group = ref.get("apiGroup")
    if isinstance(group, str):
        errs += v.invalid_each(f"{path}.apiGroup", group, v.is_dns1123_subdomain(group))
    for key in ("kind", "name"):
        value = _str(ref.get(key))
        if not value:
            errs.append(v.required(f"{path}.{key}"))
        else:
            errs += v.invalid_each(f"{path}.{key}", value, v.is_path_segment_name(value))
    return errs


def _http_path(item: Obj, path: str, opts: IngressOptions) -> list[Cause]:
    path_type = item.get("pathType")
    if path_type is None:
        return [v.required(f"{path}.pathType", "pathType must be specified")]
    errs: list[Cause] = []
    value = _str(item.get("path"))
    if path_type in ("Exact", "Prefix"):
        if not value.startswith("/"):
            errs.append(v.invalid(f"{path}.path", value, "must be an absolute path"))
        errs += [v.invalid(f"{path}.path", value, f"must not contain '{seq}'")
                 for seq in _BAD_PATH_SEQUENCES if seq in value]
        errs += [v.invalid(f"{path}.path", value, f"cannot end with '{suffix}'")
                 for suffix in _BAD_PATH_SUFFIXES if value.endswith(suffix)]
    elif path_type == "ImplementationSpecific":
        if value and not value.startswith("/"):
            errs.append(v.invalid(f"{path}.path", value, "must be an absolute path"))
    else:
        errs.append(v.not_supported(f"{path}.pathType", path_type, PATH_TYPES))
    backend = item.get("backend")
    return errs + validate_ingress_backend(backend if isinstance(backend, dict) else {}, f"{path}.backend", opts)


def _rule_value(rule: Obj, path: str, opts: IngressOptions) -> list[Cause]:
    http = rule.get("http")
    if not isinstance(http, dict):
        return []
    paths = http.get("paths")
    errs: list[Cause] = [] if paths else [v.required(f"{path}.http.paths")]
    for i, item in enumerate(_dicts(paths)):
        errs += _http_path(item, f"{path}.http.paths[{i}]", opts)
    return errs


def validate_ingress_spec(spec: Obj, opts: IngressOptions) -> list[Cause]:
    """kube's ValidateIngressSpec, at `spec`."""
    errs: list[Cause] = []
    rules = spec.get("rules")
    backend = spec.get("defaultBackend")
    if not rules and backend is None:
        shown = "[]networking.IngressRule(nil)" if rules is None else "[]networking.IngressRule{}"
        errs.append(cause("spec", f"Invalid value: {shown}: either `defaultBackend` or `rules` must be specified"))
    if isinstance(backend, dict):
        errs += validate_ingress_backend(backend, "spec.defaultBackend", opts)
    for i, rule in enumerate(_dicts(rules)):
        path = f"spec.rules[{i}]"
        host = _str(rule.get("host"))
        wildcard = False
        if host:
            if _is_ip(host):
                errs.append(v.invalid(f"{path}.host", host, "must be a DNS name, not an IP address"))
            wildcard = "*" in host
            errs += _host(f"{path}.host", host)
        if not wildcard or not opts.invalid_wildcard_rule:
            errs += _rule_value(rule, path, opts)
    for t, tls in enumerate(_dicts(spec.get("tls"))):
        hosts = tls.get("hosts")
        for i, host in enumerate(hosts if isinstance(hosts, list) else []):
            errs += _host(f"spec.tls[{t}].hosts[{i}]", _str(host))
        if not opts.invalid_secret_name:
            secret = _str(tls.get("secretName"))
            errs += v.invalid_each(f"spec.tls[{t}].secretName", secret, _secret_name(secret))
    cls = spec.get("ingressClassName")
    if isinstance(cls, str):
        errs += v.invalid_each("spec.ingressClassName", cls, v.is_dns1123_subdomain(cls))
    return errs


def validate_ingress_status(status: Obj) -> list[Cause]:
    """kube's ValidateIngressLoadBalancerStatus, at `status.loadBalancer`."""
    errs: list[Cause] = []
    for i, item in enumerate(_dicts(dig(status, "loadBalancer", "ingress"))):
        path = f"status.loadBalancer.ingress[{i}]"
        ip, hostname = _str(item.get("ip")), _str(item.get("hostname"))
        if ip and not _is_ip(ip):
            errs.append(v.invalid(f"{path}.ip", ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
        if hostname:
            errs += v.invalid_each(f"{path}.hostname", hostname, v.is_dns1123_subdomain(hostname))
            if _is_ip(hostname):
                errs.append(v.invalid(f"{path}.hostname", hostname, "must be a DNS name, not an IP address"))
    return errs


def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


class IngressStrategy(Strategy):
    schema_required = False  # validate() words missing fields (pathType, service.name) as kube does

    def validate(self, obj: Obj) -> list[Cause]:
        spec = _spec(obj)
        errs = validate_ingress_spec(spec, IngressOptions())
        annotations = dig(obj, "metadata", "annotations")
        annotated = annotations.get(INGRESS_CLASS_ANNOTATION) if isinstance(annotations, dict) else None
        cls = spec.get("ingressClassName")
        if isinstance(annotated, str) and isinstance(cls, str) and annotated != cls:
            errs.append(v.invalid(f"annotations.{INGRESS_CLASS_ANNOTATION}", annotated,
                                  "must match `ingressClassName` when both are specified"))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        # What the stored object already had stays allowed (kube's IngressValidationOptions). An
        # unchanged spec is not judged again: a write through /status reaches here with the stored
        # spec, which kube's status validation never looks at, and an Ingress stored before this
        # validation existed must still take its controller's status.
        status = new.get("status")
        errs = [] if new.get("spec") == old.get("spec") else validate_ingress_spec(_spec(new), IngressOptions(old))
        return errs + (validate_ingress_status(status) if isinstance(status, dict) else [])

    def initial_status(self, obj: Obj) -> Obj | None:
        # kube's PrepareForCreate resets status; IngressStatus.loadBalancer is a struct, always written.
        return {"loadBalancer": {}}

    def table_columns(self) -> list[Column]:
        return INGRESS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _ingress(obj, now)


_HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")
_HTTP_PATH_FMT = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+"


def _domain_prefixed_path(path: str, value: str) -> list[Cause]:
    """apimachinery's IsDomainPrefixedPath (an IngressClass's controller: `example.com/edge`)."""
    if not value:
        return [v.required(path)]
    host, slash, rest = value.partition("/")
    if not slash or not host or not rest:
        return [v.invalid(path, value, 'must be a domain-prefixed path (such as "acme.io/foo")')]
    errs = v.invalid_each(path, host, v.is_dns1123_subdomain(host))
    if not _HTTP_PATH.fullmatch(rest):
        errs.append(v.invalid(path, rest, v.regex_error("Invalid path", _HTTP_PATH_FMT)))
    return errs


def validate_ingress_class_spec(spec: Obj) -> list[Cause]:
    """kube's validateIngressClassSpec, at `spec`."""
    controller = _str(spec.get("controller"))
    errs: list[Cause] = []
    if len(controller) > 250:
        errs.append(cause("spec.controller", "Too long: must have at most 250 bytes", "FieldValueTooLong"))
    errs += _domain_prefixed_path("spec.controller", controller)
    params = spec.get("parameters")
    if not isinstance(params, dict):
        return errs
    path = "spec.parameters"
    group = params.get("apiGroup")
    if isinstance(group, str):
        errs += v.invalid_each(f"{path}.apiGroup", group, v.is_dns1123_subdomain(group))
    for key in ("kind", "name"):
        value = _str(params.get(key))
        errs += (v.invalid_each(f"{path}.{key}", value, v.is_path_segment_name(value)) if value
                 else [v.required(f"{path}.{key}")])
    scope = params.get("scope")
    if scope is None:
        return [*errs, v.required(f"{path}.scope")]
    if scope not in PARAMETER_SCOPES:
        return [*errs, v.not_supported(f"{path}.scope", scope, PARAMETER_SCOPES)]
    namespace = params.get("namespace")
    if scope == "Namespace":
        if namespace is None:
            errs.append(v.required(f"{path}.namespace", "`parameters.scope` is set to 'Namespace'"))
        else:
            errs += v.invalid_each(f"{path}.namespace", _str(namespace), v.is_dns1123_label(_str(namespace)))
    elif namespace is not None:
        errs.append(v.forbidden(f"{path}.namespace", "`parameters.scope` is set to 'Cluster'"))
    return errs


class IngressClassStrategy(Strategy):
    schema_required = False  # validate() words a missing controller or scope as kube does

    def validate(self, obj: Obj) -> list[Cause]:
        return validate_ingress_class_spec(_spec(obj))

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        if new.get("spec") == old.get("spec"):
            return []  # as Ingresses: a class stored before this validation existed stays usable
        controller, was = _spec(new).get("controller"), _spec(old).get("controller")
        errs = [] if controller == was else [v.invalid("spec.controller", controller, "field is immutable")]
        return errs + self.validate(new)

    def table_columns(self) -> list[Column]:
        return INGRESS_CLASS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _ingressclass(obj, now)
