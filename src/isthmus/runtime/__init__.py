"""Controller runtime: informers, work queues, controllers, events, leader election, metrics, and the
Manager every leader-elected component is built on.

How a controller is written with them: docs/architecture.md and docs/runtime.md.
"""

from isthmus.runtime.controller import Controller, KeyMapper, Reconciler, Result, enqueue_owner, enqueue_self
from isthmus.runtime.events import NORMAL, WARNING, EventRecorder, object_reference
from isthmus.runtime.informer import (
    NAMESPACE_INDEX,
    Cache,
    Handlers,
    IndexFunc,
    Informer,
    SharedInformerFactory,
    WatchError,
    label_index,
    resource_name,
)
from isthmus.runtime.leader import LeaderElector, LeadershipLost
from isthmus.runtime.logging import setup_logging
from isthmus.runtime.manager import LeaderElection, Manager, Term
from isthmus.runtime.metrics import REGISTRY, HealthServer, parse_addr
from isthmus.runtime.objects import (
    OwnerRef,
    make_key,
    object_key,
    object_labels,
    object_name,
    object_namespace,
    object_resource_version,
    object_uid,
    owner_refs,
    split_key,
)
from isthmus.runtime.workqueue import BucketRateLimiter, ExponentialBackoff, QueueShutDown, WorkQueue

__all__ = [
    "NAMESPACE_INDEX",
    "NORMAL",
    "REGISTRY",
    "WARNING",
    "BucketRateLimiter",
    "Cache",
    "Controller",
    "EventRecorder",
    "ExponentialBackoff",
    "Handlers",
    "HealthServer",
    "IndexFunc",
    "Informer",
    "KeyMapper",
    "LeaderElection",
    "LeaderElector",
    "LeadershipLost",
    "Manager",
    "OwnerRef",
    "QueueShutDown",
    "Reconciler",
    "Result",
    "SharedInformerFactory",
    "Term",
    "WatchError",
    "WorkQueue",
    "enqueue_owner",
    "enqueue_self",
    "label_index",
    "make_key",
    "object_key",
    "object_labels",
    "object_name",
    "object_namespace",
    "object_reference",
    "object_resource_version",
    "object_uid",
    "owner_refs",
    "parse_addr",
    "resource_name",
    "setup_logging",
    "split_key",
]
