"""A namespace's Pod Security policy from its labels (k8s.io/pod-security-admission/api).

kube-apiserver's default AdmissionConfiguration: every mode privileged at `latest`, no exemptions,
so an unlabelled namespace (kube-system included) admits everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from isthmus.apiserver.admission.podsecurity.checks import Version
from isthmus.apiserver.apimachinery import errors

PREFIX = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")
_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")


@dataclass(frozen=True)
class LevelVersion:
    level: str = "privileged"
    version: Version | None = None  # None: latest

    def __str__(self) -> str:
        v = "latest" if self.version is None else f"v{self.version[0]}.{self.version[1]}"
        return f"{self.level}:{v}"


@dataclass(frozen=True)
class Policy:
    enforce: LevelVersion = LevelVersion()
    audit: LevelVersion = LevelVersion()
    warn: LevelVersion = LevelVersion()

    def fully_privileged(self) -> bool:
        return all(lv.level == "privileged" for lv in (self.enforce, self.audit, self.warn))


DEFAULT = Policy()


def _rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else 2


def compare_levels(a: str, b: str) -> int:
    return (_rank(a) > _rank(b)) - (_rank(a) < _rank(b))


def _parse_version(value: str) -> tuple[Version | None, bool]:
    if value == "latest":
        return None, True
    m = _VERSION.match(value)
    return ((1, int(m.group(1))), True) if m else (None, False)


def policy_from_labels(labels: Any, defaults: Policy = DEFAULT) -> tuple[Policy, list[dict[str, str]]]:
    """PolicyToEvaluate: the policy and the label errors as field causes. An invalid enforce level
    counts as restricted (fail closed), invalid audit and warn levels as privileged (fail open)."""
    labels = labels if isinstance(labels, dict) else {}
    p = defaults
    causes: list[dict[str, str]] = []
    if not labels:
        return p, causes

    def invalid(key: str, value: str, why: str) -> None:
        causes.append(errors.cause(f"metadata.labels[{key}]", f"Invalid value: {errors.go_quote(value)}: {why}"))

    modes = {"enforce": p.enforce, "audit": p.audit, "warn": p.warn}
    has_level: dict[str, bool] = {}
    has_version: dict[str, bool] = {}
    for mode in ("enforce", "audit", "warn"):
        lv = modes[mode]
        key = PREFIX + mode
        if key in labels:
            value = str(labels[key])
            if value in LEVELS:
                lv = replace(lv, level=value)
                has_level[mode] = True
            else:
                invalid(key, value, "must be one of " + ", ".join(LEVELS))
                lv = replace(lv, level="restricted" if mode == "enforce" else "privileged")
                has_level[mode] = mode == "warn"  # kube notes the warn label was present even when invalid
        vkey = f"{key}-version"
        if vkey in labels:
            has_version[mode] = True
            version, ok = _parse_version(str(labels[vkey]))
            if not ok:
                invalid(vkey, str(labels[vkey]), 'must be "latest" or "v1.x"')
            lv = replace(lv, version=version)
        modes[mode] = lv
    enforce, warn = modes["enforce"], modes["warn"]
    # The warn level defaults to an explicitly set, stricter enforce level.
    if not has_level.get("warn") and has_level.get("enforce") and compare_levels(enforce.level, warn.level) > 0:
        warn = replace(warn, level=enforce.level,
                       version=warn.version if has_version.get("warn") else enforce.version)
    return Policy(enforce, modes["audit"], warn), causes
