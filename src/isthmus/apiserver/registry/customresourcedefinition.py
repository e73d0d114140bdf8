"""CustomResourceDefinitions (apiextensions.k8s.io/v1): defaults, validation, the cleanup finalizer.

Validation messages and paths follow apiextensions-apiserver's ValidateCustomResourceDefinition.
A new CRD gets the `customresourcecleanup.apiextensions.k8s.io` finalizer; controllers/crd.py
removes it once the CRD's objects are gone. Serving, establishing and cleanup are the CRD
controller's; what a CRD serves is registry/customresource.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from isthmus.apiserver.apimachinery import validation
from isthmus.apiserver.apimachinery.errors import cause
from isthmus.apiserver.openapi.schema import go_sharp, go_value
from isthmus.apiserver.registry.defaulting import ensure_dict, set_default
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import CREATED_DESC, NAME_COLUMN, Column, col, dig, name_of, parse_time

Obj = dict[str, Any]


KEY = "apiextensions.k8s.io/customresourcedefinitions"
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def default_crd(obj: Obj) -> None:
    """SetDefaults_CustomResourceDefinitionSpec: singular, listKind, conversion strategy."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        set_default(names, "singular", names["kind"].lower())
        set_default(names, "listKind", names["kind"] + "List")
    conv = ensure_dict(spec, "conversion")
    set_default(conv, "strategy", "None")


def _crd(obj: Obj, now: float) -> list[Any]:
    ts = parse_time(dig(obj, "metadata", "creationTimestamp"))
    created = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else None
    return [name_of(obj), created]


COLUMNS: list[Column] = [NAME_COLUMN, col("Created At", "date", CREATED_DESC)]


class CustomResourceDefinitionStrategy(Strategy):
    schema_required = False  # validate_crd gives kube's messages for missing fields

    def default(self, obj: Obj) -> None:
        default_crd(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        fins = obj["metadata"].setdefault("finalizers", [])
        if CLEANUP_FINALIZER not in fins:
            fins.append(CLEANUP_FINALIZER)
        # kube's PrepareForCreate: the status starts over, storedVersions with the storage version.
        obj["status"] = {"storedVersions": [v for v in [storage_version_name(obj)] if v]}

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        # kube's PrepareForUpdate: a new storage version is appended, none is ever removed here (a
        # storage migration removes them through /status once no object is stored at them).
        storage = storage_version_name(new)
        status = new.setdefault("status", {})
        stored = list(status.get("storedVersions") or [])
        if storage and storage not in stored:
            status["storedVersions"] = [*stored, storage]

    def validate(self, obj: Obj) -> list[dict[str, str]]:
        return validate_crd(obj) + validate_stored_versions(obj) + validate_api_approval(obj, None)

    def validate_update(self, new: Obj, old: Obj) -> list[dict[str, str]]:
        causes = validate_crd(new)
        # kube checks storedVersions against spec.versions on writes of the CRD itself, not of its
        # /status (where a migration trims them); a /status write leaves spec as it was.
        if new.get("spec") != old.get("spec") or new.get("status") == old.get("status"):
            causes += validate_stored_versions(new)
        return causes + validate_api_approval(new, old)

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _crd(obj, now)


# ---------------------------------------------------------------- validation


_COLUMN_TYPES = ["date", "integer", "number", "string", "boolean"]
_COLUMN_FORMATS = ["int32", "int64", "float", "double", "byte", "date", "date-time", "password"]


_dns1035 = validation.is_dns1035_label
_dns1123_subdomain = validation.is_dns1123_subdomain


def _inv(path: str, value: Any, detail: str) -> dict[str, str]:
    return cause(path, f"Invalid value: {go_value(value)}: {detail}")


def _required(path: str, detail: str = "") -> dict[str, str]:
    return cause(path, "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def _not_supported(path: str, value: Any, allowed: list[str]) -> dict[str, str]:
    values = ", ".join(f'"{a}"' for a in allowed)
    return cause(
        path, f"Unsupported value: {go_value(value)}: supported values: {values}", "FieldValueNotSupported"
    )


def storage_version_name(crd: Obj) -> str:
    """The name of the version marked storage ("" when none is)."""
    versions = dig(crd, "spec", "versions")
    return next((str(v.get("name") or "") for v in versions or [] if isinstance(v, dict) and v.get("storage")), "")


def _go_strings(values: list[Any] | None) -> str:
    """Go's %#v of a []string, as kube prints a storedVersions value."""
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(go_value(str(v)) for v in values) + "}"


def validate_stored_versions(crd: Obj) -> list[dict[str, str]]:
    """kube's ValidateCustomResourceDefinitionStoredVersions: status.storedVersions holds the storage
    version, and every version in it stays in spec.versions (objects may still be stored at it)."""
    path = "status.storedVersions"
    stored = dig(crd, "status", "storedVersions")
    stored = [str(v) for v in stored] if isinstance(stored, list) else None
    if not stored:
        return [cause(path, f"Invalid value: {_go_strings(stored)}: must have at least one stored version")]
    errs: list[dict[str, str]] = []
    index = {v: i for i, v in enumerate(stored)}
    for v in dig(crd, "spec", "versions") or []:
        if not isinstance(v, dict):
            continue
        name = str(v.get("name") or "")
        if v.get("storage") and name not in index:
            errs.append(cause(path, f"Invalid value: {_go_strings(stored)}: must have the storage version {name}"))
        index.pop(name, None)
    for v, i in sorted(index.items(), key=lambda item: item[1]):
        errs.append(_inv(f"{path}[{i}]", v, f"missing from spec.versions; {v} was previously a storage version, "
                         f"and must remain in spec.versions until a storage migration ensures no data remains "
                         f"persisted in {v} and removes {v} from status.storedVersions"))
    return errs


API_APPROVED_ANNOTATION = "api-approved.kubernetes.io"
_APPROVAL_PR = "https://github.com/kubernetes/enhancements/pull/1111"


def is_protected_group(group: str) -> bool:
    """kube's IsProtectedCommunityGroup: k8s.io and kubernetes.io and their subdomains need API review."""
    return any(group == d or group.endswith("." + d) for d in ("k8s.io", "kubernetes.io"))


def _approval_state(annotations: Any) -> tuple[str, str]:
    """kube's GetAPIApprovalState: (missing|bypassed|approved|invalid, reason)."""
    value = str((annotations or {}).get(API_APPROVED_ANNOTATION) or "") if isinstance(annotations, dict) else ""
    if not value:
        return "missing", f'protected groups must have approval annotation "{API_APPROVED_ANNOTATION}", see {_APPROVAL_PR}'
    if value.startswith("unapproved"):
        return "bypassed", f"not approved: {go_value(value)}"
    url = urlsplit(value)
    if url.scheme and url.netloc and " " not in value:
        return "approved", f"approved in {value}"
    return "invalid", (f'protected groups must have approval annotation "{API_APPROVED_ANNOTATION}" with either a URL '
                       f'or a reason starting with "unapproved", see {_APPROVAL_PR}')


def validate_api_approval(new: Obj, old: Obj | None) -> list[dict[str, str]]:
    """kube's validateAPIApproval: a CRD in a protected group needs the api-approved annotation (a URL,
    or a reason starting with "unapproved"); an update that leaves its state as it was passes."""
    if not is_protected_group(str(dig(new, "spec", "group") or "")):
        return []
    state, reason = _approval_state(dig(new, "metadata", "annotations"))
    if old is not None and _approval_state(dig(old, "metadata", "annotations"))[0] == state:
        return []
    path = f"metadata.annotations[{API_APPROVED_ANNOTATION}]"
    if state == "missing":
        return [_required(path, reason)]
    if state == "invalid":
        return [_inv(path, (dig(new, "metadata", "annotations") or {}).get(API_APPROVED_ANNOTATION), reason)]
    return []


def validate_crd(crd: dict[str, object]) -> list[dict[str, str]]:
    """Causes for an invalid CRD (names, group, scope, versions: exactly one storage, structural schemas).

    Messages and paths follow apiextensions-apiserver's ValidateCustomResourceDefinition."""
    errs: list[dict[str, str]] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    name = str(dig(crd, "metadata", "name") or "")
    group = spec.get("group") or ""
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    assert isinstance(names, dict)
    plural = names.get("plural") or ""
    if name != f"{plural}.{group}":
        errs.append(_inv("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if not group:
        errs.append(_required("spec.group"))
    elif not isinstance(group, str) or _dns1123_subdomain(group):
        errs.append(_inv("spec.group", group, ",".join(_dns1123_subdomain(str(group)))))
    elif len(group.split(".")) < 2:
        errs.append(_inv("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope")
    if not scope:
        errs.append(_required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(_not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    errs.extend(_validate_names(names))
    errs.extend(_validate_versions(spec))
    return errs


def _validate_names(names: dict[str, Any]) -> list[dict[str, str]]:
    errs: list[dict[str, str]] = []
    base = "spec.names"
    plural, singular, kind, list_kind = (
        names.get(k) or "" for k in ("plural", "singular", "kind", "listKind")
    )
    if not plural:
        errs.append(_required(f"{base}.plural"))
    elif _dns1035(str(plural)):
        errs.append(_inv(f"{base}.plural", plural, ",".join(_dns1035(str(plural)))))
    if singular and _dns1035(str(singular)):
        errs.append(_inv(f"{base}.singular", singular, ",".join(_dns1035(str(singular)))))
    if not kind:
        errs.append(_required(f"{base}.kind"))
    elif _dns1035(str(kind).lower()):
        detail = "may have mixed case, but should otherwise match: " + ",".join(_dns1035(str(kind).lower()))
        errs.append(_inv(f"{base}.kind", kind, detail))
    if list_kind and _dns1035(str(list_kind).lower()):
        detail = "may have mixed case, but should otherwise match: " + ",".join(
            _dns1035(str(list_kind).lower())
        )
        errs.append(_inv(f"{base}.listKind", list_kind, detail))
    if kind and kind == list_kind:
        errs.append(_inv(f"{base}.listKind", list_kind, "kind and listKind may not be the same"))
    for field_name in ("shortNames", "categories"):
        for i, item in enumerate(names.get(field_name) or []):
            if _dns1035(str(item)):
                errs.append(_inv(f"{base}.{field_name}[{i}]", item, ",".join(_dns1035(str(item)))))
    return errs


def _validate_versions(spec: dict[str, Any]) -> list[dict[str, str]]:
    errs: list[dict[str, str]] = []
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    if not versions:
        errs.append(_required("spec.versions"))
        return errs
    storage = 0
    seen: set[str] = set()
    unique = True
    for i, v in enumerate(versions):
        base = f"spec.versions[{i}]"
        vname = str(v.get("name") or "")
        if v.get("storage"):
            storage += 1
        if vname in seen:
            unique = False
        seen.add(vname)
        if _dns1035(vname):
            errs.append(_inv(f"{base}.name", vname, ",".join(_dns1035(vname))))
        schema = dig(v, "schema", "openAPIV3Schema")
        if not isinstance(schema, dict):
            errs.append(_required(f"{base}.schema.openAPIV3Schema", "schemas are required"))
        else:
            errs.extend(structural_errors(schema, f"{base}.schema.openAPIV3Schema"))
        for j, column in enumerate(v.get("additionalPrinterColumns") or []):
            errs.extend(_validate_column(column, f"{base}.additionalPrinterColumns[{j}]"))
    shown = go_sharp(versions)  # kube prints the Go slice here
    if not unique:
        errs.append(cause("spec.versions", f"Invalid value: {shown}: must contain unique version names"))
    if storage != 1:
        errs.append(
            cause(
                "spec.versions",
                f"Invalid value: {shown}: must have exactly one version marked as storage version",
            )
        )
    return errs


def _validate_column(col: Any, path: str) -> list[dict[str, str]]:
    if not isinstance(col, dict):
        return [_required(path)]
    errs: list[dict[str, str]] = []
    if not col.get("name"):
        errs.append(_required(f"{path}.name"))
    if not col.get("type"):
        errs.append(_required(f"{path}.type"))
    elif col["type"] not in _COLUMN_TYPES:
        errs.append(_not_supported(f"{path}.type", col["type"], _COLUMN_TYPES))
    if col.get("format") and col["format"] not in _COLUMN_FORMATS:
        errs.append(_not_supported(f"{path}.format", col["format"], _COLUMN_FORMATS))
    if not col.get("jsonPath"):
        errs.append(_required(f"{path}.jsonPath"))
    return errs


def structural_errors(schema: dict[str, Any], path: str) -> list[dict[str, str]]:
    """kube's structural-schema rules that matter in practice: a type at every level (except where
    x-kubernetes-int-or-string or x-kubernetes-preserve-unknown-fields stand in), items for arrays,
    object at the root, and only name/generateName under metadata."""
    errs: list[dict[str, str]] = []
    if schema.get("type") != "object":
        if not schema.get("type"):
            errs.append(_required(f"{path}.type", "must not be empty at the root"))
        else:
            errs.append(_inv(f"{path}.type", schema["type"], "must be object at the root"))
    meta = (schema.get("properties") or {}).get("metadata")
    if isinstance(meta, dict):
        extra = set(meta) - {"type", "properties", "description"}
        props = set(meta.get("properties") or {})
        if extra or props - {"name", "generateName"} or meta.get("type", "object") != "object":
            errs.append(
                cause(
                    f"{path}.properties[metadata]",
                    "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly "
                    "specified",
                    "FieldValueForbidden",
                )
            )
    _structural(schema, path, errs, root=True)
    return errs


def _structural(s: dict[str, Any], path: str, errs: list[dict[str, str]], root: bool = False) -> None:
    props = s.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            if not isinstance(sub, dict):
                continue
            p = f"{path}.properties[{key}]"
            if root and key == "metadata":
                continue
            if not sub.get("type") and not _typeless_ok(sub):
                errs.append(_required(f"{p}.type", "must not be empty for specified object fields"))
            _structural(sub, p, errs)
    addl = s.get("additionalProperties")
    if isinstance(addl, dict):
        p = f"{path}.additionalProperties"
        if not addl.get("type") and not _typeless_ok(addl):
            errs.append(_required(f"{p}.type", "must not be empty for specified object fields"))
        if isinstance(props, dict) and props:
            errs.append(
                cause(
                    p,
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                    "FieldValueForbidden",
                )
            )
        _structural(addl, p, errs)
    if s.get("type") == "array":
        items = s.get("items")
        if not isinstance(items, dict):
            errs.append(_required(f"{path}.items", "must be specified"))
        else:
            if not items.get("type") and not _typeless_ok(items):
                errs.append(_required(f"{path}.items.type", "must not be empty for specified array items"))
            _structural(items, f"{path}.items", errs)
    if s.get("x-kubernetes-list-type") == "map" and not s.get("x-kubernetes-list-map-keys"):
        errs.append(
            _required(
                f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map"
            )
        )


def _typeless_ok(s: dict[str, Any]) -> bool:
    return bool(s.get("x-kubernetes-int-or-string") or s.get("x-kubernetes-preserve-unknown-fields"))
