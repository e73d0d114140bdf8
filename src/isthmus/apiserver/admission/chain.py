"""The admission chain: mutating hooks, mutating webhooks, then the ValidatingAdmissionPolicy
plugin, validating hooks and validating webhooks, before storage (kube's plugin order: in-tree
mutating plugins, MutatingAdmissionWebhook, ValidatingAdmissionPolicy, ValidatingAdmissionWebhook).

In-process hooks are registered here; the two plugins live in policy/ and webhook/ and are set on
`Admission` by the generic store (registry/store.py). kube's own in-tree plugins (ServiceAccount,
Priority, PodSecurity) are "builtin" hooks: they run before the hooks a caller adds, in each phase,
as kube's compiled-in plugins come before any configured ones."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.admission.policy.engine import ValidatingAdmissionPolicies
from isthmus.apiserver.admission.webhook.dispatch import Webhooks
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.registry.resources import ResourceInfo

# A hook raises errors.ApiError (e.g. errors.invalid / errors.forbidden) to deny.
Hook = Callable[[AdmissionRequest], Awaitable[None]]


@dataclass
class Admission:
    """Hooks registered per (group, plural); plural '*' matches every resource of the group.

    `policies` is the server's ValidatingAdmissionPolicy plugin, `webhooks` its admission webhook
    plugins (the generic store sets both)."""

    mutating: list[tuple[str, str, Hook]] = field(default_factory=list)
    validating: list[tuple[str, str, Hook]] = field(default_factory=list)
    builtin_mutating: list[tuple[str, str, Hook]] = field(default_factory=list)
    builtin_validating: list[tuple[str, str, Hook]] = field(default_factory=list)
    policies: ValidatingAdmissionPolicies | None = None
    webhooks: Webhooks | None = None
    # What plugins may ask of the server, as kube's admission plugins get informers and an
    # authorizer: `reader(group, plural, namespace, name)` → the stored object (namespace '' for
    # cluster-scoped), `lister(group, plural, namespace)` → the stored objects ('' lists every
    # namespace), `can(user, verb, group, plural, namespace, name)` → whether RBAC allows it.
    reader: Callable[[str, str, str, str], dict[str, Any] | None] | None = None
    lister: Callable[[str, str, str], list[dict[str, Any]]] | None = None
    can: Callable[[UserInfo, str, str, str, str, str], bool] | None = None
    _hooked: dict[tuple[str, str, bool], bool] = field(default_factory=dict, repr=False)
    _hook_counts: tuple[int, int] = (0, 0)

    def add_mutating(self, group: str, plural: str, hook: Hook) -> None:
        self.mutating.append((group, plural, hook))

    def add_validating(self, group: str, plural: str, hook: Hook) -> None:
        self.validating.append((group, plural, hook))

    def add_builtin_mutating(self, group: str, plural: str, hook: Hook) -> None:
        self.builtin_mutating.append((group, plural, hook))

    def add_builtin_validating(self, group: str, plural: str, hook: Hook) -> None:
        self.builtin_validating.append((group, plural, hook))

    def _all_mutating(self) -> list[tuple[str, str, Hook]]:
        return [*self.builtin_mutating, *self.mutating]

    def _all_validating(self) -> list[tuple[str, str, Hook]]:
        return [*self.builtin_validating, *self.validating]

    def active(self, info: ResourceInfo, subresource: str = "") -> bool:
        """Whether a write of `info` (through `subresource`) must go through admission at all.

        kube's built-in pod plugins judge no subresource write, so a Pod's or a Deployment's status
        writes (the busiest of a cluster) skip admission unless another hook, webhook or policy
        covers the resource."""
        # Per (group, plural, builtins counted); hooks are only ever added, so the answers hold while
        # the number of hooks stays the same.
        counts = (len(self.mutating) + len(self.builtin_mutating), len(self.validating) + len(self.builtin_validating))
        if counts != self._hook_counts:
            self._hooked.clear()
            self._hook_counts = counts
        key = (info.group, info.plural, not subresource)
        hooked = self._hooked.get(key)
        if hooked is None:
            hooks = (*self._all_mutating(), *self._all_validating()) if not subresource else \
                (*self.mutating, *self.validating)
            hooked = any(self._match(g, p, info) for g, p, _ in hooks)
            self._hooked[key] = hooked
        if hooked:
            return True
        if self.webhooks is not None and self.webhooks.covers(info):
            return True
        return self.policies is not None and self.policies.covers(info)

    @staticmethod
    def _match(group: str, plural: str, info: ResourceInfo) -> bool:
        return group == info.group and plural in ("*", info.plural)

    async def run(self, req: AdmissionRequest) -> bool:
        """Admit or raise; True when the object may have changed (a mutating hook ran, or a mutating
        webhook patched it), so the caller validates it again; validating plugins never change it."""
        mutated = False
        # kube's in-tree mutations (a ServiceAccount name, the token volume, a priority) are valid by
        # construction: they do not make the caller validate the object again (a third of a Pod create).
        for g, p, hook in self.builtin_mutating:
            if self._match(g, p, req.resource):
                await hook(req)
        for g, p, hook in self.mutating:
            if self._match(g, p, req.resource):
                await hook(req)
                mutated = True
        if self.webhooks is not None and await self.webhooks.mutate(req):
            mutated = True
        if self.policies is not None and self.policies.covers(req.resource):
            self.policies.validate(req)
        for g, p, hook in self._all_validating():
            if self._match(g, p, req.resource):
                await hook(req)
        if self.webhooks is not None:
            await self.webhooks.validate(req)
        return mutated


def install_builtin_plugins(admission: Admission) -> None:
    """kube-apiserver's default-on pod admission plugins, in kube's order: ServiceAccount and
    Priority mutate (then validate) a new Pod, PodSecurity validates Pods, templates and Namespaces.
    Once per Admission (a caller may hand the same one to several servers)."""
    if admission.builtin_mutating or admission.builtin_validating:
        return
    from isthmus.apiserver.admission import podsecurity, priority, serviceaccount

    serviceaccount.install(admission)
    priority.install(admission)
    podsecurity.install(admission)
