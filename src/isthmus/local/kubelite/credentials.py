"""A Pod's ServiceAccount credentials, as the kubelet's projected ``kube-api-access-*`` volume holds them.

The kubelet asks the apiserver for a token bound to the Pod (TokenRequest, ``expirationSeconds``
3607, audience the apiserver's own) and writes ``token``, ``ca.crt`` (ConfigMap
``kube-root-ca.crt`` of the Pod's namespace) and ``namespace``; it fetches a new token once the
current one is older than 80% of its lifetime or 24 h (token manager's requiresRefresh). kube-lite
does the same into ``<pod dir>/serviceaccount/`` — each file replaced atomically, so a reader sees
the old token or the new one, never half of one — and tells the process where through
``ISTHMUS_SERVICEACCOUNT_DIR`` (there is no mount namespace to put them at the usual path).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import ConfigMap, ServiceAccount

from isthmus.kube.helpers import is_not_found
from isthmus.kube.tokens import TOKEN_EXPIRATION_SECONDS, Lifetime, request_token

__all__ = ["TOKEN_EXPIRATION_SECONDS", "Credentials", "automount", "write_atomic"]

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"


def automount(pod: Mapping[str, Any], service_account: Mapping[str, Any] | None) -> bool:
    """The Pod's automountServiceAccountToken if set, else the ServiceAccount's, else true."""
    spec = pod.get("spec") or {}
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if service_account is not None and service_account.get("automountServiceAccountToken") is not None:
        return bool(service_account["automountServiceAccountToken"])
    return True


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` in one rename (readers see the whole old or new content)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Credentials:
    """The ServiceAccount files of one Pod; :meth:`ensure` writes or refreshes them."""

    def __init__(self, client: AsyncClient, directory: Path, *, fallback_ca: bytes | None) -> None:
        self.client = client
        self.directory = directory
        self.fallback_ca = fallback_ca
        self._token: Lifetime | None = None

    def needs_refresh(self, now: float | None = None) -> bool:
        t = self._token
        return t is None or (time.time() if now is None else now) > t.refresh_at

    @property
    def next_refresh(self) -> float:
        """Seconds until :meth:`needs_refresh` turns true."""
        return 0.0 if self._token is None else max(0.0, self._token.refresh_at - time.time())

    async def service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return (await self.client.get(ServiceAccount, name, namespace=namespace)).to_dict()
        except ApiError as e:
            if is_not_found(e):
                return None
            raise

    async def ensure(self, pod: Mapping[str, Any]) -> None:
        """Write the files if missing, refresh the token when due. Raises ApiError (e.g. 404 for a
        ServiceAccount that does not exist, 403) — the caller reports kube's FailedMount."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ns = str(meta.get("namespace") or "default")
        sa = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.needs_refresh() or not (self.directory / "token").exists():
            bound = {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid")}
            token, self._token = await request_token(self.client, ns, sa, bound=bound)
            write_atomic(self.directory / "token", token.encode())
        ca = await self._root_ca(ns)
        for name, data in (("ca.crt", ca), ("namespace", ns.encode())):
            path = self.directory / name
            if data is not None and (not path.exists() or path.read_bytes() != data):
                # 0600 like the token: the process runs as kube-lite's user, and kube-lite's root dir
                # (in `isthmus up`, inside the private state dir) holds nothing others may read.
                write_atomic(path, data)

    async def _root_ca(self, namespace: str) -> bytes | None:
        try:
            cm = (await self.client.get(ConfigMap, ROOT_CA_CONFIGMAP, namespace=namespace)).to_dict()
        except ApiError as e:
            if not is_not_found(e):
                raise
            return self.fallback_ca
        ca = (cm.get("data") or {}).get("ca.crt")
        return str(ca).encode() if ca else self.fallback_ca
