"""The generic store: create, update (bodies, patches, apply) and delete for every resource type.

kube's genericregistry.Store over storage: build the new object, prepare it, default, prune and
validate it (422), admit it (mutating hooks and webhooks, ValidatingAdmissionPolicies, validating hooks and webhooks), then
commit with optimistic concurrency.
What differs between kinds is the strategy's (registry/strategy.py, which lists the order its
hooks are called in); this module never asks which kind it writes.

Storage methods never await, so everything between reading the live object and committing is
atomic on the event loop, except admission: when a hook awaited and the object changed
meanwhile, the write is recomputed (kube's GuaranteedUpdate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.admission.chain import Admission
from isthmus.apiserver.admission.policy.engine import ValidatingAdmissionPolicies
from isthmus.apiserver.admission.webhook.dispatch import Webhooks
from isthmus.apiserver.apimachinery import errors, meta
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.fieldmanager.fieldmanager import server_side_apply, track_update
from isthmus.apiserver.openapi import schema
from isthmus.apiserver.registry import namespace
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.serializer.decoding import StrictIssues
from isthmus.apiserver.storage.store import Store

__all__ = ["GenericStore", "clone"]

Obj = dict[str, Any]


# Metadata the server owns: never taken from a client's update.
SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
               "managedFields", "selfLink")
MAX_RETRIES = 8
# kube's maxNameGenerationCreateAttempts: generated names tried before giving up (RetryGenerateName).
MAX_NAME_ATTEMPTS = 8
# Who writes when a caller names nobody (the server's own loopback writes): kube's privileged group.
SYSTEM_ADMIN = UserInfo("system:admin", groups=("system:masters", "system:authenticated"))

User = UserInfo | str


def user_info(user: User) -> UserInfo:
    """A caller's user: a UserInfo as authentication made it, or just a name (controllers)."""
    if isinstance(user, UserInfo):
        return user
    return SYSTEM_ADMIN if user == SYSTEM_ADMIN.username else UserInfo(user)


def _name_taken(info: ResourceInfo, m: Obj, name: str) -> errors.ApiError:
    """kube's CheckGeneratedNameError: 409 AlreadyExists; with a generateName in the object (even
    beside a name of the client's) kube words it as a failed generation and asks to retry in 1s."""
    err = errors.already_exists(info.group, info.plural, name)
    if m.get("generateName"):
        err = errors.ApiError(409, "AlreadyExists", f"{err.message}, the server was not able to generate a "
                              "unique name for the object", {**(err.details or {}), "retryAfterSeconds": 1})
    return err


# The built-in kinds whose kube strategies keep metadata.generation (PrepareForCreate sets it to 1,
# PrepareForUpdate bumps it when the spec changes), as kube-apiserver v1.32 serves them: the kinds
# a controller reconciles and reports observedGeneration on. Every other built-in kind (ConfigMaps,
# Secrets, Pods, Services, Namespaces, RBAC, Events, HPAs, ...) carries none; custom resources always do.
GENERATION_KINDS = frozenset({
    ("", "replicationcontrollers"),
    ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"), ("apps", "daemonsets"),
    ("batch", "jobs"), ("batch", "cronjobs"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "ingresses"), ("networking.k8s.io", "ingressclasses"),
    ("networking.k8s.io", "networkpolicies"),
    ("discovery.k8s.io", "endpointslices"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"), ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"),
})
# Deployments' annotations are copied to their ReplicaSets: kube bumps the generation for them too.
ANNOTATED_GENERATION_KINDS = frozenset({("apps", "deployments")})


def tracks_generation(info: ResourceInfo) -> bool:
    """Whether objects of this resource carry metadata.generation."""
    return not info.builtin or (info.group, info.plural) in GENERATION_KINDS


def _spec_view(obj: Obj, has_status: bool) -> Obj:
    """What metadata.generation tracks: everything but metadata (and status when it is a subresource)."""
    return {k: v for k, v in obj.items() if k != "metadata" and not (has_status and k == "status")}


def _completes_deletion(info: ResourceInfo, live: Obj, new: Obj) -> bool:
    """kube's shouldDeleteDuringUpdate: an update of a deleting object deletes it when it removes
    what held it (the last finalizer, or what the strategy holds it for), unless it is a Pod still
    terminating gracefully (deletionGracePeriodSeconds > 0: the kubelet deletes it, grace 0). An
    update of a deleting object nothing held (a terminating Pod's status) keeps it."""
    nm = new["metadata"]
    if not nm.get("deletionTimestamp") or nm.get("finalizers") or info.strategy.holds_deletion(new):
        return False
    if not live["metadata"].get("finalizers") and not info.strategy.holds_deletion(live):
        return False
    return not int(nm.get("deletionGracePeriodSeconds") or 0)


def _without_volatile(obj: Obj) -> Obj:
    """The object as compared to decide whether a write is a no-op."""
    m = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": m}


def _encoded_elsewhere(info: ResourceInfo, stored: Obj | None, new: Obj) -> bool:
    """Whether the stored object is kept under another version than a write would store it: kube
    compares the encoded bytes, so an unchanged object still stored at an older storage version is
    rewritten (how a storage migration moves objects to a new storage version)."""
    if stored is None or info.strategy.plain_storage:
        return False
    return bool(stored.get("apiVersion") != info.strategy.to_storage(new).get("apiVersion"))


def _status_schema(root: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of `status` when the root's rules reach status only through it (no unknown fields
    kept at the root, status declared); None: walk the whole object."""
    resolved = schema.resolve_all_of(root)
    if not resolved or resolved.get("x-kubernetes-preserve-unknown-fields") or resolved.get("anyOf") \
            or resolved.get("oneOf") or resolved.get("not"):
        return None
    props = resolved.get("properties")
    sub = props.get("status") if isinstance(props, dict) else None
    return sub if isinstance(sub, dict) else None


class GenericStore:
    """Writes of every resource type, through one pipeline; reads go to `storage` directly."""

    def __init__(self, storage: Store, resources: ResourceRegistry, admission: Admission) -> None:
        self.storage = storage
        self.resources = resources
        self.admission = admission
        # The ValidatingAdmissionPolicy plugin reads the policies stored here; told of every write.
        admission.policies = ValidatingAdmissionPolicies(storage, resources)
        storage.on_write(admission.policies.on_write, keys=admission.policies.write_keys)
        admission.webhooks = Webhooks(storage, resources)
        storage.on_write(admission.webhooks.on_write, keys=admission.webhooks.write_keys)

    # ------------------------------------------------------------------ shared steps

    def check_kind(self, info: ResourceInfo, obj: Any) -> Obj:
        """The body is an object of this resource's kind (any served version); apiVersion/kind set."""
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the object provided is unrecognized: expected a {info.kind} object")
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if av and av != info.api_version and not self.resources.serves(info.kind, av):
            raise errors.bad_request(
                f"the API version in the data ({av}) does not match the expected API version ({info.api_version})")
        if kind and kind != info.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({info.kind})")
        obj["apiVersion"] = info.api_version
        obj["kind"] = info.kind
        m = obj.get("metadata")
        if m is None:
            obj["metadata"] = m = {}
        if not isinstance(m, dict):
            raise errors.invalid(info.group, info.kind, "", [errors.cause("metadata", "Invalid value: must be an object")])
        return obj

    def _normalize(self, info: ResourceInfo, obj: Obj, field_validation: str, warnings: list[str],
                   old: Obj | None, strict: StrictIssues | None = None, *, status_only: bool = False) -> None:
        """Defaults, pruning of unknown fields, what fieldValidation says of them and of the body's
        duplicate keys (`strict`), and validation (422); old: the live object of an update.

        status_only: a write of the status subresource, whose object is the live one but for its
        status: the schema's defaults, pruning and validation walk the status alone, as kube's custom
        resource status strategy validates with the status schema only. The rest was normalized when
        it was written and is unchanged, so a spec a newer schema would refuse does not block the
        controller reporting on it."""
        strategy = info.strategy
        root, part, path = obj, info.schema, ""
        if status_only and info.schema is not None:
            sub = _status_schema(info.schema)
            if sub is not None and isinstance(obj.get("status"), dict):
                root, part, path = obj["status"], sub, "status"
        if part is not None:
            schema.apply_defaults(root, part)
        if not strategy.plain_default:
            strategy.default(obj)
        dropped = schema.prune(root, part, path) if part is not None else []
        if field_validation != "Ignore" and (dropped or (strict is not None and strict.duplicates)):
            self._strict_decoding(info, obj, field_validation, warnings, dropped, strict or StrictIssues())
        m = obj["metadata"]
        causes = meta.validate_metadata(m, name_rule=strategy.name_rule, namespaced=info.namespaced,
                                        creating=old is None)
        if part is not None:
            causes += schema.validate(root, part, path)
        causes += strategy.validate(obj) if old is None else strategy.validate_update(obj, old)
        if causes:
            raise errors.invalid(info.group, info.kind, str(m.get("name") or ""), causes)

    @staticmethod
    def _strict_decoding(info: ResourceInfo, obj: Obj, field_validation: str, warnings: list[str],
                         unknown: list[str], strict: StrictIssues) -> None:
        """kube's strict decoding errors: Strict fails the request (400 for a body, 422 naming the
        patched object for a patch), Warn sends one warning each."""
        errs, warns = strict.combined(unknown, info.builtin)
        if not errs:
            return
        if field_validation == "Warn":
            warnings.extend(w.replace('"', '\\"') for w in warns)
            return
        text = "strict decoding error: " + ", ".join(errs)
        if strict.patch:
            raise errors.invalid("", "", "", [errors.cause(
                "patch", f"Invalid value: {errors.go_quote(orjson.dumps(obj).decode())}: {text}")])
        raise errors.bad_request(f"{info.kind} in version {errors.go_quote(info.version)} cannot be handled as a "
                                 f"{info.kind}: {text}")

    @staticmethod
    def _defaulter(info: ResourceInfo) -> Callable[[Obj], None]:
        """The kind's defaulting as _normalize runs it (server-side apply compares list-map keys after it)."""

        def default(obj: Obj) -> None:
            if info.schema is not None:
                schema.apply_defaults(obj, info.schema)
            info.strategy.default(obj)

        return default

    def _check_namespace(self, info: ResourceInfo, ns: str, operation: str, name: str = "") -> None:
        """kube's NamespaceLifecycle admission: the namespace exists, and takes no new objects while terminating."""
        if not info.namespaced:
            return
        nso = self.storage.get(namespace.KEY, "", ns)
        if nso is None:
            raise errors.not_found("", "namespaces", ns)
        if operation == "CREATE" and nso["metadata"].get("deletionTimestamp"):
            raise errors.namespace_terminating(info.group, info.plural, name, ns)

    # ------------------------------------------------------------------ create

    def _prepare_create(self, info: ResourceInfo, ns: str, body: Any, field_validation: str,
                        warnings: list[str], strict: StrictIssues | None = None) -> Obj:
        obj = self.check_kind(info, body)
        m = obj["metadata"]
        if info.namespaced:
            if m.get("namespace") and m["namespace"] != ns:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent "
                                         "on the request")
            m["namespace"] = ns
        else:
            m.pop("namespace", None)
        if not m.get("name") and m.get("generateName"):
            m["name"] = meta.generate_name(str(m["generateName"]))
        if m.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        for k in SERVER_META:
            m.pop(k, None)
        m["uid"] = meta.new_uid()
        m["creationTimestamp"] = meta.now_rfc3339()
        if tracks_generation(info):
            m["generation"] = 1
        strategy = info.strategy
        if info.has_status and not strategy.keeps_status_on_create:
            obj.pop("status", None)  # status is the status subresource's to write
        if strategy.plain_create:
            self._normalize(info, obj, field_validation, warnings, None, strict)
            return obj
        strategy.prepare_for_create(obj)
        status = strategy.initial_status(obj)
        if status is not None:
            obj["status"] = status
        self._normalize(info, obj, field_validation, warnings, None, strict)
        warnings.extend(strategy.warnings_on_create(obj))
        strategy.canonicalize(obj)
        return obj

    async def create(self, info: ResourceInfo, ns: str, body: Any, *, manager: str, dry_run: bool = False,
                     field_validation: str = "Warn", warnings: list[str] | None = None,
                     user: User = "system:admin", prepared: Obj | None = None,
                     strict: StrictIssues | None = None) -> Obj:
        """Create `body` in namespace `ns` ("" for cluster-scoped kinds); `prepared` skips preparation
        (server-side apply creating an object prepares it itself)."""
        warnings = warnings if warnings is not None else []
        # kube generates a name only when none is given (and then retries collisions); a given name
        # that exists is a conflict whatever generateName says.
        body_meta = body.get("metadata") if isinstance(body, dict) and prepared is None else None
        generated = isinstance(body_meta, dict) and not body_meta.get("name") and bool(body_meta.get("generateName"))
        obj = prepared if prepared is not None else self._prepare_create(info, ns, body, field_validation, warnings,
                                                                         strict)
        if prepared is None:
            obj = track_update(None, obj, manager=manager, schema=info.schema, api_version=info.api_version,
                               now=obj["metadata"]["creationTimestamp"])
        self._check_namespace(info, ns, "CREATE", obj["metadata"]["name"])
        if self.admission.active(info):
            req = AdmissionRequest("CREATE", info, "", ns, obj["metadata"]["name"], obj, None, user_info(user),
                                   dry_run, warnings)
            if await self.admission.run(req):  # changed: checked again, as kube validates after mutation
                obj = self.check_kind(info, req.object)
                self._normalize(info, obj, "Ignore", warnings, None)
                self._check_namespace(info, ns, "CREATE", obj["metadata"]["name"])
        name = obj["metadata"]["name"]
        for _ in range(MAX_NAME_ATTEMPTS):
            if self.storage.get(info.key, ns, name) is None:
                break
            if not generated:
                raise _name_taken(info, obj["metadata"], name)
            name = meta.generate_name(obj["metadata"]["generateName"])
            obj["metadata"]["name"] = name
        else:
            raise _name_taken(info, obj["metadata"], name)
        if not info.strategy.plain_storage:
            obj = info.strategy.to_storage(obj)  # another version of a resource is stored as its storage version
        if dry_run:
            return obj
        return self.storage.create(info.key, obj)

    # ------------------------------------------------------------------ update

    def _prepare_update(self, info: ResourceInfo, live: Obj, desired: Any, *, subresource: str,
                        field_validation: str, warnings: list[str], strict: StrictIssues | None = None) -> Obj:
        new = self.check_kind(info, desired)
        lm, nm = live["metadata"], new["metadata"]
        name, ns = lm["name"], lm.get("namespace", "")
        if nm.get("name") and nm["name"] != name:
            raise errors.bad_request(f"the name of the object ({nm['name']}) does not match the name on the URL "
                                     f"({name})")
        if info.namespaced and nm.get("namespace") and nm["namespace"] != ns:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                     "the request")
        if not info.namespaced:
            nm.pop("namespace", None)  # kube's BeforeUpdate clears it for cluster-scoped kinds
        sent_rv = nm.get("resourceVersion")
        if sent_rv and sent_rv != lm.get("resourceVersion"):
            raise errors.stale(info.group, info.plural, name)
        strategy = info.strategy
        if subresource == "status":
            new = strategy.status_strategy.prepare_for_update(new, live)
        else:
            if info.has_status:  # main-resource writes never change status
                if "status" in live:
                    new["status"] = clone(live["status"])
                else:
                    new.pop("status", None)
            strategy.prepare_for_update(new, live)
            nm = new["metadata"]
            nm["name"] = name
            if info.namespaced:
                nm["namespace"] = ns
            for k in SERVER_META:
                if k in lm:
                    nm[k] = lm[k]
                else:
                    nm.pop(k, None)
        new["metadata"]["resourceVersion"] = lm.get("resourceVersion")
        if lm.get("deletionTimestamp"):
            added = [f for f in new["metadata"].get("finalizers") or [] if f not in (lm.get("finalizers") or [])]
            if added:
                raise errors.invalid(info.group, info.kind, name, [errors.cause(
                    "metadata.finalizers", f"Forbidden: no new finalizers can be added if the object is being "
                    f"deleted, found new finalizers {added}", "FieldValueForbidden")])
        self._normalize(info, new, field_validation, warnings, live, strict, status_only=subresource == "status")
        warnings.extend(strategy.warnings_on_update(new, live))
        strategy.canonicalize(new)
        if tracks_generation(info) and (
                _spec_view(new, info.has_status) != _spec_view(live, info.has_status)
                or ((info.group, info.plural) in ANNOTATED_GENERATION_KINDS
                    and new["metadata"].get("annotations") != lm.get("annotations"))):
            new["metadata"]["generation"] = int(lm.get("generation") or 1) + 1
        return new

    async def update(self, info: ResourceInfo, ns: str, name: str, build: Callable[[Obj], Any], *,
                     subresource: str = "", manager: str, dry_run: bool = False,
                     field_validation: str = "Warn", warnings: list[str] | None = None,
                     apply: bool = False, force: bool = False,
                     user: User = "system:admin", strict: StrictIssues | None = None) -> tuple[Obj, bool]:
        """GuaranteedUpdate: build the new object from the live one, validate, admit, commit; retry on races.

        build(live_copy) returns the desired object (an update body, a patched object, or an apply config),
        a new one on each call: the write takes it over. With apply=True the result of build is the
        applied configuration and may create the object. Returns (object, created).
        """
        warnings = warnings if warnings is not None else []
        for _ in range(MAX_RETRIES):
            stored = live = self.storage.get(info.key, ns, name)
            if live is not None:  # the write is computed in the request's version, stored in the storage one
                live = info.strategy.from_storage(live)
            if live is None:
                if not apply:
                    raise errors.not_found(info.group, info.plural, name)
                applied = self.check_kind(info, build({}))
                if applied["metadata"].get("name") and applied["metadata"]["name"] != name:
                    raise errors.bad_request(f"the name of the object ({applied['metadata']['name']}) does not match "
                                             f"the name on the URL ({name})")
                applied["metadata"]["name"] = name
                if subresource == "status":
                    raise errors.not_found(info.group, info.plural, name)
                now = meta.now_rfc3339()
                merged = server_side_apply(None, applied, manager=manager, force=force, schema=info.schema,
                                           api_version=info.api_version, now=now, default=self._defaulter(info),
                                           owned=True)
                mf = merged["metadata"].get("managedFields")
                prepared = self._prepare_create(info, ns, merged, field_validation, warnings)
                if mf:
                    prepared["metadata"]["managedFields"] = mf
                created = await self.create(info, ns, None, manager=manager, dry_run=dry_run,
                                            warnings=warnings, user=user, prepared=prepared)
                return created, True
            rv_before = live["metadata"].get("resourceVersion")
            desired = build(clone(live))
            now = meta.now_rfc3339()
            if apply:
                applied = self.check_kind(info, desired)
                if subresource == "status":
                    applied = {k: v for k, v in applied.items() if k in ("apiVersion", "kind", "metadata", "status")}
                elif info.has_status:
                    applied.pop("status", None)
                merged = server_side_apply(live, applied, manager=manager, force=force, schema=info.schema,
                                           api_version=info.api_version, now=now, subresource=subresource,
                                           default=self._defaulter(info), owned=True)
                mf = merged["metadata"].get("managedFields")
                new = self._prepare_update(info, live, merged, subresource=subresource,
                                           field_validation=field_validation, warnings=warnings)
                if mf is not None:
                    new["metadata"]["managedFields"] = mf
            else:
                new = self._prepare_update(info, live, desired, subresource=subresource,
                                           field_validation=field_validation, warnings=warnings, strict=strict)
                if _without_volatile(new) != _without_volatile(live):
                    new = track_update(live, new, manager=manager, schema=info.schema,
                                       api_version=info.api_version, now=now, subresource=subresource)
            if self.admission.active(info, subresource):
                req = AdmissionRequest("UPDATE", info, subresource, ns, name, new, clone(live), user_info(user),
                                       dry_run, warnings)
                if await self.admission.run(req):
                    new = self.check_kind(info, req.object)
                    self._normalize(info, new, "Ignore", warnings, live)
                current = self.storage.get(info.key, ns, name)
                if current is None or current["metadata"].get("resourceVersion") != rv_before:
                    continue  # raced with another writer while admitting: recompute
            if _without_volatile(new) == _without_volatile(live) and (
                    new["metadata"].get("managedFields") == live["metadata"].get("managedFields") or not apply) \
                    and not _encoded_elsewhere(info, stored, new):
                return live, False  # no-op: kube does not bump the resourceVersion
            if dry_run:
                return new, False
            if _completes_deletion(info, live, new):
                return self.storage.delete(info.key, ns, name), False
            return self.storage.update(info.key, info.strategy.to_storage(new)), False
        raise errors.conflict(info.group, info.plural, name, "too many concurrent modifications, try again")

    # ------------------------------------------------------------------ delete

    async def delete(self, info: ResourceInfo, ns: str, name: str, options: Obj | None = None, *,
                     dry_run: bool = False, user: User = "system:admin",
                     warnings: list[str] | None = None) -> tuple[Obj, bool]:
        """Delete, or start a graceful deletion when finalizers (or a propagation policy) hold the object.

        Returns (object, deleted_now)."""
        options = options or {}
        warnings = warnings if warnings is not None else []
        for _ in range(MAX_RETRIES):
            live = self.storage.get(info.key, ns, name)
            if live is None:
                raise errors.not_found(info.group, info.plural, name)
            lm = live["metadata"]
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != lm.get("uid"):
                raise errors.conflict(info.group, info.plural, name,
                                      f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                                      f"{lm.get('uid')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != lm.get("resourceVersion"):
                raise errors.conflict(info.group, info.plural, name,
                                      f"Precondition failed: ResourceVersion in precondition: "
                                      f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                      f"{lm.get('resourceVersion')}")
            rv_before = lm.get("resourceVersion")
            if self.admission.active(info):
                req = AdmissionRequest("DELETE", info, "", ns, name, None, clone(live), user_info(user), dry_run,
                                       warnings)
                await self.admission.run(req)
                current = self.storage.get(info.key, ns, name)
                if current is None or current["metadata"].get("resourceVersion") != rv_before:
                    continue
            if dry_run:
                return live, False
            policy = options.get("propagationPolicy")
            finalizers = list(lm.get("finalizers") or [])
            if policy == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if policy == "Orphan" and "orphan" not in finalizers:
                finalizers.append("orphan")
            grace = info.strategy.deletion_grace(live, options)
            if finalizers or info.strategy.holds_deletion(live) or grace:
                terminating = lm.get("deletionTimestamp")
                # only a shorter grace period may be given, 0 included (a kubelet's final delete of a
                # Pod that finalizers still hold: their removal then deletes it)
                shorter = bool(terminating) and grace < int(lm.get("deletionGracePeriodSeconds") or 0)
                if terminating and finalizers == list(lm.get("finalizers") or []) and not shorter:
                    return live, False
                new = clone(live)
                nm = new["metadata"]
                nm["finalizers"] = finalizers
                if not terminating or shorter:
                    nm["deletionTimestamp"] = meta.rfc3339_after(grace)
                    nm["deletionGracePeriodSeconds"] = grace
                    if not terminating and nm.get("generation"):  # kube bumps only a generation there is
                        nm["generation"] = int(nm["generation"]) + 1
                info.strategy.prepare_for_delete(new)
                return self.storage.update(info.key, new), False
            return self.storage.delete(info.key, ns, name), True
        raise errors.conflict(info.group, info.plural, name, "too many concurrent modifications, try again")

    async def remove_finalizer(self, info: ResourceInfo, ns: str, name: str, finalizer: str, *,
                               manager: str) -> None:
        """Drop one metadata.finalizer (the last one going completes a graceful deletion)."""

        def drop(live: Obj) -> Obj:
            live["metadata"]["finalizers"] = [f for f in live["metadata"].get("finalizers") or [] if f != finalizer]
            return live

        await self.update(info, ns, name, drop, manager=manager)
