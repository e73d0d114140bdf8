"""ServiceAccount tokens from the TokenRequest API, kept fresh the way the kubelet keeps a pod's.

`isthmus controller-manager --use-service-account-credentials` runs several controllers in one
process, each as its own ServiceAccount (kube-controller-manager's flag of the same name): the
manager's own account may only ask for those accounts' tokens, and every controller's client sends
its account's token, so RBAC, audit and the webhooks see the same identity as when it ran alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import httpx2
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ServiceAccount

__all__ = ["MAX_TOKEN_AGE", "TOKEN_EXPIRATION_SECONDS", "Lifetime", "ServiceAccountToken", "request_token"]

log = logging.getLogger(__name__)

TOKEN_EXPIRATION_SECONDS = 3607
"""What the kubelet asks for (an hour and 7 s: the apiserver may extend such tokens)."""
MAX_TOKEN_AGE = 24 * 3600.0
RETRY_SECONDS = (1.0, 30.0)
"""First and largest pause between failed refreshes (doubling)."""


@dataclass(frozen=True)
class Lifetime:
    """When a token was issued and when it expires (epoch seconds)."""

    issued: float
    expires: float

    @property
    def refresh_at(self) -> float:
        """The kubelet's token manager rule: older than 80 % of its lifetime, or than 24 h."""
        return min(self.expires - 0.2 * (self.expires - self.issued), self.issued + MAX_TOKEN_AGE)


async def request_token(issuer: AsyncClient, namespace: str, name: str, *,
                        bound: dict[str, Any] | None = None) -> tuple[str, Lifetime]:
    """A token of ServiceAccount `namespace/name` (TokenRequest), optionally bound to an object."""
    spec: dict[str, Any] = {"audiences": [], "expirationSeconds": TOKEN_EXPIRATION_SECONDS}
    if bound is not None:
        spec["boundObjectRef"] = bound
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    issued = time.time()
    answer = await issuer.create(cast(Any, ServiceAccount.Token).from_dict(body), name=name, namespace=namespace)
    status = answer.to_dict().get("status") or {}
    expires = issued + TOKEN_EXPIRATION_SECONDS
    stamp = status.get("expirationTimestamp")
    if stamp:
        expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    return str(status.get("token") or ""), Lifetime(issued, expires)


class ServiceAccountToken(httpx2.Auth):
    """Bearer auth as one ServiceAccount: `fetch` once, then `keep_fresh` renews the token before
    80 % of its lifetime has passed, or at once after the apiserver refused it (a 401: the account
    was recreated, or the token expired while renewals failed). The token lives in memory only.
    `bearer_header` is what kube/transport.py's fast path calls, as for kube/client.py's TokenFileAuth."""

    def __init__(self, issuer: AsyncClient, namespace: str, name: str) -> None:
        self.issuer = issuer
        self.namespace = namespace
        self.name = name
        self.lifetime: Lifetime | None = None
        self._header = ""
        self._refused = asyncio.Event()

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    async def fetch(self) -> None:
        """Ask for a new token (raises the apiserver's error: 403 when the manager may not, 404
        when the ServiceAccount does not exist)."""
        token, self.lifetime = await request_token(self.issuer, self.namespace, self.name)
        self._header = f"Bearer {token}"

    async def keep_fresh(self) -> None:
        """Renew the token whenever due, forever; failures are retried (doubling, up to 30 s) while
        the current token still works."""
        pause = RETRY_SECONDS[0]
        while True:
            due = self.lifetime.refresh_at if self.lifetime is not None else 0.0
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, due - time.time())):
                    await self._refused.wait()
            self._refused.clear()
            try:
                await self.fetch()
                pause = RETRY_SECONDS[0]
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("cannot renew the token of %s: %s; retrying in %.0f s", self.username, err, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_SECONDS[1])

    def bearer_header(self, force: bool = False) -> str:
        """The Authorization header; `force` says the apiserver refused the last one (renewed soon)."""
        if force:
            self._refused.set()
        if not self._header:
            raise RuntimeError(f"no token for {self.username} yet (fetch first)")
        return self._header

    def auth_flow(self, request: httpx2.Request) -> Any:
        request.headers["Authorization"] = self.bearer_header()
        response = yield request
        if response.status_code == 401:
            self._refused.set()
