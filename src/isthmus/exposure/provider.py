"""The seed's `MCSLoadBalancer`: a pluggable multi-cluster load balancer, chosen by name.

Karmada's interface takes only the MultiClusterService, because its providers read endpoints from
the Karmada control plane themselves. Here the broker controller hands each call the backends it
collected (the ready pod addresses of every provider cluster, `plan.Backends`), so a provider needs
nothing but its own API. Each call returns a `LoadBalancerStatus`, which the controller writes to
the object's `status.loadBalancer`; a `ProviderError` carries the cause and the next step, and
becomes a Warning event and `LoadBalancerReady=False`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from lightkube import AsyncClient

from isthmus.api.mcsvc import LoadBalancerIngress, LoadBalancerStatus, MultiClusterService, PortStatus
from isthmus.exposure.plan import Backends
from isthmus.runtime import Informer, SharedInformerFactory

KeyFunc = Callable[[Any], list[str]]


class ProviderError(Exception):
    """The load balancer could not be made: `str()` says why and what to do."""


class MCSLoadBalancer(Protocol):
    name: str

    async def get(self, mcs: MultiClusterService) -> tuple[LoadBalancerStatus | None, bool]:
        """Whether the load balancer exists, and if so its status."""
        ...

    async def ensure(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        """Create the load balancer."""
        ...

    async def update(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        """Bring an existing load balancer in line (ports, backends)."""
        ...

    async def ensure_deleted(self, mcs: MultiClusterService) -> None:
        """Delete it if it exists."""
        ...

    def watches(self, factory: SharedInformerFactory) -> list[tuple[Informer[Any], KeyFunc]]:
        """Informers whose changes concern MultiClusterServices (`<ns>/<name>` keys)."""
        ...


@dataclass
class FakeLoadBalancer:
    """In memory, as Karmada's fake provider: records every call; the address is a hostname under
    `.invalid` (RFC 2606), so nothing can ever send a packet to it."""

    name: str = "fake"
    calls: list[tuple[str, str]] = field(default_factory=list)
    balancers: dict[str, LoadBalancerStatus] = field(default_factory=dict)
    backends: dict[str, Backends] = field(default_factory=dict)
    fail: dict[str, str] = field(default_factory=dict)
    """key → message: make ensure/update of that object fail (tests)."""

    @staticmethod
    def _key(mcs: MultiClusterService) -> str:
        return f"{mcs.namespace}/{mcs.name}"

    async def get(self, mcs: MultiClusterService) -> tuple[LoadBalancerStatus | None, bool]:
        self.calls.append(("get", self._key(mcs)))
        status = self.balancers.get(self._key(mcs))
        return status, status is not None

    def _status(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        key = self._key(mcs)
        if key in self.fail:
            raise ProviderError(self.fail[key])
        self.backends[key] = backends
        host = f"{mcs.name}.{mcs.namespace}.fake-lb.invalid"
        ports = [PortStatus(port=p[1], protocol=p[2]) for p in backends.ports] or None
        status = LoadBalancerStatus(ingress=[LoadBalancerIngress(hostname=host, ports=ports)])
        self.balancers[key] = status
        return status

    async def ensure(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        self.calls.append(("ensure", self._key(mcs)))
        return self._status(mcs, backends)

    async def update(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        self.calls.append(("update", self._key(mcs)))
        return self._status(mcs, backends)

    async def ensure_deleted(self, mcs: MultiClusterService) -> None:
        self.calls.append(("ensure_deleted", self._key(mcs)))
        self.balancers.pop(self._key(mcs), None)
        self.backends.pop(self._key(mcs), None)

    def watches(self, factory: SharedInformerFactory) -> list[tuple[Informer[Any], KeyFunc]]:
        return []


PROVIDERS: dict[str, Callable[[AsyncClient], MCSLoadBalancer]] = {}
"""Every provider by name (`isthmus mcsvc-broker --provider NAME`)."""


def register(name: str, factory: Callable[[AsyncClient], MCSLoadBalancer]) -> None:
    PROVIDERS[name] = factory


def build(name: str, client: AsyncClient) -> MCSLoadBalancer:
    if name not in PROVIDERS:
        raise ProviderError(f"unknown load-balancer provider {name!r} (known: {', '.join(sorted(PROVIDERS))})")
    return PROVIDERS[name](client)


register("fake", lambda _client: FakeLoadBalancer())
