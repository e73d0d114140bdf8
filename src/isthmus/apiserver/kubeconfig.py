"""Write kubeconfig files for the embedded server (and merge contexts for the local clusterset)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from isthmus.apiserver.storage.datadir import write_private


def kubeconfig_dict(name: str, server: str, *, ca_pem: bytes | None = None, token: str | None = None,
                    client_cert: tuple[bytes, bytes] | None = None, namespace: str = "default") -> dict[str, Any]:
    """One cluster, user and context named `name`; the user authenticates with `token`, or with
    `client_cert` (certificate PEM, key PEM) embedded as kubectl's client-certificate-data/client-key-data."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    user: dict[str, Any] = {"token": token} if token else {}
    if client_cert is not None:
        user["client-certificate-data"] = base64.b64encode(client_cert[0]).decode()
        user["client-key-data"] = base64.b64encode(client_cert[1]).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: str | Path, config: dict[str, Any]) -> None:
    """Atomic write, mode 0600 from the first byte (it may carry a token or a private key)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_private(p, yaml.safe_dump(config, sort_keys=False))
