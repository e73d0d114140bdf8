"""The namespace controller: empties terminating namespaces, then lets them go.

Deleting a namespace marks it Terminating (its `kubernetes` spec finalizer holds it); this
controller deletes what it contains (respecting those objects' own finalizers), finalizes it
once empty and removes it. It also creates the namespaces every cluster has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.registry.namespace import FINALIZER
from isthmus.apiserver.registry.namespace import KEY as NS_KEY
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
INTERVAL = 0.2


async def create_system_namespaces(storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
    info = resources.get("", "v1", "namespaces")
    for ns in SYSTEM_NAMESPACES:
        if storage.get(NS_KEY, "", ns) is None:
            await store.create(info, "", {"metadata": {"name": ns}}, manager="isthmus-apiserver")


class NamespaceController:
    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
        self.storage = storage
        self.resources = resources
        self.store = store

    async def run(self) -> None:
        ns_info = self.resources.get("", "v1", "namespaces")
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                for nso in self.storage.list(NS_KEY):
                    if nso["metadata"].get("deletionTimestamp"):
                        await self._terminate(ns_info, nso)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("namespace controller")

    async def _terminate(self, ns_info: ResourceInfo, nso: Obj) -> None:
        ns = nso["metadata"]["name"]
        left = 0
        for key in self.resources.keys():
            info = self.resources.storage_info(key)
            if info is None or not info.namespaced:
                continue
            for o in self.storage.list(key, ns):
                left += 1
                if not o["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        await self.store.delete(info, ns, o["metadata"]["name"])
        if left == 0 and FINALIZER in (nso.get("spec") or {}).get("finalizers", []):

            def finalize(live: Obj) -> Obj:
                live.setdefault("spec", {})["finalizers"] = [
                    f for f in live["spec"].get("finalizers", []) if f != FINALIZER]
                return live

            with contextlib.suppress(ApiError):
                await self.store.update(ns_info, "", ns, finalize, subresource="status",
                                        manager="namespace-controller")
        current = self.storage.get(NS_KEY, "", ns)
        if current is not None and not ns_info.strategy.holds_deletion(current) and not \
                current["metadata"].get("finalizers"):
            self.storage.delete(NS_KEY, "", ns)
