"""A real embedded apiserver for tests: on a random 127.0.0.1 port, persisted under a temp dir,
restartable (the `apiserver` fixture in tests/conftest.py is one of these)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig

from isthmus.apiserver.server import ApiServer


class RunningApiServer:
    """A started ApiServer persisted under a temp dir; `restart()` keeps port, data and token."""

    def __init__(self, data_dir: Path, **kwargs: Any) -> None:
        self.data_dir = data_dir
        self.kwargs = kwargs
        self.server = ApiServer(data_dir=data_dir, **kwargs)
        self.kubeconfig = str(data_dir / "kubeconfig")
        self._clients: list[AsyncClient] = []

    async def start(self) -> None:
        await self.server.start()
        self.server.write_kubeconfig(self.kubeconfig)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def store(self) -> Any:
        return self.server.store

    def client(self, **kwargs: Any) -> AsyncClient:
        c = AsyncClient(config=KubeConfig.from_file(self.kubeconfig), **kwargs)
        self._clients.append(c)
        return c

    async def stop(self) -> None:
        await self.server.stop()

    async def restart(self) -> None:
        port = self.server.port
        await self.server.stop()
        self.server = ApiServer(data_dir=self.data_dir, **{**self.kwargs, "port": port})
        await self.start()

    async def close(self) -> None:
        for c in self._clients:
            try:
                await c.close()
            except Exception:
                pass
        await self.server.stop()


@contextlib.asynccontextmanager
async def installed_as(tmp_path: Path, manifests: Path, namespace: str, account: str
                       ) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    """(admin, `account`'s own client) on an RBAC-enforcing apiserver with the CRDs and the kustomization
    `manifests` installed. No webhook server runs here, so the webhook configurations (failurePolicy
    Fail) are left out: they would refuse the objects they guard."""
    from isthmus.kube.client import client_for, load_config
    from isthmus.kube.helpers import install_crds
    from isthmus.kube.manifests import apply, render
    from isthmus.kube.tokens import ServiceAccountToken

    run = RunningApiServer(tmp_path / "apiserver", token="admin-token", tls=True)
    await run.start()
    config = load_config(run.kubeconfig)
    admin = client_for(config)
    try:
        await asyncio.wait_for(install_crds(admin), 60)
        objs = [o for o in render(manifests) if not o["kind"].endswith("WebhookConfiguration")]
        await asyncio.wait_for(apply(admin, objs, field_manager="test"), 60)
        token = ServiceAccountToken(admin, namespace, account)
        await token.fetch()
        own = client_for(config, auth=token)
        try:
            yield admin, own
        finally:
            await own.close()
    finally:
        await admin.close()
        await run.close()
