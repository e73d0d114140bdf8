"""kube-controller-manager's ServiceAccount controllers, which every real cluster runs:

- ServiceAccountsController (pkg/controller/serviceaccount): a `default` ServiceAccount in every
  active namespace, created again if deleted.
- RootCACertPublisher (pkg/controller/certificates/rootcacertpublisher): ConfigMap
  `kube-root-ca.crt` with `ca.crt` = the CA that signs the serving certificate, in every active
  namespace, reset when changed or deleted. Only when serving TLS (there is no CA otherwise).
- TokensController (the legacy tokens controller): Secrets of type
  kubernetes.io/service-account-token annotated `kubernetes.io/service-account.name` get a
  non-expiring token, `ca.crt` and `namespace`, and the ServiceAccount's uid annotation; such a
  Secret whose ServiceAccount is gone (or has another uid) is deleted, as kube does.

Each is fed by the store's writes (on_write) and reconciles everything once at start.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authentication.serviceaccounts import ServiceAccountTokens
from isthmus.apiserver.controllers.base import QueueController
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

NS_KEY, SA_KEY, CM_KEY, SECRET_KEY = "/namespaces", "/serviceaccounts", "/configmaps", "/secrets"
DEFAULT_SA = "default"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_KEY = "ca.crt"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as "
    "the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of "
    "Kubernetes clusters.")
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"


def _active(storage: Store, ns: str) -> bool:
    nso = storage.get(NS_KEY, "", ns)
    return nso is not None and not nso["metadata"].get("deletionTimestamp")


class ServiceAccountsController(QueueController):
    name = "serviceaccount-controller"
    write_keys = (NS_KEY, SA_KEY)
    user = "system:serviceaccount:kube-system:service-account-controller"

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
        super().__init__()
        self.storage, self.resources, self.store = storage, resources, store

    def on_write(self, ev: WatchEvent) -> None:
        if ev.key == NS_KEY and ev.type != "DELETED":
            self.put(("namespace", ev.obj["metadata"]["name"]))
        elif ev.key == SA_KEY and ev.type == "DELETED" and ev.obj["metadata"]["name"] == DEFAULT_SA:
            self.put(("namespace", ev.obj["metadata"]["namespace"]))

    def resync(self) -> None:
        for nso in self.storage.list(NS_KEY):
            self.put(("namespace", nso["metadata"]["name"]))

    async def handle(self, kind: str, arg: Any) -> None:
        ns = str(arg)
        if not _active(self.storage, ns) or self.storage.get(SA_KEY, ns, DEFAULT_SA) is not None:
            return
        info = self.resources.get("", "v1", "serviceaccounts")
        await self.store.create(info, ns, {"apiVersion": "v1", "kind": "ServiceAccount",
                                           "metadata": {"name": DEFAULT_SA}}, manager="kube-controller-manager",
                                user=self.user)


class RootCACertPublisher(QueueController):
    name = "root-ca-cert-publisher"
    write_keys = (NS_KEY, CM_KEY)
    user = "system:serviceaccount:kube-system:root-ca-cert-publisher"

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore, ca_pem: bytes) -> None:
        super().__init__()
        self.storage, self.resources, self.store = storage, resources, store
        self.ca = ca_pem.decode()

    def on_write(self, ev: WatchEvent) -> None:
        if ev.key == NS_KEY and ev.type != "DELETED":
            self.put(("namespace", ev.obj["metadata"]["name"]))
        elif ev.key == CM_KEY and ev.obj["metadata"]["name"] == ROOT_CA_CONFIGMAP:
            self.put(("namespace", ev.obj["metadata"]["namespace"]))

    def resync(self) -> None:
        for nso in self.storage.list(NS_KEY):
            self.put(("namespace", nso["metadata"]["name"]))

    async def handle(self, kind: str, arg: Any) -> None:
        ns = str(arg)
        if not _active(self.storage, ns):
            return
        info = self.resources.get("", "v1", "configmaps")
        live = self.storage.get(CM_KEY, ns, ROOT_CA_CONFIGMAP)
        if live is None:
            await self.store.create(info, ns, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA_CONFIGMAP, "annotations": {DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION}},
                "data": {ROOT_CA_KEY: self.ca}}, manager="kube-controller-manager", user=self.user)
            return
        annotations = live["metadata"].get("annotations") or {}
        if live.get("data") == {ROOT_CA_KEY: self.ca} and annotations.get(DESCRIPTION_ANNOTATION) == ROOT_CA_DESCRIPTION:
            return

        def reset(current: Obj) -> Obj:
            out: Obj = clone(current)
            out["data"] = {ROOT_CA_KEY: self.ca}
            out.pop("binaryData", None)
            out["metadata"].setdefault("annotations", {})[DESCRIPTION_ANNOTATION] = ROOT_CA_DESCRIPTION
            return out

        await self.store.update(info, ns, ROOT_CA_CONFIGMAP, reset, manager="kube-controller-manager", user=self.user)


class TokensController(QueueController):
    name = "tokens-controller"
    write_keys = (SECRET_KEY, SA_KEY)
    user = "system:kube-controller-manager"

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore,
                 tokens: ServiceAccountTokens, ca_pem: bytes | None) -> None:
        super().__init__()
        self.storage, self.resources, self.store = storage, resources, store
        self.tokens = tokens
        self.ca = ca_pem

    def on_write(self, ev: WatchEvent) -> None:
        m = ev.obj["metadata"]
        if ev.key == SECRET_KEY and ev.type != "DELETED" and ev.obj.get("type") == SA_TOKEN_TYPE:
            self.put(("secret", (m["namespace"], m["name"])))
        elif ev.key == SA_KEY:
            self.put(("serviceaccount", (m["namespace"], m["name"], m.get("uid", ""))))

    def resync(self) -> None:
        for secret in self.storage.list(SECRET_KEY):
            if secret.get("type") == SA_TOKEN_TYPE:
                self.put(("secret", (secret["metadata"]["namespace"], secret["metadata"]["name"])))

    async def handle(self, kind: str, arg: Any) -> None:
        if kind == "serviceaccount":
            ns, name, uid = arg
            sa = self.storage.get(SA_KEY, ns, name)
            if sa is not None and sa["metadata"].get("uid") == uid:
                return
            for secret in self.storage.list(SECRET_KEY, ns):  # its token Secrets go with it
                if secret.get("type") == SA_TOKEN_TYPE and self._references(secret, name, uid):
                    await self._delete(secret)
            return
        await self._sync_secret(*arg)

    async def _sync_secret(self, ns: str, name: str) -> None:
        secret = self.storage.get(SECRET_KEY, ns, name)
        if secret is None or secret.get("type") != SA_TOKEN_TYPE or secret["metadata"].get("deletionTimestamp"):
            return
        annotations = secret["metadata"].get("annotations") or {}
        sa_name = annotations.get(SA_NAME_ANNOTATION, "")
        sa = self.storage.get(SA_KEY, ns, sa_name)
        if sa is None or (annotations.get(SA_UID_ANNOTATION) and
                          annotations[SA_UID_ANNOTATION] != sa["metadata"].get("uid")):
            await self._delete(secret)  # kube deletes token Secrets whose ServiceAccount is gone
            return
        data = secret.get("data") or {}
        want = {"namespace": base64.b64encode(ns.encode()).decode()}
        if self.ca:
            want["ca.crt"] = base64.b64encode(self.ca).decode()
        if all(data.get(k) == v for k, v in want.items()) and data.get("token") and \
                annotations.get(SA_UID_ANNOTATION) == sa["metadata"].get("uid"):
            return
        token = data.get("token") or base64.b64encode(self.tokens.issue_legacy(sa, name).encode()).decode()
        info = self.resources.get("", "v1", "secrets")

        def fill(current: Obj) -> Obj:
            out: Obj = clone(current)
            out["data"] = {**(out.get("data") or {}), **want, "token": token}
            out["metadata"].setdefault("annotations", {})[SA_UID_ANNOTATION] = sa["metadata"].get("uid", "")
            return out

        await self.store.update(info, ns, name, fill, manager="kube-controller-manager", user=self.user)

    @staticmethod
    def _references(secret: Obj, name: str, uid: str) -> bool:
        annotations = secret["metadata"].get("annotations") or {}
        return bool(annotations.get(SA_NAME_ANNOTATION) == name and
                    annotations.get(SA_UID_ANNOTATION, uid) in (uid, ""))

    async def _delete(self, secret: Obj) -> None:
        info = self.resources.get("", "v1", "secrets")
        m = secret["metadata"]
        await self.store.delete(info, m["namespace"], m["name"], {"preconditions": {"uid": m.get("uid")}},
                                user=self.user)
