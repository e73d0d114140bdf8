"""`isthmus egress-operator`: leader-elected; the binder (binder.py) and, per ExternalService:

- a forwarder Deployment (two replicas by default, spread over nodes, rolled one surge pod at a time)
  with a PodDisruptionBudget, and Service `<name>` in namespace `external-services` (the seed's
  `<name>.external-services:<port>`), which another ExternalService of the same name in another
  namespace cannot take (`ForwarderNameInUse`);
- the Forwarder and Gateway objects `<ns>.<name>` in the operator's namespace, kept current from
  the claims' bindings and live EndpointSlices (rules.py computes them);
- status: each source's claim, address and ready pods, and the `ClaimsBound`, `ForwarderReady`,
  `GatewayReady` and `Ready` conditions.

A finalizer removes what lives in other namespaces (owner references cannot cross them) before the
ExternalService goes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.policy_v1 import PodDisruptionBudget

from isthmus.api.base import (
    conditions_equal,
    find_condition,
    merge_conditions,
    new_condition,
)
from isthmus.api.egress import (
    ES_NAME_LABEL,
    ES_NAMESPACE_LABEL,
    EXTERNAL_SERVICE_FINALIZER,
    FORWARDER_HEALTH_PORT,
    FORWARDER_NAMESPACE,
    FORWARDER_POD_LABEL,
    FORWARDER_RELAY_PORT,
    FORWARDER_RELAY_PORT_NAME,
    FORWARDER_SERVICE_ACCOUNT,
    GATEWAY_RELAY_PORT,
    GATEWAY_SERVICE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OPERATOR_FIELD_MANAGER,
    OPERATOR_LEASE,
    OPERATOR_NAMESPACE,
    READY,
    SLICE_MANAGED_BY,
    ExternalService,
    Forwarder,
    Gateway,
    Reason,
    SourceIPClaim,
    dataplane_name,
    forwarder_workload_name,
)
from isthmus.api.image import IMAGE
from isthmus.egress import metrics
from isthmus.egress.binder import BY_USED_CLAIM, Binder, as_dict, set_finalizers
from isthmus.egress.rules import ServiceView, plan, relay_address, source_service
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime import (
    Controller,
    EventRecorder,
    Informer,
    LeaderElection,
    Manager,
    Result,
    Term,
    object_key,
    object_labels,
)

log = logging.getLogger(__name__)

ExternalServiceRes: Any = resource_for(ExternalService)
ForwarderRes: Any = resource_for(Forwarder)
GatewayRes: Any = resource_for(Gateway)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
BY_SOURCE_SERVICE = "source-service"
BY_FORWARDER = "forwarder"
RETRY_SECONDS = 5.0
FORWARDER_REPLICAS = 2
"""Forwarder pods per ExternalService: one keeps serving while the other is drained or rolled."""
FORWARDER_GRACE_SECONDS = 30
"""The forwarder pods' terminationGracePeriodSeconds (kube's default, said aloud): it must exceed the
forwarder's lame-duck period (`isthmus egress-forwarder --shutdown-delay`, 5 s by default)."""


def _source_services(obj: Any) -> list[str]:
    es = as_dict(obj)
    ns = es["metadata"].get("namespace") or ""
    return sorted({f"{(s.get('service') or {}).get('namespace') or ns}/{(s.get('service') or {}).get('name')}"
                   for s in (es.get("spec") or {}).get("sources") or []})


def _owner_key(obj: Any) -> list[str]:
    labels = object_labels(obj)
    ns, name = labels.get(ES_NAMESPACE_LABEL), labels.get(ES_NAME_LABEL)
    return [f"{ns}/{name}"] if ns and name else []


def _slice_service(obj: Any) -> str:
    d = as_dict(obj)
    return f"{d['metadata'].get('namespace')}/{(d['metadata'].get('labels') or {}).get(SERVICE_NAME_LABEL, '')}"


class EgressOperator:
    def __init__(
        self,
        client: AsyncClient,
        *,
        identity: str,
        image: str = IMAGE,
        workers: int = 4,
        forwarder_args: tuple[str, ...] = (),
        forwarder_replicas: int = FORWARDER_REPLICAS,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.client = client
        self.image = image
        self.workers = workers
        self.forwarder_args = forwarder_args
        if forwarder_replicas < 1:
            raise ValueError("an ExternalService needs at least one forwarder replica")
        self.forwarder_replicas = forwarder_replicas
        self.recorder = EventRecorder(client, OPERATOR_FIELD_MANAGER, instance=identity)
        self.binder = Binder(client, self.recorder, workers=workers)
        self.manager = Manager("egress-operator", election=LeaderElection(
            client, OPERATOR_LEASE, OPERATOR_NAMESPACE, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period))
        self.manager.setup(self._wire)
        self.manager.on_exit(self.recorder.aclose)
        self._said: dict[str, str] = {}
        metrics.track_operator(self)

    @property
    def ready(self) -> bool:
        """Leading, caches synced, the forwarders' namespace made."""
        return self.manager.ready

    async def run(self) -> None:
        await self.manager.run()

    def _wire(self, term: Term) -> None:
        factory = term.informers(self.client)
        controllers = self.binder.register(factory)
        self.externals: Informer[Any] = self.binder.externals
        self.claims: Informer[Any] = self.binder.claims
        self.services: Informer[Any] = factory.informer(Service)
        self.slices: Informer[Any] = factory.informer(EndpointSlice)
        self.deployments: Informer[Any] = factory.informer(Deployment, OPERATOR_NAMESPACE)
        self.budgets: Informer[Any] = factory.informer(PodDisruptionBudget, OPERATOR_NAMESPACE)
        self.forwarders: Informer[Any] = factory.informer(ForwarderRes, OPERATOR_NAMESPACE)
        self.gateways: Informer[Any] = factory.informer(GatewayRes, OPERATOR_NAMESPACE)
        self.externals.add_indexer(BY_SOURCE_SERVICE, _source_services)
        self.externals.add_indexer(BY_FORWARDER, lambda o: [forwarder_workload_name(
            as_dict(o)["metadata"].get("namespace") or "", as_dict(o)["metadata"].get("name") or "")])

        c = Controller("egress-externalservices", self.reconcile, workers=self.workers, qps=500.0, burst=5000)
        c.watch(self.externals)
        c.watch(self.claims, lambda o: self.externals.cache.index_keys(BY_USED_CLAIM, object_key(o)))

        def by_service(svc_key: str) -> list[str]:
            ns, _, name = svc_key.partition("/")
            if ns == OPERATOR_NAMESPACE and name == GATEWAY_SERVICE:
                return self.externals.cache.keys()
            if ns == OPERATOR_NAMESPACE:
                return self.externals.cache.index_keys(BY_FORWARDER, name)
            if ns == FORWARDER_NAMESPACE:
                return [k for k in self.externals.cache.keys() if k.split("/", 1)[1] == name]
            return self.externals.cache.index_keys(BY_SOURCE_SERVICE, svc_key)

        c.watch(self.services, lambda o: by_service(object_key(o)))
        c.watch(self.slices, lambda o: by_service(_slice_service(o)))
        for informer in (self.deployments, self.budgets, self.forwarders, self.gateways):
            c.watch(informer, _owner_key)
        self.controller = c
        term.add(*controllers, c)
        term.on_synced(self._synced)

    async def _synced(self) -> None:
        await self._ensure_namespace()
        log.info("egress-operator leading")

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        try:
            return await self._reconcile(key)
        except ApiError as e:
            if helpers.is_conflict(e):
                return Result(requeue_after=0.05)
            raise

    async def _reconcile(self, key: str) -> Result | None:
        raw = self.externals.cache.get(key)
        if raw is None:
            self._said.pop(key, None)
            return None
        es = ExternalService.from_dict(raw)
        ns, name = es.namespace or "", es.name
        finalizers = list(es.metadata.finalizers or [])
        if es.metadata.deletion_timestamp is not None:
            if EXTERNAL_SERVICE_FINALIZER in finalizers:
                await self._remove_dataplane(es)
                await set_finalizers(self.client, ExternalServiceRes, es.metadata, [f for f in finalizers if f != EXTERNAL_SERVICE_FINALIZER])
            return None
        if EXTERNAL_SERVICE_FINALIZER not in finalizers:
            await set_finalizers(self.client, ExternalServiceRes, es.metadata, [*finalizers, EXTERNAL_SERVICE_FINALIZER])
            return None

        existing = self.services.cache.get(f"{FORWARDER_NAMESPACE}/{name}")
        if existing is not None and _owner_key(existing) != [key]:
            owner = (_owner_key(existing) or ["someone else"])[0]
            msg = (f"Service {name}.{FORWARDER_NAMESPACE} belongs to {owner}: ExternalServices of one name in two "
                   "namespaces cannot both be reached as <name>.external-services; rename one")
            await self._status(es, raw, [new_condition(READY, False, Reason.NAME_IN_USE, msg, es.metadata.generation)],
                               None, None, None)
            return None

        claims = {}
        for s in es.spec.sources:
            c = self.claims.cache.get(f"{ns}/{s.source_ip_claim_name}") if s.source_ip_claim_name else None
            if c is not None:
                claims[s.source_ip_claim_name or ""] = SourceIPClaim.from_dict(c)
        services = {k: v for k in {source_service(es, i) for i in range(len(es.spec.sources))}
                    if (v := self._service_view(k)) is not None}
        workload = forwarder_workload_name(ns, name)
        forwarders = self._endpoint_ips(f"{OPERATOR_NAMESPACE}/{workload}")
        gateways = self._endpoint_ips(f"{OPERATOR_NAMESPACE}/{GATEWAY_SERVICE}")
        # The gateway admits every forwarder pod, a starting one too: it relays as soon as it is ready,
        # which may be before the operator has seen that and told the gateway.
        p = plan(es, claims, services, forwarder_ips=self._endpoint_ips(f"{OPERATOR_NAMESPACE}/{workload}", every=True),
                 forwarder_address=relay_address(forwarders, FORWARDER_RELAY_PORT),
                 gateway_address=relay_address(gateways, GATEWAY_RELAY_PORT), gateway_ips=gateways)

        await self._apply_deployment(es, workload)
        await self._apply_budget(es, workload)
        await self._apply_forwarder_services(es, workload, self._endpoints(f"{OPERATOR_NAMESPACE}/{workload}"))
        dp = dataplane_name(ns, name)
        labels = {ES_NAMESPACE_LABEL: ns, ES_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY_VALUE}
        fwd_obj = await self._apply_if_changed(self.forwarders, Forwarder(spec=p.forwarder), dp, labels)
        gw_obj = await self._apply_if_changed(self.gateways, Gateway(spec=p.gateway), dp, labels)

        conditions = self._conditions(es, p.problems, fwd_obj, gw_obj)
        await self._status(es, raw, conditions, p.sources,
                           ",".join(s.source_ip for s in p.sources if s.source_ip) or None,
                           f"{OPERATOR_NAMESPACE}/{workload}")
        not_ready = [c for c in conditions if c.type == READY and not c.is_true]
        return Result(requeue_after=RETRY_SECONDS) if not_ready and p.problems else None

    def _service_view(self, key: str) -> ServiceView | None:
        raw = self.services.cache.get(key)
        if raw is None:
            return None
        spec = as_dict(raw).get("spec") or {}
        ip = spec.get("clusterIP")
        return ServiceView(cluster_ip=ip if ip and ip != "None" else None,
                           ports=tuple((p.get("protocol") or "TCP", int(p["port"])) for p in spec.get("ports") or []),
                           ready_ips=tuple(self._endpoint_ips(key)), pod_ips=tuple(self._endpoint_ips(key, every=True)))

    def _endpoint_ips(self, svc_key: str, *, every: bool = False) -> list[str]:
        """The Service's ready endpoint addresses (`every`: all of them, not ready and terminating too)."""
        return [ip for ip, conditions in self._endpoints(svc_key) if every or conditions["ready"]]

    def _conditions(self, es: ExternalService, problems: list[tuple[str, str]], fwd: Forwarder | None,
                    gw: Gateway | None) -> list[Any]:
        gen = es.metadata.generation
        out = []
        if problems:
            reason = problems[0][0]
            out.append(new_condition("ClaimsBound", not any(r.startswith("Claim") for r, _ in problems),
                                     reason if reason.startswith("Claim") else Reason.BOUND,
                                     "; ".join(m for r, m in problems if r.startswith("Claim")), gen))
        else:
            out.append(new_condition("ClaimsBound", True, Reason.BOUND, "every source's claim is bound", gen))
        dep = self.deployments.cache.get(f"{OPERATOR_NAMESPACE}/{forwarder_workload_name(es.namespace or '', es.name)}")
        ready_replicas = ((as_dict(dep).get("status") or {}).get("readyReplicas") or 0) if dep is not None else 0
        fwd_cond = find_condition(fwd.status.conditions, READY) if fwd is not None else None
        fwd_ok = (ready_replicas > 0 and fwd is not None and fwd_cond is not None and fwd_cond.is_true
                  and fwd.status.observed_generation == fwd.metadata.generation)
        out.append(new_condition("ForwarderReady", fwd_ok, Reason.READY if fwd_ok else Reason.FORWARDER_NOT_READY,
                                 f"{ready_replicas} forwarder pod(s) ready" if fwd_ok else
                                 f"forwarder {es.name}.{FORWARDER_NAMESPACE}: {ready_replicas} pod(s) ready"
                                 + (f"; {fwd_cond.message}" if fwd_cond is not None and fwd_cond.message else ""),
                                 gen))
        gw_cond = find_condition(gw.status.conditions, READY) if gw is not None else None
        gw_ok = (gw is not None and gw_cond is not None and gw_cond.is_true
                 and gw.status.observed_generation == gw.metadata.generation)
        gw_msg = (f"programmed by {gw.status.holder}" if gw_ok and gw is not None else
                  (gw_cond.message if gw_cond is not None else "no gateway leader has programmed the rules yet"))
        out.append(new_condition("GatewayReady", gw_ok, gw_cond.reason if gw_cond is not None and not gw_ok else
                                 (Reason.PROGRAMMED if gw_ok else Reason.NO_GATEWAY), gw_msg, gen))
        blocking = [c for c in out if not c.is_true]
        if blocking:
            first = blocking[0]
            out.append(new_condition(READY, False, first.reason, f"{first.type}: {first.message}", gen))
        else:
            out.append(new_condition(READY, True, Reason.READY, f"reachable as {es.name}.{FORWARDER_NAMESPACE}", gen))
        return out

    async def _status(self, es: ExternalService, raw: Any, conditions: list[Any], sources: Any,
                      source_ips: str | None, forwarder: str | None) -> None:
        merged = merge_conditions(es.status.conditions, conditions)
        ready = find_condition(conditions, READY)
        key = f"{es.namespace}/{es.name}"
        if ready is not None and not ready.is_true and self._said.get(key) != ready.reason:
            self.recorder.warning(raw, ready.reason, ready.message)
        self._said[key] = ready.reason if ready is not None else ""
        body: dict[str, Any] = {}
        if not conditions_equal(merged, es.status.conditions):
            body["conditions"] = [c.to_dict() for c in merged]
        src = [s.to_dict() for s in sources] if sources is not None else None
        current = es.status.to_dict()
        for field, value in (("sources", src), ("sourceIPs", source_ips), ("forwarder", forwarder),
                             ("address", f"{es.name}.{FORWARDER_NAMESPACE}"),
                             ("observedGeneration", es.metadata.generation)):
            if current.get(field) != value:
                body[field] = value
        if body:
            await helpers.merge_patch(self.client, ExternalServiceRes.Status, es.name, {"status": body},
                                      namespace=es.namespace, field_manager=OPERATOR_FIELD_MANAGER)

    async def _apply_if_changed(self, informer: Informer[Any], obj: Forwarder | Gateway, name: str,
                                labels: dict[str, str]) -> Any:
        current = informer.cache.get(f"{OPERATOR_NAMESPACE}/{name}")
        model = type(obj)
        if current is not None:
            cur = model.from_dict(current)
            if cur.spec == obj.spec and (cur.metadata.labels or {}).items() >= labels.items():
                return cur
        obj.metadata.name, obj.metadata.namespace, obj.metadata.labels = name, OPERATOR_NAMESPACE, labels
        body = obj.to_dict()
        body.pop("status", None)
        out = await self.client.apply(resource_for(model).from_dict(body), field_manager=OPERATOR_FIELD_MANAGER,
                                      force=True)
        return model.from_dict(out)

    def _labels(self, es: ExternalService) -> dict[str, str]:
        return forwarder_labels(es)

    def _ports(self, es: ExternalService) -> list[dict[str, Any]]:
        """The forwarder's ports: each of the ExternalService's (port → targetPort), and the relay."""
        ports: list[dict[str, Any]] = [{"name": p.name or f"{p.protocol.lower()}-{p.port}", "protocol": p.protocol,
                                        "port": p.port, "targetPort": p.listen_port} for p in es.spec.ports]
        ports.append({"name": FORWARDER_RELAY_PORT_NAME, "protocol": "TCP", "port": FORWARDER_RELAY_PORT,
                      "targetPort": FORWARDER_RELAY_PORT})
        return ports

    def _endpoints(self, svc_key: str) -> list[tuple[str, dict[str, bool]]]:
        """(address, conditions) of every endpoint of the Service's EndpointSlices, by address."""
        ns, _, name = svc_key.partition("/")
        out: dict[str, dict[str, bool]] = {}
        for raw in self.slices.cache.list_namespace(ns):
            d = as_dict(raw)
            if (d["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) != name:
                continue
            for ep in d.get("endpoints") or []:
                c = ep.get("conditions") or {}
                ready = c.get("ready") is not False
                conditions = {"ready": ready, "serving": bool(c.get("serving", ready)),
                              "terminating": bool(c.get("terminating", False))}
                out.update({ip: conditions for ip in ep.get("addresses") or []})
        return sorted(out.items())

    async def _apply_forwarder_services(self, es: ExternalService, workload: str,
                                        endpoints_of: list[tuple[str, dict[str, bool]]]) -> None:
        """The Service over the forwarder pods (operator's namespace), and its public face `<name>` in
        external-services: no selector, an EndpointSlice mirroring the first one's endpoints with their
        conditions, so a forwarder in its lame duck (serving, terminating) stays the proxies' fallback
        when none is ready, as kube-proxy does for a Service's own pods."""
        ports = self._ports(es)
        internal: dict[str, Any] = {"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": workload, "namespace": OPERATOR_NAMESPACE, "labels": self._labels(es)},
                    "spec": {"selector": {FORWARDER_POD_LABEL: workload}, "ports": ports}}
        public: dict[str, Any] = {"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": es.name, "namespace": FORWARDER_NAMESPACE, "labels": self._labels(es)},
                  "spec": {"ports": ports}}
        for body in (internal, public):
            current = self.services.cache.get(f"{body['metadata']['namespace']}/{body['metadata']['name']}")
            if current is None or not _same(as_dict(current), body):
                await self.client.apply(Service.from_dict(body), field_manager=OPERATOR_FIELD_MANAGER,  # type: ignore[call-overload]
                                        force=True)
        slice_name = f"{es.name}-forwarder"
        endpoints = [{"addresses": [ip], "conditions": conditions} for ip, conditions in endpoints_of]
        published: dict[str, Any] = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": slice_name, "namespace": FORWARDER_NAMESPACE,
                             "labels": {**self._labels(es), SERVICE_NAME_LABEL: es.name,
                                        SLICE_MANAGED_BY_LABEL: SLICE_MANAGED_BY}},
                "addressType": "IPv6" if any(":" in ip for ip, _ in endpoints_of) else "IPv4",
                "endpoints": endpoints,
                "ports": [{"name": p["name"], "protocol": p["protocol"], "port": p["targetPort"]} for p in ports]}
        current = self.slices.cache.get(f"{FORWARDER_NAMESPACE}/{slice_name}")
        if current is None or not _same(as_dict(current), published):
            await self.client.apply(EndpointSlice.from_dict(published), field_manager=OPERATOR_FIELD_MANAGER,  # type: ignore[call-overload]
                                    force=True)

    async def _ensure_namespace(self) -> None:
        """external-services is where forwarders are published; made here rather than by the manifests,
        so an install moved to another namespace keeps every workload in that one (kustomize's
        namespace transformer would rename a second Namespace object to the same one). The
        operator may create no other namespace: deploy/member/egress's admission policy says so."""
        client: Any = self.client
        try:
            await client.create(Namespace.from_dict({"metadata": {
                "name": FORWARDER_NAMESPACE, "labels": forwarder_namespace_labels()}}))
        except ApiError as e:
            if e.status.code != 409:
                raise

    async def _apply_deployment(self, es: ExternalService, workload: str) -> None:
        body = forwarder_deployment(es, workload, self._labels(es), self.image, self.forwarder_args,
                                    replicas=self.forwarder_replicas)
        current = self.deployments.cache.get(f"{OPERATOR_NAMESPACE}/{workload}")
        if current is not None and _same(as_dict(current), body):
            return
        await self.client.apply(Deployment.from_dict(body), field_manager=OPERATOR_FIELD_MANAGER, force=True)  # type: ignore[call-overload]

    async def _apply_budget(self, es: ExternalService, workload: str) -> None:
        body = forwarder_budget(workload, self._labels(es))
        current = self.budgets.cache.get(f"{OPERATOR_NAMESPACE}/{workload}")
        if current is not None and _same(as_dict(current), body):
            return
        await self.client.apply(PodDisruptionBudget.from_dict(body), field_manager=OPERATOR_FIELD_MANAGER,  # type: ignore[call-overload]
                                force=True)

    async def _remove_dataplane(self, es: ExternalService) -> None:
        key = f"{es.namespace}/{es.name}"
        workload = forwarder_workload_name(es.namespace or "", es.name)
        for res, ns, name, cache in ((Deployment, OPERATOR_NAMESPACE, workload, self.deployments),
                                     (PodDisruptionBudget, OPERATOR_NAMESPACE, workload, self.budgets),
                                     (Service, OPERATOR_NAMESPACE, workload, self.services),
                                     (Service, FORWARDER_NAMESPACE, es.name, self.services),
                                     (EndpointSlice, FORWARDER_NAMESPACE, f"{es.name}-forwarder", self.slices),
                                     (ForwarderRes, OPERATOR_NAMESPACE, dataplane_name(es.namespace or "", es.name),
                                      self.forwarders),
                                     (GatewayRes, OPERATOR_NAMESPACE, dataplane_name(es.namespace or "", es.name),
                                      self.gateways)):
            current = cache.cache.get(f"{ns}/{name}")
            if current is not None and _owner_key(current) == [key]:
                await helpers.ensure_deleted(self.client, res, name, namespace=ns)


def _same(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether every field we set is already there (the server adds defaults we do not compare)."""
    return _contains(current, desired)


def _contains(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(
            _contains(h, w) for h, w in zip(have, want, strict=True))
    return bool(have == want)


def forwarder_namespace_labels() -> dict[str, str]:
    """external-services' labels: no pod runs there (forwarders run in the operator's namespace), so
    Pod Security's strictest level, as isthmus-system has it (deploy/member/namespace.yaml)."""
    levels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    versions = {"pod-security.kubernetes.io/enforce-version": "v1.32",
                "pod-security.kubernetes.io/warn-version": "latest",
                "pod-security.kubernetes.io/audit-version": "latest"}
    return {"app.kubernetes.io/part-of": "isthmus", **levels, **versions}


def forwarder_labels(es: ExternalService) -> dict[str, str]:
    """The labels of an ExternalService's forwarder objects."""
    return {ES_NAMESPACE_LABEL: es.namespace or "", ES_NAME_LABEL: es.name, MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            "app.kubernetes.io/name": "isthmus-egress-forwarder", "app.kubernetes.io/part-of": "isthmus"}


METRICS_PORT_NAME = "metrics"
"""What every Isthmus pod names its /metrics (and probe) port: the metrics Service in
deploy/monitoring targets it by this name, so a pod naming it otherwise is never scraped."""


def forwarder_deployment(es: ExternalService, workload: str, labels: dict[str, str], image: str,
                         forwarder_args: Sequence[str], *, replicas: int = FORWARDER_REPLICAS) -> dict[str, Any]:
    """The forwarder Deployment of an ExternalService (in the operator's namespace).

    Clients reach the forwarder only through its pods: with one, every drain of its node and every
    rollout refuses new connections until a new pod is ready. So `replicas` (two by default), on
    different nodes where there are several, and a rollout that starts the new pod before it stops an
    old one (maxSurge 1, maxUnavailable 0) — the old one then drains in its lame duck
    (`egress-forwarder --shutdown-delay`) while the operator takes it out of the published slice."""
    dp = dataplane_name(es.namespace or "", es.name)
    pod_labels = {FORWARDER_POD_LABEL: workload, "app.kubernetes.io/name": "isthmus-egress-forwarder",
                  "app.kubernetes.io/part-of": "isthmus"}
    listen = sorted({(p.protocol, p.listen_port) for p in es.spec.ports})
    container = {
        "name": "forwarder",
        "image": image,
        "args": ["egress-forwarder", f"--forwarder={dp}", "--listen=$(POD_IP)",
                 f"--metrics-addr=$(POD_IP):{FORWARDER_HEALTH_PORT}", *forwarder_args],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [*({"containerPort": port, "protocol": proto} for proto, port in listen),
                  {"name": FORWARDER_RELAY_PORT_NAME, "containerPort": FORWARDER_RELAY_PORT, "protocol": "TCP"},
                  {"name": METRICS_PORT_NAME, "containerPort": FORWARDER_HEALTH_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": METRICS_PORT_NAME}, "periodSeconds": 2,
                           "timeoutSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": METRICS_PORT_NAME}, "periodSeconds": 10,
                          "timeoutSeconds": 2, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": workload, "namespace": OPERATOR_NAMESPACE, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {FORWARDER_POD_LABEL: workload}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"serviceAccountName": FORWARDER_SERVICE_ACCOUNT,
                                           "terminationGracePeriodSeconds": FORWARDER_GRACE_SECONDS,
                                           # Preferred, not required: on one node (or with more replicas
                                           # than nodes) the pods still run, together.
                                           "affinity": {"podAntiAffinity": {
                                               "preferredDuringSchedulingIgnoredDuringExecution": [{
                                                   "weight": 100, "podAffinityTerm": {
                                                       "topologyKey": "kubernetes.io/hostname",
                                                       "labelSelector": {"matchLabels": {
                                                           FORWARDER_POD_LABEL: workload}}}}]}},
                                           "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                                               "seccompProfile": {"type": "RuntimeDefault"}},
                                           "containers": [container]}}}}
    return body


def forwarder_budget(workload: str, labels: dict[str, str]) -> dict[str, Any]:
    """The forwarder's PodDisruptionBudget: a drain evicts one of its pods at a time, so with two one
    keeps serving; `maxUnavailable` (not `minAvailable: 1`) so a one-replica forwarder can still be
    drained. Same name, namespace and labels as its Deployment (no owner reference: the
    ExternalService is in another namespace; the operator deletes it with the Deployment)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": workload, "namespace": OPERATOR_NAMESPACE, "labels": labels},
            "spec": {"maxUnavailable": 1,
                     # A forwarder pod that is not ready serves nothing: evicting it costs nothing, and
                     # kube's default (IfHealthyBudget) would block a drain on a crash-looping one.
                     "unhealthyPodEvictionPolicy": "AlwaysAllow",
                     "selector": {"matchLabels": {FORWARDER_POD_LABEL: workload}}}}
