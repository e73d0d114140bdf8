"""Shell completion as kubectl does it, through click's completion protocol as typer wires it
(`_ISTHMUS_COMPLETE=complete_bash`, COMP_WORDS, COMP_CWORD) against a real embedded apiserver:
`--context` from the kubeconfig, `-n` from the API's namespaces, object names from the API in the
namespace the command line names; a server that never answers offers nothing, quietly."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from isthmus.api.mcs import ServiceExport
from isthmus.kube.helpers import install_crds
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer
from tests.harness.clusterset import service

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


class World:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    async def complete(self, words: str, **env: str) -> list[str]:
        """What bash completion offers for the last word of `words`."""
        cword = len(words.split()) - (0 if words.endswith(" ") else 1)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig), "_ISTHMUS_COMPLETE": "complete_bash",
                 "COMP_WORDS": words, "COMP_CWORD": str(cword), **env})
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0 and not err, err.decode()
        return out.decode().split()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("complete")
    srv = RunningApiServer(tmp / "api")
    await srv.start()
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        client = srv.client()
        await install_crds(client)
        for ns in ("shop", "staging"):
            await client.create(Namespace(metadata=ObjectMeta(name=ns)))
        for name in ("web", "cart"):
            await client.create(service(name, "shop"))
        await client.create(service("db", "staging"))
        export: Any = resource_for(ServiceExport)
        await client.create(export.from_dict({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                                              "metadata": {"name": "web", "namespace": "shop"}}))
        doc = srv.server.kubeconfig("c1")
        hung = {"name": "hung", "cluster": {"server": f"http://127.0.0.1:{silent.getsockname()[1]}"}}
        doc["clusters"].append(hung)
        doc["contexts"] += [{"name": "hung", "context": {"cluster": "hung"}},
                            {"name": "c1-staging", "context": {**doc["contexts"][0]["context"], "namespace": "staging"}}]
        doc["current-context"] = "c1"
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(doc))
        yield World(kubeconfig)
    finally:
        silent.close()
        await srv.close()


async def test_contexts_come_from_the_kubeconfig(world: World) -> None:
    assert await world.complete("isthmus show exports --context ") == ["c1", "c1-staging", "hung"]
    assert await world.complete("isthmus version --context c1") == ["c1", "c1-staging"]
    assert await world.complete("isthmus diagnose --context h") == ["hung"]
    assert await world.complete("isthmus join b.subm --broker-context c1-") == ["c1-staging"]
    assert await world.complete(f"isthmus show exports --kubeconfig {world.kubeconfig} --context hu") == ["hung"]


async def test_namespaces_come_from_the_api(world: World) -> None:
    assert set(await world.complete("isthmus show imports -n ")) >= {"default", "shop", "staging"}
    assert await world.complete("isthmus export -n s") == ["shop", "staging"]
    assert await world.complete("isthmus expose web --namespace st") == ["staging"]


async def test_object_names_come_from_the_namespace_named(world: World) -> None:
    assert await world.complete("isthmus export -n shop ") == ["cart", "web"]
    assert await world.complete("isthmus export -n shop w") == ["web"]
    assert await world.complete("isthmus unexport -n shop ") == ["web"]  # only what is exported
    assert await world.complete("isthmus export --context c1-staging ") == ["db"]  # the context's namespace
    assert await world.complete("isthmus expose -n staging ") == ["db"]


async def test_an_unanswering_server_offers_nothing_quietly(world: World) -> None:
    assert await world.complete("isthmus export --context hung -n ") == []
    assert await world.complete("isthmus export --context hung ") == []
    assert await world.complete("isthmus export --kubeconfig /nonexistent -n ") == []
