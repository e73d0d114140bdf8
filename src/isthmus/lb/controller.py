"""The translator: keeps each Service of type LoadBalancer and class isthmus.io/edgelb (class-less
ones too when the admin opts in) and each Ingress of class edgelb in its
LoadBalancerPool, and their `status.loadBalancer` in step with the pool's status. Leader-elected.

Keys are `Service/<ns>/<name>` and `Ingress/<ns>/<name>`. A reconcile reads the object, its config,
the nodes and the pool from caches, computes the owner's fragment and its merge into the pool
(`translate.py`, pure), writes the pool if it changed (resourceVersion-checked), then the object's
status. An object that is gone, paused-no, no longer eligible, has its parts removed from every pool
(owners are read from part names: no finalizer, nothing to forget while the translator is down).
Creation strategies, out-of-band pool deletion and unprovisioned pools follow the seed's Scenarios.

Built on `runtime.Manager`: the Lease, the informers of each leadership term, readiness and the
Lease handed back on stop are the Manager's; this module only wires the controller (`_wire`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Service
from lightkube.resources.networking_v1 import Ingress, IngressClass
from lightkube.types import PatchType
from prometheus_client import Counter, Gauge

from isthmus.api.base import Condition, merge_conditions, new_condition
from isthmus.api.lb import (
    DKLB_CONFIG_ANNOTATION,
    EDGELB_CONTROLLER,
    EDGELB_INGRESS_CLASS,
    INGRESS_CLASS_ANNOTATION,
    LB_NAMESPACE,
    MANAGED_BY_LABEL,
    PAUSED_ANNOTATION,
    POOL_ALLOWED_NAMESPACES_ANNOTATION,
    POOL_CLUSTER_LABEL,
    POOL_CREATED_ANNOTATION,
    POOL_CREATOR_ANNOTATION,
    POOL_SHARED_WITH_ANNOTATION,
    POOLS_NAMESPACE,
    READY,
    TRANSLATOR_LEASE_NAME,
    TRANSLATOR_MANAGER,
    ConfigError,
    CreationStrategy,
    LoadBalancerPool,
    Owner,
    Reason,
    api_name,
    automatic_pool_prefixes,
    backend_owner,
    cluster_name_part,
    frontend_owner,
    is_pool_name,
    namespaces_in,
    parse_ingress_config,
    parse_service_config,
    pool_name,
)
from isthmus.kube.helpers import describe_error
from isthmus.kube.resources import resource_for
from isthmus.lb.translate import (
    Conflict,
    Fragment,
    Merge,
    has_parts,
    load_balancer_ingress,
    merge,
    owner_key,
    owns,
    ready_node_addresses,
    remove_owner,
    translate_ingress,
    translate_service,
)
from isthmus.runtime import Controller, EventRecorder, LeaderElection, Manager, Result, Term
from isthmus.runtime.metrics import REGISTRY

log = logging.getLogger(__name__)

PoolResource: Any = resource_for(LoadBalancerPool)
PORTS_CONDITION = "isthmus.io/LoadBalancerPortsAllocated"
"""On a Service: False while a frontend port it asks for is another owner's (in the pool or in
another pool: pools share their edge hosts' addresses)."""
ADMITTED_CONDITION = "isthmus.io/LoadBalancerPoolAdmitted"
"""On a Service: False while the pool its config names may not be joined from its namespace (or
its name is another object's automatic pool name); set once it was False, True when admitted."""
DEFAULT_GRACE = 20.0
"""How long a pool may stay without a serving instance before the owner hears of it."""
RECHECK = 5.0

TRANSLATIONS = Counter("isthmus_lb_translations_total", "Reconciles of Services/Ingresses", ["kind", "result"], registry=REGISTRY)
TRANSLATION_RESULTS = ("ok", "invalid", "error")
"""`result` values: translated, a config the translator refuses, a pool it could not write."""
POOLS_OWNED = Gauge("isthmus_lb_pools", "LoadBalancerPools holding parts of this cluster", registry=REGISTRY)


def is_lb_service(svc: Mapping[str, Any], class_less: bool = False) -> bool:
    """A LoadBalancer Service of class isthmus.io/edgelb; a class-less one too only when the admin
    opted in (`--lb-class-less-services`): a cluster's cloud controller, MetalLB or Cilium LB-IPAM
    answers those, and two controllers writing one Service's status fight for ever. A Service of any
    other class is never ours."""
    spec = svc.get("spec") or {}
    cls = spec.get("loadBalancerClass")
    return spec.get("type") == "LoadBalancer" and (cls == EDGELB_CONTROLLER or (cls is None and class_less))


def is_edgelb_ingress(ing: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]) -> bool:
    """Class edgelb by annotation, by an IngressClass whose controller is ours, or by our
    IngressClass being the default when the Ingress names none (kube's rules)."""
    annotations = (ing.get("metadata") or {}).get("annotations") or {}
    if INGRESS_CLASS_ANNOTATION in annotations:
        return bool(annotations[INGRESS_CLASS_ANNOTATION] == EDGELB_INGRESS_CLASS)
    name = (ing.get("spec") or {}).get("ingressClassName")
    for c in classes:
        ours = (c.get("spec") or {}).get("controller") == EDGELB_CONTROLLER
        meta = c.get("metadata") or {}
        if name is not None and meta.get("name") == name:
            return ours
        if name is None and ours and (meta.get("annotations") or {}).get(
            "ingressclass.kubernetes.io/is-default-class"
        ) == "true":
            return True
    return False


def may_clear_status(kind: str, obj: Mapping[str, Any], class_less: bool = False) -> bool:
    """Whether an object that is not (or no longer) ours may have its load-balancer status cleared:
    only when its class still names us (a paused one, a Service whose type changed, an Ingress whose
    IngressClass went). The status of another class's object is its controller's: clearing it would
    fight that controller on every write."""
    if kind == "Service":
        cls = (obj.get("spec") or {}).get("loadBalancerClass")
        return cls == EDGELB_CONTROLLER or (cls is None and class_less)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    named = annotations.get(INGRESS_CLASS_ANNOTATION, (obj.get("spec") or {}).get("ingressClassName"))
    return bool(named == EDGELB_INGRESS_CLASS)


def _key(obj: Any) -> str:
    """`ns/name` (or `name` for cluster-scoped objects) of a cached object."""
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else str(meta.name)


def _dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    out: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return out


class Translator:
    """One cluster's translator (`isthmus lb`)."""

    def __init__(
        self,
        client: AsyncClient,
        cluster: str,
        *,
        identity: str,
        grace: float = DEFAULT_GRACE,
        class_less: bool = False,
        workers: int = 4,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not cluster.strip() or ":" in cluster:
            raise ValueError("the cluster name must be non-empty and contain no ':'")
        self.client = client
        self.cluster = cluster
        self.part = cluster_name_part(cluster)
        self.grace = grace
        self.class_less = class_less
        self.workers = workers
        self.recorder = EventRecorder(client, TRANSLATOR_MANAGER, instance=identity)
        self.manager = Manager("lb", election=LeaderElection(
            client, TRANSLATOR_LEASE_NAME, LB_NAMESPACE, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period))  # fmt: skip
        self.manager.setup(self._wire)
        self.manager.on_exit(self.recorder.aclose)
        for kind in ("Service", "Ingress"):  # every series at 0 before the first translation (no "No data")
            for result in TRANSLATION_RESULTS:
                TRANSLATIONS.labels(kind, result)
        self._unserved_since: dict[str, float] = {}
        self._warned_unserved: set[str] = set()
        self._addresses: dict[str, list[dict[str, Any]]] = {}
        self._target: dict[str, str] = {}
        """owner key → the pool its config names (last reconcile)."""

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Leading, caches synced."""
        return self.manager.ready

    async def run(self) -> None:
        await self.manager.run()

    def _wire(self, term: Term) -> None:
        self.services = term.informer(self.client, Service)
        self.ingresses = term.informer(self.client, Ingress)
        self.classes = term.informer(self.client, IngressClass)
        self.nodes = term.informer(self.client, Node)
        self.pools = term.informer(self.client, PoolResource)
        c = Controller("lb", self.reconcile, workers=self.workers)
        c.watch(self.services, self._keys_for_service)
        c.watch(self.ingresses, lambda o: [f"Ingress/{_key(o)}"])
        c.watch(self.classes, lambda _o: self._all_ingress_keys())
        c.watch(self.nodes, lambda _o: self._all_keys())
        c.watch(self.pools, self._keys_for_pool)
        self.controller = c
        term.add(c)
        term.on_synced(self._synced)

    async def _synced(self) -> None:
        for key in self._orphan_keys():  # owners deleted while no translator ran
            self.controller.enqueue(key)
        log.info("translator leading", extra={"cluster": self.cluster})

    # -- key mapping ------------------------------------------------------------------------------

    def _keys_for_service(self, svc: Any) -> list[str]:
        ns, name = _key(svc).split("/")
        keys = [f"Service/{ns}/{name}"]
        for ing in self.ingresses.cache.list_namespace(ns):  # Ingresses using it as a backend
            if name in _ingress_services(_dict(ing)):
                keys.append(f"Ingress/{_key(ing)}")
        return keys

    def _all_ingress_keys(self) -> list[str]:
        return [f"Ingress/{_key(i)}" for i in self.ingresses.cache.list()]

    def _all_keys(self) -> list[str]:
        keys = [f"Service/{_key(s)}" for s in self.services.cache.list()
                if is_lb_service(_dict(s), self.class_less)]  # fmt: skip
        return keys + self._all_ingress_keys()

    def _keys_for_pool(self, pool: Any) -> list[str]:
        keys = {k for k, target in self._target.items() if target == pool.metadata.name}
        spec = (_dict(pool).get("spec") or {}).get("haproxy") or {}
        for part in [*(f.get("name", "") for f in spec.get("frontends") or []),
                     *(b.get("name", "") for b in spec.get("backends") or [])]:  # fmt: skip
            owner = frontend_owner(part) or backend_owner(part)
            if owner is not None and owner.cluster == self.part:
                keys.add(owner_key(owner))
        return sorted(keys)

    def _orphan_keys(self) -> list[str]:
        keys: set[str] = set()
        for pool in self.pools.cache.list():
            keys.update(self._keys_for_pool(pool))
        return sorted(keys)

    # -- reconcile --------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        kind, ns, name = key.split("/", 2)
        owner = Owner(cluster=self.part, kind="Service" if kind == "Service" else "Ingress", namespace=ns, name=name)
        cache = self.services.cache if kind == "Service" else self.ingresses.cache
        live = cache.get(f"{ns}/{name}")
        obj = _dict(live) if live is not None else None
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            await self._withdraw(owner, None)
            return None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if annotations.get(PAUSED_ANNOTATION) == "true":
            return None
        eligible = is_lb_service(obj, self.class_less) if kind == "Service" else is_edgelb_ingress(obj, map(_dict, self.classes.cache.list()))
        if not eligible:
            await self._withdraw(owner, None)
            if may_clear_status(kind, obj, self.class_less):
                await self._write_status(obj, kind, [], None)
            return None
        nodes = ready_node_addresses(_dict(n) for n in self.nodes.cache.list())
        try:
            if kind == "Service":
                frag = translate_service(self.cluster, obj, parse_service_config(annotations), nodes)
            else:
                services = {_key(s): _dict(s) for s in self.services.cache.list_namespace(ns)}
                frag = translate_ingress(self.cluster, obj, parse_ingress_config(annotations), services, nodes)
        except ConfigError as e:
            TRANSLATIONS.labels(kind, "invalid").inc()
            self.recorder.warning(live, Reason.INVALID_CONFIG,
                                  f"{e}. Nothing was changed in the pool; fix the annotation to go on")
            return None
        for problem in frag.problems:
            self.recorder.warning(live, problem.reason, problem.message)
        self._target[key] = frag.pool
        try:
            return await self._apply(key, owner, live, obj, kind, frag)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # Scenarios 1, 3, 5: say why where the user looks, then retry (backoff)
            TRANSLATIONS.labels(kind, "error").inc()
            if not (isinstance(e, ApiError) and e.status.code == 409):
                self.recorder.warning(live, Reason.TRANSLATION_ERROR,
                                      f"cannot update pool {frag.pool}: {describe_error(e)}. Retrying; next step: check "
                                      f"that the LoadBalancerPool CRD is installed and the translator's role allows it "
                                      f"(`kubectl auth can-i create loadbalancerpools --as "
                                      f"system:serviceaccount:{LB_NAMESPACE}:isthmus-lb`)")  # fmt: skip
            raise

    async def _apply(self, key: str, owner: Owner, live: Any, obj: dict[str, Any], kind: str,
                     frag: Fragment) -> Result | None:
        pool = self.pools.cache.get(frag.pool)
        model = LoadBalancerPool.from_dict(pool) if pool is not None else None
        refusal = self._reserved_name(frag, model) or (self._not_shared(model, owner) if model is not None else None)
        if refusal is not None:  # settled on the newcomer, before anything is written
            await self._withdraw(owner, None)
            TRANSLATIONS.labels(kind, "invalid").inc()
            self.recorder.warning(live, Reason.POOL_NOT_SHARED, refusal)
            await self._write_status(obj, kind, [], None, refused=refusal)
            return None
        # Parts left in another pool (the config named another pool before): withdrawn.
        await self._withdraw(owner, frag.pool)
        if model is None:
            return await self._missing(live, obj, kind, frag)
        annotations = model.metadata.annotations or {}
        creator = annotations.get(POOL_CREATOR_ANNOTATION)
        # Only an owner of the creator's namespace takes the settings over when the creator left: a
        # namespace the pool is shared with never becomes its home.
        settles = creator in (None, owner_key(owner)) or (
            not self._creator_present(model, creator) and _namespace_of(creator) == owner.namespace)
        result = merge(model.spec, frag, apply_settings=settles, elsewhere=self._ports_elsewhere(frag.pool, owner))
        if not settles and frag.settings != frag.settings.of(model.spec):
            self.recorder.warning(live, Reason.POOL_SETTINGS_CONFLICT,
                                  f"pool {frag.pool} keeps the settings of {creator}, which created it "
                                  f"(role {model.spec.role}, size {model.spec.count}); this object's config differs")
        self._report_conflicts(live, result)
        assert result.spec is not None
        shared = ",".join(frag.shared_with) or None
        reshare = settles and annotations.get(POOL_SHARED_WITH_ANNOTATION) != shared
        if result.spec.to_dict() != model.spec.to_dict() or (settles and creator != owner_key(owner)) or reshare:
            meta: dict[str, Any] = {POOL_CREATOR_ANNOTATION: creator if not settles else owner_key(owner)}
            if settles:
                meta[POOL_SHARED_WITH_ANNOTATION] = shared
            body = {"metadata": {"resourceVersion": model.metadata.resource_version, "annotations": meta},
                    "spec": result.spec.to_dict()}  # fmt: skip
            await self.client.patch(PoolResource, frag.pool, body, patch_type=PatchType.MERGE,
                                    field_manager=TRANSLATOR_MANAGER)  # fmt: skip
            self.recorder.normal(live, Reason.POOL_UPDATED, f"pool {frag.pool} updated with this object's frontends")
        TRANSLATIONS.labels(kind, "ok").inc()
        res = await self._status_from_pool(live, obj, kind, frag, model, result)
        return Result(requeue_after=1.0) if frag.pending else res

    def _reserved_name(self, frag: Fragment, model: LoadBalancerPool | None) -> str | None:
        """A config naming a pool in the automatic pools' name space that is not its own automatic
        pool: refused, so nobody takes (or creates first) another namespace's automatic pool. An
        object may join the automatic pool of another object of its own namespace once it exists."""
        if not frag.explicit or not frag.pool.startswith(automatic_pool_prefixes(self.cluster)):
            return None
        o = frag.owner
        if frag.pool in (pool_name(self.cluster, o.namespace, o.name), pool_name(self.cluster, o.namespace, o.name,
                                                                                ext=True)):
            return None  # its own automatic name, written out
        creator = (model.metadata.annotations or {}).get(POOL_CREATOR_ANNOTATION) if model is not None else None
        if creator is not None and _namespace_of(creator) == o.namespace:
            return None  # joining a pool of its own namespace (never creating one under such a name)
        return (f"pool {frag.pool} is named like an automatic pool (<cluster>--<namespace>--<name>), which only its "
                "own Service or Ingress may use; nothing was changed. Next step: choose another pool name in "
                f"{DKLB_CONFIG_ANNOTATION} .name (and have its creator share it with this namespace, sharedWith)")

    def _not_shared(self, model: LoadBalancerPool, owner: Owner) -> str | None:
        """Why `owner` may not join this pool (None: it may). A pool belongs to its creator's
        namespace; another namespace joins it only when the creator's config shares it
        (`sharedWith`) or an admin allows it (POOL_ALLOWED_NAMESPACES_ANNOTATION), and automatic
        pools are never joined from another namespace."""
        annotations = model.metadata.annotations or {}
        creator = annotations.get(POOL_CREATOR_ANNOTATION)
        admin = namespaces_in(annotations.get(POOL_ALLOWED_NAMESPACES_ANNOTATION))
        if creator is None:  # made out of band: the admin who made it decides
            if not admin or owner.namespace in admin or "*" in admin:
                return None
            return (f"pool {model.name} (made out of band) admits namespaces {', '.join(sorted(admin))} only "
                    f"({POOL_ALLOWED_NAMESPACES_ANNOTATION}); nothing was changed. Next step: ask an admin to add "
                    f"{owner.namespace}, or use another pool")  # fmt: skip
        home = _namespace_of(creator)
        if owner.namespace == home:
            return None
        if model.name.startswith(automatic_pool_prefixes(self.cluster)):
            return (f"pool {model.name} is the automatic pool of {creator} in namespace {home}: automatic pools "
                    "are never shared with another namespace; nothing was changed. Next step: name a pool of "
                    f"your own in {DKLB_CONFIG_ANNOTATION} .name")  # fmt: skip
        allowed = namespaces_in(annotations.get(POOL_SHARED_WITH_ANNOTATION)) | admin
        if owner.namespace in allowed or "*" in allowed:
            return None
        return (f"pool {model.name} belongs to namespace {home} (created by {creator}) and is not shared with "
                f"namespace {owner.namespace}; nothing was changed. Next step: its creator lists {owner.namespace} "
                f"in sharedWith of its {DKLB_CONFIG_ANNOTATION}, or an admin in the pool's "
                f"{POOL_ALLOWED_NAMESPACES_ANNOTATION} annotation")  # fmt: skip

    def _ports_elsewhere(self, pool: str, owner: Owner) -> dict[int, tuple[str, str]]:
        """Frontend ports bound by other pools (port → (pool, frontend)), but `owner`'s own (being
        withdrawn): every pool may run on every edge host, so such a port would be refused there."""
        out: dict[int, tuple[str, str]] = {}
        for other in self.pools.cache.list():
            name = _key(other)
            if name == pool:
                continue
            for fe in ((_dict(other).get("spec") or {}).get("haproxy") or {}).get("frontends") or []:
                port = int(fe.get("bindPort") or 0)
                if port and not owns(owner, frontend_owner(str(fe.get("name") or ""))):
                    out.setdefault(port, (name, str(fe.get("name") or "")))
        return out

    def _creator_present(self, model: LoadBalancerPool, creator: str) -> bool:
        kind, _, rest = creator.partition("/")
        ns, _, name = rest.partition("/")
        if kind not in ("Service", "Ingress"):
            return False
        return has_parts(model.spec, Owner.model_validate({"cluster": self.part, "kind": kind, "namespace": ns,
                                                            "name": name}))

    async def _missing(self, live: Any, obj: dict[str, Any], kind: str, frag: Fragment) -> Result | None:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        cfg_strategy = frag_strategy(annotations, kind)
        created_before = annotations.get(POOL_CREATED_ANNOTATION) == frag.pool
        had_address = bool(((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress"))
        if created_before or had_address:
            self.recorder.warning(live, Reason.POOL_MISSING,
                                  f"pool {frag.pool} is gone (deleted out of band?); strategy {cfg_strategy.value}: "
                                  + ("re-creating it" if cfg_strategy == CreationStrategy.IF_NOT_PRESENT
                                     else "not re-creating it. Next step: create the pool again, or delete and "
                                     "re-create this object"))  # fmt: skip
        if cfg_strategy == CreationStrategy.NEVER or (cfg_strategy == CreationStrategy.ONCE and created_before):
            if not created_before and not had_address:
                self.recorder.warning(live, Reason.POOL_MISSING,
                                      f"pool {frag.pool} does not exist and strategy Never forbids creating it: "
                                      "create it out of band (this object will use it)")
            await self._write_status(obj, kind, [], None)
            return Result(requeue_after=30.0)
        result = merge(None, frag, apply_settings=True, elsewhere=self._ports_elsewhere(frag.pool, frag.owner))
        assert result.spec is not None
        body = LoadBalancerPool(spec=result.spec)
        body.metadata.name = frag.pool
        body.metadata.labels = {POOL_CLUSTER_LABEL: self.part.replace(".", "-")[:63].strip("-"),
                                MANAGED_BY_LABEL: TRANSLATOR_MANAGER}  # fmt: skip
        body.metadata.annotations = {POOL_CREATOR_ANNOTATION: owner_key(frag.owner)}
        if frag.shared_with:
            body.metadata.annotations[POOL_SHARED_WITH_ANNOTATION] = ",".join(frag.shared_with)
        try:
            await self.client.create(PoolResource.from_dict(body.to_dict()), field_manager=TRANSLATOR_MANAGER)
        except ApiError as e:
            if e.status.code == 409:  # another owner created it meanwhile: merge next time round
                return Result(requeue=True)
            raise
        self.recorder.normal(live, Reason.POOL_CREATED, f"pool {frag.pool} created (role {frag.settings.role}, "
                             f"size {frag.settings.count})")
        if annotations.get(POOL_CREATED_ANNOTATION) != frag.pool:
            resource = Service if kind == "Service" else Ingress
            meta = obj["metadata"]
            await self.client.patch(resource, meta["name"], {"metadata": {"annotations": {POOL_CREATED_ANNOTATION: frag.pool}}},
                                    namespace=meta["namespace"], patch_type=PatchType.MERGE,
                                    field_manager=TRANSLATOR_MANAGER)  # fmt: skip
        self._report_conflicts(live, result)
        await self._write_status(obj, kind, [], result)
        return Result(requeue_after=RECHECK)

    def _report_conflicts(self, live: Any, result: Merge) -> None:
        for c in result.conflicts:
            self.recorder.warning(live, Reason.PORT_CONFLICT,
                                  f"frontend {c.frontend}: port {c.port} is already bound by {c.describe()}; "
                                  "not exposed. Next step: choose another port in .frontends, or another pool")

    async def _status_from_pool(
        self, live: Any, obj: dict[str, Any], kind: str, frag: Fragment, model: LoadBalancerPool, result: Merge
    ) -> Result | None:
        key = f"{kind}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        ingress = load_balancer_ingress(model.status, result.placed, result.conflicts)
        log.debug("status from pool", extra={"key": key, "pool": frag.pool, "ingress": ingress,
                                             "placed": result.placed, "frontends": model.status.to_dict()})
        serving = any(e.get("ip") or e.get("hostname") for e in ingress) and any(
            c.type == READY and c.status == "True" for c in model.status.conditions
        )
        served_ingress = ingress if serving else []
        previous = self._addresses.get(key)
        await self._write_status(obj, kind, served_ingress, result)
        if serving:
            self._unserved_since.pop(key, None)
            self._warned_unserved.discard(key)
            addrs = [e.get("ip") or e.get("hostname") for e in served_ingress]
            if previous != served_ingress:
                if previous:
                    self.recorder.normal(live, Reason.ADDRESSES_CHANGED,
                                         f"pool {frag.pool} now serves at {', '.join(map(str, addrs))}")
                else:
                    self.recorder.normal(live, Reason.EXPOSED, f"exposed by pool {frag.pool} at "
                                         f"{', '.join(map(str, addrs))}")
                self._addresses[key] = served_ingress
            return None
        self._addresses.pop(key, None)
        since = self._unserved_since.setdefault(key, time.monotonic())
        if time.monotonic() - since > self.grace and key not in self._warned_unserved:
            self._warned_unserved.add(key)
            why = next((c.message for c in model.status.conditions if c.type == READY), "") or "no status yet"
            self.recorder.warning(live, Reason.POOL_NOT_PROVISIONED,
                                  f"pool {frag.pool} has no serving instance after {self.grace:.0f}s ({why}). Next step: "
                                  f"check the pool managers (`kubectl -n {POOLS_NAMESPACE} get pods -l "
                                  "app.kubernetes.io/name=isthmus-pools`, `kubectl describe loadbalancerpool "
                                  f"{frag.pool}`)")  # fmt: skip
        return Result(requeue_after=RECHECK)

    async def _write_status(self, obj: dict[str, Any], kind: str, ingress: list[dict[str, Any]], result: Merge | None,
                            *, refused: str | None = None) -> None:
        status = obj.get("status") or {}
        current = (status.get("loadBalancer") or {}).get("ingress") or []
        body: dict[str, Any] = {}
        if current != ingress:
            body["loadBalancer"] = {"ingress": ingress or None}  # merge patch: null removes the list
        if kind == "Service":
            existing = status.get("conditions") or []
            conflicts: list[Conflict] = result.conflicts if result is not None else []
            generation = (obj.get("metadata") or {}).get("generation")
            conds: list[Condition] = []
            if conflicts or any(c.get("type") == PORTS_CONDITION for c in existing):
                conds.append(new_condition(
                    PORTS_CONDITION, not conflicts, "PortConflict" if conflicts else "Allocated",
                    "; ".join(f"port {c.port} is already bound by {c.describe()}" for c in conflicts)
                    or "every frontend port is bound",
                    observed_generation=generation,
                ))  # fmt: skip
            if refused is not None or any(c.get("type") == ADMITTED_CONDITION for c in existing):
                conds.append(new_condition(ADMITTED_CONDITION, refused is None,
                                           Reason.POOL_NOT_SHARED if refused else "Admitted",
                                           refused or "the pool admits this object's namespace",
                                           observed_generation=generation))  # fmt: skip
            if conds:
                merged = merge_conditions([Condition.model_validate(c) for c in existing], conds)
                wanted = [c.to_dict() for c in merged]
                if wanted != existing:
                    body["conditions"] = wanted
        if not body:
            return
        resource = Service if kind == "Service" else Ingress
        meta = obj["metadata"]
        try:
            await self.client.patch(resource.Status, meta["name"], {"status": body}, namespace=meta["namespace"],
                                    patch_type=PatchType.MERGE, field_manager=TRANSLATOR_MANAGER)  # fmt: skip
        except ApiError as e:
            if e.status.code in (400, 413, 422):  # refused as it is: an Event says so (retrying cannot help)
                self.recorder.warning(resource.from_dict(obj), Reason.STATUS_NOT_WRITTEN,
                                      f"the translator cannot write this object's status ({e.status.code} "
                                      f"{e.status.reason}: {e.status.message})"[:1000])  # fmt: skip
                return
            if e.status.code != 404:
                raise

    async def _withdraw(self, owner: Owner, keep: str | None) -> None:
        """Remove `owner`'s parts from every pool but `keep`; a pool left empty is deleted."""
        for pool in self.pools.cache.list():
            name = _key(pool)
            if name == keep:
                continue
            model = LoadBalancerPool.from_dict(pool)
            if not has_parts(model.spec, owner):
                continue
            rest = remove_owner(model.spec, owner)
            try:
                if rest is None or not is_pool_name(name):
                    # A pool stored under a name no pool can have (issue 40) runs nowhere: it goes.
                    await self.client.delete(PoolResource, api_name(name))
                    log.info("deleted an empty pool", extra={"pool": name})
                else:
                    await self.client.patch(PoolResource, api_name(name),
                                            {"metadata": {"resourceVersion": model.metadata.resource_version},
                                             "spec": rest.to_dict()},
                                            patch_type=PatchType.MERGE, field_manager=TRANSLATOR_MANAGER)  # fmt: skip
            except ApiError as e:
                if e.status.code != 404:
                    raise


def _namespace_of(creator: str | None) -> str | None:
    """The namespace of a `<Kind>/<ns>/<name>` creator annotation."""
    parts = (creator or "").split("/")
    return parts[1] if len(parts) == 3 else None


def frag_strategy(annotations: Mapping[str, str], kind: str) -> CreationStrategy:
    """The creation strategy (config and legacy annotation already reconciled by parsing)."""
    cfg = parse_service_config(annotations) if kind == "Service" else parse_ingress_config(annotations)
    return cfg.strategies.creation


def _ingress_services(ing: Mapping[str, Any]) -> set[str]:
    spec = ing.get("spec") or {}
    refs = [spec.get("defaultBackend") or {}]
    for rule in spec.get("rules") or []:
        refs += [p.get("backend") or {} for p in (rule.get("http") or {}).get("paths") or []]
    return {r["service"]["name"] for r in refs if (r.get("service") or {}).get("name")}

