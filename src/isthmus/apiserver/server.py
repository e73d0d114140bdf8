"""The embedded Kubernetes-compatible API server: app setup, authentication, routing, lifecycle.

What lives where (see the package docstring): handlers/ serves requests by concern,
registry/ holds the per-resource strategies and the generic store every write goes through,
controllers/ runs the garbage collector, the namespace controller and the CRD controller,
storage/ keeps the objects (memory + SQLite) and feeds watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import HttpVersion11, web
from multidict import CIMultiDict, CIMultiDictProxy

from isthmus.apiserver import authorization
from isthmus.apiserver.admission.chain import Admission, install_builtin_plugins
from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authentication import impersonation
from isthmus.apiserver.authentication.authenticators import (
    ADMIN,
    API_AUDIENCES,
    MASTERS_GROUP,
    AuthenticationError,
    Authenticator,
    StaticTokens,
    UserInfo,
    X509Authenticator,
)
from isthmus.apiserver.authentication.serviceaccounts import (
    DEFAULT_ISSUER,
    ServiceAccountTokens,
    load_or_create_key,
    load_public_keys,
)
from isthmus.apiserver.authentication.tls import (
    ensure_admin_cert,
    ensure_certs,
    ensure_client_ca,
    server_context,
)
from isthmus.apiserver.authorization.attributes import Attributes
from isthmus.apiserver.builtins import builtin_resources
from isthmus.apiserver.controllers.apfbootstrap import ensure_apf_defaults
from isthmus.apiserver.controllers.apfclassifier import FS_HEADER, PL_HEADER, Classification, FlowClassifier
from isthmus.apiserver.controllers.bootstraprbac import ensure_bootstrap_policy
from isthmus.apiserver.controllers.clusterauthentication import ensure_authentication_configmap
from isthmus.apiserver.controllers.clusterroleaggregation import ClusterRoleAggregationController
from isthmus.apiserver.controllers.crd import CRDController
from isthmus.apiserver.controllers.eventttl import DEFAULT_TTL as DEFAULT_EVENT_TTL
from isthmus.apiserver.controllers.eventttl import EventTTLController
from isthmus.apiserver.controllers.garbagecollector import GarbageCollector
from isthmus.apiserver.controllers.kubernetesservice import KubernetesServiceController, advertise_address
from isthmus.apiserver.controllers.namespace import NamespaceController, create_system_namespaces
from isthmus.apiserver.controllers.serviceaccounts import (
    RootCACertPublisher,
    ServiceAccountsController,
    TokensController,
)
from isthmus.apiserver.controllers.systempriorityclasses import ensure_system_priority_classes
from isthmus.apiserver.handlers import (
    binding,
    create,
    delete,
    discovery,
    eviction,
    get,
    health,
    openapi,
    patch,
    pods,
    tokenrequest,
    update,
    watch,
)
from isthmus.apiserver.handlers.common import USER, HandlerContext, not_found, status_response
from isthmus.apiserver.handlers.scope import resolve
from isthmus.apiserver.httpserver import JsonAnswer, LeanRequest, LeanServer
from isthmus.apiserver.kubeconfig import kubeconfig_dict, write_kubeconfig
from isthmus.apiserver.openapi import proto as openapi_proto
from isthmus.apiserver.registry.customresourcedefinition import KEY as CRD_KEY
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage import datadir
from isthmus.apiserver.storage.journal import StoreInUse, UnusableStore
from isthmus.apiserver.storage.store import HISTORY_SECONDS, Store

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

# What kube's system:public-info-viewer role grants to unauthenticated users.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})


class ApiServer:
    """One embedded API server. `await start()` then use `url`; `await stop()` to shut down."""

    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        token: str | None = None,
        tls: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 3 * 1024 * 1024,
        history: int = 200_000,
        history_seconds: float = HISTORY_SECONDS,
        bookmark_interval: float = 5.0,
        preload_crds: list[Obj] | None = None,
        admission: Admission | None = None,
        reinitialize: bool = False,
        token_user: UserInfo = ADMIN,
        api_audiences: tuple[str, ...] | None = None,
        advertise_address: str | None = None,
        anonymous_auth: bool = False,
        service_account_issuer: str = DEFAULT_ISSUER,
        service_account_signing_key_file: str | Path | None = None,
        service_account_key_files: tuple[str | Path, ...] = (),
        authorization_mode: str = "RBAC",
        event_ttl: float = DEFAULT_EVENT_TTL,
        cluster_netns: str | None = None,
    ) -> None:
        """token None serves everyone (for in-process use); `isthmus apiserver` always sets one.

        token_user: who the token authenticates as. With TLS, clients may also authenticate with a
        certificate from the server's client CA (authentication/authenticators.py has the whole chain).

        advertise_address: the IP the `default/kubernetes` endpoints name (default: the listen
        address when it is one, else 127.0.0.1).

        anonymous_auth: kube's --anonymous-auth: requests without credentials are system:anonymous
        (on the public paths only, until authorization decides for them); otherwise they are 401.

        ServiceAccount tokens (authentication/serviceaccounts.py): signed with service_account_signing_key_file,
        else `<data dir>/tls/sa.key` (made once), else a key that lives as long as the server;
        also verified with the keys in service_account_key_files. api_audiences default to the
        issuer, as kube's do.

        authorization_mode: kube's --authorization-mode, comma-separated: RBAC (the default),
        AlwaysAllow, AlwaysDeny. system:masters is always allowed.

        cluster_netns: the network namespace (a path) connections to the cluster's own addresses are
        made from (webhooks called through their Service), as kube's egress selector routes the
        "cluster" network context; None: this process's own namespace.

        reinitialize: accept starting empty when the data dir was initialised before but its
        database is missing, empty or unreadable (an unreadable file is renamed aside, never deleted).
        """
        # Absolute, so errors name the file unambiguously whatever the caller's working directory.
        self.data_dir = Path(data_dir).absolute() if data_dir else None
        self.reinitialize = reinitialize
        self.token = token
        self.tls = tls
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.bookmark_interval = bookmark_interval
        self.event_ttl = event_ttl  # seconds an Event lasts after its last write (kube's --event-ttl); 0: forever
        self.preload_crds = preload_crds or []
        self.admission = admission or Admission()
        install_builtin_plugins(self.admission)
        self.ca_pem: bytes | None = None
        self.token_user = token_user
        self.advertise_address = advertise_address
        api_audiences = api_audiences or (API_AUDIENCES if service_account_issuer == DEFAULT_ISSUER
                                           else (service_account_issuer,))
        modes = [m.strip() for m in authorization_mode.split(",")]
        # Anonymous requests reach every path and authorization decides (RBAC's bootstrap policy
        # opens the public paths to them), as in kube; AlwaysAllow would open everything to them,
        # so with it they stay limited to the public paths here.
        self.authenticator = Authenticator(
            tokens=[StaticTokens({token: token_user}, api_audiences)] if token else [],
            api_audiences=api_audiences, anonymous=anonymous_auth,
            anonymous_paths=PUBLIC_PATHS if "AlwaysAllow" in modes else None, open_access=not token)
        self.service_account_issuer = service_account_issuer
        self._sa_signing_key_file = Path(service_account_signing_key_file) if service_account_signing_key_file else None
        self._sa_key_files = [Path(p) for p in service_account_key_files]
        # Issues TokenRequests and legacy tokens, and authenticates both; its key is set in start().
        self.sa_tokens = ServiceAccountTokens(None, self._lookup, issuer=service_account_issuer,
                                              api_audiences=api_audiences)
        self.store = Store(str(self.data_dir / "state.db") if self.data_dir else None, history=history,
                           history_seconds=history_seconds)
        self.resources = ResourceRegistry()
        self.generic_store = GenericStore(self.store, self.resources, self.admission)
        if self.admission.webhooks is not None:
            self.admission.webhooks.dial_netns = cluster_netns
        self.authorizer = authorization.Authorizer(modes, authorization.RuleResolver(self.store))
        self._flows = FlowClassifier(self.store)  # APF's response headers (controllers/apfclassifier.py)
        self.admission.reader = lambda group, plural, ns, name: self.store.get(f"{group}/{plural}", ns, name)
        self.admission.lister = lambda group, plural, ns: self.store.list(f"{group}/{plural}", ns or None)
        self.admission.can = lambda user, verb, group, plural, ns, name: self.authorizer.authorize(
            Attributes(user=user, verb=verb, resource_request=True, api_group=group, resource=plural, namespace=ns,
                       name=name)).allowed
        self._http: LeanServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ctx = HandlerContext(self.store, self.generic_store, self.resources, max_body_bytes,
                                   bookmark_interval, authenticator=self.authenticator)
        self._started = False
        self._tls_tmp: str | None = None
        self._certs: Path | None = None  # the TLS dir, once serving TLS

    def _lookup(self, key: str, ns: str, name: str) -> Obj | None:
        """A stored core object by storage key, for the ServiceAccount token authenticator."""
        return self.store.get(key, ns, name)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def _move_to_shared_storage(self) -> None:
        """Objects a data dir holds under a resource's own key although it now shares another's
        (events.k8s.io Events were once kept apart from the core ones) move there, converted to
        the storage version; one whose name is taken there is dropped."""
        for info in self.resources.all():
            own = f"{info.group}/{info.plural}"
            if info.key == own:
                continue
            for obj in self.store.list(own):
                m = obj["metadata"]
                ns, name = m.get("namespace", ""), m["name"]
                self.store.delete(own, ns, name)
                if self.store.get(info.key, ns, name) is None:
                    self.store.create(info.key, info.strategy.to_storage(obj))

    async def start(self) -> str:
        """Open the store and listen. Raises DataDirError (one line for the user) before binding."""
        if self.data_dir:
            self._open_data_dir(self.data_dir)
        else:
            self.store.open()
        for info in builtin_resources():
            self.resources.add(info)
        self._move_to_shared_storage()
        gcol = GarbageCollector(self.store, self.resources, self.generic_store)
        crds = CRDController(self.store, self.resources, self.generic_store)
        self.store.on_write(gcol.on_write)
        self.store.on_write(crds.on_write, keys=crds.write_keys)
        crds.serve_stored()
        # Only after every stored CRD is served again: otherwise custom objects are missing from the
        # uid index and the GC takes their dependents for orphans.
        gcol.index_all()
        self.store.on_write(self.authorizer.resolver.on_write, keys=self.authorizer.resolver.write_keys)
        self.store.on_write(self._flows.on_write, keys=self._flows.write_keys)
        self.authorizer.resolver.index_all()
        # Everything loaded so far lives as long as the server: keep it out of the cyclic GC's scans,
        # whose full collections otherwise pause the loop for tens of ms with 100k objects.
        gc.freeze()
        await create_system_namespaces(self.store, self.resources, self.generic_store)
        await ensure_bootstrap_policy(self.store, self.resources, self.generic_store)
        aggregation = ClusterRoleAggregationController(self.store, self.resources, self.generic_store)
        await aggregation.sync_all()  # admin, edit and view have their rules from the first request
        self.store.on_write(aggregation.on_write, keys=aggregation.write_keys)
        self._spawn(aggregation.run())
        await ensure_system_priority_classes(self.store, self.resources, self.generic_store)
        crd_info = self.resources.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        for crd in self.preload_crds:
            name = crd.get("metadata", {}).get("name", "")
            if self.store.get(CRD_KEY, "", name) is None:
                await self.create_object(crd_info, "", clone(crd), manager="isthmus-apiserver")
        self._spawn(gcol.run())
        self._spawn(crds.run())
        self._spawn(NamespaceController(self.store, self.resources, self.generic_store).run())
        if self.event_ttl > 0:
            event_ttl = EventTTLController(self.store, self.event_ttl)
            self.store.on_write(event_ttl.on_write, keys=event_ttl.write_keys)
            event_ttl.resync()
            self._spawn(event_ttl.run())
        self._setup_service_account_tokens()
        # Objects left mid-deletion by a previous run (foreground/orphan/CRD cleanup) resume here.
        gcol.resync()
        crds.resync()

        # Plain requests on a lean HTTP/1.1 protocol (httpserver.py); the rest (watches, streams,
        # upgrades) on aiohttp's low-level server: every path comes to one handler, so an
        # Application's router, match info and middleware chain would only add work to each request.
        http = web.Server(self._serve, request_factory=self._make_request, access_log=None)
        ssl_ctx = None
        if self.tls:
            if self.data_dir is None and self._tls_tmp is None:
                self._tls_tmp = tempfile.mkdtemp(prefix="isthmus-apiserver-")  # 0700
            certs = self.data_dir / "tls" if self.data_dir else Path(self._tls_tmp or "") / "tls"
            ca_path, crt_path, key_path = ensure_certs(certs, [self.host, "localhost", "127.0.0.1"])
            self.ca_pem = ca_path.read_bytes()
            client_ca = ensure_client_ca(certs)
            self._certs = certs
            self.authenticator.x509 = X509Authenticator(client_ca.read_bytes())
            ssl_ctx = server_context(crt_path, key_path, client_ca)
        self._http = LeanServer(self._handle, http, self.max_body_bytes)
        self.port = await self._http.listen(self.host, self.port, ssl_ctx)
        self._ctx.server_address = f"{self.host}:{self.port}"
        # Only now is the port known, which the kubernetes Service's endpoints name. Reconciled
        # before the server reports itself started, so clients find them from the first request.
        kube_svc = KubernetesServiceController(self.store, self.resources, self.generic_store,
                                               self.advertise_address or advertise_address(self.host), self.port)
        self.store.on_write(kube_svc.on_write, keys=kube_svc.write_keys)
        with contextlib.suppress(ApiError):  # logged; retried on the next change
            await kube_svc.reconcile()
        self._spawn(kube_svc.run())
        self._start_service_account_controllers()
        await ensure_apf_defaults(self.store, self.resources, self.generic_store)
        if self._certs is not None:  # kube's cluster authentication info: the client CA (TLS only)
            await ensure_authentication_configmap(self.store, self.resources, self.generic_store,
                                                  ensure_client_ca(self._certs).read_text())
        self._started = True
        log.info("apiserver listening on %s (data: %s)", self.url, self.data_dir or "in memory")
        return self.url

    def _setup_service_account_tokens(self) -> None:
        """The signing key (kube's --service-account-signing-key-file, or one kept in the data dir)
        and the token authenticator in the chain."""
        try:
            key_file = self._sa_signing_key_file or (self.data_dir / "tls" / "sa.key" if self.data_dir else None)
            self.sa_tokens.use_keys(load_or_create_key(key_file) if key_file else None,
                                    [k for p in self._sa_key_files for k in load_public_keys(p)])
        except (OSError, ValueError) as e:
            raise datadir.DataDirError(f"cannot use the service account key: {e}") from None
        if self.sa_tokens not in self.authenticator.tokens:
            self.authenticator.tokens.append(self.sa_tokens)

    def _start_service_account_controllers(self) -> None:
        """kube-controller-manager's: default ServiceAccounts, kube-root-ca.crt (TLS only), legacy
        token Secrets. Each is fed by writes and queued a full resync now."""
        controllers: list[Any] = [
            ServiceAccountsController(self.store, self.resources, self.generic_store),
            TokensController(self.store, self.resources, self.generic_store, self.sa_tokens, self.ca_pem)]
        if self.ca_pem is not None:
            controllers.append(RootCACertPublisher(self.store, self.resources, self.generic_store, self.ca_pem))
        for c in controllers:
            self.store.on_write(c.on_write, keys=c.write_keys)
            c.resync()
            self._spawn(c.run())

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self.store.close_watches()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._http:
            await self._http.close()
            self._http = None
        self.store.close()
        if self._tls_tmp:
            # Without a data dir the CA dies with the process; leave no private keys behind.
            shutil.rmtree(self._tls_tmp, ignore_errors=True)
            self._tls_tmp = None
        log.info("apiserver stopped")

    def _open_data_dir(self, data_dir: Path) -> None:
        """Private modes, then the database: a data dir that held one never silently starts empty."""
        datadir.secure(data_dir)
        db = data_dir / datadir.DB
        used = datadir.evidence_of_use(data_dir)
        if not db.exists() and used:
            if not self.reinitialize:
                raise datadir.DataDirError(
                    f"database {db} is missing, but data dir {data_dir} was initialised before ({used}): "
                    + datadir.ADVICE)
            kept = datadir.set_aside(db)
            log.warning("--reinitialize: %s is missing, starting with an empty database; kept aside: %s",
                        db, ", ".join(map(str, kept)) or "nothing")
        try:
            self.store.open()
        except StoreInUse as e:
            raise datadir.DataDirError(str(e)) from None  # never set aside, --reinitialize or not: it is someone's live data
        except UnusableStore as e:
            if not self.reinitialize:
                raise datadir.DataDirError(f"{e}: {datadir.ADVICE}") from None
            kept = datadir.set_aside(db)
            log.warning("--reinitialize: %s; starting with an empty database; kept aside: %s",
                        e, ", ".join(map(str, kept)))
            self.store.open()
        except OSError as e:
            raise datadir.DataDirError(f"cannot open database {db}: {e.strerror or e}") from None
        datadir.write_marker(data_dir)

    def kubeconfig(self, name: str = "isthmus", auth: str = "token") -> dict[str, Any]:
        """A kubeconfig for this server: auth "token" carries the bearer token, "cert" a client
        certificate for the token's user (TLS only; kept in the TLS dir, so it survives restarts)."""
        if auth == "cert":
            if self._certs is None:
                raise ValueError("client certificates need TLS")
            pair = ensure_admin_cert(self._certs, self.token_user.username, self.token_user.groups)
            return kubeconfig_dict(name, self.url, ca_pem=self.ca_pem, client_cert=pair)
        return kubeconfig_dict(name, self.url, ca_pem=self.ca_pem, token=self.token)

    def write_kubeconfig(self, path: str | Path, name: str = "isthmus", auth: str = "token") -> None:
        write_kubeconfig(path, self.kubeconfig(name, auth))

    def resource_infos(self) -> list[ResourceInfo]:
        return self.resources.all()

    async def create_object(self, info: ResourceInfo, ns: str, body: Any, *, manager: str, dry_run: bool = False,
                            field_validation: str = "Warn", warnings: list[str] | None = None,
                            user: str = "system:admin") -> Obj:
        """Create through the full write pipeline, as a client's POST would."""
        return await self.generic_store.create(info, ns, body, manager=manager, dry_run=dry_run,
                                               field_validation=field_validation, warnings=warnings, user=user)

    async def update_object(self, info: ResourceInfo, ns: str, name: str, build: Callable[[Obj], Any], *,
                            subresource: str = "", manager: str, dry_run: bool = False,
                            field_validation: str = "Warn", warnings: list[str] | None = None,
                            apply: bool = False, force: bool = False, user: str = "system:admin") -> Obj:
        """Update what build(live copy) returns, through the full write pipeline."""
        obj, _ = await self.generic_store.update(info, ns, name, build, subresource=subresource, manager=manager,
                                                 dry_run=dry_run, field_validation=field_validation,
                                                 warnings=warnings, apply=apply, force=force, user=user)
        return obj

    async def delete_object(self, info: ResourceInfo, ns: str, name: str, options: Obj | None = None, *,
                            dry_run: bool = False, user: str = "system:admin") -> tuple[Obj, bool]:
        """Delete or start a graceful deletion. Returns (object, deleted_now)."""
        return await self.generic_store.delete(info, ns, name, options, dry_run=dry_run, user=user)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ HTTP entry

    def _make_request(self, message: Any, payload: Any, protocol: Any, writer: Any,
                      task: asyncio.Task[None]) -> web.Request:
        """As an Application makes them: bodies over max_body_bytes raise HTTPRequestEntityTooLarge."""
        return web.Request(message, payload, protocol, writer, task, asyncio.get_running_loop(),
                           client_max_size=self.max_body_bytes)

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        """The low-level server's handler: `Expect: 100-continue` as an Application answers it, then _handle."""
        expect = request.headers.get("Expect")
        if expect and request.version == HttpVersion11:
            if expect.lower() != "100-continue":
                raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the body has not started
        assert isinstance(request, web.Request)
        return await self._handle(request)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """Authentication, then routing; every error becomes a kube Status response."""
        who: UserInfo | None = None  # the user, once impersonation is through: APF classifies from there
        flow: Classification | None = None
        try:
            path = request.path
            user = request._state[USER] = self._authenticate(request, path)  # request[USER], without a call
            if impersonation.requested(request.headers):
                user = request._state[USER] = self._impersonate(request, user)
            who = user
            self._authorize(request, path, user)
            flow = self._flows.classify(user, lambda: self._attributes(request, path, user))
            if path in health.PATHS:
                return with_flow(health.respond(path, request.query, self.store.check), flow)
            return with_flow(await self._route(request, path), flow)
        except ApiError as e:
            if who is not None and flow is None:  # kube classifies before it authorizes: its 403 has them too
                flow = self._flows.classify(who, lambda: self._attributes(request, path, who))
            return with_flow(status_response(e, request), flow)
        except impersonation.BadImpersonation as e:  # kube's responsewriters.InternalError: plain text
            text = f"Internal Server Error: {errors.go_quote(request.raw_path)}: {e}"
            return web.Response(status=500, text=text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
        except web.HTTPRequestEntityTooLarge:
            return status_response(errors.too_large(self.max_body_bytes))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:
            log.exception("internal error on %s %s", request.method, request.path)
            return status_response(errors.internal(type(e).__name__ + ": " + str(e)))
        finally:
            authorization.CURRENT.set(None)  # a keep-alive connection's next request starts clean

    def _authenticate(self, request: web.Request, path: str) -> UserInfo:
        """The request's user (authentication.Authenticator), else 401 on every path."""
        peer = None
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        if ssl_object is not None:
            peer = ssl_object.getpeercert(binary_form=True)
        try:
            return self.authenticator.authenticate(request.headers.get("Authorization"), peer, path)
        except AuthenticationError as e:
            log.debug("unauthorized %s %s: %s", request.method, path, e)
            raise errors.unauthorized() from None

    @staticmethod
    def _attributes(request: web.Request, path: str, user: UserInfo) -> Attributes:
        """The request's attributes: authorization's, or (system:masters, whom it does not look at, and
        refused requests) made now."""
        ctx = authorization.CURRENT.get()
        if ctx is not None and ctx.attributes is not None:
            return ctx.attributes
        return authorization.request_attributes(request.method, path, request.query, user,
                                                request.query.getall("watch", []))

    def _impersonate(self, request: web.Request, requestor: UserInfo) -> UserInfo:
        """kube's WithImpersonation (authentication/impersonation.py): the user the request acts as,
        each impersonation authorized for the requestor; the headers are gone afterwards."""
        def authorize(attrs: Attributes) -> tuple[bool, str]:
            decision = self.authorizer.authorize(attrs)
            return decision.allowed, decision.reason

        headers = request.headers.items()
        user = impersonation.impersonate(headers, requestor, authorize)
        stripped = CIMultiDictProxy(CIMultiDict(impersonation.strip(headers)))
        request._headers = stripped
        request._cache["headers"] = stripped  # aiohttp's reified property
        if isinstance(request, LeanRequest):
            request.headers = stripped
        if user is None:
            return requestor
        log.debug("%s is impersonating %s", requestor.username, user.username)
        return user

    def _authorize(self, request: web.Request, path: str, user: UserInfo) -> None:
        """kube's authorization filter: the request's attributes to the authorizer chain, 403 unless
        allowed; the attributes stay in authorization.CURRENT for the rest of this request."""
        if MASTERS_GROUP in user.groups:  # kube's privileged group: allowed, whatever the request asks
            authorization.CURRENT.set(authorization.RequestContext(user, self.authorizer))
            return
        attrs = authorization.request_attributes(request.method, path, request.query, user,
                                                 request.query.getall("watch", []))
        decision = self.authorizer.authorize(attrs)
        if not decision.allowed:
            log.debug("forbidden %s %s for %s: %s", request.method, path, user.username, decision.reason)
            raise authorization.forbidden(attrs, decision.reason)
        authorization.CURRENT.set(authorization.RequestContext(user, self.authorizer, attrs))

    async def _route(self, request: web.Request, path: str) -> web.StreamResponse:
        ctx = self._ctx
        parts = list(filter(None, path.split("/")))
        if not parts:
            return discovery.root(ctx)
        head = parts[0]
        if head == "version":
            return discovery.version()
        if head == "openapi":
            if parts == ["openapi", "v2"]:
                return openapi_proto.v2_response(request, ctx.resources.all())
            return openapi.serve(ctx, parts[1:])
        if head == "api":
            if len(parts) == 1:
                return discovery.legacy_versions(ctx)
            if len(parts) == 2:
                return discovery.resource_list(ctx, "", parts[1])
            return await self._resource_request(request, "", parts[1], parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return discovery.group_list(ctx)
            if len(parts) == 2:
                return discovery.group(ctx, parts[1])
            if len(parts) == 3:
                return discovery.resource_list(ctx, parts[1], parts[2])
            return await self._resource_request(request, parts[1], parts[2], parts[3:])
        raise not_found()

    async def _resource_request(self, request: web.Request, group: str, version: str,
                                rest: list[str]) -> web.StreamResponse:
        """A verb on a resource path, to the handler of its concern."""
        ctx = self._ctx
        if len(rest) == 5:  # all below are namespaces/<ns>/<plural>/<name>/<subresource>
            if rest[4] == "binding" and binding.is_binding(group, version, rest):  # kube's BindingREST
                return await binding.serve(ctx, request, rest)
            if rest[4] == "eviction" and eviction.is_eviction(group, version, rest):  # kube's EvictionREST
                return await eviction.serve(ctx, request, rest)
            if pods.is_node_subresource(group, version, rest):  # pods/log, exec...: proxied to the Pod's node
                return await pods.serve(ctx, request, rest, kubelet_token=self.token)
            if tokenrequest.is_token_request(group, version, rest):  # serviceaccounts/<name>/token
                return await tokenrequest.serve(ctx, request, rest, self.sa_tokens)
        elif len(rest) == 3 and rest[2] == "bindings" and binding.is_binding(group, version, rest):  # legacy
            return await binding.serve(ctx, request, rest)
        scope = resolve(ctx, request, group, version, rest)
        method, name = request.method, scope.name
        if method == "GET":
            if scope.watch:
                return await watch.watch_resource(ctx, scope)
            if name is None:
                return await get.list_resource(ctx, scope)
            return await get.get_resource(ctx, scope)
        if method == "POST" and name is None:
            return await create.create_resource(ctx, scope)
        if method == "PUT" and name is not None:
            return await update.update_resource(ctx, scope)
        if method == "PATCH" and name is not None:
            return await patch.patch_resource(ctx, scope)
        if method == "DELETE" and name is not None and not scope.subresource:
            return await delete.delete_resource(ctx, scope)
        if method == "DELETE" and name is None:
            return await delete.delete_collection(ctx, scope)
        raise errors.method_not_allowed()


def with_flow(resp: web.StreamResponse, flow: Classification | None) -> web.StreamResponse:
    """APF's headers on a response (not on a stream already under way: a watch's went out without them)."""
    if flow is not None:
        if type(resp) is JsonAnswer:
            resp.extra_head = flow.lines
        elif not resp.prepared:
            resp.headers[FS_HEADER] = flow.flow_schema_uid
            resp.headers[PL_HEADER] = flow.priority_level_uid
    return resp


async def serve(server: ApiServer, kubeconfig_out: str | None, kubeconfig_auth: str = "token") -> None:
    """Run until SIGTERM/SIGINT (the `isthmus apiserver` command); kubeconfig_auth: "token" or "cert"."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()
    await server.start()
    if kubeconfig_out:
        server.write_kubeconfig(kubeconfig_out, auth=kubeconfig_auth)
    log.info("ready in %.2fs; kubeconfig: %s", time.monotonic() - started, kubeconfig_out)
    print(f"isthmus apiserver listening on {server.url}", flush=True)
    if kubeconfig_out:
        print(f"kubeconfig written to {kubeconfig_out}", flush=True)
    await stop.wait()
    await server.stop()
