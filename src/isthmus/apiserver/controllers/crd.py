"""The CRD controller: serves each stored CustomResourceDefinition, establishes it, cleans up after it.

As apiextensions-apiserver: a CRD is served as soon as it is stored (every served version
becomes a ResourceInfo), gets its NamesAccepted and Established conditions, and, when deleted,
keeps serving until the `customresourcecleanup.apiextensions.k8s.io` finalizer is removed,
which happens once all its objects are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from isthmus.apiserver.apimachinery import meta
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.controllers.base import QueueController
from isthmus.apiserver.registry.customresource import crd_resources
from isthmus.apiserver.registry.customresourcedefinition import CLEANUP_FINALIZER as CRD_CLEANUP_FINALIZER
from isthmus.apiserver.registry.customresourcedefinition import KEY as CRD_KEY
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]


def _has_condition(obj: Obj, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class CRDController(QueueController):
    name = "crd"
    write_keys = (CRD_KEY,)

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
        super().__init__()
        self.storage = storage
        self.resources = resources
        self.store = store

    def serve_stored(self) -> None:
        for crd in self.storage.list(CRD_KEY):
            self._serve(crd)

    def _serve(self, crd: Obj) -> None:
        # Terminating CRDs keep serving so their instances can finish deleting.
        name = crd["metadata"]["name"]
        self.resources.unserve_crd(name)
        try:
            infos = crd_resources(crd)
        except Exception:  # a CRD we stored must never take the server down
            log.exception("cannot serve CRD %s", name)
            return
        self.resources.serve_crd(name, infos)

    def on_write(self, ev: WatchEvent) -> None:
        if ev.key != CRD_KEY:
            return
        m = ev.obj["metadata"]
        if ev.type == "DELETED":
            self.resources.unserve_crd(m["name"])
            return
        if m.get("deletionTimestamp"):
            self.put(("cleanup", m["name"]))
        self._serve(ev.obj)
        if not _has_condition(ev.obj, "Established") and not m.get("deletionTimestamp"):
            self.put(("establish", m["name"]))

    def resync(self) -> None:
        """After a restart: resume cleanups a previous run left midway."""
        for crd in self.storage.list(CRD_KEY):
            if crd["metadata"].get("deletionTimestamp"):
                self.put(("cleanup", crd["metadata"]["name"]))

    async def handle(self, kind: str, arg: Any) -> None:
        if kind == "establish":
            await self._establish(arg)
        elif kind == "cleanup":
            await self._cleanup(arg)

    async def _establish(self, name: str) -> None:
        info = self.resources.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        now = meta.now_rfc3339()

        def establish(live: Obj) -> Obj:
            spec = live.get("spec", {})
            names = dict(spec.get("names", {}))
            names.setdefault("singular", str(names.get("kind", "")).lower())
            names.setdefault("listKind", f"{names.get('kind', '')}List")
            # storedVersions are the registry's (set at create, appended on updates): kept as they are.
            stored = (live.get("status") or {}).get("storedVersions") or [
                v["name"] for v in spec.get("versions", []) if v.get("storage")]
            live["status"] = {
                "acceptedNames": names,
                "storedVersions": stored,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
            }
            return live

        await self.store.update(info, "", name, establish, subresource="status", manager="apiextensions-controller")

    async def _cleanup(self, name: str) -> None:
        crd = self.storage.get(CRD_KEY, "", name)
        info = self.resources.storage_info(CRD_KEY)
        if crd is None or info is None or not crd["metadata"].get("deletionTimestamp"):
            return
        fins = crd["metadata"].get("finalizers") or []
        # The garbage collector goes first: removing its finalizer writes the CRD, which brings us back.
        if CRD_CLEANUP_FINALIZER not in fins or "orphan" in fins or "foregroundDeletion" in fins:
            return
        for cinfo in self.resources.crd_infos(name):
            if not cinfo.storage_version:
                continue
            for o in self.storage.list(cinfo.key):
                om = o["metadata"]
                with contextlib.suppress(ApiError):
                    await self.store.delete(cinfo, om.get("namespace", ""), om["name"])
            if self.storage.count(cinfo.key) == 0:
                await self.store.remove_finalizer(info, "", name, CRD_CLEANUP_FINALIZER, manager="garbage-collector")
            else:
                await asyncio.sleep(0.05)
                self.put(("cleanup", name))
