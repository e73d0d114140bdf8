"""POST .../pods/<name>/eviction: a Pod deleted only as its PodDisruptionBudget allows (kube's EvictionREST).

As kube-apiserver 1.32's pkg/registry/core/pod/storage/eviction.go: a Pod that is finished,
Pending or already terminating is deleted at once; otherwise the one PodDisruptionBudget whose
selector matches it decides. An unready Pod is deleted without spending the budget when its PDB's
unhealthyPodEvictionPolicy is AlwaysAllow, or (IfHealthyBudget, the default) when the
application is healthy enough already; any other eviction takes one of the PDB's
`status.disruptionsAllowed` (a status write with optimistic concurrency, retried on conflict,
recording the Pod in `disruptedPods` for the disruption controller) or is refused with 429.
Before deleting, the Pod gets the condition DisruptionTarget (EvictionByEvictionAPI). The
Eviction's deleteOptions (grace period, preconditions, dry run) are those of the deletion.

The PDB's status itself is the disruption controller's (kube-controller-manager's, here
kube-lite's): the handler only spends from it.
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from isthmus.apiserver.admission.matching import label_selector_matches
from isthmus.apiserver.apimachinery import errors, meta
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.handlers.common import (
    HandlerContext,
    json_response,
    read_body,
    subresource_object,
    user_of,
)
from isthmus.apiserver.handlers.scope import _manager_from_agent
from isthmus.apiserver.handlers.subadmission import admit_create
from isthmus.apiserver.registry.resources import ResourceInfo
from isthmus.apiserver.registry.store import SYSTEM_ADMIN

Obj = dict[str, Any]

KIND = "Eviction"
# kube's EvictionREST.AcceptsGroupVersion: both; v1 is what discovery names.
API_VERSIONS = ("policy/v1", "policy/v1beta1")
# kube's MaxDisruptedPodSize: evictions approved but not yet seen by the disruption controller.
MAX_DISRUPTED_PODS = 2000
# kube's EvictionsRetry has 20 steps; here nothing sleeps (a conflict means another write landed).
RETRIES = 20
# What kube-apiserver's loopback client writes the PDB status as (its user agent's first word).
LOOPBACK_MANAGER = "kube-apiserver"
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def is_eviction(group: str, version: str, rest: list[str]) -> bool:
    """Whether a resource path (after /api/v1) is a Pod's eviction subresource."""
    return (not group and version == "v1" and len(rest) == 5 and rest[0] == "namespaces" and rest[2] == "pods"
            and rest[4] == "eviction")


# ---------------------------------------------------------------------- pure rules


def can_ignore_pdb(pod: Obj) -> bool:
    """A finished, Pending or terminating Pod has no budget to respect (kube's canIgnorePDB)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def should_enforce_resource_version(pod: Obj) -> bool:
    """Whether deleting a PDB-ignoring Pod must not race with it becoming ready (not finished, not terminating)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def is_ready(pod: Obj) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict))


def selects(selector: Any, labels: dict[str, str]) -> bool:
    """Whether a PDB's selector picks the Pod: one that is nil, empty or unparseable picks none."""
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    for req in selector.get("matchExpressions") or []:
        if not isinstance(req, dict) or req.get("operator") not in _OPERATORS:
            return False
        if req["operator"] in ("In", "NotIn") and not req.get("values"):
            return False
    return label_selector_matches(selector, labels)


def matching_pdbs(pdbs: list[Obj], pod: Obj) -> list[Obj]:
    labels = pod["metadata"].get("labels") or {}
    return [p for p in pdbs if selects((p.get("spec") or {}).get("selector"), labels)]


def too_many_requests(message: str, cause: str, retry_after: int) -> errors.ApiError:
    """errors.NewTooManyRequests with a DisruptionBudget cause, as the eviction handler builds them."""
    details: Obj = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return errors.ApiError(429, "TooManyRequests", message, details)


def still_processing(pdb_name: str) -> errors.ApiError:
    """kube's createTooManyRequestsError."""
    return too_many_requests(VIOLATES, f"The disruption budget {pdb_name} is still being processed by the server.", 10)


def _forbidden(pdb_name: str, why: str) -> errors.ApiError:
    return errors.forbidden(why, "policy", "poddisruptionbudget", pdb_name)


def set_disruption_allowed_condition(status: Obj, now: str) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition through meta.SetStatusCondition."""
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    want = {"type": "DisruptionAllowed", "status": "True" if allowed else "False",
            "observedGeneration": int(status.get("observedGeneration") or 0),
            "reason": "SufficientPods" if allowed else "InsufficientPods", "message": ""}
    conditions = status.setdefault("conditions", [])
    for c in conditions:
        if c.get("type") == "DisruptionAllowed":
            if c.get("status") != want["status"]:
                c["lastTransitionTime"] = now
            c.update(status=want["status"], reason=want["reason"], message="",
                     observedGeneration=want["observedGeneration"])
            return
    conditions.append({**want, "lastTransitionTime": now})


def spend(pdb: Obj, pod_name: str, now: str, dry_run: bool) -> Obj:
    """kube's checkAndDecrement: the PDB with one disruption spent and the Pod recorded, or ApiError."""
    name = pdb["metadata"]["name"]
    status = clone(pdb.get("status") or {})
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        raise still_processing(name)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise _forbidden(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise _forbidden(name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise too_many_requests(VIOLATES, f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} "
                                          f"healthy pods and has {int(status.get('currentHealthy') or 0)} currently", 0)
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        set_disruption_allowed_condition(status, now)
    if not dry_run:
        status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: now}
    return {**pdb, "status": status}


def disruption_target(status: Obj, now: str) -> None:
    """podutil.UpdatePodCondition with DisruptionTarget=True, reason EvictionByEvictionAPI."""
    want = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None, "lastTransitionTime": now,
            "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}
    conditions = status.setdefault("conditions", [])
    for i, c in enumerate(conditions):
        if c.get("type") == "DisruptionTarget":
            if c.get("status") == "True":
                want["lastTransitionTime"] = c.get("lastTransitionTime")
            conditions[i] = want
            return
    conditions.append(want)


def delete_options(eviction: Obj, query_dry_run: bool) -> Obj:
    """propagateDryRun: the Eviction's deleteOptions, with the request's dryRun when it names none."""
    options = eviction.get("deleteOptions")
    if options is None:
        return {"dryRun": ["All"]} if query_dry_run else {}
    if not isinstance(options, dict):
        raise errors.bad_request("deleteOptions must be an object")
    options = dict(options)
    request = ["All"] if query_dry_run else []
    if not options.get("dryRun"):
        if request:
            options["dryRun"] = request
    elif request and options["dryRun"] != request:
        raise errors.ApiError(500, "", f"Non-matching dry-run options in request and content: [All] and "
                                       f"[{' '.join(map(str, options['dryRun']))}]")
    return options


def _replace(new: Obj, _live: Obj) -> Obj:
    """An update's build: the object as the client sends it (its resourceVersion the precondition)."""
    out: Obj = clone(new)
    return out


def _rv_unset(options: Obj) -> bool:
    return not (options.get("preconditions") or {}).get("resourceVersion")


def _with_rv(options: Obj, rv: str) -> Obj:
    return {**options, "preconditions": {**(options.get("preconditions") or {}), "resourceVersion": rv}}


# ---------------------------------------------------------------------- the request


class _Eviction:
    """One eviction request: the steps of kube's EvictionREST.Create that touch the store."""

    def __init__(self, ctx: HandlerContext, request: web.Request, namespace: str, name: str, options: Obj) -> None:
        self.ctx, self.request, self.ns, self.name, self.options = ctx, request, namespace, name, options
        self.pods: ResourceInfo = ctx.resources.get("", "v1", "pods")
        self.pdbs: ResourceInfo = ctx.resources.get("policy", "v1", "poddisruptionbudgets")
        self.dry_run = options.get("dryRun") == ["All"]
        agent = request.headers.get("User-Agent", "")
        self.manager = request.query.get("fieldManager") or _manager_from_agent(agent)

    def pod(self) -> Obj:
        live = self.ctx.storage.get(self.pods.key, self.ns, self.name)
        if live is None:
            raise errors.not_found("", "pods", self.name)
        return live

    async def delete(self, options: Obj) -> None:
        """addConditionAndDeletePod: the DisruptionTarget condition (checked against the
        preconditions on the latest Pod), then the deletion with these options."""
        if not self.dry_run:
            pre = options.get("preconditions") or {}

            def with_condition(latest: Obj) -> Obj:
                lm = latest["metadata"]
                if pre.get("uid") and pre["uid"] != lm.get("uid"):
                    raise errors.conflict("", "Pod", self.name, f"the UID in the precondition ({pre['uid']}) does not "
                                          f"match the UID in record ({lm.get('uid')}). The object might have been "
                                          "deleted and then recreated")
                if pre.get("resourceVersion") and pre["resourceVersion"] != lm.get("resourceVersion"):
                    raise errors.conflict("", "Pod", self.name, f"the ResourceVersion in the precondition "
                                          f"({pre['resourceVersion']}) does not match the ResourceVersion in record "
                                          f"({lm.get('resourceVersion')}). The object might have been modified")
                status = latest.get("status")
                if not isinstance(status, dict):
                    latest["status"] = status = {}
                disruption_target(status, meta.now_rfc3339())
                return latest

            updated, _ = await self.ctx.store.update(self.pods, self.ns, self.name, with_condition,
                                                     subresource="status", manager=self.manager,
                                                     user=user_of(self.request))
            if not _rv_unset(options):  # the condition bumped it, and it was this request's write
                options = _with_rv(options, str(updated["metadata"].get("resourceVersion")))
        await self.ctx.store.delete(self.pods, self.ns, self.name, options, dry_run=self.dry_run,
                                    user=user_of(self.request))

    async def spend_budget(self, pdb: Obj, pod_name: str) -> None:
        """Verify-and-decrement, retried on conflict with a fresh read of the PDB (RetryOnConflict)."""
        name = pdb["metadata"]["name"]
        last: errors.ApiError | None = None
        for _ in range(RETRIES):
            spent = spend(pdb, pod_name, meta.now_rfc3339(), self.dry_run)
            if self.dry_run:
                return
            try:
                await self.ctx.store.update(self.pdbs, self.ns, name, functools.partial(_replace, spent),
                                            subresource="status", manager=LOOPBACK_MANAGER, user=SYSTEM_ADMIN)
                return
            except errors.ApiError as e:
                if e.code != 409:
                    raise
                last = e
            fresh = self.ctx.storage.get(self.pdbs.key, self.ns, name)
            if fresh is None:
                raise errors.not_found("policy", "poddisruptionbudgets", name)
            pdb = self.pdbs.strategy.from_storage(fresh)
        assert last is not None
        raise last

    async def run(self) -> Obj | None:
        """None: evicted; else the Status kube answers with instead (several PDBs)."""
        original = self.options
        retry_conflicts = _rv_unset(original)
        pod: Obj | None = None
        for attempt in range(RETRIES):
            pod = self.pod()
            if not can_ignore_pdb(pod):
                break
            options = original
            if should_enforce_resource_version(pod) and _rv_unset(original):
                options = _with_rv(original, str(pod["metadata"].get("resourceVersion")))
            try:
                await self.delete(options)
                return None
            except errors.ApiError as e:
                if e.code != 409 or not retry_conflicts or attempt == RETRIES - 1:
                    raise
        assert pod is not None
        pdbs = matching_pdbs([self.pdbs.strategy.from_storage(p) for p in
                              self.ctx.storage.list(self.pdbs.key, self.ns)], pod)
        if len(pdbs) > 1:
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": MORE_THAN_ONE, "code": 500}
        unready_allowed = False
        pdb_name = ""
        if pdbs:
            pdb = pdbs[0]
            pdb_name = pdb["metadata"]["name"]
            status = pdb.get("status") or {}
            if not is_ready(pod):
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
                desired = int(status.get("desiredHealthy") or 0)
                if policy == "AlwaysAllow" or (int(status.get("currentHealthy") or 0) >= desired and desired > 0):
                    unready_allowed = True  # not counted as healthy: nothing to spend
            if not unready_allowed:
                await self.spend_budget(pdb, pod["metadata"]["name"])
        options = original
        if unready_allowed:  # the Pod must not have turned ready since it was judged
            options = _with_rv(original, str(pod["metadata"].get("resourceVersion")))
        try:
            await self.delete(options)
        except errors.ApiError as e:
            if e.code == 409 and unready_allowed and _rv_unset(original):
                raise still_processing(pdb_name) from None
            raise
        return None


def _decode(body: Any) -> Obj:
    return subresource_object(body, KIND, API_VERSIONS)


async def serve(ctx: HandlerContext, request: web.Request, rest: list[str]) -> web.Response:
    if request.method != "POST":
        raise errors.method_not_allowed()
    namespace, name = rest[1], rest[3]
    if request.query.get("dryRun") not in (None, "", "All"):
        raise errors.bad_request(f"unsupported dry run value: {request.query.get('dryRun')!r}")
    eviction = _decode(await read_body(ctx, request))
    m = eviction["metadata"]
    if m.get("namespace") and m["namespace"] != namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the "
                                 "request")
    if str(m.get("name") or "") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    query_dry_run = request.query.get("dryRun") == "All"
    body_dry_run = isinstance(eviction.get("deleteOptions"), dict) and eviction["deleteOptions"].get("dryRun")
    eviction = await admit_create(ctx, request, KIND, "eviction", namespace, name, eviction,
                                  query_dry_run or bool(body_dry_run))
    options = delete_options(eviction, query_dry_run)
    if ctx.storage.get("/namespaces", "", namespace) is None:
        raise errors.not_found("", "namespaces", namespace)
    refused = await _Eviction(ctx, request, namespace, name, options).run()
    if refused is not None:
        return json_response(refused, status=int(refused["code"]), request=request)
    return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                         status=201, request=request)
