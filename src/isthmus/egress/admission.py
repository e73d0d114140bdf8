"""Admission rules of the egress kinds (kube's field-error wording), pure: what they need of other
objects — the claim's class, whether the author may see a Service — comes in as functions, so the
embedded apiserver's in-process plugin and `isthmus webhook` (with API lookups) share them.

- ExternalService: a DNS-1035 name (it is the forwarder Service's); targetIP an IP; at least one
  source and one port; no raw `sourceIP` (the seed's security concern: point to claims); a claim of
  this namespace only, each at most once; a Service of another namespace only if the author may get
  Services there; ports 1-65535, TCP or UDP, no duplicates, none on the forwarder's own ports.
- SourceIPClaim: a class name; a specific address must be an IP, inside the class's ranges; the class
  must allow the claim's namespace (a class not created yet leaves the claim Pending instead);
  spec immutable.
- SourceIPClass: valid ranges, overlapping neither each other nor another class's (the other class
  is named); namespace names valid.
- SourceIP: named by its address (what makes double allocation impossible).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from isthmus.api.egress import (
    FORWARDER_HEALTH_PORT,
    FORWARDER_RELAY_PORT,
    AddressRange,
    SourceIPClass,
    source_ip_name,
)
from isthmus.egress import binding

Problems = list[tuple[str, str]]
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CLASS_KINDS = ("SourceIPClass", "SourceIPClaim", "SourceIP", "ExternalService")
ClassLookup = Callable[[str], Mapping[str, Any] | None]
CanSee = Callable[[str, str], bool]
"""(namespace, service name) → whether the request's author may get that Service."""


def _q(value: Any) -> str:
    """A value as kube's field errors quote it (Go's %q for strings)."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def _ip_problem(value: Any, field: str) -> tuple[str, str] | None:
    try:
        ipaddress.ip_address(str(value).strip())
    except ValueError:
        return field, f"Invalid value: {_q(value)}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    return None


def validate_external_service(obj: Mapping[str, Any], can_see: CanSee) -> Problems:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ns = meta.get("namespace") or ""
    out: Problems = []
    name = meta.get("name") or ""
    if name and (not DNS1035.fullmatch(name) or len(name) > 63):
        out.append(("metadata.name", f"Invalid value: {_q(name)}: a DNS-1035 label must consist of lower case "
                    "alphanumeric characters or '-', start with an alphabetic character, and end with an "
                    "alphanumeric character, at most 63 characters (it names the forwarder Service "
                    f"<name>.external-services)"))
    target = spec.get("targetIP")
    if not target:
        out.append(("spec.targetIP", "Required value"))
    elif (p := _ip_problem(target, "spec.targetIP")) is not None:
        out.append(p)
    sources = spec.get("sources") or []
    if not sources:
        out.append(("spec.sources", "Required value: at least one source service"))
    claims: dict[str, int] = {}
    for i, s in enumerate(sources):
        f = f"spec.sources[{i}]"
        if s.get("sourceIP") is not None:
            out.append((f"{f}.sourceIP", "Forbidden: a source IP cannot be chosen in an ExternalService: create a "
                        f"SourceIPClaim in namespace {ns} and name it in sourceIPClaimName"))
        claim = s.get("sourceIPClaimName")
        if not claim and s.get("sourceIP") is not None:
            pass  # the Forbidden above says what to do instead
        elif not claim:
            out.append((f"{f}.sourceIPClaimName", "Required value: the SourceIPClaim (of this namespace) whose "
                        "address these pods use"))
        elif "/" in claim or not DNS1123_LABEL.fullmatch(claim.replace(".", "-")):
            out.append((f"{f}.sourceIPClaimName", f"Invalid value: {_q(claim)}: a claim of another namespace cannot be "
                        f"used: name a SourceIPClaim of namespace {ns}"))
        elif claim in claims:
            out.append((f"{f}.sourceIPClaimName", f"Duplicate value: {_q(claim)} (also spec.sources[{claims[claim]}]): "
                        "one claim gives one service its address"))
        else:
            claims[claim] = i
        svc = s.get("service") or {}
        if not svc.get("name"):
            out.append((f"{f}.service.name", "Required value"))
        svc_ns = svc.get("namespace") or ns
        if svc.get("name") and svc_ns != ns and not can_see(svc_ns, svc["name"]):
            out.append((f"{f}.service", f"Forbidden: you cannot get Service {svc_ns}/{svc['name']}: an "
                        "ExternalService may only name services its author can see"))
    ports = spec.get("ports") or []
    if not ports:
        out.append(("spec.ports", "Required value: at least one port"))
    seen: dict[tuple[str, int], int] = {}
    listen: dict[tuple[str, int], int] = {}
    for i, p in enumerate(ports):
        f = f"spec.ports[{i}]"
        proto = p.get("protocol") or "TCP"
        if proto not in ("TCP", "UDP"):
            out.append((f"{f}.protocol", f'Unsupported value: "{proto}": supported values: "TCP", "UDP"'))
        port = p.get("port")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            out.append((f"{f}.port", f"Invalid value: {port}: must be between 1 and 65535, inclusive"))
            continue
        target_port = p.get("targetPort") or port
        if not isinstance(target_port, int) or not 1 <= target_port <= 65535:
            out.append((f"{f}.targetPort", f"Invalid value: {_q(target_port)}: must be a port number between 1 and "
                        "65535, inclusive"))
            continue
        if target_port in (FORWARDER_RELAY_PORT, FORWARDER_HEALTH_PORT):
            out.append((f"{f}.targetPort", f"Invalid value: {target_port}: reserved for the forwarder's relay "
                        "and health ports"))
        if (proto, port) in seen:
            out.append((f"{f}", f"Duplicate value: {proto}/{port} (also spec.ports[{seen[(proto, port)]}])"))
        elif (proto, target_port) in listen:
            out.append((f"{f}.targetPort", f"Duplicate value: {proto}/{target_port} (also "
                        f"spec.ports[{listen[(proto, target_port)]}])"))
        seen.setdefault((proto, port), i)
        listen.setdefault((proto, target_port), i)
    return out


def validate_claim(operation: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None,
                   class_of: ClassLookup) -> Problems:
    spec = obj.get("spec") or {}
    ns = (obj.get("metadata") or {}).get("namespace") or ""
    out: Problems = []
    if operation == "UPDATE" and old is not None and (old.get("spec") or {}) != spec:
        return [("spec", "Forbidden: spec is immutable after creation (delete the claim and create another)")]
    class_name = spec.get("sourceIPClassName")
    if not class_name:
        return [("spec.sourceIPClassName", "Required value")]
    wanted = spec.get("sourceIP")
    if wanted is not None and (p := _ip_problem(wanted, "spec.sourceIP")) is not None:
        out.append(p)
        wanted = None
    if operation != "CREATE":
        return out
    raw = class_of(class_name)
    if raw is None:
        return out  # Pending ClassNotFound until the admin creates it, as a PVC waits for its class
    cls = SourceIPClass.from_dict(dict(raw))
    if not binding.namespace_allowed(cls, ns):
        out.append(("spec.sourceIPClassName", f"Forbidden: SourceIPClass {class_name!r} does not allow namespace "
                    f"{ns!r} (allowed: {', '.join(cls.spec.allowed_namespaces) or 'none'})"))
    if wanted is not None and not binding.in_class(cls, wanted):
        ranges = ", ".join(f"{r.start}-{r.end}" for r in cls.spec.ranges)
        out.append(("spec.sourceIP", f"Invalid value: {_q(wanted)}: outside every range of SourceIPClass "
                    f"{class_name!r} ({ranges})"))
    return out


def validate_class(obj: Mapping[str, Any], old: Mapping[str, Any] | None = None,
                   others: Iterable[Mapping[str, Any]] = ()) -> Problems:
    """`others`: the other SourceIPClasses stored. A range sharing addresses with one of theirs is
    refused (each class's capacity counts its addresses, and a SourceIP, named by its address, can
    be of one class only); on an update, only an overlap the old ranges did not already have, so an
    admin can still edit (or shrink) a class that overlapped before the rule."""
    spec = obj.get("spec") or {}
    out: Problems = []
    try:
        ranges = [AddressRange.model_validate(r) for r in spec.get("ranges") or []]
    except ValueError:
        return [("spec.ranges", "Invalid value: each range needs start and end")]
    out += [(f, m if m.startswith(("Required", "Invalid")) else f"Invalid value: {m}")
            for f, m in binding.range_problems(ranges)]
    name = (obj.get("metadata") or {}).get("name") or ""
    stored = []
    for other in others:
        try:
            stored.append(SourceIPClass.from_dict(dict(other)))
        except ValueError:
            continue  # a stored class this version cannot read has no ranges to compare
    try:
        before = binding.indexed_spans([AddressRange.model_validate(r)
                                        for r in ((old or {}).get("spec") or {}).get("ranges") or []])
    except ValueError:
        before = []
    refused: set[int] = set()
    for o in binding.overlaps(ranges, stored, name):
        if o.index in refused or any(_covers(b, o.shared) for _, b in before):
            continue
        refused.add(o.index)
        out.append((f"spec.ranges[{o.index}]", f"Invalid value: {_q(f'{o.span.first}-{o.span.last}')}: overlaps "
                    f"SourceIPClass {_q(o.other)} ({o.other_span.first}-{o.other_span.last}): an address can "
                    "belong to one class only"))
    for i, ns in enumerate(spec.get("allowedNamespaces") or []):
        if not isinstance(ns, str) or not DNS1123_LABEL.fullmatch(ns) or len(ns) > 63:
            out.append((f"spec.allowedNamespaces[{i}]", f"Invalid value: {_q(ns)}: not a namespace name"))
    return out


def _covers(outer: binding.Span, inner: binding.Span) -> bool:
    return (outer.first.version == inner.first.version
            and int(outer.first) <= int(inner.first) and int(inner.last) <= int(outer.last))


def validate_source_ip(obj: Mapping[str, Any]) -> Problems:
    name = (obj.get("metadata") or {}).get("name") or ""
    address = (obj.get("spec") or {}).get("sourceIP") or ""
    if (p := _ip_problem(address, "spec.sourceIP")) is not None:
        return [p]
    if name != source_ip_name(address):
        return [("metadata.name", f"Invalid value: {_q(name)}: a SourceIP is named by its address: "
                 f"{source_ip_name(address)!r}")]
    return []


def message(problems: Problems) -> str:
    """kube's aggregate: `[f: msg, f: msg]`, or the single error alone."""
    parts = [f"{f}: {m}" for f, m in problems]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


# --- `isthmus webhook` (real clusters): the same rules, lookups through the API ------------------

VALIDATE_PATH = "/egress/validate"
KINDS = ("ExternalService", "SourceIPClaim", "SourceIPClass", "SourceIP")


def webhook_handlers(client: Any) -> dict[str, Any]:
    """What `isthmus webhook` serves for egress (deploy/member/webhook names the path). The claim's
    class is read with the webhook's own rights; whether the author may see a Service of another
    namespace is a SubjectAccessReview for the author."""
    from lightkube.resources.authorization_v1 import SubjectAccessReview

    from isthmus.api.egress import GROUP
    from isthmus.kube.helpers import get_or_none
    from isthmus.kube.resources import resource_for
    from isthmus.runtime.webhook import AdmissionResponse

    class_res: Any = resource_for(SourceIPClass)

    async def may_get_service(user: Mapping[str, Any], ns: str, name: str) -> bool:
        review = SubjectAccessReview.from_dict({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user.get("username"), "groups": user.get("groups"), "uid": user.get("uid"),
                     "extra": user.get("extra"),
                     "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "services", "name": name}}})
        answer = await client.create(review)
        return bool(answer.status is not None and answer.status.allowed)

    async def review(request: dict[str, Any]) -> AdmissionResponse:
        kind = (request.get("kind") or {}).get("kind")
        if ((request.get("kind") or {}).get("group") != GROUP or kind not in KINDS or request.get("subResource")
                or request.get("operation") == "DELETE"):
            return AdmissionResponse()
        obj = request.get("object") or {}
        operation = request.get("operation", "")
        if kind == "ExternalService":
            ns = (obj.get("metadata") or {}).get("namespace") or request.get("namespace") or ""
            seen: dict[tuple[str, str], bool] = {}
            for s in (obj.get("spec") or {}).get("sources") or []:
                svc = s.get("service") or {}
                key = (svc.get("namespace") or ns, svc.get("name") or "")
                if key[0] != ns and key[1] and key not in seen:
                    seen[key] = await may_get_service(request.get("userInfo") or {}, *key)
            problems = validate_external_service(obj, lambda n, s: seen.get((n, s), False))
        elif kind == "SourceIPClaim":
            wanted = (obj.get("spec") or {}).get("sourceIPClassName") or ""
            cls = await get_or_none(client, class_res, wanted) if wanted and operation == "CREATE" else None
            found = cls.to_dict() if cls is not None else None
            problems = validate_claim(operation, obj, request.get("oldObject"),
                                      lambda n: found if n == wanted else None)
        elif kind == "SourceIPClass":
            stored = [c.to_dict() async for c in client.list(class_res)]
            problems = validate_class(obj, request.get("oldObject"), stored)
        else:
            problems = validate_source_ip(obj)
        if not problems:
            return AdmissionResponse()
        name = request.get("name") or (obj.get("metadata") or {}).get("name") or ""
        return AdmissionResponse(allowed=False, code=422,
                                 message=f'{kind}.{GROUP} "{name}" is invalid: {message(problems)}')

    return {VALIDATE_PATH: review}
