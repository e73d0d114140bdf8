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
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from isthmus.apiserver import datadir, errors, meta, openapi, protobuf, schema, table
from isthmus.apiserver.admission import Admission, AdmissionRequest
from isthmus.apiserver.apply import server_side_apply, track_update
from isthmus.apiserver.builtins import builtin_resources, crd_resources, validate_crd
from isthmus.apiserver.errors import ApiError
from isthmus.apiserver.kubeconfig import kubeconfig_dict, write_kubeconfig
from isthmus.apiserver.patch import apply_json_patch, apply_merge_patch, apply_strategic_merge_patch
from isthmus.apiserver.resources import ResourceInfo
from isthmus.apiserver.selectors import parse_field_selector, parse_label_selector
from isthmus.apiserver.store import Store, UnusableStore, WatchEvent
from isthmus.apiserver.tls import ensure_certs, server_context

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

KUBE_VERSION = {"major": "1", "minor": "32"}
CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"
NS_KEY = "/namespaces"
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Metadata the server owns: never taken from a client's update.
SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
               "managedFields", "selfLink")
STATUS_VERBS = ["get", "patch", "update"]
MAX_RETRIES = 8
# What kube's system:public-info-viewer role grants to unauthenticated users.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})


def clone(obj: Any) -> Any:
    """Deep copy of JSON data (orjson round trip beats copy.deepcopy by ~10x)."""
    return orjson.loads(orjson.dumps(obj))


def _spec_view(obj: Obj, has_status: bool) -> Obj:
    """What metadata.generation tracks: everything but metadata (and status when it is a subresource)."""
    return {k: v for k, v in obj.items() if k != "metadata" and not (has_status and k == "status")}


def _without_volatile(obj: Obj) -> Obj:
    """The object as compared to decide whether a write is a no-op."""
    m = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": m}


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
        self._resources: dict[tuple[str, str, str], ResourceInfo] = {}
        self._crd_infos: dict[str, list[ResourceInfo]] = {}
        self._discovery_cache: dict[str, bytes] = {}
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._gc_queue: asyncio.Queue[tuple[str, Any]] | None = None
        # uid → (key, namespace, name) of every object; owner uid → dependents' (key, namespace, name).
        self._uids: dict[str, tuple[str, str, str]] = {}
        self._dependents: defaultdict[str, set[tuple[str, str, str]]] = defaultdict(set)
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
        self._gc_queue = asyncio.Queue()
        self._register_builtins()
        self.store.on_write(self._on_write)
        for crd in self.store.list(CRD_KEY):
            self._register_crd(crd)
        # Only after every stored CRD is served again: otherwise custom objects are missing from the
        # uid index and the GC takes their dependents for orphans.
        self._index_all()
        # Everything loaded so far lives as long as the server: keep it out of the cyclic GC's scans,
        # whose full collections otherwise pause the loop for tens of ms with 100k objects.
        gc.freeze()
        for ns in DEFAULT_NAMESPACES:
            if self.store.get(NS_KEY, "", ns) is None:
                await self.create_object(self._info("", "v1", "namespaces"), "", {"metadata": {"name": ns}},
                                         manager="isthmus-apiserver")
        for crd in self.preload_crds:
            name = crd.get("metadata", {}).get("name", "")
            if self.store.get(CRD_KEY, "", name) is None:
                await self.create_object(self._info("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
                                         "", clone(crd), manager="isthmus-apiserver")
        self._spawn(self._gc_loop())
        self._spawn(self._namespace_loop())
        # Objects left mid-deletion by a previous run (foreground/orphan/CRD cleanup) resume here.
        for key in list(self._keys()):
            for obj in self.store.list(key):
                if obj["metadata"].get("deletionTimestamp"):
                    self._gc_put(("deleting", (key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])))
                for ref in obj["metadata"].get("ownerReferences") or []:
                    if ref.get("uid") not in self._uids:
                        self._gc_put(("dependent", (key, obj["metadata"].get("namespace", ""),
                                                    obj["metadata"]["name"])))

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

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ registry

    def _register(self, info: ResourceInfo) -> None:
        self._resources[(info.group, info.version, info.plural)] = info
        self._discovery_cache.clear()

    def _register_builtins(self) -> None:
        for info in builtin_resources():
            self._register(info)

    def _register_crd(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        self._unregister_crd(name)
        if crd["metadata"].get("deletionTimestamp"):
            # Terminating CRDs keep serving so their instances can finish deleting.
            pass
        try:
            infos = crd_resources(crd)
        except Exception:  # a CRD we stored must never take the server down
            log.exception("cannot serve CRD %s", name)
            return
        for info in infos:
            self._register(info)
        self._crd_infos[name] = infos

    def _unregister_crd(self, name: str) -> None:
        for info in self._crd_infos.pop(name, []):
            self._resources.pop((info.group, info.version, info.plural), None)
        self._discovery_cache.clear()

    def _info(self, group: str, version: str, plural: str) -> ResourceInfo:
        info = self._resources.get((group, version, plural))
        if info is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"group": group, "kind": plural} if group else {"kind": plural})
        return info

    def _keys(self) -> set[str]:
        return {i.key for i in self._resources.values()}

    def _storage_info(self, key: str) -> ResourceInfo | None:
        found = None
        for info in self._resources.values():
            if info.key == key:
                if info.storage_version:
                    return info
                found = info
        return found

    def resource_infos(self) -> list[ResourceInfo]:
        return list(self._resources.values())

    # ------------------------------------------------------------------ indexes (GC)

    def _index_all(self) -> None:
        for key in self._keys() | {CRD_KEY}:
            for obj in self.store.list(key):
                self._index(key, None, obj)

    def _index(self, key: str, prev: Obj | None, obj: Obj | None) -> None:
        ref = None
        if prev is not None:
            m = prev["metadata"]
            ref = (key, m.get("namespace", ""), m["name"])
            for o in m.get("ownerReferences") or []:
                self._dependents[o.get("uid", "")].discard(ref)
        if obj is not None:
            m = obj["metadata"]
            ref = (key, m.get("namespace", ""), m["name"])
            self._uids[m["uid"]] = ref
            for o in m.get("ownerReferences") or []:
                self._dependents[o.get("uid", "")].add(ref)

    def _on_write(self, ev: WatchEvent) -> None:
        m = ev.obj["metadata"]
        ref = (ev.key, m.get("namespace", ""), m["name"])
        if ev.type == "DELETED":
            self._index(ev.key, ev.obj, None)
            self._uids.pop(m.get("uid", ""), None)
            self._gc_put(("owner-gone", m.get("uid", "")))
            # An owner in foreground deletion waits for this dependent to go.
            for o in m.get("ownerReferences") or []:
                owner = self._uids.get(o.get("uid", ""))
                if owner:
                    self._gc_put(("deleting", owner))
            if ev.key == CRD_KEY:
                self._unregister_crd(m["name"])
        else:
            self._index(ev.key, ev.prev, ev.obj)
            if m.get("deletionTimestamp"):
                self._gc_put(("deleting", ref))
            new_owners = {o.get("uid") for o in m.get("ownerReferences") or []}
            old_owners = {o.get("uid") for o in (ev.prev or {}).get("metadata", {}).get("ownerReferences") or []}
            if new_owners - old_owners:
                self._gc_put(("dependent", ref))
            if ev.key == CRD_KEY:
                self._register_crd(ev.obj)
                if not _has_condition(ev.obj, "Established") and not m.get("deletionTimestamp"):
                    self._gc_put(("establish", m["name"]))
        self._enc_cache.clear() if len(self._enc_cache) > 4096 else None

    def _gc_put(self, item: tuple[str, Any]) -> None:
        if self._gc_queue is not None:
            self._gc_queue.put_nowait(item)

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
        for g, v, _ in self._resources:
            if g:
                out.add(f"/apis/{g}")
                out.add(f"/apis/{g}/{v}")
        return list(out)

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for info in self._resources.values():
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
        cached = self._discovery_cache.get(gv)
        if cached is None:
            resources = []
            for info in sorted(self._resources.values(), key=lambda i: i.plural):
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
            self._discovery_cache[gv] = cached
        return web.Response(body=cached, content_type="application/json")

    def _openapi(self, rest: list[str]) -> web.Response:
        infos = self.resource_infos()
        if rest == ["v2"]:
            key = "openapi/v2"
            if key not in self._discovery_cache:
                self._discovery_cache[key] = orjson.dumps(openapi.openapi_v2(infos))
            return web.Response(body=self._discovery_cache[key], content_type="application/json")
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
            if key not in self._discovery_cache:
                doc = openapi.openapi_v3_group(infos, group, version)
                if doc is None:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                self._discovery_cache[key] = orjson.dumps(doc)
            return web.Response(body=self._discovery_cache[key], content_type="application/json")
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
        info = self._info(group, version, rest[0])
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

    # ------------------------------------------------------------------ writes

    def _check_kind(self, info: ResourceInfo, obj: Any) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the object provided is unrecognized: expected a {info.kind} object")
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if av and av != info.api_version and not any(
                i.kind == info.kind and i.api_version == av for i in self._resources.values()):
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

    def _normalize(self, info: ResourceInfo, obj: Obj, field_validation: str, warnings: list[str]) -> None:
        """Defaults, pruning of unknown fields (per fieldValidation) and validation (422)."""
        if info.schema is not None:
            schema.apply_defaults(obj, info.schema)
        if info.defaulter is not None:
            info.defaulter(obj)
        if info.schema is not None:
            dropped = schema.prune(obj, info.schema)
            if dropped:
                if field_validation == "Strict":
                    msgs = "; ".join(f'unknown field "{p}"' for p in dropped)
                    raise errors.bad_request(f"strict decoding error: {msgs}")
                if field_validation == "Warn":
                    warnings.extend(f'unknown field \\"{p}\\"' for p in dropped)
        m = obj["metadata"]
        causes = meta.validate_metadata(m, name_rule=meta.NAME_RULES.get(info.key, "subdomain"),
                                        namespaced=info.namespaced)
        if info.schema is not None:
            causes += schema.validate(obj, info.schema)
        if info.key == CRD_KEY:
            causes += validate_crd(obj)
        if causes:
            raise errors.invalid(info.group, info.kind, str(m.get("name") or ""), causes)

    def _check_namespace(self, info: ResourceInfo, ns: str, operation: str) -> None:
        if not info.namespaced:
            return
        nso = self.store.get(NS_KEY, "", ns)
        if nso is None:
            raise errors.not_found("", "namespaces", ns)
        if operation == "CREATE" and nso["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f"{info.plural} is forbidden: unable to create new content in "
                           f"namespace {ns} because it is being terminated",
                           {"kind": info.plural, "causes": [{"reason": "NamespaceTerminating",
                                                             "message": f"namespace {ns} is being terminated",
                                                             "field": "metadata.namespace"}]})

    def _prepare_create(self, info: ResourceInfo, ns: str, body: Any, field_validation: str,
                        warnings: list[str]) -> Obj:
        obj = self._check_kind(info, body)
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
        m["generation"] = 1
        if info.has_status:
            obj.pop("status", None)
        if info.key == NS_KEY:
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            obj["status"] = {"phase": "Active"}
        if info.key == CRD_KEY:
            fins = m.setdefault("finalizers", [])
            if CRD_CLEANUP_FINALIZER not in fins:
                fins.append(CRD_CLEANUP_FINALIZER)
        self._normalize(info, obj, field_validation, warnings)
        return obj

    async def create_object(self, info: ResourceInfo, ns: str, body: Any, *, manager: str, dry_run: bool = False,
                            field_validation: str = "Warn", warnings: list[str] | None = None,
                            user: str = "system:admin", prepared: Obj | None = None) -> Obj:
        """Create through the full pipeline (also used internally, e.g. for default namespaces)."""
        warnings = warnings if warnings is not None else []
        obj = prepared if prepared is not None else self._prepare_create(info, ns, body, field_validation, warnings)
        if prepared is None:
            obj = track_update(None, obj, manager=manager, schema=info.schema, api_version=info.api_version,
                               now=obj["metadata"]["creationTimestamp"])
        self._check_namespace(info, ns, "CREATE")
        if self.admission.active(info):
            req = AdmissionRequest("CREATE", info, "", ns, obj["metadata"]["name"], obj, None, user, dry_run)
            await self.admission.run(req)
            obj = self._check_kind(info, req.object)
            self._normalize(info, obj, "Ignore", warnings)
            self._check_namespace(info, ns, "CREATE")
        name = obj["metadata"]["name"]
        for _ in range(MAX_RETRIES):
            if self.store.get(info.key, ns, name) is None:
                break
            if not obj["metadata"].get("generateName") or prepared is not None:
                raise errors.already_exists(info.group, info.plural, name)
            name = meta.generate_name(obj["metadata"]["generateName"])
            obj["metadata"]["name"] = name
        else:
            raise errors.already_exists(info.group, info.plural, name)
        if dry_run:
            return obj
        return self.store.create(info.key, obj)

    def _prepare_update(self, info: ResourceInfo, live: Obj, desired: Any, *, subresource: str,
                        field_validation: str, warnings: list[str]) -> Obj:
        new = self._check_kind(info, desired)
        lm, nm = live["metadata"], new["metadata"]
        name, ns = lm["name"], lm.get("namespace", "")
        if nm.get("name") and nm["name"] != name:
            raise errors.bad_request(f"the name of the object ({nm['name']}) does not match the name on the URL "
                                     f"({name})")
        if info.namespaced and nm.get("namespace") and nm["namespace"] != ns:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                     "the request")
        sent_rv = nm.get("resourceVersion")
        if sent_rv and sent_rv != lm.get("resourceVersion"):
            raise errors.stale(info.group, info.plural, name)
        if subresource == "status":
            # Only status moves through /status (and, for namespaces' /finalize, spec.finalizers).
            keep = clone(live)
            if "status" in new:
                keep["status"] = new["status"]
            else:
                keep.pop("status", None)
            if info.key == NS_KEY:
                keep.setdefault("spec", {})["finalizers"] = (new.get("spec") or {}).get("finalizers", [])
            new = keep
        else:
            if info.has_status:
                if "status" in live:
                    new["status"] = clone(live["status"])
                else:
                    new.pop("status", None)
            if info.key == NS_KEY:
                new.setdefault("spec", {})["finalizers"] = list((live.get("spec") or {}).get("finalizers", []))
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
        self._normalize(info, new, field_validation, warnings)
        if _spec_view(new, info.has_status) != _spec_view(live, info.has_status):
            new["metadata"]["generation"] = int(lm.get("generation") or 1) + 1
        return new

    async def update_object(self, info: ResourceInfo, ns: str, name: str, build: Callable[[Obj], Any], *,
                            subresource: str = "", manager: str, dry_run: bool = False,
                            field_validation: str = "Warn", warnings: list[str] | None = None,
                            apply: bool = False, force: bool = False,
                            user: str = "system:admin") -> Obj:
        obj, _ = await self._update(info, ns, name, build, subresource=subresource, manager=manager,
                                    dry_run=dry_run, field_validation=field_validation, warnings=warnings,
                                    apply=apply, force=force, user=user)
        return obj

    async def _update(self, info: ResourceInfo, ns: str, name: str, build: Callable[[Obj], Any], *,
                      subresource: str = "", manager: str, dry_run: bool = False,
                      field_validation: str = "Warn", warnings: list[str] | None = None,
                      apply: bool = False, force: bool = False,
                      user: str = "system:admin") -> tuple[Obj, bool]:
        """GuaranteedUpdate: build the new object from the live one, validate, admit, commit; retry on races.

        build(live_copy) returns the desired object (an update body, a patched object, or an apply config).
        With apply=True the result of build is the applied configuration and may create the object.
        """
        warnings = warnings if warnings is not None else []
        for _ in range(MAX_RETRIES):
            live = self.store.get(info.key, ns, name)
            if live is None:
                if not apply:
                    raise errors.not_found(info.group, info.plural, name)
                applied = self._check_kind(info, build({}))
                if applied["metadata"].get("name") and applied["metadata"]["name"] != name:
                    raise errors.bad_request(f"the name of the object ({applied['metadata']['name']}) does not match "
                                             f"the name on the URL ({name})")
                applied["metadata"]["name"] = name
                if subresource == "status":
                    raise errors.not_found(info.group, info.plural, name)
                now = meta.now_rfc3339()
                merged = server_side_apply(None, applied, manager=manager, force=force, schema=info.schema,
                                           api_version=info.api_version, now=now)
                mf = merged["metadata"].get("managedFields")
                prepared = self._prepare_create(info, ns, merged, field_validation, warnings)
                if mf:
                    prepared["metadata"]["managedFields"] = mf
                created = await self.create_object(info, ns, None, manager=manager, dry_run=dry_run,
                                                   warnings=warnings, user=user, prepared=prepared)
                return created, True
            rv_before = live["metadata"].get("resourceVersion")
            desired = build(clone(live))
            now = meta.now_rfc3339()
            if apply:
                applied = self._check_kind(info, desired)
                if subresource == "status":
                    applied = {k: v for k, v in applied.items() if k in ("apiVersion", "kind", "metadata", "status")}
                elif info.has_status:
                    applied.pop("status", None)
                merged = server_side_apply(live, applied, manager=manager, force=force, schema=info.schema,
                                           api_version=info.api_version, now=now, subresource=subresource)
                mf = merged["metadata"].get("managedFields")
                new = self._prepare_update(info, live, merged, subresource=subresource,
                                           field_validation=field_validation, warnings=warnings)
                if mf is not None:
                    new["metadata"]["managedFields"] = mf
            else:
                new = self._prepare_update(info, live, desired, subresource=subresource,
                                           field_validation=field_validation, warnings=warnings)
                if _without_volatile(new) != _without_volatile(live):
                    new = track_update(live, new, manager=manager, schema=info.schema,
                                       api_version=info.api_version, now=now, subresource=subresource)
            if self.admission.active(info):
                req = AdmissionRequest("UPDATE", info, subresource, ns, name, new, clone(live), user, dry_run)
                await self.admission.run(req)
                new = self._check_kind(info, req.object)
                self._normalize(info, new, "Ignore", warnings)
                current = self.store.get(info.key, ns, name)
                if current is None or current["metadata"].get("resourceVersion") != rv_before:
                    continue  # raced with another writer while admitting: recompute
            if _without_volatile(new) == _without_volatile(live) and (
                    new["metadata"].get("managedFields") == live["metadata"].get("managedFields") or not apply):
                return live, False  # no-op: kube does not bump the resourceVersion
            if dry_run:
                return new, False
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers") and not (
                    info.key == NS_KEY and (new.get("spec") or {}).get("finalizers")):
                return self.store.delete(info.key, ns, name), False
            return self.store.update(info.key, new), False
        raise errors.conflict(info.group, info.plural, name, "too many concurrent modifications, try again")

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
        out, created = await self._update(info, ns, name, build, subresource=sub, manager=manager,
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

    async def delete_object(self, info: ResourceInfo, ns: str, name: str, options: Obj | None = None, *,
                            dry_run: bool = False, user: str = "system:admin") -> tuple[Obj, bool]:
        """Delete or start a graceful deletion. Returns (object, deleted_now)."""
        options = options or {}
        for _ in range(MAX_RETRIES):
            live = self.store.get(info.key, ns, name)
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
                req = AdmissionRequest("DELETE", info, "", ns, name, None, clone(live), user, dry_run)
                await self.admission.run(req)
                current = self.store.get(info.key, ns, name)
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
            ns_pending = info.key == NS_KEY and (live.get("spec") or {}).get("finalizers")
            if finalizers or ns_pending:
                if lm.get("deletionTimestamp") and finalizers == list(lm.get("finalizers") or []):
                    return live, False
                new = clone(live)
                nm = new["metadata"]
                nm["finalizers"] = finalizers
                if not nm.get("deletionTimestamp"):
                    nm["deletionTimestamp"] = meta.now_rfc3339()
                    nm["deletionGracePeriodSeconds"] = 0
                    nm["generation"] = int(nm.get("generation") or 1) + 1
                if info.key == NS_KEY:
                    new.setdefault("status", {})["phase"] = "Terminating"
                return self.store.update(info.key, new), False
            return self.store.delete(info.key, ns, name), True
        raise errors.conflict(info.group, info.plural, name, "too many concurrent modifications, try again")

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

    # ------------------------------------------------------------------ background controllers

    async def _gc_loop(self) -> None:
        """Garbage collector, finalizer processing and CRD establishment, driven by store writes."""
        assert self._gc_queue is not None
        while True:
            kind, arg = await self._gc_queue.get()
            try:
                if kind == "owner-gone":
                    for dep in list(self._dependents.get(arg, ())):
                        await self._gc_dependent(dep)
                    if not self._dependents.get(arg):
                        self._dependents.pop(arg, None)
                elif kind == "dependent":
                    await self._gc_dependent(arg)
                elif kind == "deleting":
                    await self._process_deleting(arg)
                elif kind == "establish":
                    await self._establish_crd(arg)
            except ApiError as e:
                if e.code not in (404, 409):
                    log.warning("gc %s %s: %s", kind, arg, e.message)
                elif e.code == 409:
                    self._gc_put((kind, arg))
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("gc %s %s failed", kind, arg)

    def _owner_exists(self, dependent_ns: str, ref: Obj) -> bool:
        loc = self._uids.get(ref.get("uid", ""))
        if loc is None:
            return False
        key, ns, name = loc
        info = self._storage_info(key)
        kind_ok = info is None or info.kind == ref.get("kind")
        return kind_ok and name == ref.get("name") and (ns == "" or ns == dependent_ns)

    async def _gc_dependent(self, loc: tuple[str, str, str]) -> None:
        key, ns, name = loc
        obj = self.store.get(key, ns, name)
        info = self._storage_info(key)
        if obj is None or info is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs:
            return
        alive = [r for r in refs if self._owner_exists(ns, r)]
        if len(alive) == len(refs):
            return
        if not alive:
            # Foreground owners wait for dependents that block them; background: just delete.
            await self.delete_object(info, ns, name, {"propagationPolicy": "Background"})
            return
        keep_uids = {r.get("uid") for r in alive}

        def drop_refs(live: Obj) -> Obj:
            live["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") in keep_uids]
            return live

        await self.update_object(info, ns, name, drop_refs, manager="garbage-collector")

    async def _process_deleting(self, loc: tuple[str, str, str]) -> None:
        key, ns, name = loc
        obj = self.store.get(key, ns, name)
        info = self._storage_info(key)
        if obj is None or info is None or not obj["metadata"].get("deletionTimestamp"):
            return
        m = obj["metadata"]
        fins = list(m.get("finalizers") or [])
        uid = m["uid"]
        deps = list(self._dependents.get(uid, ()))
        if "orphan" in fins:
            for dkey, dns, dname in deps:
                dinfo = self._storage_info(dkey)
                if dinfo is None:
                    continue

                def orphan(live: Obj) -> Obj:
                    live["metadata"]["ownerReferences"] = [
                        r for r in live["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                    return live

                with contextlib.suppress(ApiError):
                    await self.update_object(dinfo, dns, dname, orphan, manager="garbage-collector")
            await self._remove_finalizer(info, ns, name, "orphan")
            return
        if "foregroundDeletion" in fins:
            remaining = 0
            for dkey, dns, dname in deps:
                dinfo = self._storage_info(dkey)
                dep = self.store.get(dkey, dns, dname)
                if dinfo is None or dep is None:
                    continue
                remaining += 1
                if not dep["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        await self.delete_object(dinfo, dns, dname, {"propagationPolicy": "Foreground"})
            if remaining == 0:
                await self._remove_finalizer(info, ns, name, "foregroundDeletion")
            return
        if key == CRD_KEY and CRD_CLEANUP_FINALIZER in fins:
            for cinfo in self._crd_infos.get(name, []):
                if not cinfo.storage_version:
                    continue
                for o in self.store.list(cinfo.key):
                    om = o["metadata"]
                    with contextlib.suppress(ApiError):
                        await self.delete_object(cinfo, om.get("namespace", ""), om["name"])
                if self.store.count(cinfo.key) == 0:
                    await self._remove_finalizer(info, ns, name, CRD_CLEANUP_FINALIZER)
                else:
                    await asyncio.sleep(0.05)
                    self._gc_put(("deleting", loc))

    async def _remove_finalizer(self, info: ResourceInfo, ns: str, name: str, finalizer: str) -> None:
        def drop(live: Obj) -> Obj:
            live["metadata"]["finalizers"] = [f for f in live["metadata"].get("finalizers") or [] if f != finalizer]
            return live

        await self.update_object(info, ns, name, drop, manager="garbage-collector")

    async def _establish_crd(self, name: str) -> None:
        info = self._info("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        now = meta.now_rfc3339()

        def establish(live: Obj) -> Obj:
            spec = live.get("spec", {})
            names = dict(spec.get("names", {}))
            names.setdefault("singular", str(names.get("kind", "")).lower())
            names.setdefault("listKind", f"{names.get('kind', '')}List")
            live["status"] = {
                "acceptedNames": names,
                "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
            }
            return live

        await self.update_object(info, "", name, establish, subresource="status", manager="apiextensions-controller")

    async def _namespace_loop(self) -> None:
        """The namespace controller: empties terminating namespaces, then lets them go."""
        ns_info = self._info("", "v1", "namespaces")
        while True:
            await asyncio.sleep(0.2)
            try:
                for nso in self.store.list(NS_KEY):
                    if not nso["metadata"].get("deletionTimestamp"):
                        continue
                    ns = nso["metadata"]["name"]
                    left = 0
                    for key in self._keys():
                        info = self._storage_info(key)
                        if info is None or not info.namespaced:
                            continue
                        for o in self.store.list(key, ns):
                            left += 1
                            if not o["metadata"].get("deletionTimestamp"):
                                with contextlib.suppress(ApiError):
                                    await self.delete_object(info, ns, o["metadata"]["name"])
                    if left == 0 and "kubernetes" in (nso.get("spec") or {}).get("finalizers", []):

                        def finalize(live: Obj) -> Obj:
                            live.setdefault("spec", {})["finalizers"] = [
                                f for f in live["spec"].get("finalizers", []) if f != "kubernetes"]
                            return live

                        with contextlib.suppress(ApiError):
                            await self.update_object(ns_info, "", ns, finalize, subresource="status",
                                                     manager="namespace-controller")
                    current = self.store.get(NS_KEY, "", ns)
                    if current is not None and not (current.get("spec") or {}).get("finalizers") and not \
                            current["metadata"].get("finalizers"):
                        self.store.delete(NS_KEY, "", ns)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("namespace controller")


# ---------------------------------------------------------------------- helpers


def _has_condition(obj: Obj, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


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
