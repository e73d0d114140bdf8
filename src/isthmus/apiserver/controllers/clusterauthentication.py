"""kube-apiserver's `start-cluster-authentication-info-controller` post-start hook: ConfigMap
kube-system/extension-apiserver-authentication (pkg/controlplane/controller/clusterauthenticationtrust).

Extension apiservers and webhooks that delegate authentication (metrics-server, an aggregated API's
server) read it to learn which CA signs the clients the cluster trusts: `client-ca-file` is the
server's client CA (kube's --client-ca-file), written only when the server serves TLS (it has no
client CA otherwise). kube adds `requestheader-*` keys when it is given a front-proxy
(--requestheader-client-ca-file); this server authenticates no requests by header, so it writes
none: publishing them would tell delegating servers to trust headers nobody vouches for.
Reading it is what the bootstrap Role `extension-apiserver-authentication-reader` grants.

Kept as kube keeps it: created at start, its `client-ca-file` rewritten when it no longer holds
the CA (a CA still there, next to others an admin added, is left as it is).
"""

from __future__ import annotations

import logging
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

NAMESPACE = "kube-system"
NAME = "extension-apiserver-authentication"
CLIENT_CA_KEY = "client-ca-file"
MANAGER, USER = "kube-apiserver", "system:apiserver"  # kube's loopback client


def _holds(bundle: Any, ca_pem: str) -> bool:
    return isinstance(bundle, str) and ca_pem.strip() in bundle


async def ensure_authentication_configmap(storage: Store, resources: ResourceRegistry, store: GenericStore,
                                          client_ca_pem: str) -> None:
    info = resources.get("", "v1", "configmaps")
    try:
        live = storage.get(info.key, NAMESPACE, NAME)
        if live is None:
            await store.create(info, NAMESPACE, {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": NAME, "namespace": NAMESPACE},
                                                 "data": {CLIENT_CA_KEY: client_ca_pem}}, manager=MANAGER, user=USER)
        elif not _holds((live.get("data") or {}).get(CLIENT_CA_KEY), client_ca_pem):

            def build(cur: Obj) -> Obj:
                cur["data"] = {**(cur.get("data") or {}), CLIENT_CA_KEY: client_ca_pem}
                return cur

            await store.update(info, NAMESPACE, NAME, build, manager=MANAGER, user=USER)
    except ApiError as e:  # logged; the next start tries again
        log.warning("cannot write %s/%s: %s", NAMESPACE, NAME, e.message)
