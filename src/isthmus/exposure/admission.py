"""Admission for MultiClusterService, pure: Karmada's validating and mutating webhooks.

The same functions serve the embedded apiserver's in-process plugin (`MultiClusterService`, wired
by the CLI) and `isthmus webhook` on real brokers, so both answer alike, with kube's field-error
wording (`spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`).

Validation (Karmada's, docs/mcsvc.md): the name is a DNS-1035 label (it names the Service); port
names are DNS-1123 labels and unique; ports 1-65535; `types` non-empty, each CrossCluster or
LoadBalancer; cluster names (providerClusters, consumerClusters, range.clusterNames) valid cluster
IDs. Two choices differ from Karmada's latest webhook, as the seed and issue ask: `types` may hold
both types and may change on update (the controllers clean up what a removed type made); and
`range.clusterNames` (the seed's field) and `consumerClusters` may not name two different lists.
Mutation adds the permanent-id label once (a UUID, as Karmada's mutating webhook).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from isthmus.api.mcsvc import EXPOSURE_TYPES, GROUP, PERMANENT_ID_LABEL
from isthmus.runtime.webhook import AdmissionResponse

KIND = "MultiClusterService"
CLUSTER_NAME_MAX = 48
"""Karmada's cluster-name limit (pkg/apis/cluster/validation)."""

# Matched whole (fullmatch), as kube's validators do: with `match`, `$` would also match before a
# trailing newline and let "web\n" through.
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
PORT_MESSAGE = "must be between 1 and 65535, inclusive"

FieldError = tuple[str, str]
"""(field path, message after the path) — e.g. ("spec.ports[0].port", "Invalid value: 0: ...")."""


def _show(value: Any) -> str:
    """A value as Go's field errors print it: strings quoted, numbers bare."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _invalid(path: str, value: Any, message: str) -> FieldError:
    return path, f"Invalid value: {_show(value)}: {message}"


def _label_errors(path: str, value: str, pattern: re.Pattern[str], message: str) -> list[FieldError]:
    out: list[FieldError] = []
    if len(value) > 63:
        out.append(_invalid(path, value, "must be no more than 63 characters"))
    if not pattern.fullmatch(value):
        out.append(_invalid(path, value, message))
    return out


def cluster_name_errors(path: str, name: Any) -> list[FieldError]:
    if not isinstance(name, str) or not name:
        return [_invalid(path, name if isinstance(name, str) else str(name), "must be not empty")]
    if len(name) > CLUSTER_NAME_MAX:
        return [_invalid(path, name, f"must be no more than {CLUSTER_NAME_MAX} characters")]
    return [] if _DNS1123.fullmatch(name) else [_invalid(path, name, DNS1123_MESSAGE)]


def validate(operation: str, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Field errors of a MultiClusterService create or update (empty: allowed)."""
    if operation not in ("CREATE", "UPDATE") or obj is None:
        return []
    errors: list[FieldError] = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if name:
        errors += _label_errors("metadata.name", name, _DNS1035, DNS1035_MESSAGE)
    spec = obj.get("spec") or {}

    seen: set[str] = set()
    for i, port in enumerate(spec.get("ports") or []):
        path = f"spec.ports[{i}]"
        port = port if isinstance(port, Mapping) else {}
        pname = port.get("name") or ""
        if pname:
            errors += _label_errors(f"{path}.name", pname, _DNS1123, DNS1123_MESSAGE)
            if pname in seen:
                errors.append((f"{path}.name", f"Duplicate value: {_show(pname)}"))
            seen.add(pname)
        number = port.get("port", 0)
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            errors.append(_invalid(f"{path}.port", number, PORT_MESSAGE))

    types = spec.get("types") or []
    if not types:
        errors.append(("spec.types", "Required value: MultiClusterService types should not be empty"))
    for i, t in enumerate(types):
        if t not in EXPOSURE_TYPES:
            errors.append((f"spec.types[{i}]", f"Unsupported value: {_show(t)}: supported values: "
                           + ", ".join(_show(v) for v in EXPOSURE_TYPES)))
        elif t in types[:i]:
            errors.append((f"spec.types[{i}]", f"Duplicate value: {_show(t)}"))

    for field in ("providerClusters", "consumerClusters"):
        names = []
        for i, sel in enumerate(spec.get(field) or []):
            cname = sel.get("name") if isinstance(sel, Mapping) else None
            errors += cluster_name_errors(f"spec.{field}[{i}].name", cname if cname is not None else "")
            if isinstance(cname, str) and cname in names:
                errors.append((f"spec.{field}[{i}].name", f"Duplicate value: {_show(cname)}"))
            names.append(cname)
    range_names = list(((spec.get("range") or {}).get("clusterNames")) or [])
    for i, cname in enumerate(range_names):
        errors += cluster_name_errors(f"spec.range.clusterNames[{i}]", cname)
    consumers = [str(s.get("name")) for s in spec.get("consumerClusters") or [] if isinstance(s, Mapping)]
    if range_names and consumers and sorted(set(map(str, range_names))) != sorted(set(consumers)):
        errors.append(("spec.range.clusterNames", "Invalid value: " + _show(",".join(range_names))
                       + ": conflicts with spec.consumerClusters (" + ",".join(str(c) for c in consumers)
                       + "): range.clusterNames is the older name of consumerClusters; set one of them"))

    if operation == "UPDATE" and old is not None:
        old_id = ((old.get("metadata") or {}).get("labels") or {}).get(PERMANENT_ID_LABEL)
        new_id = (meta.get("labels") or {}).get(PERMANENT_ID_LABEL)
        if old_id and new_id != old_id:
            errors.append(_invalid(f"metadata.labels[{PERMANENT_ID_LABEL}]", new_id or "",
                                   "the permanent ID is set once and may not change"))
    return errors


def message(errors: list[FieldError]) -> str:
    """field.ErrorList.ToAggregate().Error(): one error as is, several as `[a, b]`."""
    parts = list(dict.fromkeys(f"{path}: {text}" for path, text in errors))
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def mutate(operation: str, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """JSONPatch adding the permanent-id label when missing (kept from the old object on update)."""
    if operation not in ("CREATE", "UPDATE") or obj is None:
        return []
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(PERMANENT_ID_LABEL):
        return []
    previous = ((old or {}).get("metadata") or {}).get("labels") or {}
    value = previous.get(PERMANENT_ID_LABEL) or str(uuid.uuid4())
    if not (obj.get("metadata") or {}).get("labels"):
        return [{"op": "add", "path": "/metadata/labels", "value": {PERMANENT_ID_LABEL: value}}]
    return [{"op": "add", "path": "/metadata/labels/" + PERMANENT_ID_LABEL.replace("~", "~0").replace("/", "~1"),
             "value": value}]


# --- `isthmus webhook` handlers (AdmissionReview v1) ---------------------------------------------

VALIDATE_PATH = "/mcsvc/validate"
MUTATE_PATH = "/mcsvc/mutate"


def _ours(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind") or {}
    return kind.get("group") == GROUP and kind.get("kind") == KIND and not request.get("subResource")


async def review_validate(request: dict[str, Any]) -> AdmissionResponse:
    if not _ours(request):
        return AdmissionResponse()
    errors = validate(request.get("operation", ""), request.get("object"), request.get("oldObject"))
    if not errors:
        return AdmissionResponse()
    name = (request.get("name") or ((request.get("object") or {}).get("metadata") or {}).get("name") or "")
    return AdmissionResponse(allowed=False, code=422,
                             message=f'{KIND}.{GROUP} "{name}" is invalid: {message(errors)}')


async def review_mutate(request: dict[str, Any]) -> AdmissionResponse:
    if not _ours(request):
        return AdmissionResponse()
    return AdmissionResponse(patch=mutate(request.get("operation", ""), request.get("object"),
                                          request.get("oldObject")))


HANDLERS = {VALIDATE_PATH: review_validate, MUTATE_PATH: review_mutate}
"""What `isthmus webhook` serves for exposure (deploy/broker/controllers/webhook names these paths)."""
