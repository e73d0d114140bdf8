"""In-process admission: mutating then validating hooks run before storage, as webhooks would in production."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from isthmus.apiserver.resources import ResourceInfo


@dataclass
class AdmissionRequest:
    operation: str  # "CREATE" | "UPDATE" | "DELETE"
    resource: ResourceInfo
    subresource: str  # "" or "status"
    namespace: str
    name: str
    object: dict[str, Any] | None  # the object to store (mutating hooks edit it in place)
    old_object: dict[str, Any] | None
    user: str
    dry_run: bool = False


# A hook raises errors.ApiError (e.g. errors.invalid / errors.forbidden) to deny.
Hook = Callable[[AdmissionRequest], Awaitable[None]]


@dataclass
class Admission:
    """Hooks registered per (group, plural); plural '*' matches every resource of the group."""

    mutating: list[tuple[str, str, Hook]] = field(default_factory=list)
    validating: list[tuple[str, str, Hook]] = field(default_factory=list)

    def add_mutating(self, group: str, plural: str, hook: Hook) -> None:
        self.mutating.append((group, plural, hook))

    def add_validating(self, group: str, plural: str, hook: Hook) -> None:
        self.validating.append((group, plural, hook))

    def active(self, info: ResourceInfo) -> bool:
        return any(self._match(g, p, info) for g, p, _ in (*self.mutating, *self.validating))

    @staticmethod
    def _match(group: str, plural: str, info: ResourceInfo) -> bool:
        return group == info.group and plural in ("*", info.plural)

    async def run(self, req: AdmissionRequest) -> None:
        for g, p, hook in self.mutating:
            if self._match(g, p, req.resource):
                await hook(req)
        for g, p, hook in self.validating:
            if self._match(g, p, req.resource):
                await hook(req)
