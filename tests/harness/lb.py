"""The LB translator and a pool manager running real HAProxy against a real apiserver, for the
translator tests (moved from tests/integration/test_lb_translator.py; the `env` fixture that
starts one is in tests/integration/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Namespace, Node, Service
from lightkube.types import PatchType

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, LB_NAMESPACE, LoadBalancerPool
from isthmus.haproxy.manager import PoolManager
from isthmus.kube.helpers import install_crds
from isthmus.kube.manifests import deploy_dir
from isthmus.kube.resources import resource_for
from isthmus.lb.controller import Translator
from tests.harness.polling import eventually_passes

POOL = resource_for(LoadBalancerPool)
NS = "default"


def free_node_port() -> int:
    for port in range(31000, 32700):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free NodePort")


class Backend:
    """An HTTP server standing for a node's NodePort: answers JSON naming itself."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def handle(request: web.Request) -> web.Response:
            return web.json_response({"backend": self.name, "path": request.path, "headers": dict(request.headers)})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        for _ in range(20):
            self.port = free_node_port()
            try:
                await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
                return
            except OSError:
                continue
        raise RuntimeError("cannot listen")


class Env:
    def __init__(self, apiserver: Any, tmp: Path, n: int) -> None:
        self.client = apiserver.client()
        self.public, self.private = f"127.30.{150 + n}.1", f"127.31.{150 + n}.1"
        self.tmp = tmp
        self.tasks: list[asyncio.Task[None]] = []
        self.manager: PoolManager | None = None
        self.translator: Translator | None = None
        self.backends: list[Backend] = []

    async def start(self) -> None:
        await install_crds(self.client)
        await self.client.create(Namespace(metadata=ObjectMeta(name=LB_NAMESPACE)))
        await self.client.create(Node(metadata=ObjectMeta(name="node-1")))
        await self.client.patch(Node.Status, "node-1", {"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}, patch_type=PatchType.MERGE)
        self.manager = PoolManager(self.client, identity="edge-1", public_address=self.public,
                                   private_address=self.private, state_dir=self.tmp / "pools",
                                   lease_duration=3, renew_period=0.5)  # fmt: skip
        # Opted in to class-less Services, as the local clusterset is: the seed's flows use them.
        self.translator = Translator(self.client, "kube/one", identity="lb-1", grace=2.0, class_less=True,
                                     lease_duration=3, renew_deadline=2, retry_period=0.5)  # fmt: skip
        self.tasks = [asyncio.create_task(self.manager.run()), asyncio.create_task(self.translator.run())]

    async def backend(self, name: str) -> Backend:
        b = Backend(name)
        await b.start()
        self.backends.append(b)
        return b

    async def service(self, name: str, ports: list[tuple[int, int]], config: str | None = None,
                      type_: str = "LoadBalancer", load_balancer_class: str | None = None) -> None:
        annotations = {DKLB_CONFIG_ANNOTATION: config} if config is not None else {}
        klass = {"loadBalancerClass": load_balancer_class} if load_balancer_class else {}
        await self.client.create(Service.from_dict({
            "metadata": {"name": name, "namespace": NS, "annotations": annotations},
            "spec": {"type": type_, "selector": {"app": name}, **klass,
                     "ports": [{"name": f"p{p}", "port": p, "targetPort": p, "nodePort": np} for p, np in ports]},
        }))  # fmt: skip

    async def lb_address(self, kind: Any, name: str) -> list[dict[str, Any]]:
        async def probe() -> list[dict[str, Any]]:
            obj = (await self.client.get(kind, name, namespace=NS)).to_dict()
            ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            assert ingress, obj.get("status")
            return list(ingress)

        return await eventually_passes(probe)

    async def events(self, name: str) -> list[tuple[str, str, str]]:
        out = []
        async for e in self.client.list(Event, namespace=NS):
            if e.involvedObject.name == name:
                out.append((e.type or "", e.reason or "", e.message or ""))
        return out

    async def pool(self, name: str) -> LoadBalancerPool | None:
        with contextlib.suppress(Exception):
            return LoadBalancerPool.from_dict(await self.client.get(POOL, name))
        return None

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.manager is not None:
            await self.manager.shutdown()
        for b in self.backends:
            if b.runner is not None:
                await b.runner.cleanup()


async def fetch(host_ip: str, port: int, path: str = "/", host: str = "x") -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"http://{host_ip}:{port}{path}", headers={"Host": host}) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text


def lb_overlay(into: Path, class_less: bool = False) -> Path:
    """An admin's overlay of deploy/member opting in (as docs/lb.md shows)."""
    into.mkdir(parents=True, exist_ok=True)
    components = ["components/lb", *(["components/lb/class-less"] if class_less else [])]
    (into / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(deploy_dir() / "member", into)],
        "components": [os.path.relpath(deploy_dir() / c, into) for c in components]}))
    return into
