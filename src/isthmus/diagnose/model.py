"""What a diagnosis is made of: checks with a status, a reason and the next step, grouped per
cluster. Pure data; `isthmus diagnose -o json` prints `Diagnosis.to_dict()` as is, so its keys
are a contract (docs/diagnose.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from isthmus.api.base import format_time

API_VERSION = "diagnose.isthmus.io/v1alpha1"


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    """Worth a look, but nothing is broken: does not fail the diagnosis."""
    FAIL = "fail"
    SKIP = "skip"
    """Not run because something it needs failed first (the API is unreachable)."""


MARKS = {Status.PASS: "✔", Status.WARN: "⚠", Status.FAIL: "✘", Status.SKIP: "-"}


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 range`, `2 ranges`: a count with its noun as English wants it (`nouns` for an irregular
    plural, `1 process`, `2 processes`). Every count diagnose and the CLI print goes through here."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str
    next: str | None = None
    """What to run next: a concrete command (or an instruction when there is none)."""
    details: list[str] = field(default_factory=list)
    """One line per object at fault (a conflict's message, a pool's failed instance)."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": str(self.status), "message": self.message, "next": self.next,
                "details": list(self.details)}


def passed(name: str, message: str, details: list[str] | None = None) -> Check:
    return Check(name, Status.PASS, message, None, details or [])


def warned(name: str, message: str, next_: str | None = None, details: list[str] | None = None) -> Check:
    return Check(name, Status.WARN, message, next_, details or [])


def failed(name: str, message: str, next_: str | None = None, details: list[str] | None = None) -> Check:
    return Check(name, Status.FAIL, message, next_, details or [])


@dataclass
class TargetReport:
    """The checks of one kubeconfig context (a member cluster, the broker, or both), or of the
    clusterset as a whole (`context` None)."""

    title: str
    context: str | None
    server: str | None
    roles: list[str]
    cluster_id: str | None
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.title, "context": self.context, "server": self.server, "roles": list(self.roles),
                "clusterID": self.cluster_id, "checks": [c.to_dict() for c in self.checks]}


@dataclass
class Diagnosis:
    at: datetime
    targets: list[TargetReport]

    def counts(self) -> dict[str, int]:
        out = {str(s): 0 for s in Status}
        for t in self.targets:
            for c in t.checks:
                out[str(c.status)] += 1
        return out

    @property
    def ok(self) -> bool:
        return all(c.status is not Status.FAIL for t in self.targets for c in t.checks)

    def failures(self) -> list[tuple[TargetReport, Check]]:
        return [(t, c) for t in self.targets for c in t.checks if c.status is Status.FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "Diagnosis", "time": format_time(self.at), "ok": self.ok,
                "summary": self.counts(), "targets": [t.to_dict() for t in self.targets]}
