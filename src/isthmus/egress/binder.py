"""Binding SourceIPClaims to SourceIPs, with PersistentVolume semantics (part of `isthmus
egress-operator`).

Three controllers over one set of caches:

- **claims** (`ns/name`): holds the claim-protection finalizer (let go only when no ExternalService
  names the claim), binds a Pending claim — an Available SourceIP of the class first, else a new
  one created under the address's own name, so the API server's name uniqueness refuses a second
  binder of the same address (409: pick again) — and reports Pending with a reason, Bound, or Lost.
  Writes go in a fixed order, each idempotent: SourceIP (with claimRef naming the claim's UID),
  SourceIP status, claim status. A crash between them is resumed from the SourceIP whose claimRef
  carries this claim's UID; a claim re-created under the same name has another UID, so it never
  inherits an address.
- **sourceips** (name): a SourceIP whose claim is gone (or is another claim now) is Released and
  then reclaimed by its policy — Delete frees the address, Retain keeps it until an admin deletes it
  or clears its claimRef (then it is Available again); the protection finalizer is held only while
  bound. A freed address wakes the Pending claims of its class.
- **classes** (name): capacity, allocated, and Ready (the ranges are valid and overlap no older
  class's: admission refuses overlaps, this flags one admitted in a race).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.types import PatchType

from isthmus.api.base import ObjectMeta, conditions_equal, merge_conditions, new_condition
from isthmus.api.egress import (
    CLAIM_FINALIZER,
    CLASS_LABEL,
    EXTERNAL_SERVICE_FINALIZER,
    OPERATOR_FIELD_MANAGER,
    READY,
    SOURCE_IP_FINALIZER,
    ClaimPhase,
    ClaimRef,
    ExternalService,
    Reason,
    SourceIP,
    SourceIPClaim,
    SourceIPClass,
    SourceIPPhase,
    SourceIPSpec,
    canonical_ip,
    source_ip_name,
)
from isthmus.egress import binding
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime import Controller, EventRecorder, Informer, Result, SharedInformerFactory, object_key

log = logging.getLogger(__name__)

ClassRes: Any = resource_for(SourceIPClass)
ClaimRes: Any = resource_for(SourceIPClaim)
SourceIPRes: Any = resource_for(SourceIP)
ExternalServiceRes: Any = resource_for(ExternalService)

BY_CLAIM = "claim"
BY_CLASS = "class"
BY_CLAIM_CLASS = "claim-class"
BY_USED_CLAIM = "used-claim"


def as_dict(obj: Any) -> dict[str, Any]:
    return cast(dict[str, Any], obj.to_dict())


def _claim_ref_key(obj: Any) -> list[str]:
    ref = (as_dict(obj).get("spec") or {}).get("claimRef") or {}
    return [f"{ref['namespace']}/{ref['name']}"] if ref.get("namespace") and ref.get("name") else []


def _sip_class(obj: Any) -> list[str]:
    c = (as_dict(obj).get("spec") or {}).get("sourceIPClassName")
    return [c] if c else []


def _claim_class(obj: Any) -> list[str]:
    c = (as_dict(obj).get("spec") or {}).get("sourceIPClassName")
    return [c] if c else []


def used_claims(obj: Any) -> list[str]:
    """`ns/claim` of every claim an ExternalService names (its own namespace only)."""
    d = as_dict(obj)
    ns = (d.get("metadata") or {}).get("namespace") or ""
    meta = d.get("metadata") or {}
    if meta.get("deletionTimestamp") and EXTERNAL_SERVICE_FINALIZER not in (meta.get("finalizers") or []):
        return []  # a deleting ExternalService whose own finalizer is off no longer holds its claims
    return sorted({f"{ns}/{s['sourceIPClaimName']}" for s in (d.get("spec") or {}).get("sources") or []
                   if s.get("sourceIPClaimName")})


async def set_finalizers(client: AsyncClient, res: Any, meta: ObjectMeta, finalizers: list[str]) -> None:
    """The object's finalizers, conditional on the resourceVersion read (409: re-read and decide again)."""
    body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}}
    await helpers.merge_patch(client, res, meta.name or "", body, namespace=meta.namespace,
                              field_manager=OPERATOR_FIELD_MANAGER)


class Binder:
    """The binding controllers; `register` wires them on the operator's informer factory."""

    def __init__(self, client: AsyncClient, recorder: EventRecorder, *, workers: int = 4) -> None:
        self.client = client
        self.recorder = recorder
        self.workers = workers
        self._creating: set[str] = set()
        """SourceIP names this binder is creating (not yet in its cache)."""
        self._said: dict[str, str] = {}
        """claim key → the last Pending reason warned about (one Event per change)."""

    def register(self, factory: SharedInformerFactory) -> list[Controller]:
        self.classes: Informer[Any] = factory.informer(ClassRes)
        self.claims: Informer[Any] = factory.informer(ClaimRes)
        self.sips: Informer[Any] = factory.informer(SourceIPRes)
        self.externals: Informer[Any] = factory.informer(ExternalServiceRes)
        self.sips.add_indexer(BY_CLAIM, _claim_ref_key)
        self.sips.add_indexer(BY_CLASS, _sip_class)
        self.claims.add_indexer(BY_CLAIM_CLASS, _claim_class)
        self.externals.add_indexer(BY_USED_CLAIM, used_claims)

        claims = Controller("egress-claims", self.reconcile_claim, workers=self.workers, qps=500.0, burst=5000)
        claims.watch(self.claims)
        claims.watch(self.sips, _claim_ref_key)
        claims.watch(self.externals, used_claims)
        claims.watch(self.classes, lambda o: self.claims.cache.index_keys(BY_CLAIM_CLASS, o.metadata.name))
        sips = Controller("egress-sourceips", self.reconcile_source_ip, workers=self.workers, qps=500.0,
                          burst=5000)
        sips.watch(self.sips)
        sips.watch(self.claims, lambda o: self.sips.cache.index_keys(BY_CLAIM, object_key(o)))
        classes = Controller("egress-classes", self.reconcile_class, workers=1, qps=100.0, burst=1000)
        # Which class keeps a shared address depends on every other class: any change looks at all.
        classes.watch(self.classes, lambda _o: list(self.classes.cache.keys()))
        classes.watch(self.sips, _sip_class)
        # A SourceIP gone or freed: the class's Pending claims may bind now.
        self.sips.add_handler(on_update=lambda _o, n: self._wake(n), on_delete=self._wake)
        self._claims_controller = claims
        return [claims, sips, classes]

    def _wake(self, sip: Any) -> None:
        for cls in _sip_class(sip):
            for key in self.claims.cache.index_keys(BY_CLAIM_CLASS, cls):
                raw = self.claims.cache.get(key)
                if raw is not None and ((as_dict(raw).get("status") or {}).get("phase") or "Pending") == "Pending":
                    self._claims_controller.enqueue(key)

    # ------------------------------------------------------------------ claims

    async def reconcile_claim(self, key: str) -> Result | None:
        try:
            return await self._reconcile_claim(key)
        except ApiError as e:
            if helpers.is_conflict(e):
                return Result(requeue_after=0.05)
            raise

    async def _reconcile_claim(self, key: str) -> Result | None:
        raw = self.claims.cache.get(key)
        if raw is None:
            self._said.pop(key, None)
            return None
        claim = SourceIPClaim.from_dict(raw)
        ns, name = claim.namespace or "", claim.name
        finalizers = list(claim.metadata.finalizers or [])
        if claim.metadata.deletion_timestamp is not None:
            if CLAIM_FINALIZER in finalizers and not self.externals.cache.index_keys(BY_USED_CLAIM, key):
                await set_finalizers(self.client, ClaimRes, claim.metadata, [f for f in finalizers if f != CLAIM_FINALIZER])
            return None
        if CLAIM_FINALIZER not in finalizers:
            await set_finalizers(self.client, ClaimRes, claim.metadata, [*finalizers, CLAIM_FINALIZER])
            return None  # the update event brings it back with the new resourceVersion

        mine = [SourceIP.from_dict(s) for s in self.sips.cache.by_index(BY_CLAIM, key)]
        mine = [s for s in mine if s.spec.claim_ref is not None and s.spec.claim_ref.uid == claim.metadata.uid]
        if mine:
            return await self._finish_bind(claim, mine[0])
        if claim.status.phase in (ClaimPhase.BOUND, ClaimPhase.LOST) and claim.status.source_ip:
            # Bound once and its SourceIP is gone: Lost, as a PVC whose PV vanished (terminal).
            if claim.status.phase != ClaimPhase.LOST:
                msg = f"SourceIP {claim.status.source_ip} bound to this claim no longer exists"
                await self._claim_status(claim, ClaimPhase.LOST, claim.status.source_ip, False,
                                         Reason.SOURCE_IP_LOST, msg)
                self.recorder.warning(raw, Reason.SOURCE_IP_LOST, msg)
            return None

        class_name = claim.spec.source_ip_class_name
        cls_raw = self.classes.cache.get(class_name)
        cls = SourceIPClass.from_dict(cls_raw) if cls_raw is not None else None
        older = self.older(cls) if cls is not None else []
        refusal = binding.check_claim(cls, class_name, ns, claim.spec.source_ip, older)
        if refusal is not None:
            return await self._pending(claim, raw, refusal.reason, refusal.message)
        assert cls is not None
        target, create = self._pick(cls, claim, older)
        if target is None:
            if claim.spec.source_ip:
                holder = self._holder(claim.spec.source_ip)
                return await self._pending(claim, raw, Reason.ADDRESS_IN_USE,
                                           f"{canonical_ip(claim.spec.source_ip)} is held by {holder}")
            return await self._pending(
                claim, raw, Reason.CLASS_EXHAUSTED,
                f"no free address in SourceIPClass {class_name!r} (all {binding.capacity(cls, older)} in use); "
                "the claim binds as soon as one is released")
        ref = ClaimRef(namespace=ns, name=name, uid=claim.metadata.uid or "")
        if create:
            sip_name = source_ip_name(target)
            sip = SourceIP(
                metadata=ObjectMeta(name=sip_name, labels={CLASS_LABEL: class_name}, finalizers=[SOURCE_IP_FINALIZER]),
                spec=SourceIPSpec(source_ip=target, source_ip_class_name=class_name, claim_ref=ref,
                                  reclaim_policy=cls.spec.reclaim_policy),
            )
            self._creating.add(sip_name)
            try:
                made = await self.client.create(SourceIPRes.from_dict(sip.to_dict()),
                                                field_manager=OPERATOR_FIELD_MANAGER)
            except ApiError as e:
                if e.status.code == 409:  # someone else holds that address now: choose again
                    return Result(requeue_after=0.0)
                raise
            finally:
                self._creating.discard(sip_name)
            bound = SourceIP.from_dict(made)
        else:
            # An Available SourceIP of the class: take it with its resourceVersion (a 409 means
            # another claim was quicker: choose again).
            current = SourceIP.from_dict(self.sips.cache.get(source_ip_name(target)))
            body = {"metadata": {"resourceVersion": current.metadata.resource_version,
                                 "finalizers": sorted({*(current.metadata.finalizers or []), SOURCE_IP_FINALIZER})},
                    "spec": {"claimRef": ref.to_dict(), "reclaimPolicy": cls.spec.reclaim_policy.value}}
            made = await self.client.patch(SourceIPRes, current.name, body, patch_type=PatchType.MERGE,
                                           field_manager=OPERATOR_FIELD_MANAGER)
            bound = SourceIP.from_dict(made)
        return await self._finish_bind(claim, bound)

    def older(self, cls: SourceIPClass) -> list[SourceIPClass]:
        """The classes that keep the addresses `cls` shares with them (admission refuses overlaps;
        this holds when two were admitted at once)."""
        others = [SourceIPClass.from_dict(r) for r in self.classes.cache.list()]
        return binding.older_classes(cls, others)

    def _pick(self, cls: SourceIPClass, claim: SourceIPClaim,
              older: list[SourceIPClass]) -> tuple[str | None, bool]:
        """(address, create?) for a claim: its wanted address, else an Available SourceIP of the class,
        else the first address nobody holds."""
        if claim.spec.source_ip:
            address: str | None = canonical_ip(claim.spec.source_ip)
            assert address is not None
            raw = self.sips.cache.get(source_ip_name(address))
            if raw is None:
                return (None, False) if source_ip_name(address) in self._creating else (address, True)
            sip = SourceIP.from_dict(raw)
            if self._available(sip, cls):
                return address, False
            return None, False
        available = sorted(
            (SourceIP.from_dict(r) for r in self.sips.cache.by_index(BY_CLASS, cls.name)),
            key=lambda s: binding.sort_key(s.spec.source_ip))
        for sip in available:
            if self._available(sip, cls):
                return sip.spec.source_ip, False
        taken = set(self.sips.cache.keys()) | self._creating
        address = binding.first_free(cls, taken, older)
        return address, address is not None

    @staticmethod
    def _available(sip: SourceIP, cls: SourceIPClass) -> bool:
        return (sip.spec.claim_ref is None and sip.metadata.deletion_timestamp is None
                and sip.spec.source_ip_class_name == cls.name)

    def _holder(self, address: str) -> str:
        raw = self.sips.cache.get(source_ip_name(canonical_ip(address)))
        if raw is None:
            return "a claim being bound"
        sip = SourceIP.from_dict(raw)
        ref = sip.spec.claim_ref
        if ref is None:
            return "a SourceIP being reclaimed"
        if sip.status.phase == SourceIPPhase.RELEASED:
            return (f"SourceIP {sip.name}, Released and retained after claim {ref.namespace}/{ref.name} "
                    "(an admin deletes it or clears its claimRef)")
        return f"claim {ref.namespace}/{ref.name}"

    async def _finish_bind(self, claim: SourceIPClaim, sip: SourceIP) -> Result | None:
        if sip.status.phase != SourceIPPhase.BOUND:
            await self._sip_status(sip, SourceIPPhase.BOUND, True, Reason.BOUND,
                                   f"bound to claim {claim.namespace}/{claim.name}")
        if claim.status.phase != ClaimPhase.BOUND or claim.status.source_ip != sip.spec.source_ip:
            self.recorder.normal(claim.to_dict(), Reason.BOUND,
                                 f"bound to SourceIP {sip.spec.source_ip} of class {sip.spec.source_ip_class_name}")
        await self._claim_status(claim, ClaimPhase.BOUND, sip.spec.source_ip, True, Reason.BOUND,
                                 f"bound to SourceIP {sip.spec.source_ip}")
        self._said.pop(f"{claim.namespace}/{claim.name}", None)
        return None

    async def _pending(self, claim: SourceIPClaim, raw: Any, reason: str, message: str) -> Result | None:
        key = f"{claim.namespace}/{claim.name}"
        if self._said.get(key) != f"{reason}:{message}":
            self.recorder.warning(raw, reason, message)
            self._said[key] = f"{reason}:{message}"
        await self._claim_status(claim, ClaimPhase.PENDING, None, False, reason, message)
        return None

    async def _claim_status(self, claim: SourceIPClaim, phase: ClaimPhase, address: str | None, ok: bool,
                            reason: str, message: str) -> None:
        cond = new_condition(READY, ok, reason, message, observed_generation=claim.metadata.generation)
        merged = merge_conditions(claim.status.conditions, [cond])
        if (claim.status.phase == phase and claim.status.source_ip == address
                and conditions_equal(merged, claim.status.conditions)):
            return
        body = {"status": {"phase": phase.value, "sourceIP": address,
                           "conditions": [c.to_dict() for c in merged]}}
        await helpers.merge_patch(self.client, ClaimRes.Status, claim.name, body, namespace=claim.namespace,
                                  field_manager=OPERATOR_FIELD_MANAGER)

    async def _sip_status(self, sip: SourceIP, phase: SourceIPPhase, ok: bool, reason: str, message: str) -> None:
        cond = new_condition(READY, ok, reason, message)
        merged = merge_conditions(sip.status.conditions, [cond])
        if sip.status.phase == phase and conditions_equal(merged, sip.status.conditions):
            return
        body = {"status": {"phase": phase.value, "conditions": [c.to_dict() for c in merged]}}
        await helpers.merge_patch(self.client, SourceIPRes.Status, sip.name, body, field_manager=OPERATOR_FIELD_MANAGER)

    # ------------------------------------------------------------------ source IPs

    async def reconcile_source_ip(self, key: str) -> Result | None:
        try:
            return await self._reconcile_source_ip(key)
        except ApiError as e:
            if helpers.is_conflict(e):
                return Result(requeue_after=0.05)
            raise

    async def _reconcile_source_ip(self, key: str) -> Result | None:
        raw = self.sips.cache.get(key)
        if raw is None:
            return None
        sip = SourceIP.from_dict(raw)
        ref = sip.spec.claim_ref
        finalizers = list(sip.metadata.finalizers or [])
        if ref is not None:
            claim_raw = self.claims.cache.get(f"{ref.namespace}/{ref.name}")
            if claim_raw is not None and as_dict(claim_raw)["metadata"].get("uid") == ref.uid:
                if SOURCE_IP_FINALIZER not in finalizers and sip.metadata.deletion_timestamp is None:
                    await set_finalizers(self.client, SourceIPRes, sip.metadata, [*finalizers, SOURCE_IP_FINALIZER])
                return None  # bound: the claim's reconcile writes the phases
            # The claim is gone, or the name is another claim's now: released.
            msg = f"claim {ref.namespace}/{ref.name} ({ref.uid}) is gone"
            if sip.status.phase != SourceIPPhase.RELEASED:
                await self._sip_status(sip, SourceIPPhase.RELEASED, False, Reason.RELEASED, msg)
                self.recorder.normal(raw, Reason.RELEASED, f"{msg}; reclaim policy {sip.spec.reclaim_policy.value}")
            if sip.spec.reclaim_policy.value == "Delete":
                if finalizers:
                    await set_finalizers(self.client, SourceIPRes, sip.metadata, [])
                await helpers.ensure_deleted(self.client, SourceIPRes, sip.name)
                return None
        elif sip.status.phase != SourceIPPhase.AVAILABLE:
            await self._sip_status(sip, SourceIPPhase.AVAILABLE, True, Reason.AVAILABLE,
                                   "not bound: the next claim of its class may take it")
        if SOURCE_IP_FINALIZER in finalizers:  # protection only while bound
            await set_finalizers(self.client, SourceIPRes, sip.metadata, [f for f in finalizers if f != SOURCE_IP_FINALIZER])
        return None

    # ------------------------------------------------------------------ classes

    async def reconcile_class(self, key: str) -> None:
        raw = self.classes.cache.get(key)
        if raw is None:
            return
        cls = SourceIPClass.from_dict(raw)
        problems = binding.range_problems(cls.spec.ranges)
        older = self.older(cls)
        shared = binding.overlaps(cls.spec.ranges, older)
        if problems:
            cond = new_condition(READY, False, Reason.INVALID_RANGES,
                                 "; ".join(f"{f}: {m}" for f, m in problems), cls.metadata.generation)
        elif shared:
            cond = new_condition(READY, False, Reason.RANGES_OVERLAP, overlap_message(shared), cls.metadata.generation)
        elif not cls.spec.allowed_namespaces:
            cond = new_condition(READY, True, Reason.VALID, "no namespace may claim from this class yet: "
                                 "spec.allowedNamespaces is empty", cls.metadata.generation)
        else:
            cond = new_condition(READY, True, Reason.VALID, "", cls.metadata.generation)
        merged = merge_conditions(cls.status.conditions, [cond])
        capacity = binding.capacity(cls, older)
        allocated = len(self.sips.cache.index_keys(BY_CLASS, cls.name))
        if (cls.status.capacity == capacity and cls.status.allocated == allocated
                and conditions_equal(merged, cls.status.conditions)):
            return
        body = {"status": {"capacity": capacity, "allocated": allocated,
                           "conditions": [c.to_dict() for c in merged]}}
        await helpers.merge_patch(self.client, ClassRes.Status, cls.name, body, field_manager=OPERATOR_FIELD_MANAGER)
        if shared and not any(c.type == READY and c.reason == Reason.RANGES_OVERLAP for c in cls.status.conditions):
            self.recorder.warning(raw, Reason.RANGES_OVERLAP, overlap_message(shared))


def overlap_message(shared: list[binding.Overlap]) -> str:
    """What the newer of two overlapping classes says (its Ready=False condition and Event)."""
    parts = [f"spec.ranges[{o.index}] shares {o.shared.first}-{o.shared.last} with SourceIPClass {o.other!r}"
             for o in shared]
    return ("; ".join(parts) + ": an address belongs to one class, the older one, so this class neither counts "
            "nor hands out those addresses; change the ranges so they do not overlap")
