"""Which admission webhooks a write calls, the call (AdmissionReview admission.k8s.io/v1 over
HTTPS), and what their answers do, as kube-apiserver 1.32's webhook dispatchers.

Mutating webhooks run one after another in order of configuration name then webhook order, a
JSONPatch answer replacing the object; webhooks with reinvocationPolicy IfNeeded run once more
when a later webhook changed the object. Validating webhooks run concurrently on the final object;
the first denial (in configuration order) fails the request. Matching: namespaceSelector,
objectSelector, rules (matchPolicy Equivalent also tries the resource's other versions), then
matchConditions (CEL). A call that fails follows failurePolicy (Fail: 500 InternalError).

Nothing is compiled or looked up while no configuration is stored: `covers` is False and writes
pay nothing. Webhooks never judge the admission configuration resources themselves (kube's
exemption, so a broken webhook cannot lock the admin out of deleting it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import socket
import ssl
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from celpy import celtypes

from isthmus.apiserver.admission.attributes import AdmissionRequest, admission_review_request
from isthmus.apiserver.admission.matching import (
    equivalents,
    label_selector_matches,
    may_cover,
    namespace_labels,
    object_labels,
    rule_matches,
)
from isthmus.apiserver.admission.policy.cel import (
    CompileError,
    EvalError,
    Program,
    compile_expression,
    to_cel,
)
from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.apimachinery.patch import apply_json_patch
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

Obj = dict[str, Any]

GROUP = "admissionregistration.k8s.io"
VWC_KEY = f"{GROUP}/validatingwebhookconfigurations"
MWC_KEY = f"{GROUP}/mutatingwebhookconfigurations"
SERVICES_KEY = "/services"
DEFAULT_TIMEOUT = 10
MAX_TIMEOUT = 30
# sideEffects a dry-run request may call (the others make kube reject the dry run).
DRY_RUN_SAFE = ("None", "NoneOnDryRun")
MATCH_CONDITION_ROOTS = ("object", "oldObject", "request")


class CallError(Exception):
    """kube's ErrCallingWebhook: the call failed (not a denial); failurePolicy decides."""


@dataclass
class Hook:
    """One webhook of a stored configuration, defaults applied as kube's v1 defaults."""

    config: str
    spec: Obj
    mutating: bool
    conditions: list[tuple[str, Program | None, str]] = field(default_factory=list)  # (name, program, error)

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")

    @property
    def fail(self) -> bool:
        return bool(self.spec.get("failurePolicy", "Fail") != "Ignore")

    @property
    def timeout(self) -> int:
        t = self.spec.get("timeoutSeconds")
        return min(int(t), MAX_TIMEOUT) if isinstance(t, int) and t > 0 else DEFAULT_TIMEOUT

    @property
    def review_version(self) -> str:
        """The first AdmissionReview version of the webhook's list the server speaks (kube's choice);
        v1beta1's review has v1's shape."""
        versions = self.spec.get("admissionReviewVersions") or []
        return next((v for v in versions if v in ("v1", "v1beta1")), "v1")

    @property
    def reinvoke(self) -> bool:
        return self.mutating and self.spec.get("reinvocationPolicy") == "IfNeeded"


def _compile(config: Obj, mutating: bool) -> list[Hook]:
    hooks: list[Hook] = []
    for spec in config.get("webhooks") or []:
        if not isinstance(spec, dict):
            continue
        hook = Hook(str(config["metadata"]["name"]), spec, mutating)
        for cond in spec.get("matchConditions") or []:
            name, text = str(cond.get("name") or ""), str(cond.get("expression") or "")
            try:
                hook.conditions.append((name, compile_expression(text, MATCH_CONDITION_ROOTS), ""))
            except CompileError as e:
                hook.conditions.append((name, None, str(e)))
        hooks.append(hook)
    return hooks


def _go_error(e: BaseException, host: str) -> str:
    """The Go net/http error text a client-go caller sees for this failure."""
    if isinstance(e, TimeoutError):
        return "context deadline exceeded"
    cert_error = getattr(e, "certificate_error", None)
    if isinstance(cert_error, ssl.SSLCertVerificationError) or isinstance(e, ssl.SSLCertVerificationError):
        err = cert_error if cert_error is not None else e
        text = str(getattr(err, "verify_message", "") or err)
        if "mismatch" in text.lower():
            return f"tls: failed to verify certificate: x509: certificate is not valid for {host}"
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if isinstance(e, aiohttp.ClientConnectorDNSError):
        return f"dial tcp: lookup {e.host}: no such host"
    if isinstance(e, aiohttp.ClientConnectorError):
        os_error = e.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return f"dial tcp {e.host}:{e.port}: connect: connection refused"
        return f"dial tcp {e.host}:{e.port}: {os_error.strerror or os_error}"
    return str(e) or type(e).__name__


def cc_is_service(h: Hook) -> bool:
    """The hook is called through a Service of the cluster (not a `url` outside it)."""
    return not (h.spec.get("clientConfig") or {}).get("url")


class Webhooks:
    """Both webhook plugins over the server's storage; `on_write` keeps the compiled view current."""

    write_keys = (VWC_KEY, MWC_KEY)

    def __init__(self, storage: Store, resources: ResourceRegistry) -> None:
        self.storage = storage
        self.resources = resources
        self._dirty = True
        self._mutating: list[Hook] = []
        self._validating: list[Hook] = []
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._bases: frozenset[str] = frozenset()  # resource names any webhook's rules name
        self.dial_netns: str | None = None
        """kube's egress selector, "cluster" network context: where connections to the cluster's
        addresses (a webhook Service's ClusterIP) are made — a network namespace (path) that routes
        them, when this apiserver's own does not (the local clusterset's runc mode: a ClusterIP dialled
        from the host would follow the host's default route off this machine)."""

    def on_write(self, ev: WatchEvent) -> None:
        if ev.key in (VWC_KEY, MWC_KEY):
            self._dirty = True

    def _refresh(self) -> None:
        self._dirty = False

        def hooks(key: str, mutating: bool) -> list[Hook]:
            configs = sorted(self.storage.list(key), key=lambda o: str(o["metadata"]["name"]))
            return [h for c in configs for h in _compile(c, mutating)]

        self._mutating = hooks(MWC_KEY, True)
        self._validating = hooks(VWC_KEY, False)
        self._bases = frozenset(str(r).partition("/")[0] for h in (*self._mutating, *self._validating)
                                for rule in h.spec.get("rules") or [] if isinstance(rule, dict)
                                for r in rule.get("resources") or [])

    def covers(self, info: ResourceInfo) -> bool:
        """Whether some webhook's rules may name `info` (cheap: no configuration, no cost)."""
        if self._dirty:
            self._refresh()
        return may_cover(self._bases, info)

    # ------------------------------------------------------------------ matching

    def _matches(self, h: Hook, a: AdmissionRequest) -> ResourceInfo | None:
        """kube's ShouldCallHook: the resource (the request's or an equivalent) `h` is called as."""
        spec = h.spec
        is_namespace = a.resource.group == "" and a.resource.plural == "namespaces"
        sel = spec.get("namespaceSelector")
        if sel and (a.namespace or is_namespace) and not label_selector_matches(sel, namespace_labels(a, self.storage)):
            return None
        sel = spec.get("objectSelector")
        if sel and not ((a.object is not None and label_selector_matches(sel, object_labels(a.object)))
                        or (a.old_object is not None and label_selector_matches(sel, object_labels(a.old_object)))):
            return None
        rules = [r for r in spec.get("rules") or [] if isinstance(r, dict)]
        for rule in rules:
            if rule_matches(rule, a, a.resource):
                return a.resource
        if spec.get("matchPolicy", "Equivalent") == "Exact":
            return None
        for rule in rules:
            for other in equivalents(self.resources, a.resource):
                if rule_matches(rule, a, other):
                    return other
        return None

    @staticmethod
    def _converted(obj: Obj | None, a: AdmissionRequest, matched: ResourceInfo) -> Obj | None:
        if obj is None or matched.api_version == a.resource.api_version:
            return obj
        out: Obj = matched.strategy.from_storage(a.resource.strategy.to_storage(clone(obj)))
        return out

    def _conditions_hold(self, h: Hook, request: Obj) -> bool:
        """matchConditions: all true calls the hook, any false skips it; errors raise CallError."""
        if not h.conditions:
            return True
        activation = {"object": to_cel(request["object"]), "oldObject": to_cel(request["oldObject"]),
                      "request": to_cel({k: v for k, v in request.items() if k not in ("object", "oldObject")})}
        errs: list[str] = []
        for name, program, compile_error in h.conditions:
            if program is None:
                errs.append(f"compilation error: {compile_error}")
                continue
            try:
                result = program.evaluate(activation)
            except EvalError as e:
                errs.append(f"expression '{program.expression}' resulted in error: {e}")
                continue
            if isinstance(result, (bool, celtypes.BoolType)) and not result:
                return False
            if not isinstance(result, (bool, celtypes.BoolType)):
                errs.append(f"matchCondition {name} must evaluate to bool")
        if errs:
            raise CallError(f"failed to evaluate match conditions: {errs[0]}")
        return True

    # ------------------------------------------------------------------ the call

    def _endpoint(self, h: Hook) -> tuple[str, str, str | None]:
        """(URL kube names in errors, URL dialled, TLS server name when dialling an IP for a host)."""
        cc = h.spec.get("clientConfig") or {}
        query = f"?timeout={h.timeout}s"
        if cc.get("url"):
            url = str(cc["url"])
            return url + query, url + query, None
        svc = cc.get("service") or {}
        ns, name = str(svc.get("namespace") or ""), str(svc.get("name") or "")
        port = int(svc.get("port") or 443)
        path = str(svc.get("path") or "")
        host = f"{name}.{ns}.svc"
        shown = f"https://{host}:{port}{path}{query}"
        obj = self.storage.get(SERVICES_KEY, ns, name)
        if obj is None:
            raise CallError(f'failed to call webhook: service "{name}" not found')
        spec = obj.get("spec") or {}
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            raise CallError(f"failed to call webhook: service {ns}/{name} has no clusterIP")
        if not any(p.get("port") == port for p in spec.get("ports") or []):
            raise CallError(f'failed to call webhook: no service port {port} found for service "{name}"')
        return shown, f"https://{ip}:{port}{path}{query}", host

    def _ssl(self, h: Hook) -> ssl.SSLContext:
        bundle = str((h.spec.get("clientConfig") or {}).get("caBundle") or "")
        ctx = self._contexts.get(bundle)
        if ctx is None:
            try:
                pem = base64.b64decode(bundle, validate=True).decode() if bundle else None
                ctx = ssl.create_default_context(cadata=pem) if pem else ssl.create_default_context()
            except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError):
                raise CallError("could not get REST client: unable to load root certificates: unable to parse "
                                "bytes as PEM block") from None
            self._contexts[bundle] = ctx
        return ctx

    async def _call(self, h: Hook, review: Obj) -> Obj:
        """POST the AdmissionReview; the response's `response`, checked as kube checks it."""
        shown, dialled, server_name = self._endpoint(h)
        ctx = self._ssl(h)
        host = server_name or (urlsplit(dialled).hostname or "")
        kwargs: dict[str, Any] = {}
        if server_name is not None:
            kwargs["server_hostname"] = server_name
            kwargs["headers"] = {"Host": urlsplit(shown).netloc}
        connector = None
        if self.dial_netns is not None and cc_is_service(h):
            netns_path = self.dial_netns

            def in_cluster(addr: Any) -> socket.socket:
                from isthmus.runtime.netns import socket_in

                family, kind, proto = addr[0], addr[1], addr[2]
                return socket_in(netns_path, family, kind, proto)

            connector = aiohttp.TCPConnector(socket_factory=in_cluster)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=h.timeout),
                                             connector=connector, trust_env=False) as s, s.post(
                    dialled, data=orjson.dumps(review), ssl=ctx, allow_redirects=False,
                    **{**kwargs, "headers": {**kwargs.get("headers", {}), "Content-Type": "application/json",
                                             "Accept": "application/json"}}) as r:
                raw = await r.read()
                status = r.status
        except (TimeoutError, aiohttp.ClientError, ssl.SSLError, OSError) as e:
            raise CallError(f'failed to call webhook: Post "{shown}": {_go_error(e, host)}') from None
        if status < 200 or status >= 300:
            raise CallError(f"failed to call webhook: an error on the server ({errors.go_quote(raw.decode(errors='replace'))}) "
                            "has prevented the request from succeeding")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise CallError(f"received invalid webhook response: {e}") from None
        if not isinstance(body, dict) or body.get("apiVersion") != review["apiVersion"] or \
                body.get("kind") != "AdmissionReview":
            got = body if isinstance(body, dict) else {}
            raise CallError(f"received invalid webhook response: expected webhook response of "
                            f"{review['apiVersion']}, Kind=AdmissionReview, got {got.get('apiVersion', '')}, "
                            f"Kind={got.get('kind', '')}")
        resp = body.get("response")
        if not isinstance(resp, dict):
            raise CallError("received invalid webhook response: webhook response was absent")
        uid = review["request"]["uid"]
        if resp.get("uid") != uid:
            raise CallError(f'received invalid webhook response: expected response.uid="{uid}", '
                            f'got "{resp.get("uid", "")}"')
        if resp.get("patch") is not None or resp.get("patchType") is not None:
            if not h.mutating:
                raise CallError("received invalid webhook response: validating webhook may not return a patch")
            if resp.get("patchType") != "JSONPatch":
                raise CallError(f'received invalid webhook response: expected patchType "JSONPatch", got '
                                f'"{resp.get("patchType") or ""}"')
        return resp

    @staticmethod
    def _denied(h: Hook, resp: Obj) -> errors.ApiError:
        """kube's webhookerrors.ToStatusErr: the webhook's Status, its message prefixed."""
        status = resp.get("status") if isinstance(resp.get("status"), dict) else {}
        assert isinstance(status, dict)
        denied_by = f'admission webhook "{h.name}" denied the request'
        raw_code = status.get("code")
        code = raw_code if isinstance(raw_code, int) else 0
        if code < 400:
            code = 403
        reason = str(status.get("reason") or "")
        if status.get("message"):
            message = f"{denied_by}: {status['message']}"
        elif reason:
            message = f"{denied_by}: {reason}"
        else:
            message = f"{denied_by} without explanation"
        details = status.get("details") if isinstance(status.get("details"), dict) else None
        return errors.ApiError(code, reason, message, details)

    def _review(self, h: Hook, a: AdmissionRequest, matched: ResourceInfo) -> Obj:
        request = admission_review_request(a, matched)
        request["uid"] = str(uuid.uuid4())
        request["object"] = self._converted(a.object, a, matched)
        request["oldObject"] = self._converted(a.old_object, a, matched)
        if request["options"] is None:
            del request["options"]
        return {"apiVersion": f"admission.k8s.io/{h.review_version}", "kind": "AdmissionReview", "request": request}

    async def _invoke(self, h: Hook, a: AdmissionRequest) -> Obj | None:
        """Call `h` if it applies: its response, None when skipped or ignored; raises the denial or
        the failure kube raises."""
        matched = self._matches(h, a)
        if matched is None:
            return None
        review = self._review(h, a, matched)
        try:
            if not self._conditions_hold(h, review["request"]):
                return None
            if a.dry_run and h.spec.get("sideEffects") not in DRY_RUN_SAFE:
                raise errors.bad_request(f'admission webhook "{h.name}" does not support dry run')
            resp = await self._call(h, review)
        except CallError as e:
            if not h.fail:
                return None
            raise errors.internal(f'failed calling webhook "{h.name}": {e}') from None
        for w in resp.get("warnings") or []:
            if isinstance(w, str) and w:
                a.warnings.append(w.replace("\\", "\\\\").replace('"', '\\"'))
        if not resp.get("allowed"):
            raise self._denied(h, resp)
        resp["_matched"] = matched
        return resp

    def _with_warnings(self, e: errors.ApiError, a: AdmissionRequest) -> errors.ApiError:
        e.warnings = list(a.warnings)  # type: ignore[attr-defined]  # status_response sends them too
        return e

    # ------------------------------------------------------------------ the plugins

    async def mutate(self, a: AdmissionRequest) -> bool:
        """The MutatingAdmissionWebhook plugin: patches applied to `a.object` in order. True when
        one changed it."""
        if not self.covers(a.resource) or not self._mutating:
            return False
        mutations = 0
        seen: dict[int, int] = {}  # IfNeeded hook index → mutations counted when it was called

        async def run(i: int, h: Hook) -> None:
            nonlocal mutations
            try:
                resp = await self._invoke(h, a)
            except errors.ApiError as e:
                raise self._with_warnings(e, a) from None
            if resp is None:
                return
            if h.reinvoke:
                seen[i] = mutations
            patch = resp.get("patch")
            if patch is None or a.object is None:
                return
            try:
                ops = orjson.loads(base64.b64decode(str(patch)))
                patched = apply_json_patch(self._converted(a.object, a, resp["_matched"]), ops)
            except (ValueError, binascii.Error, errors.ApiError) as e:
                raise self._with_warnings(errors.internal(str(e)), a) from None
            if resp["_matched"].api_version != a.resource.api_version:
                patched = a.resource.strategy.from_storage(resp["_matched"].strategy.to_storage(patched))
            if patched != a.object:
                a.object = patched
                mutations += 1
                if h.reinvoke:
                    seen[i] = mutations

        for i, h in enumerate(self._mutating):
            await run(i, h)
        again = [i for i, n in seen.items() if mutations > n]
        for i in sorted(again):
            await run(i, self._mutating[i])
        return mutations > 0

    async def validate(self, a: AdmissionRequest) -> None:
        """The ValidatingAdmissionWebhook plugin: every matching webhook concurrently."""
        if not self.covers(a.resource) or not self._validating:
            return
        results = await asyncio.gather(*(self._invoke(h, a) for h in self._validating), return_exceptions=True)
        for r in results:
            if isinstance(r, errors.ApiError):
                raise self._with_warnings(r, a)
            if isinstance(r, BaseException):
                raise r
