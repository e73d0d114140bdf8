"""The egress operator against a real apiserver, for the binding tests (moved from
tests/integration/test_egress_binding.py)."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, AsyncClient

from isthmus.api.egress import (
    SourceIP,
    SourceIPClaim,
    SourceIPClass,
)
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer
from tests.harness.polling import eventually

ClassRes: Any = resource_for(SourceIPClass)
ClaimRes: Any = resource_for(SourceIPClaim)
SipRes: Any = resource_for(SourceIP)


class Env:
    def __init__(self, srv: RunningApiServer, client: AsyncClient) -> None:
        self.srv = srv
        self.client = client

    async def klass(self, name: str, ranges: list[tuple[str, str]], allowed: list[str] | None = None,
                    reclaim: str = "Delete") -> None:
        await self.client.create(ClassRes.from_dict({
            "metadata": {"name": name},
            "spec": {"ranges": [{"start": a, "end": b} for a, b in ranges],
                     "allowedNamespaces": ["default"] if allowed is None else allowed,
                     "reclaimPolicy": reclaim}}))

    async def claim(self, name: str, cls: str, address: str | None = None, ns: str = "default") -> None:
        spec = {"sourceIPClassName": cls} | ({"sourceIP": address} if address else {})
        await self.client.create(ClaimRes.from_dict({"metadata": {"name": name, "namespace": ns}, "spec": spec}))

    async def get_claim(self, name: str, ns: str = "default") -> dict[str, Any] | None:
        try:
            return dict((await self.client.get(ClaimRes, name, namespace=ns)).to_dict())
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise

    async def phase(self, name: str, ns: str = "default") -> tuple[str | None, str | None]:
        c = await self.get_claim(name, ns)
        st = (c or {}).get("status") or {}
        return st.get("phase"), st.get("sourceIP")

    async def bound(self, name: str, ns: str = "default") -> str:
        async def check() -> str | None:
            phase, ip = await self.phase(name, ns)
            return ip if phase == "Bound" else None

        return str(await eventually(check, 15, f"claim {name} Bound"))

    async def ready_reason(self, name: str) -> str:
        c = await self.get_claim(name) or {}
        for cond in (c.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Ready":
                return f"{cond['status']}/{cond['reason']}: {cond['message']}"
        return ""

    async def sips(self) -> dict[str, dict[str, Any]]:
        return {o.metadata.name: dict(o.to_dict()) async for o in self.client.list(SipRes)}
