"""ObjectMeta rules kube-apiserver enforces on every object: names, labels, annotations, owners."""

from __future__ import annotations

import os
import re
import secrets
import time
from typing import Any

from isthmus.apiserver.apimachinery import validation
from isthmus.apiserver.apimachinery.errors import cause

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # kube's: no vowels, no confusable digits
# Finalizers kube accepts without a '/' (the apiextensions one included).
STANDARD_FINALIZERS = {"kubernetes", "orphan", "foregroundDeletion", "customresourcecleanup.apiextensions.k8s.io"}

SUBDOMAIN_MSG = validation.regex_error(
    validation.DNS1123_SUBDOMAIN_MSG, validation.DNS1123_SUBDOMAIN_FMT, "example.com"
)

_now_second, _now_text = -1, ""  # the second now_rfc3339 last formatted, and how


def now_rfc3339() -> str:
    """Now, to the second, as kube's metav1.Time writes it (formatted once a second)."""
    global _now_second, _now_text
    t = int(time.time())
    if t != _now_second:
        _now_second, _now_text = t, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    return _now_text


def rfc3339_after(seconds: int) -> str:
    """Now plus `seconds` (a graceful deletion's deletionTimestamp: when it is due)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))


_random = bytearray()


def _forget_random() -> None:
    _random.clear()  # a forked child must not hand out its parent's bytes again


os.register_at_fork(after_in_child=_forget_random)


def new_uid() -> str:
    """A random (version 4) UUID, as str(uuid.uuid4()) spells it, without building a UUID object.
    The random bytes come from the OS 4 KB at a time (one getrandom call per 256 uids, as Go's
    uuid pool does), not 16 at a time."""
    if len(_random) < 16:
        _random[:] = os.urandom(4096)
    h = _random[-16:].hex()
    del _random[-16:]
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_UUID_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


_UUID_VARIANT = "89ab"  # RFC 4122: the top two bits of byte 8 are 10


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))


_NAME_RULES = {
    "label": validation.is_dns1123_label,
    "dns1035": validation.is_dns1035_label,
    "path": validation.is_path_segment_name,  # kube's path.ValidatePathSegmentName (RBAC's system:basic-user)
    "subdomain": validation.is_dns1123_subdomain,
}


# The common case in one step (a create's name is nearly always valid): rule → (pattern, most characters).
_VALID_NAME = {
    "label": (re.compile(validation.DNS1123_LABEL_FMT), 63),
    "dns1035": (re.compile(validation.DNS1035_LABEL_FMT), 63),
    "subdomain": (re.compile(validation.DNS1123_SUBDOMAIN_FMT), 253),
}


def validate_name(name: str, rule: str = "subdomain", field: str = "metadata.name", *,
                  prefix: bool = False) -> list[dict[str, str]]:
    """kube's NameIs* for `rule`; `prefix`: a generateName, checked with its trailing '-' masked."""
    fast = _VALID_NAME.get(rule)
    if fast is not None and not prefix and len(name) <= fast[1] and fast[0].fullmatch(name):
        return []
    check = _NAME_RULES.get(rule, validation.is_dns1123_subdomain)
    value = validation.mask_trailing_dash(name) if prefix and rule != "path" else name
    return validation.invalid_each(field, name, check(value))


def _validate_qualified_key(key: str, field: str) -> list[dict[str, str]]:
    return validation.invalid_each(field, key, validation.is_qualified_name(key))


# Labels already found valid: the same few pairs come with object after object, and their two
# regular expressions were a tenth of a create's validation. Bounded: cleared when full.
_VALID_LABELS: set[tuple[str, str]] = set()


def validate_metadata(meta: Any, *, name_rule: str, namespaced: bool, creating: bool = True) -> list[dict[str, str]]:
    """Causes for everything wrong in metadata. The name and generateName are judged on create only,
    as kube's ValidateObjectMetaUpdate leaves them (the name cannot change): an object stored before
    a rule was tightened can still be updated, its finalizers removed."""
    if not isinstance(meta, dict):
        return [cause("metadata", "Invalid value: must be an object", "FieldValueTypeInvalid")]
    out: list[dict[str, str]] = []
    generate = meta.get("generateName")
    if creating and isinstance(generate, str) and generate:  # checked even once a name was made from it
        out += validate_name(generate, name_rule, "metadata.generateName", prefix=True)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        out.append(cause("metadata.name", "Required value: name or generateName is required", "FieldValueRequired"))
    elif creating:
        out += validate_name(name, name_rule)
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            out.append(cause("metadata.labels", "Invalid value: must be a map of strings", "FieldValueTypeInvalid"))
        else:
            for k, v in labels.items():
                if type(v) is str and (k, v) in _VALID_LABELS:
                    continue
                errs = len(out)
                out += _validate_qualified_key(str(k), "metadata.labels")
                if not isinstance(v, str):
                    out.append(cause(f"metadata.labels.{k}", "Invalid value: must be a string", "FieldValueTypeInvalid"))
                else:
                    out += validation.invalid_each("metadata.labels", v, validation.is_valid_label_value(v))
                if len(out) == errs and isinstance(k, str) and isinstance(v, str):
                    if len(_VALID_LABELS) >= 4096:
                        _VALID_LABELS.clear()
                    _VALID_LABELS.add((k, v))
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict):
            out.append(
                cause("metadata.annotations", "Invalid value: must be a map of strings", "FieldValueTypeInvalid")
            )
        else:
            total = 0
            for k, v in annotations.items():
                # kube checks the key lower-cased (annotation keys may carry upper case prefixes)
                out += validation.invalid_each("metadata.annotations", str(k),
                                               validation.is_qualified_name(str(k).lower()))
                if not isinstance(v, str):
                    out.append(
                        cause(f"metadata.annotations.{k}", "Invalid value: must be a string", "FieldValueTypeInvalid")
                    )
                else:
                    total += len(k) + len(v)
            if total > 256 * 1024:
                out.append(cause("metadata.annotations", "Too long: must have at most 262144 bytes", "FieldValueTooLong"))
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            out.append(cause("metadata.finalizers", "Invalid value: must be a list of strings", "FieldValueTypeInvalid"))
        else:
            for f in finalizers:  # kube's ValidateFinalizerName, then its kube-specific rule; no index
                out += validation.invalid_each("metadata.finalizers", f, validation.is_qualified_name(f))
                if "/" not in f and f not in STANDARD_FINALIZERS:
                    out.append(validation.invalid(
                        "metadata.finalizers", f, "name is neither a standard finalizer name nor is it fully qualified"))
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            out.append(cause("metadata.ownerReferences", "Invalid value: must be a list", "FieldValueTypeInvalid"))
        else:
            controllers = 0
            for i, ref in enumerate(owners):
                f = f"metadata.ownerReferences[{i}]"
                if not isinstance(ref, dict):
                    out.append(cause(f, "Invalid value: must be an object", "FieldValueTypeInvalid"))
                    continue
                for req in ("apiVersion", "kind", "name", "uid"):
                    if not ref.get(req):
                        out.append(cause(f"{f}.{req}", "Invalid value: \"\": " + req + " must not be empty"))
                if ref.get("controller"):
                    controllers += 1
            if controllers > 1:
                out.append(
                    cause("metadata.ownerReferences", "Invalid value: Only one reference can have Controller set to true")
                )
    return out
