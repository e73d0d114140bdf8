"""The built-in PriorityClasses, created at every start as kube's `scheduling/bootstrap-system-priority-classes`
post-start hook does (pkg/registry/scheduling/rest/storage_scheduling.go): a missing one is created,
an existing one is left as it is (validation keeps its value and the admission plugin its existence).
"""

from __future__ import annotations

import logging

from isthmus.apiserver.admission.priority import GROUP, PLURAL, SYSTEM_PRIORITY_CLASSES
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.registry.resources import ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store

log = logging.getLogger("isthmus.apiserver")

MANAGER = "isthmus-apiserver"


async def ensure_system_priority_classes(storage: Store, resources: ResourceRegistry, store: GenericStore) -> None:
    info = resources.get(GROUP, "v1", PLURAL)
    for wanted in SYSTEM_PRIORITY_CLASSES:
        name = wanted["metadata"]["name"]
        if storage.get(info.key, "", name) is not None:
            continue
        try:
            await store.create(info, "", clone(wanted), manager=MANAGER)
        except ApiError as e:  # logged; the next start tries again
            log.warning("cannot create the system PriorityClass %s: %s", name, e.message)
