"""The embedded Kubernetes-compatible API server: HTTP surface, write pipeline, watches, GC.

Request flow for writes, as in kube-apiserver: decode → build the new object (create body,
update body, patch applied to the live object, or server-side apply) → defaults → prune and
validate (422) → admission (mutating, validating) → optimistic-concurrency commit. The store
is synchronous, so everything between reading the live object and committing runs without an
await, except admission: when admission awaited and the live object changed meanwhile, the
write is recomputed (kube's GuaranteedUpdate loop).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import gc
import hmac
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from isthmus.apiserver import datadir, errors, openapi, protobuf, table
from isthmus.apiserver.admission import Admission
from isthmus.apiserver.builtins import builtin_resources
from isthmus.apiserver.controllers.crd import CRDController
from isthmus.apiserver.controllers.garbagecollector import GarbageCollector
from isthmus.apiserver.controllers.namespace import NamespaceController, create_system_namespaces
from isthmus.apiserver.errors import ApiError
from isthmus.apiserver.kubeconfig import kubeconfig_dict, write_kubeconfig
from isthmus.apiserver.patch import apply_json_patch, apply_merge_patch, apply_strategic_merge_patch
from isthmus.apiserver.registry.store import CRD_KEY, NS_KEY, GenericStore, clone
from isthmus.apiserver.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.selectors import parse_field_selector, parse_label_selector
from isthmus.apiserver.storage import Store, UnusableStore
from isthmus.apiserver.tls import ensure_certs, server_context

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

KUBE_VERSION = {"major": "1", "minor": "32"}
STATUS_VERBS = ["get", "patch", "update"]
# What kube's system:public-info-viewer role grants to unauthenticated users.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})


def _truthy(v: str | None) -> bool:
    return v is not None and v.lower() in ("true", "1")


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
        bookmark_interval: float = 5.0,
        preload_crds: list[Obj] | None = None,
        admission: Admission | None = None,
        reinitialize: bool = False,
    ) -> None:
        """token None serves everyone (for in-process use); `isthmus apiserver` always sets one.

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
        self.preload_crds = preload_crds or []
        self.admission = admission or Admission()
        self.ca_pem: bytes | None = None
        self.store = Store(str(self.data_dir / "state.db") if self.data_dir else None, history=history)
        self.resources = ResourceRegistry()
        self.generic_store = GenericStore(self.store, self.resources, self.admission)
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._enc_cache: dict[tuple[int, str], bytes] = {}
        self._started = False
        self._tls_tmp: str | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> str:
        """Open the store and listen. Raises DataDirError (one line for the user) before binding."""
        if self.data_dir:
            self._open_data_dir(self.data_dir)
        else:
            self.store.open()
        for info in builtin_resources():
            self.resources.add(info)
        gcol = GarbageCollector(self.store, self.resources, self.generic_store)
        crds = CRDController(self.store, self.resources, self.generic_store)
        self.store.on_write(gcol.on_write)
        self.store.on_write(crds.on_write)
        crds.serve_stored()
        # Only after every stored CRD is served again: otherwise custom objects are missing from the
        # uid index and the GC takes their dependents for orphans.
        gcol.index_all()
        # Everything loaded so far lives as long as the server: keep it out of the cyclic GC's scans,
        # whose full collections otherwise pause the loop for tens of ms with 100k objects.
        gc.freeze()
        await create_system_namespaces(self.store, self.resources, self.generic_store)
        crd_info = self.resources.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        for crd in self.preload_crds:
            name = crd.get("metadata", {}).get("name", "")
            if self.store.get(CRD_KEY, "", name) is None:
                await self.create_object(crd_info, "", clone(crd), manager="isthmus-apiserver")
        self._spawn(gcol.run())
        self._spawn(crds.run())
        self._spawn(NamespaceController(self.store, self.resources, self.generic_store).run())
        # Objects left mid-deletion by a previous run (foreground/orphan/CRD cleanup) resume here.
        gcol.resync()
        crds.resync()

        app = web.Application(client_max_size=self.max_body_bytes, middlewares=[])
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        ssl_ctx = None
        if self.tls:
            if self.data_dir is None and self._tls_tmp is None:
                self._tls_tmp = tempfile.mkdtemp(prefix="isthmus-apiserver-")  # 0700
            certs = self.data_dir / "tls" if self.data_dir else Path(self._tls_tmp or "") / "tls"
            ca_path, crt_path, key_path = ensure_certs(certs, [self.host, "localhost", "127.0.0.1"])
            self.ca_pem = ca_path.read_bytes()
            ssl_ctx = server_context(crt_path, key_path)
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=ssl_ctx, reuse_address=True,
                           backlog=1024)
        await site.start()
        server = site._server
        if self.port == 0 and server is not None:
            socks = getattr(server, "sockets", None) or []
            self.port = socks[0].getsockname()[1]
        self._started = True
        log.info("apiserver listening on %s (data: %s)", self.url, self.data_dir or "in memory")
        return self.url

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
        if self._runner:
            await self._runner.cleanup()
            self._runner = None
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

    def kubeconfig(self, name: str = "isthmus") -> dict[str, Any]:
        return kubeconfig_dict(name, self.url, ca_pem=self.ca_pem, token=self.token)

    def write_kubeconfig(self, path: str | Path, name: str = "isthmus") -> None:
        write_kubeconfig(path, self.kubeconfig(name))

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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            path = request.path
            if not self._authenticate(request) and path not in PUBLIC_PATHS:
                raise errors.unauthorized()
            if path in ("/healthz", "/livez", "/readyz"):
                return web.Response(text="ok")
            return await self._route(request, path)
        except ApiError as e:
            return self._status(e)
        except web.HTTPRequestEntityTooLarge:
            return self._status(errors.too_large(self.max_body_bytes))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:
            log.exception("internal error on %s %s", request.method, request.path)
            return self._status(errors.internal(type(e).__name__ + ": " + str(e)))

    def _authenticate(self, request: web.Request) -> bool:
        """True when the request carries our token, False when it carries none (anonymous).

        As kube's bearer token authenticator: the scheme is case-insensitive, a header that is
        not `Bearer <token>` counts as no credentials, and a wrong token is 401 on every path.
        """
        if not self.token:
            return True
        parts = request.headers.get("Authorization", "").strip().split(" ", 2)
        if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
            return False
        if not hmac.compare_digest(parts[1].encode(), self.token.encode()):
            raise errors.unauthorized()
        return True

    @staticmethod
    def _json(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
        resp = web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
        for w in warnings or []:
            resp.headers.add("Warning", f'299 - "{w}"')
        return resp

    def _status(self, e: ApiError) -> web.Response:
        return self._json(e.status(), status=e.code)

    async def _route(self, request: web.Request, path: str) -> web.StreamResponse:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return self._json({"paths": sorted(self._root_paths())})
        head = parts[0]
        if head == "version":
            return self._json(self._version())
        if head == "openapi":
            return self._openapi(parts[1:])
        if head == "api":
            if len(parts) == 1:
                return self._json({"kind": "APIVersions", "versions": ["v1"],
                                   "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                   "serverAddress": f"{self.host}:{self.port}"}]})
            if len(parts) == 2:
                return self._resource_list("", parts[1])
            return await self._resource_request(request, "", parts[1], parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return self._json(self._group_list())
            if len(parts) == 2:
                group = self._group(parts[1])
                if group is None:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                return self._json(group)
            if len(parts) == 3:
                return self._resource_list(parts[1], parts[2])
            return await self._resource_request(request, parts[1], parts[2], parts[3:])
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # ------------------------------------------------------------------ discovery

    def _version(self) -> Obj:
        return {**KUBE_VERSION, "gitVersion": "v1.32.0-isthmus", "gitCommit": "isthmus", "gitTreeState": "clean",
                "buildDate": "2026-11-21T00:00:00Z", "goVersion": "python3.11", "compiler": "cpython",
                "platform": "linux/amd64"}

    def _root_paths(self) -> list[str]:
        out = {"/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/openapi/v2", "/openapi/v3",
               "/version"}
        for g, v in {(i.group, i.version) for i in self.resources.all()}:
            if g:
                out.add(f"/apis/{g}")
                out.add(f"/apis/{g}/{v}")
        return list(out)

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for info in self.resources.all():
            if info.group:
                vs = groups.setdefault(info.group, [])
                if info.version not in vs:
                    vs.append(info.version)
        for vs in groups.values():
            vs.sort(key=_version_priority)
        return groups

    def _group(self, name: str) -> Obj | None:
        versions = self._group_versions().get(name)
        if not versions:
            return None
        gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": gvs, "preferredVersion": gvs[0]}

    def _group_list(self) -> Obj:
        groups = []
        for name in sorted(self._group_versions()):
            g = self._group(name)
            if g:
                g = {k: v for k, v in g.items() if k not in ("kind", "apiVersion")}
                groups.append(g)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> web.Response:
        gv = f"{group}/{version}" if group else version
        cached = self.resources.cache.get(gv)
        if cached is None:
            resources = []
            for info in sorted(self.resources.all(), key=lambda i: i.plural):
                if info.group != group or info.version != version:
                    continue
                r: Obj = {"name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
                          "kind": info.kind, "verbs": info.verbs}
                if info.short_names:
                    r["shortNames"] = info.short_names
                if info.categories:
                    r["categories"] = info.categories
                resources.append(r)
                if info.has_status:
                    resources.append({"name": f"{info.plural}/status", "singularName": "",
                                      "namespaced": info.namespaced, "kind": info.kind, "verbs": STATUS_VERBS})
            if not resources:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            cached = orjson.dumps({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                                   "resources": resources})
            self.resources.cache[gv] = cached
        return web.Response(body=cached, content_type="application/json")

    def _openapi(self, rest: list[str]) -> web.Response:
        infos = self.resource_infos()
        if rest == ["v2"]:
            key = "openapi/v2"
            if key not in self.resources.cache:
                self.resources.cache[key] = orjson.dumps(openapi.openapi_v2(infos))
            return web.Response(body=self.resources.cache[key], content_type="application/json")
        if rest == ["v3"]:
            return self._json(openapi.openapi_v3_index(infos))
        if len(rest) >= 3 and rest[0] == "v3":
            if rest[1] == "api" and len(rest) == 3:
                group, version = "", rest[2]
            elif rest[1] == "apis" and len(rest) == 4:
                group, version = rest[2], rest[3]
            else:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            key = f"openapi/v3/{group}/{version}"
            if key not in self.resources.cache:
                doc = openapi.openapi_v3_group(infos, group, version)
                if doc is None:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                self.resources.cache[key] = orjson.dumps(doc)
            return web.Response(body=self.resources.cache[key], content_type="application/json")
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # ------------------------------------------------------------------ resource requests

    async def _resource_request(self, request: web.Request, group: str, version: str,
                                rest: list[str]) -> web.StreamResponse:
        q = request.query
        watch = _truthy(q.get("watch"))
        if rest and rest[0] == "watch":  # legacy /watch/ paths
            watch, rest = True, rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        info = self.resources.get(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub == "finalize" and info.key == NS_KEY:
            sub = "status"  # spec.finalizers are written like status here: owned by the server
        if sub and (sub != "status" or not info.has_status):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if info.namespaced and namespace is None and (name is not None or request.method == "POST"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not info.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = namespace or ""
        method = request.method
        accept = request.headers.get("Accept", "")
        as_table = "as=Table" in accept
        dry_run = q.get("dryRun") == "All"
        if q.get("dryRun") not in (None, "", "All"):
            raise errors.bad_request(f"unsupported dry run value: {q.get('dryRun')!r}")
        manager = q.get("fieldManager") or _manager_from_agent(request.headers.get("User-Agent", ""))
        fv = q.get("fieldValidation", "Warn")
        if fv not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(f"fieldValidation {fv!r} is invalid: valid values are Ignore, Warn, Strict")

        if method == "GET":
            if watch:
                return await self._watch(request, info, namespace, name, as_table)
            if name is None:
                return self._list(request, info, namespace, as_table)
            obj = self.store.get(info.key, ns, name)
            if obj is None:
                raise errors.not_found(info.group, info.plural, name)
            if as_table:
                return self._json(table.to_table(info, [self._out(info, obj)], resource_version=str(self.store.rv),
                                                 include_object=q.get("includeObject", "Metadata")))
            return self._json(self._out(info, obj))
        if method == "POST" and name is None:
            body = await self._body(request)
            warnings: list[str] = []
            created = await self.create_object(info, ns, body, manager=manager, dry_run=dry_run,
                                               field_validation=fv, warnings=warnings)
            return self._json(self._out(info, created), status=201, warnings=warnings)
        if method == "PUT" and name is not None:
            body = await self._body(request)
            warnings = []
            out = await self.update_object(info, ns, name, lambda live: clone(body), subresource=sub,
                                           manager=manager, dry_run=dry_run, field_validation=fv,
                                           warnings=warnings)
            return self._json(self._out(info, out), warnings=warnings)
        if method == "PATCH" and name is not None:
            return await self._patch(request, info, ns, name, sub, manager, dry_run, fv)
        if method == "DELETE" and name is not None and not sub:
            options = await self._delete_options(request)
            out, _ = await self.delete_object(info, ns, name, options, dry_run=dry_run)
            return self._json(self._out(info, out))
        if method == "DELETE" and name is None:
            options = await self._delete_options(request)
            return await self._delete_collection(request, info, namespace, options, dry_run)
        raise errors.method_not_allowed()

    def _out(self, info: ResourceInfo, obj: Obj) -> Obj:
        if obj.get("apiVersion") != info.api_version:
            return {**obj, "apiVersion": info.api_version}
        return obj

    async def _body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise errors.too_large(self.max_body_bytes)
        raw = await request.read()
        ctype = request.content_type or "application/json"
        return _decode(raw, ctype)

    # ------------------------------------------------------------------ list / get / watch

    def _matcher(self, request: web.Request, info: ResourceInfo, name: str | None) -> Callable[[Obj], bool] | None:
        q = request.query
        ls = parse_label_selector(q.get("labelSelector"))
        fs = parse_field_selector(q.get("fieldSelector"), info.field_selectors, builtin=info.builtin)
        if not q.get("labelSelector") and not q.get("fieldSelector") and name is None:
            return None

        def match(obj: Obj) -> bool:
            m = obj.get("metadata", {})
            if name is not None and m.get("name") != name:
                return False
            return ls.matches(m.get("labels")) and fs.matches(obj)

        return match

    def _list(self, request: web.Request, info: ResourceInfo, namespace: str | None, as_table: bool) -> web.Response:
        q = request.query
        match = self._matcher(request, info, None)
        rv = self.store.rv
        items = self.store.list(info.key, namespace)  # sorted by (namespace, name)
        start = 0
        cont = q.get("continue")
        if cont:
            try:
                token = orjson.loads(base64.urlsafe_b64decode(cont.encode()))
                rv = int(token["rv"])
                after = (str(token["ns"]), str(token["name"]))
            except Exception as e:
                raise errors.bad_request(f"continue key is not valid: {e}") from None
            # Seek instead of rescanning: pages stay O(page) however big the collection is.
            start = bisect.bisect_right(items, after, key=lambda o: (o["metadata"].get("namespace", ""),
                                                                     o["metadata"]["name"]))
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise errors.bad_request(f"invalid limit: {q.get('limit')!r}") from None
        page: list[Obj] = []
        i = start
        while i < len(items) and (limit <= 0 or len(page) < limit):
            o = items[i]
            i += 1
            if match is None or match(o):
                page.append(o)
        more = any(match is None or match(o) for o in items[i:]) if limit > 0 and i < len(items) else False
        continue_token = None
        remaining = 0
        if more:
            last = page[-1]["metadata"]
            continue_token = base64.urlsafe_b64encode(orjson.dumps(
                {"rv": rv, "ns": last.get("namespace", ""), "name": last["name"]})).decode()
            remaining = len(items) - i if match is None else 0
        items = page
        if as_table:
            return self._json(table.to_table(info, [self._out(info, o) for o in items], resource_version=str(rv),
                                             include_object=q.get("includeObject", "Metadata"),
                                             continue_token=continue_token))
        list_meta: Obj = {"resourceVersion": str(rv)}
        if continue_token:
            list_meta["continue"] = continue_token
            if remaining:
                list_meta["remainingItemCount"] = remaining
        out_items = items if all(o.get("apiVersion") == info.api_version for o in items[:1]) else [
            self._out(info, o) for o in items]
        return self._json({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": list_meta,
                           "items": out_items})

    def _encode_event(self, info: ResourceInfo, etype: str, obj: Obj, as_table: bool) -> bytes:
        if as_table:
            body: Any = table.to_table(info, [self._out(info, obj)], resource_version=obj["metadata"].get(
                "resourceVersion", ""), include_object="Object")
            return orjson.dumps({"type": etype, "object": body}) + b"\n"
        ck = (int(obj["metadata"].get("resourceVersion") or 0), etype + info.api_version)
        hit = self._enc_cache.get(ck)
        if hit is None:
            if len(self._enc_cache) > 4096:
                self._enc_cache.clear()
            hit = b'{"type":"' + etype.encode() + b'","object":' + orjson.dumps(self._out(info, obj)) + b"}\n"
            self._enc_cache[ck] = hit
        return hit

    async def _watch(self, request: web.Request, info: ResourceInfo, namespace: str | None, name: str | None,
                     as_table: bool) -> web.StreamResponse:
        q = request.query
        match = self._matcher(request, info, name)
        rv_param = q.get("resourceVersion") or ""
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        initial_events = _truthy(q.get("sendInitialEvents"))
        timeout = float(q.get("timeoutSeconds") or 0)
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        initial: list[Obj] = []
        error: ApiError | None = None
        watch = None
        # Listing and registering the watch happen without an await, so no event can fall between them.
        if rv_param in ("", "0") or initial_events:
            initial = self.store.list(info.key, namespace)
            if match is not None:
                initial = [o for o in initial if match(o)]
            start_rv = self.store.rv
            watch = self.store.watch(info.key, namespace, start_rv, match)
        else:
            try:
                start_rv = int(rv_param)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {rv_param!r}") from None
            try:
                watch = self.store.watch(info.key, namespace, start_rv, match)
            except ApiError as e:
                error = e
        await resp.prepare(request)
        try:
            if error is not None:
                await resp.write(orjson.dumps({"type": "ERROR", "object": error.status()}) + b"\n")
                return resp
            assert watch is not None
            for obj in initial:
                await resp.write(self._encode_event(info, "ADDED", obj, as_table))
            if initial_events and bookmarks:
                await resp.write(self._bookmark(info, start_rv, initial_end=True))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout if timeout > 0 else None
            it = watch.__aiter__()
            last_rv = start_rv
            while True:
                wait: float | None = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    wait = left if wait is None else min(wait, left)
                try:
                    ev = await asyncio.wait_for(it.__anext__(), wait)
                except TimeoutError:
                    if bookmarks:
                        last_rv = max(last_rv, self.store.rv)
                        await resp.write(self._bookmark(info, last_rv))
                    continue
                except StopAsyncIteration:
                    break
                last_rv = ev.rv
                await resp.write(self._encode_event(info, ev.type, ev.obj, as_table))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            if watch is not None:
                watch.close()
        with contextlib.suppress(Exception):
            await resp.write_eof()
        return resp

    def _bookmark(self, info: ResourceInfo, rv: int, initial_end: bool = False) -> bytes:
        m: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            m["annotations"] = {"k8s.io/initial-events-end": "true"}
        return orjson.dumps({"type": "BOOKMARK", "object": {"kind": info.kind, "apiVersion": info.api_version,
                                                             "metadata": m}}) + b"\n"

    async def _patch(self, request: web.Request, info: ResourceInfo, ns: str, name: str, sub: str, manager: str,
                     dry_run: bool, fv: str) -> web.Response:
        ctype = (request.content_type or "").lower()
        q = request.query
        raw = await request.read()
        warnings: list[str] = []
        apply = False
        force = _truthy(q.get("force"))
        if ctype == "application/json-patch+json":
            ops = _decode(raw, "application/json")

            def build(live: Obj) -> Any:
                return apply_json_patch(live, ops)
        elif ctype == "application/merge-patch+json":
            patch = _decode(raw, "application/json")
            _require_object_patch(patch)

            def build(live: Obj) -> Any:
                return apply_merge_patch(live, patch)
        elif ctype == "application/strategic-merge-patch+json":
            if not info.builtin:
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media types include: "
                               "application/json-patch+json, application/merge-patch+json, "
                               "application/apply-patch+yaml")
            patch = _decode(raw, "application/json")
            _require_object_patch(patch)

            def build(live: Obj) -> Any:
                return apply_strategic_merge_patch(live, patch, info.schema)
        elif ctype in ("application/apply-patch+yaml", "application/apply-patch+cbor"):
            if not q.get("fieldManager"):
                raise errors.invalid("meta.k8s.io", "PatchOptions", "", [errors.cause(
                    "fieldManager", "Required value: is required for apply patch", "FieldValueRequired")])
            applied = _decode(raw, "application/yaml")
            if not isinstance(applied, dict):
                raise errors.bad_request("apply patch must be an object")
            if not applied.get("apiVersion") or not applied.get("kind"):
                raise errors.bad_request("apiVersion and kind must be set in an apply configuration")
            apply = True

            def build(live: Obj) -> Any:
                return clone(applied)
        else:
            raise errors.unsupported_media_type(ctype)
        out, created = await self.generic_store.update(info, ns, name, build, subresource=sub, manager=manager,
                                          dry_run=dry_run, field_validation=fv, warnings=warnings, apply=apply,
                                          force=force)
        return self._json(self._out(info, out), status=201 if created else 200, warnings=warnings)

    async def _delete_options(self, request: web.Request) -> Obj:
        q = request.query
        opts: Obj = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                body = _decode(raw, request.content_type or "application/json")
                if isinstance(body, dict):
                    opts.update(body)
        if q.get("propagationPolicy"):
            opts["propagationPolicy"] = q["propagationPolicy"]
        if q.get("gracePeriodSeconds"):
            opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        if "orphanDependents" in q:
            opts["orphanDependents"] = _truthy(q.get("orphanDependents"))
        policy = opts.get("propagationPolicy")
        if policy is None and "orphanDependents" in opts:
            policy = "Orphan" if opts["orphanDependents"] else "Background"
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.invalid("meta.k8s.io", "DeleteOptions", "", [errors.cause(
                "propagationPolicy", f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                '"Orphan", "nil"', "FieldValueNotSupported")])
        opts["propagationPolicy"] = policy
        return opts

    async def _delete_collection(self, request: web.Request, info: ResourceInfo, namespace: str | None,
                                 options: Obj, dry_run: bool) -> web.Response:
        match = self._matcher(request, info, None)
        items = [o for o in self.store.list(info.key, namespace) if match is None or match(o)]
        out = []
        for o in items:
            m = o["metadata"]
            with contextlib.suppress(ApiError):
                deleted, _ = await self.delete_object(info, m.get("namespace", ""), m["name"], options,
                                                      dry_run=dry_run)
                out.append(self._out(info, deleted))
        return self._json({"kind": info.list_kind, "apiVersion": info.api_version,
                           "metadata": {"resourceVersion": str(self.store.rv)}, "items": out})

# ---------------------------------------------------------------------- helpers


def _version_priority(v: str) -> tuple[int, int, int]:
    """Kube's version ordering: GA > beta > alpha, higher numbers first."""
    import re

    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", v)
    if not m:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)


def _decode(raw: bytes, ctype: str) -> Any:
    if ctype == protobuf.CONTENT_TYPE:  # kubectl's typed clients (create namespace/configmap/...)
        return protobuf.decode_object(raw)
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "yaml" not in ctype:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise errors.bad_request(f"error converting YAML to JSON: {str(e).splitlines()[0]}") from None


def _require_object_patch(patch: Any) -> None:
    if not isinstance(patch, dict):
        raise errors.bad_request("the patch must be a JSON object")


def _manager_from_agent(agent: str) -> str:
    """kube's default field manager: the user agent up to the first '/'."""
    head = agent.split("/", 1)[0].strip()
    return head[:128] or "unknown"


async def serve(server: ApiServer, kubeconfig_out: str | None) -> None:
    """Run until SIGTERM/SIGINT (the `isthmus apiserver` command)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()
    await server.start()
    if kubeconfig_out:
        server.write_kubeconfig(kubeconfig_out)
    log.info("ready in %.2fs; kubeconfig: %s", time.monotonic() - started, kubeconfig_out)
    print(f"isthmus apiserver listening on {server.url}", flush=True)
    if kubeconfig_out:
        print(f"kubeconfig written to {kubeconfig_out}", flush=True)
    await stop.wait()
    await server.stop()
