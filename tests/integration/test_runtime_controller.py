"""A sample controller converges against the embedded apiserver despite conflicts and injected errors.

The controller keeps, for every ConfigMap labelled role=source, a copy ``copy-<name>`` (role=copy)
with the same data, owned by the source. A meddler keeps overwriting the copies meanwhile, so the
controller's cached resourceVersions go stale and its writes meet 409 Conflicts; reconcile also
fails on purpose the first times for each key.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import ConfigMap

from isthmus.runtime import Controller, Result, SharedInformerFactory, enqueue_owner, metrics, split_key
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(90)


async def test_sample_controller_converges(apiserver: Any) -> None:
    client = apiserver.client()
    factory = SharedInformerFactory(client)
    sources = factory.informer(ConfigMap, "default", labels={"role": "source"})
    copies = factory.informer(ConfigMap, "default", labels={"role": "copy"})
    injected: Counter[str] = Counter()
    conflicted: set[str] = set()
    outcomes: Counter[str] = Counter()

    async def reconcile(key: str) -> Result | None:
        if injected[key] < 2:
            injected[key] += 1
            raise RuntimeError(f"injected failure {injected[key]} for {key}")
        ns, name = split_key(key)
        src = sources.cache.get(key)
        copy_name = f"copy-{name}"
        copy = copies.cache.get(f"{ns}/{copy_name}")
        try:
            if src is None:
                if copy is not None:
                    await client.delete(ConfigMap, copy_name, namespace=ns)
                    outcomes["deleted"] += 1
                return None
            if copy is None:
                await client.create(
                    ConfigMap(
                        metadata=ObjectMeta(
                            name=copy_name,
                            namespace=ns,
                            labels={"role": "copy"},
                            ownerReferences=[
                                OwnerReference(
                                    apiVersion="v1",
                                    kind="ConfigMap",
                                    name=name,
                                    uid=src.metadata.uid,
                                    controller=True,
                                )
                            ],
                        ),
                        data=src.data,
                    )
                )
                outcomes["created"] += 1
            elif copy.data != src.data:
                if key not in conflicted:  # someone else writes first, once per key: a sure 409
                    conflicted.add(key)
                    fresh = await client.get(ConfigMap, copy_name, namespace=ns)
                    fresh.metadata.annotations = {"touched": "yes"}
                    await client.replace(fresh)
                # Write from the cache with its resourceVersion: stale → 409 → retried from fresh state.
                desired = ConfigMap(metadata=copy.metadata, data=src.data)
                await client.replace(desired)
                outcomes["updated"] += 1
        except ApiError as e:
            if e.status.code in (409, 404):
                outcomes[f"api-{e.status.code}"] += 1
            raise
        return None

    controller = Controller("copier", reconcile, workers=4, backoff_base=0.01, backoff_cap=0.5)
    controller.watch(sources)
    controller.watch(copies, enqueue_owner("ConfigMap", ""))
    factory.start()
    run = asyncio.create_task(controller.run())
    errors_before = metrics.RECONCILE_ERRORS.labels("copier")._value.get()

    n = 12
    for i in range(n):
        await client.create(
            ConfigMap(
                metadata=ObjectMeta(name=f"s{i}", namespace="default", labels={"role": "source"}),
                data={"v": "0"},
            )
        )

    async def meddle(rounds: int) -> None:
        for r in range(rounds):
            for i in random.sample(range(n), 4):
                try:
                    obj = await client.get(ConfigMap, f"copy-s{i}", namespace="default")
                    obj.data = {"v": f"tampered-{r}"}
                    await client.replace(obj)
                except ApiError:
                    pass
            await asyncio.sleep(0.02)

    async def converged() -> bool:
        srcs = {
            o.metadata.name: o.data
            async for o in client.list(ConfigMap, namespace="default", labels={"role": "source"})
        }
        cps = {
            o.metadata.name: o.data
            async for o in client.list(ConfigMap, namespace="default", labels={"role": "copy"})
        }
        return cps == {f"copy-{k}": v for k, v in srcs.items()}

    try:
        await eventually(lambda: _count_copies(client, n))
        # change sources while tampering with the copies
        meddler = asyncio.create_task(meddle(40))
        for i in range(n):
            src = await client.get(ConfigMap, f"s{i}", namespace="default")
            src.data = {"v": "1"}
            await client.replace(src)
        await meddler
        await eventually(converged)
        # deleting a source removes its copy
        await client.delete(ConfigMap, "s0", namespace="default")
        await eventually(converged)
        await asyncio.sleep(0.3)
        assert await converged()
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await factory.stop()
    assert metrics.RECONCILE_ERRORS.labels("copier")._value.get() - errors_before >= 2 * n
    assert outcomes["created"] >= n and outcomes["updated"] >= n
    assert outcomes["api-409"] >= n, outcomes  # conflicts happened and were survived


async def _count_copies(client: Any, n: int) -> bool:
    cps = [o async for o in client.list(ConfigMap, namespace="default", labels={"role": "copy"})]
    return len(cps) == n
