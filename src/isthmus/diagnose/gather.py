"""`isthmus gather`: one .tar.gz for a bug report, read through the API of every context.

Per context: every Isthmus, MCS and Karmada object (YAML), the Services, EndpointSlices,
Deployments and Pods of isthmus-system and of the exported services, Events of those namespaces
and of the broker's, pod logs of isthmus-system (and the previous container's when it restarted),
and Secret *names* only: a Secret's data is never read into the archive. Beside them the
diagnosis (`diagnose.json`), a `manifest.json` (what was collected, what failed) and a README.
Sizes are bounded: objects per kind, Events per namespace, bytes per log.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import ALL_NS, ApiError, AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Pod, Secret, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api import CRD_MODELS
from isthmus.api.base import format_time
from isthmus.api.mcs import AGENT_NAMESPACE, KUBE_SERVICE_NAME_LABEL, SERVICE_NAME_LABEL, ServiceExport
from isthmus.diagnose.model import plural
from isthmus.diagnose.net import probe_api, raw_get, utc_now
from isthmus.diagnose.run import REQUEST_TIMEOUT, ContextRef
from isthmus.kube.client import client_for
from isthmus.kube.helpers import describe_error
from isthmus.kube.resources import RESOURCES

MAX_OBJECTS = 2000
"""Per kind and context: a clusterset with more still gives a readable archive."""
MAX_EVENTS = 1000
"""Per namespace, the newest."""
MAX_EXPORTED_SERVICES = 200
LOG_TAIL_LINES = 5000
LOG_LIMIT_BYTES = 1 << 20
CONTEXT_TIMEOUT = 60.0
"""All of one context's requests; an unreachable context is recorded as such and skipped."""
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)

README = """\
# Isthmus gather archive

Collected by `isthmus gather` at {time} from {count}: {contexts}.

- `diagnose.json`: `isthmus diagnose -o json` at the same moment (docs/diagnose.md).
- `manifest.json`: every file, and what could not be collected (with the error).
- `<context>/version.json`: the API server's /version.
- `<context>/objects/<plural>.<group>.yaml`: every object of each Isthmus, MCS and Karmada kind.
- `<context>/isthmus-system/`: Services, EndpointSlices, Deployments, Pods; `secrets.txt` lists
  Secret names and types only (no Secret data is ever collected).
- `<context>/services/<namespace>/<name>.yaml`: each exported Service with its EndpointSlices.
- `<context>/events/<namespace>.yaml`: Events of isthmus-system, the broker's namespace and the
  exported services' namespaces (newest {max_events} each).
- `<context>/logs/<pod>/<container>.log` (and `.previous.log` after a restart): the last
  {tail} lines, at most {limit} bytes each.
"""


@dataclass
class Archive:
    """Files gathered in memory, then written as one tar.gz."""

    root: str
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)

    def add(self, path: str, data: bytes | str) -> None:
        self.files[path] = data.encode() if isinstance(data, str) else data

    def error(self, context: str, what: str, err: BaseException | str) -> None:
        self.errors.append({"context": context, "what": what,
                            "error": err if isinstance(err, str) else _error(err)})

    def write(self, path: Path) -> None:
        with tarfile.open(path, "w:gz") as tar:
            stamp = time.time()
            for name, data in sorted(self.files.items()):
                info = tarfile.TarInfo(f"{self.root}/{name}")
                info.size = len(data)
                info.mtime = int(stamp)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))


def _error(err: BaseException) -> str:
    if isinstance(err, ApiError) and err.status is not None:
        return f"{err.status.code}: {err.status.message}"
    return describe_error(err)


def _clean(obj: Any) -> dict[str, Any]:
    """An object as a dict without the server's bookkeeping (managedFields, last-applied)."""
    raw = obj if isinstance(obj, dict) else obj.to_dict()
    data: dict[str, Any] = json.loads(json.dumps(raw, default=str))  # plain types: generic objects are dict subclasses
    meta = data.get("metadata") or {}
    meta.pop("managedFields", None)
    annotations = meta.get("annotations") or {}
    for key in DROPPED_ANNOTATIONS:
        annotations.pop(key, None)
    return data


def _yaml(items: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(items, sort_keys=False, default_flow_style=False) if items else ""


async def _list(client: AsyncClient, res: Any, namespace: str | None, **kw: Any) -> tuple[list[Any], bool]:
    """(objects, truncated): at most MAX_OBJECTS."""
    out: list[Any] = []
    async for item in client.list(res, namespace=namespace, **kw):
        if len(out) >= MAX_OBJECTS:
            return out, True
        out.append(item)
    return out, False


async def _gather_context(arch: Archive, ref: ContextRef) -> None:
    ctx = ref.name
    client = client_for(ref.config, timeout=REQUEST_TIMEOUT)
    try:
        async with asyncio.timeout(CONTEXT_TIMEOUT):
            await _collect(arch, ctx, client)
    except TimeoutError:
        arch.error(ctx, "everything", f"stopped after {CONTEXT_TIMEOUT:g}s")
    except Exception as err:
        arch.error(ctx, "everything", err)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def _collect(arch: Archive, ctx: str, client: AsyncClient) -> None:
    try:
        probe = await probe_api(client)
    except Exception as err:
        arch.error(ctx, "version", err)
        return  # unreachable: nothing else will answer
    arch.add(f"{ctx}/version.json", json.dumps({"gitVersion": probe.version, "clockSkewSeconds": probe.skew}, indent=2))

    namespaces = {AGENT_NAMESPACE}
    exported: list[tuple[str, str]] = []
    for model in CRD_MODELS:
        res = RESOURCES[model]
        info = model.crd
        what = f"{info.plural}.{info.group}"
        try:
            items, cut = await _list(client, res, ALL_NS if info.namespaced else None)
        except ApiError as err:
            arch.error(ctx, what, err)
            continue
        if cut:
            arch.truncated.append(f"{ctx}/objects/{what}.yaml")
        arch.add(f"{ctx}/objects/{what}.yaml", _yaml([_clean(i) for i in items]))
        if model is ServiceExport:
            exported = sorted((i.metadata.namespace, i.metadata.name) for i in items)[:MAX_EXPORTED_SERVICES]
        if model.__name__ in ("Broker", "Cluster"):
            namespaces |= {i.metadata.namespace for i in items}

    core: tuple[tuple[Any, str], ...] = ((Service, "services"), (EndpointSlice, "endpointslices"),
                                         (Deployment, "deployments"), (Pod, "pods"))
    for kind, name in core:
        try:
            items, _ = await _list(client, kind, AGENT_NAMESPACE)
        except ApiError as err:
            arch.error(ctx, f"{AGENT_NAMESPACE}/{name}", err)
            continue
        arch.add(f"{ctx}/{AGENT_NAMESPACE}/{name}.yaml", _yaml([_clean(i) for i in items]))
        if kind is Pod:
            await _logs(arch, ctx, client, items)
    await _secret_names(arch, ctx, client, sorted(namespaces))

    for ns, name in exported:
        namespaces.add(ns)
        docs = []
        try:
            svc = await client.get(Service, name, namespace=ns)
            docs.append(_clean(svc))
        except ApiError as err:
            arch.error(ctx, f"service {ns}/{name}", err)
        for label in (KUBE_SERVICE_NAME_LABEL, SERVICE_NAME_LABEL):
            with contextlib.suppress(ApiError):
                slices, _ = await _list(client, EndpointSlice, ns, labels={label: name})
                docs += [_clean(s) for s in slices]
        arch.add(f"{ctx}/services/{ns}/{name}.yaml", _yaml(docs))

    for ns in sorted(namespaces):
        try:
            events, _ = await _list(client, Event, ns)
        except ApiError as err:
            arch.error(ctx, f"events {ns}", err)
            continue
        events.sort(key=lambda e: str(e.lastTimestamp or e.eventTime or e.metadata.creationTimestamp or ""))
        if len(events) > MAX_EVENTS:
            arch.truncated.append(f"{ctx}/events/{ns}.yaml")
        arch.add(f"{ctx}/events/{ns}.yaml", _yaml([_clean(e) for e in events[-MAX_EVENTS:]]))


async def _secret_names(arch: Archive, ctx: str, client: AsyncClient, namespaces: list[str]) -> None:
    """Names and types only: the Secret objects are listed, their data dropped right here."""
    lines = []
    for ns in namespaces:
        try:
            secrets, _ = await _list(client, Secret, ns)
        except ApiError as err:
            arch.error(ctx, f"secret names {ns}", err)
            continue
        lines += [f"{ns}/{s.metadata.name}\t{s.type or 'Opaque'}" for s in secrets]
    arch.add(f"{ctx}/{AGENT_NAMESPACE}/secrets.txt", "".join(f"{line}\n" for line in lines))


async def _logs(arch: Archive, ctx: str, client: AsyncClient, pods: list[Pod]) -> None:
    for pod in pods:
        name = pod.metadata.name if pod.metadata else None
        if not name:
            continue
        statuses = {s.name: s for s in (pod.status.containerStatuses or [])} if pod.status else {}
        for container in pod.spec.containers if pod.spec else []:
            restarted = (statuses[container.name].restartCount or 0) > 0 if container.name in statuses else False
            for previous in (False, True) if restarted else (False,):
                suffix = ".previous.log" if previous else ".log"
                params = {"container": container.name, "tailLines": LOG_TAIL_LINES, "limitBytes": LOG_LIMIT_BYTES}
                if previous:
                    params["previous"] = "true"
                path = f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{name}/log"
                try:
                    resp = await raw_get(client, path, params)
                except Exception as err:
                    arch.error(ctx, f"logs {name}/{container.name}{suffix}", err)
                    continue
                if resp.status_code != 200:
                    arch.error(ctx, f"logs {name}/{container.name}{suffix}", f"{resp.status_code}: {resp.text[:200]}")
                    continue
                if resp.content or not previous:  # an empty previous log says nothing
                    arch.add(f"{ctx}/logs/{name}/{container.name}{suffix}", resp.content[:LOG_LIMIT_BYTES])


async def gather(refs: list[ContextRef], archive: Path, diagnosis: dict[str, Any] | None) -> Archive:
    """Collect every context concurrently and write `archive` (the Archive is returned for the
    summary: its files, errors and truncations)."""
    at = utc_now()
    arch = Archive(f"isthmus-gather-{at.strftime('%Y%m%dT%H%M%SZ')}")
    await asyncio.gather(*(_gather_context(arch, r) for r in refs))
    if diagnosis is not None:
        arch.add("diagnose.json", json.dumps(diagnosis, indent=2, ensure_ascii=False))
    contexts = [r.name for r in refs]
    arch.add("README.md", README.format(time=format_time(at), count=plural(len(contexts), 'kubeconfig context'), contexts=", ".join(contexts),
                                        max_events=MAX_EVENTS, tail=LOG_TAIL_LINES, limit=LOG_LIMIT_BYTES))
    manifest = {"apiVersion": "gather.isthmus.io/v1alpha1", "kind": "GatherManifest", "time": format_time(at),
                "contexts": contexts, "files": sorted([*arch.files, "manifest.json"]), "errors": arch.errors,
                "truncated": sorted(arch.truncated)}
    arch.add("manifest.json", json.dumps(manifest, indent=2))
    arch.write(archive)
    return arch
