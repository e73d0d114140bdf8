"""isthmus.kube helpers against the embedded apiserver: apply, status patch, create-or-update, delete."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta as LkMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Service
from lightkube.types import PatchType

from isthmus.api.base import find_condition, new_condition
from isthmus.api.mcs import ConditionType, ServiceExport, ServiceImport
from isthmus.kube.client import make_client
from isthmus.kube.helpers import (
    apply,
    apply_quiet,
    create_or_update,
    ensure_deleted,
    get,
    get_or_none,
    install_crds,
    is_conflict,
    list_all,
    patch_status,
    patch_status_quiet,
)
from isthmus.kube.resources import resource_for

NS = "shop"


async def _setup(apiserver: Any) -> AsyncClient:
    client = make_client(apiserver.kubeconfig)
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(Namespace(metadata=LkMeta(name=NS)))
    return client


def _import(name: str = "web", port: int = 80) -> ServiceImport:
    return ServiceImport.model_validate(
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"type": "ClusterSetIP", "ports": [{"port": port}]},
        }
    )


async def test_make_client_talks_to_the_embedded_apiserver(apiserver: Any) -> None:
    client = make_client(apiserver.kubeconfig, field_manager="isthmus-test")
    try:
        names = [ns.metadata.name async for ns in client.list(Namespace) if ns.metadata]
        assert "default" in names
    finally:
        await client.close()


async def test_apply_models_and_field_ownership(apiserver: Any) -> None:
    client = await _setup(apiserver)
    try:
        created = await apply(client, _import(), field_manager="agent-a")
        assert isinstance(created, ServiceImport)
        assert created.metadata.uid and created.spec.ports[0].port == 80

        again = await apply(client, _import(port=81), field_manager="agent-a")
        assert again.spec.ports[0].port == 81
        assert again.metadata.uid == created.metadata.uid

        with pytest.raises(ApiError) as err:  # another manager changing an owned field
            await apply(client, _import(port=82), field_manager="agent-b")
        assert is_conflict(err.value)
        forced = await apply(client, _import(port=82), field_manager="agent-b", force=True)
        assert forced.spec.ports[0].port == 82
    finally:
        await client.close()


async def test_apply_lightkube_builtin(apiserver: Any) -> None:
    client = await _setup(apiserver)
    try:
        svc = Service(
            metadata=LkMeta(name="web", namespace=NS),
            spec=ServiceSpec(ports=[ServicePort(port=80, name="http")], selector={"app": "web"}),
        )
        out = await apply(client, svc, field_manager="isthmus-test")
        assert isinstance(out, Service) and out.spec is not None and out.spec.ports
        assert out.spec.ports[0].port == 80
    finally:
        await client.close()


async def test_patch_status_apply_merges_conditions_of_two_managers(apiserver: Any) -> None:
    client = await _setup(apiserver)
    try:
        se = await apply(
            client,
            ServiceExport.model_validate({"metadata": {"name": "web", "namespace": NS}}),
            field_manager="user",
        )
        mine = se.deepcopy()
        mine.status.conditions = [new_condition(ConditionType.VALID, True, "Valid")]
        await patch_status(client, mine, field_manager="agent")
        theirs = se.deepcopy()
        theirs.status.conditions = [new_condition(ConditionType.READY, False, "Pending")]
        out = await patch_status(client, theirs, field_manager="other")
        assert {c.type for c in out.status.conditions} == {"Valid", "Ready"}
        assert out.spec == se.spec

        # merge patch replaces the list wholesale
        only = se.deepcopy()
        only.status.conditions = [new_condition(ConditionType.CONFLICT, False, "NoConflicts")]
        out = await patch_status(client, only, field_manager="agent", patch_type=PatchType.MERGE)
        assert [c.type for c in out.status.conditions] == ["Conflict"]

        fetched = await get(client, ServiceExport, "web", namespace=NS)
        assert find_condition(fetched.status.conditions, "Conflict") is not None
    finally:
        await client.close()


async def test_quiet_writes_write_the_same_and_still_raise(apiserver: Any) -> None:
    """apply_quiet / patch_status_quiet: the write a caller makes without reading its answer back."""
    client = await _setup(apiserver)
    try:
        assert await apply_quiet(client, _import(), field_manager="agent-a") is None
        stored = await get(client, ServiceImport, "web", namespace=NS)
        assert stored.spec.ports[0].port == 80
        with pytest.raises(ApiError) as err:  # errors are read: another manager's field
            await apply_quiet(client, _import(port=82), field_manager="agent-b")
        assert is_conflict(err.value)
        await apply_quiet(client, _import(port=82), field_manager="agent-b", force=True)
        lk_svc = Service(metadata=LkMeta(name="web", namespace=NS), spec=ServiceSpec(ports=[ServicePort(port=80)]))
        assert await apply_quiet(client, lk_svc, field_manager="isthmus-test") is None

        se = await apply(client, ServiceExport.model_validate({"metadata": {"name": "web", "namespace": NS}}),
                         field_manager="user")
        se.status.conditions = [new_condition(ConditionType.VALID, True, "Valid")]
        assert await patch_status_quiet(client, se, field_manager="agent", patch_type=PatchType.MERGE) is None
        fetched = await get(client, ServiceExport, "web", namespace=NS)
        assert [c.type for c in fetched.status.conditions] == ["Valid"]
        assert (await get(client, ServiceImport, "web", namespace=NS)).spec.ports[0].port == 82
        # A later write in the same task reads its answer again.
        out = await apply(client, _import(port=83), field_manager="agent-b", force=True)
        assert isinstance(out, ServiceImport) and out.spec.ports[0].port == 83
    finally:
        await client.close()


async def test_create_or_update_creates_updates_and_skips_noops(apiserver: Any) -> None:
    client = await _setup(apiserver)
    try:
        assert await create_or_update(client, ServiceImport, "web", lambda cur: None, namespace=NS) is None
        assert await get_or_none(client, ServiceImport, "web", namespace=NS) is None

        def want(port: int) -> Any:
            def mutate(cur: ServiceImport | None) -> ServiceImport:
                obj = cur or _import()
                obj.spec.ports[0].port = port
                return obj

            return mutate

        first = await create_or_update(client, ServiceImport, "web", want(80), namespace=NS)
        assert first.metadata.resource_version
        same = await create_or_update(client, ServiceImport, "web", want(80), namespace=NS)
        assert same.metadata.resource_version == first.metadata.resource_version  # no write
        changed = await create_or_update(client, ServiceImport, "web", want(90), namespace=NS)
        assert changed.spec.ports[0].port == 90
        assert changed.metadata.resource_version != first.metadata.resource_version
    finally:
        await client.close()


async def test_create_or_update_retries_on_conflict(apiserver: Any) -> None:
    client = await _setup(apiserver)
    other = apiserver.client()
    try:
        await apply(client, _import(), field_manager="seed")
        calls = 0

        def mutate(cur: ServiceImport | None) -> ServiceImport:
            nonlocal calls
            calls += 1
            assert cur is not None
            cur.metadata.labels = {**(cur.metadata.labels or {}), "seen": str(calls)}
            return cur

        # a concurrent writer bumps the resourceVersion between our read and our write, once
        original_get = client.get
        raced = False

        async def get_then_race(*args: Any, **kwargs: Any) -> Any:
            nonlocal raced
            obj = await original_get(*args, **kwargs)
            if not raced:
                raced = True
                await other.patch(
                    type(obj),
                    "web",
                    {"metadata": {"annotations": {"x": "y"}}},
                    namespace=NS,
                    patch_type=PatchType.MERGE,
                )
            return obj

        client.get = get_then_race  # type: ignore[method-assign]
        out = await create_or_update(client, ServiceImport, "web", mutate, namespace=NS)
        assert calls == 2
        assert out.metadata.labels == {"seen": "2"}
        assert out.metadata.annotations == {"x": "y"}  # the other writer's change survived
    finally:
        await client.close()


async def test_create_or_update_concurrent_writers_never_lose_updates(apiserver: Any) -> None:
    client = await _setup(apiserver)
    try:
        clients = [apiserver.client() for _ in range(5)]

        def bump(cur: ConfigMap | None) -> ConfigMap:
            obj = cur or ConfigMap(metadata=LkMeta(name="counter", namespace=NS), data={"n": "0"})
            assert obj.data is not None
            obj.data["n"] = str(int(obj.data["n"]) + 1)
            return obj

        await asyncio.gather(
            *(
                create_or_update(c, ConfigMap, "counter", bump, namespace=NS, retries=50)
                for c in clients
                for _ in range(4)
            )
        )
        final = await client.get(ConfigMap, "counter", namespace=NS)
        assert final.data == {"n": "20"}
    finally:
        await client.close()


async def test_ensure_deleted(apiserver: Any) -> None:
    client = await _setup(apiserver)
    try:
        await apply(client, _import(), field_manager="t")
        assert await ensure_deleted(client, ServiceImport, "web", namespace=NS) is True
        assert await ensure_deleted(client, ServiceImport, "web", namespace=NS) is False
        assert await list_all(client, ServiceImport, namespace=NS) == []

        held = _import("held")
        held.metadata.finalizers = ["isthmus.io/test"]
        await apply(client, held, field_manager="t")
        waiter = asyncio.create_task(ensure_deleted(client, ServiceImport, "held", namespace=NS, wait=True))
        await asyncio.sleep(0.3)
        assert not waiter.done()  # the finalizer holds it
        await client.patch(
            cast(Any, resource_for(ServiceImport)),
            "held",
            {"metadata": {"finalizers": None}},
            namespace=NS,
            patch_type=PatchType.MERGE,
        )
        async with asyncio.timeout(10):
            assert await waiter is True
        assert await get_or_none(client, ServiceImport, "held", namespace=NS) is None
    finally:
        await client.close()
