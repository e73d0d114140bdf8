"""The garbage collector: dependents of vanished owners, and orphan / foreground deletion.

As kube's garbage collector: a dependent whose owners are all gone is deleted (background);
one that keeps some owners loses the references to the others. An owner deleted with
propagationPolicy Orphan carries the `orphan` finalizer until its dependents' ownerReferences
to it are removed; with Foreground it carries `foregroundDeletion` until its dependents are
gone (they are deleted in the foreground too).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.controllers.base import QueueController
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

Obj = dict[str, Any]
Ref = tuple[str, str, str]  # (storage key, namespace, name)
MANAGER = "garbage-collector"


class GarbageCollector(QueueController):
    name = "gc"

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
        super().__init__()
        self.storage = storage
        self.resources = resources
        self.store = store
        # uid → where the object is; owner uid → its dependents.
        self._uids: dict[str, Ref] = {}
        self._dependents: defaultdict[str, set[Ref]] = defaultdict(set)

    # ------------------------------------------------------------------ the owner graph

    def index_all(self) -> None:
        """Index every stored object of the served resources (after all CRDs are served again:
        otherwise custom objects are missing and their dependents look orphaned)."""
        for key in self.resources.keys():
            for obj in self.storage.list(key):
                self._index(key, None, obj)

    def _index(self, key: str, prev: Obj | None, obj: Obj | None) -> None:
        ref = None
        if prev is not None:
            m = prev["metadata"]
            ref = (key, m.get("namespace", ""), m["name"])
            for o in m.get("ownerReferences") or []:
                self._dependents[o.get("uid", "")].discard(ref)
        if obj is not None:
            m = obj["metadata"]
            ref = (key, m.get("namespace", ""), m["name"])
            self._uids[m["uid"]] = ref
            for o in m.get("ownerReferences") or []:
                self._dependents[o.get("uid", "")].add(ref)

    def on_write(self, ev: WatchEvent) -> None:
        m = ev.obj["metadata"]
        ref = (ev.key, m.get("namespace", ""), m["name"])
        if ev.type == "DELETED":
            self._index(ev.key, ev.obj, None)
            self._uids.pop(m.get("uid", ""), None)
            self.put(("owner-gone", m.get("uid", "")))
            # An owner in foreground deletion waits for this dependent to go.
            for o in m.get("ownerReferences") or []:
                owner = self._uids.get(o.get("uid", ""))
                if owner:
                    self.put(("deleting", owner))
        else:
            self._index(ev.key, ev.prev, ev.obj)
            if m.get("deletionTimestamp"):
                self.put(("deleting", ref))
            owners = m.get("ownerReferences")
            if owners:  # most objects have none: nothing new to check
                new_owners = {o.get("uid") for o in owners}
                old_owners = {o.get("uid") for o in (ev.prev or {}).get("metadata", {}).get("ownerReferences") or []}
                if new_owners - old_owners:
                    self.put(("dependent", ref))

    def resync(self) -> None:
        """After a restart: resume deletions a previous run left midway, collect orphans."""
        for key in list(self.resources.keys()):
            for obj in self.storage.list(key):
                m = obj["metadata"]
                if m.get("deletionTimestamp"):
                    self.put(("deleting", (key, m.get("namespace", ""), m["name"])))
                for ref in m.get("ownerReferences") or []:
                    if ref.get("uid") not in self._uids:
                        self.put(("dependent", (key, m.get("namespace", ""), m["name"])))

    # ------------------------------------------------------------------ work

    async def handle(self, kind: str, arg: Any) -> None:
        if kind == "owner-gone":
            for dep in list(self._dependents.get(arg, ())):
                await self._collect(dep)
            if not self._dependents.get(arg):
                self._dependents.pop(arg, None)
        elif kind == "dependent":
            await self._collect(arg)
        elif kind == "deleting":
            await self._process_deleting(arg)

    def _owner_exists(self, dependent_ns: str, ref: Obj) -> bool:
        loc = self._uids.get(ref.get("uid", ""))
        if loc is None:
            return False
        key, ns, name = loc
        info = self.resources.storage_info(key)
        kind_ok = info is None or info.kind == ref.get("kind")
        return kind_ok and name == ref.get("name") and (ns == "" or ns == dependent_ns)

    async def _collect(self, loc: Ref) -> None:
        """A dependent whose owners all vanished is deleted; one that keeps some loses the others."""
        key, ns, name = loc
        obj = self.storage.get(key, ns, name)
        info = self.resources.storage_info(key)
        if obj is None or info is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs:
            return
        alive = [r for r in refs if self._owner_exists(ns, r)]
        if len(alive) == len(refs):
            return
        if not alive:
            # Foreground owners wait for dependents that block them; background: just delete.
            await self.store.delete(info, ns, name, {"propagationPolicy": "Background"})
            return
        keep_uids = {r.get("uid") for r in alive}

        def drop_refs(live: Obj) -> Obj:
            live["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") in keep_uids]
            return live

        await self.store.update(info, ns, name, drop_refs, manager=MANAGER)

    async def _process_deleting(self, loc: Ref) -> None:
        key, ns, name = loc
        obj = self.storage.get(key, ns, name)
        info = self.resources.storage_info(key)
        if obj is None or info is None or not obj["metadata"].get("deletionTimestamp"):
            return
        m = obj["metadata"]
        fins = list(m.get("finalizers") or [])
        uid = m["uid"]
        deps = list(self._dependents.get(uid, ()))
        if "orphan" in fins:
            for dkey, dns, dname in deps:
                dinfo = self.resources.storage_info(dkey)
                if dinfo is None:
                    continue

                def orphan(live: Obj) -> Obj:
                    live["metadata"]["ownerReferences"] = [
                        r for r in live["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                    return live

                with contextlib.suppress(ApiError):
                    await self.store.update(dinfo, dns, dname, orphan, manager=MANAGER)
            await self.store.remove_finalizer(info, ns, name, "orphan", manager=MANAGER)
            return
        if "foregroundDeletion" in fins:
            remaining = 0
            for dkey, dns, dname in deps:
                dinfo = self.resources.storage_info(dkey)
                dep = self.storage.get(dkey, dns, dname)
                if dinfo is None or dep is None:
                    continue
                remaining += 1
                if not dep["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        await self.store.delete(dinfo, dns, dname, {"propagationPolicy": "Foreground"})
            if remaining == 0:
                await self.store.remove_finalizer(info, ns, name, "foregroundDeletion", manager=MANAGER)
