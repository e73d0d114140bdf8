"""Controller logic with informers fed by hand (no API server): mapping, results, retries, panics."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import ConfigMap, Pod

from isthmus.runtime import Controller, Informer, Result, enqueue_owner, label_index
from isthmus.runtime.informer import Cache
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(20)


def fed_informer(resource: Any = ConfigMap) -> Informer[Any]:
    """An informer that never talks to a server: tests feed it with `feed`."""
    inf: Informer[Any] = Informer(None, resource)  # type: ignore[arg-type]
    inf._synced.set()
    return inf


def feed(inf: Informer[Any], type_: str, obj: dict[str, Any]) -> None:
    inf._handle_event(orjson.dumps({"type": type_, "object": obj}))


def cm(name: str, ns: str = "default", rv: str = "1", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, **meta},
    }


async def run_in_background(c: Controller) -> asyncio.Task[None]:
    t = asyncio.create_task(c.run())
    await eventually(lambda: c.queue is not None)
    return t


async def stop(t: asyncio.Task[None]) -> None:
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t


async def test_reconciles_cached_and_new_objects() -> None:
    inf = fed_informer()
    inf._replace(
        {"default/a": ConfigMap(metadata=ObjectMeta(name="a", namespace="default", resourceVersion="1"))}
    )
    seen: list[str] = []

    async def reconcile(key: str) -> Result | None:
        seen.append(key)
        return None

    c = Controller("t-basic", reconcile, workers=2)
    c.watch(inf)
    t = await run_in_background(c)
    await eventually(lambda: seen == ["default/a"])
    feed(inf, "ADDED", cm("b", rv="2"))
    feed(inf, "MODIFIED", cm("a", rv="3"))
    feed(inf, "DELETED", cm("b", rv="4"))
    await eventually(lambda: seen.count("default/a") == 2 and "default/b" in seen)
    await stop(t)
    assert c.queue is None


async def test_error_retries_with_growing_backoff_then_succeeds() -> None:
    inf = fed_informer()
    attempts: list[float] = []
    loop = asyncio.get_running_loop()

    async def reconcile(key: str) -> Result | None:
        attempts.append(loop.time())
        if len(attempts) < 5:
            raise RuntimeError("injected")
        return None

    c = Controller("t-backoff", reconcile, backoff_base=0.02, backoff_cap=1.0)
    c.watch(inf)
    t = await run_in_background(c)
    feed(inf, "ADDED", cm("x"))
    await eventually(lambda: len(attempts) == 5)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.015 and gaps[3] >= 0.15  # 0.02, 0.04, 0.08, 0.16
    assert gaps[3] > gaps[0]
    await asyncio.sleep(0.3)
    assert len(attempts) == 5  # success ends retries
    assert c.queue is not None and c.queue.num_requeues("default/x") == 0  # forgotten
    await stop(t)


async def test_panic_is_logged_and_retried_and_worker_survives(caplog: pytest.LogCaptureFixture) -> None:
    inf = fed_informer()
    calls: dict[str, int] = {}

    async def reconcile(key: str) -> Result | None:
        calls[key] = calls.get(key, 0) + 1
        if key == "default/bad" and calls[key] <= 2:
            raise ZeroDivisionError("boom")
        if key == "default/deep" and calls[key] == 1:
            raise RecursionError("deep")
        return None

    c = Controller("t-panic", reconcile, workers=1, backoff_base=0.01)
    c.watch(inf)
    t = await run_in_background(c)
    with caplog.at_level(logging.ERROR, logger="isthmus.runtime.controller"):
        feed(inf, "ADDED", cm("bad"))
        feed(inf, "ADDED", cm("deep"))
        feed(inf, "ADDED", cm("good"))
        await eventually(lambda: calls.get("default/bad") == 3 and calls.get("default/deep") == 2)
        await eventually(lambda: calls.get("default/good") == 1)
    assert any("reconcile failed" in r.message and r.exc_info for r in caplog.records)
    assert not t.done()
    await stop(t)


async def test_requeue_after_and_requeue() -> None:
    inf = fed_informer()
    calls: list[str] = []

    async def reconcile(key: str) -> Result | None:
        calls.append(key)
        if key == "default/timer" and calls.count(key) < 3:
            return Result(requeue_after=0.05)
        if key == "default/again" and calls.count(key) < 2:
            return Result(requeue=True)
        return Result()

    c = Controller("t-requeue", reconcile, backoff_base=0.01)
    c.watch(inf)
    t = await run_in_background(c)
    feed(inf, "ADDED", cm("timer"))
    feed(inf, "ADDED", cm("again"))
    await eventually(lambda: calls.count("default/timer") == 3 and calls.count("default/again") == 2)
    await asyncio.sleep(0.2)
    assert calls.count("default/timer") == 3
    await stop(t)


async def test_one_key_never_reconciled_concurrently() -> None:
    inf = fed_informer()
    active: set[str] = set()
    overlap = False
    done = 0

    async def reconcile(key: str) -> Result | None:
        nonlocal overlap, done
        if key in active:
            overlap = True
        active.add(key)
        await asyncio.sleep(0.005)
        active.discard(key)
        done += 1
        return None

    c = Controller("t-exclusive", reconcile, workers=8)
    c.watch(inf)
    t = await run_in_background(c)
    for i in range(100):
        feed(inf, "MODIFIED", cm(f"k{i % 4}", rv=str(i + 10)))
        await asyncio.sleep(0.001)
    await eventually(lambda: not active and done >= 4 and c.queue is not None and len(c.queue) == 0)
    assert not overlap
    await stop(t)


async def test_enqueue_owner_and_related_mapping() -> None:
    owners = fed_informer(ConfigMap)
    pods = fed_informer(Pod)
    seen: list[str] = []

    async def reconcile(key: str) -> Result | None:
        seen.append(key)
        return None

    c = Controller("t-owner", reconcile)
    c.watch(owners)
    c.watch(pods, enqueue_owner("ConfigMap", ""))
    # a related object mapped by label to a cluster-wide name
    c.watch(pods, lambda p: [f"ns/{p.metadata.labels['app']}"] if p.metadata.labels else [])
    t = await run_in_background(c)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u1", "controller": True}
    not_ctrl = {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u2"}
    wrong_group = {
        "apiVersion": "example.com/v1",
        "kind": "ConfigMap",
        "name": "foreign",
        "uid": "u3",
        "controller": True,
    }
    feed(
        pods,
        "ADDED",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "prod",
                "resourceVersion": "5",
                "labels": {"app": "web"},
                "ownerReferences": [ref, not_ctrl, wrong_group],
            },
        },
    )
    await eventually(lambda: sorted(seen) == ["ns/web", "prod/owner"])
    await stop(t)
    assert enqueue_owner("ConfigMap", controller_only=False)(
        Pod(metadata=ObjectMeta(name="p", namespace="n", ownerReferences=[OwnerReference(**not_ctrl)]))
    ) == ["n/other"]


async def test_update_enqueues_old_and_new_relation() -> None:
    pods = fed_informer(Pod)
    seen: list[str] = []

    async def reconcile(key: str) -> Result | None:
        seen.append(key)
        return None

    c = Controller("t-relabel", reconcile)
    c.watch(pods, lambda p: [p.metadata.labels["svc"]])
    feed(
        pods,
        "ADDED",
        {"metadata": {"name": "p", "namespace": "n", "resourceVersion": "1", "labels": {"svc": "a"}}},
    )
    t = await run_in_background(c)
    await eventually(lambda: seen == ["a"])
    feed(
        pods,
        "MODIFIED",
        {"metadata": {"name": "p", "namespace": "n", "resourceVersion": "2", "labels": {"svc": "b"}}},
    )
    await eventually(lambda: sorted(seen) == ["a", "a", "b"])
    await stop(t)


async def test_predicate_filters_events() -> None:
    inf = fed_informer()
    seen: list[str] = []

    async def reconcile(key: str) -> Result | None:
        seen.append(key)
        return None

    c = Controller("t-pred", reconcile)
    c.watch(inf, predicate=lambda old, new: old is None or old.data != new.data)
    t = await run_in_background(c)
    feed(inf, "ADDED", {**cm("a", rv="1"), "data": {"x": "1"}})
    await eventually(lambda: seen == ["default/a"])
    feed(inf, "MODIFIED", {**cm("a", rv="2", labels={"l": "1"}), "data": {"x": "1"}})
    await asyncio.sleep(0.1)
    assert seen == ["default/a"]
    feed(inf, "MODIFIED", {**cm("a", rv="3"), "data": {"x": "2"}})
    await eventually(lambda: seen == ["default/a", "default/a"])
    await stop(t)


async def test_shutdown_lets_inflight_reconcile_finish_and_restart_resyncs() -> None:
    inf = fed_informer()
    inf._replace(
        {"default/a": ConfigMap(metadata=ObjectMeta(name="a", namespace="default", resourceVersion="1"))}
    )
    started = asyncio.Event()
    finished: list[str] = []

    async def reconcile(key: str) -> Result | None:
        started.set()
        await asyncio.sleep(0.2)
        finished.append(key)
        return None

    c = Controller("t-grace", reconcile, shutdown_grace=5)
    c.watch(inf)
    t = asyncio.create_task(c.run())
    await asyncio.wait_for(started.wait(), 2)
    await stop(t)
    assert finished == ["default/a"]  # completed, not cut off
    # events while stopped are not lost: the next run enqueues every cached key
    feed(inf, "ADDED", cm("b", rv="2"))
    t = await run_in_background(c)
    await eventually(lambda: sorted(finished) == ["default/a", "default/a", "default/b"])
    await stop(t)


async def test_reconcile_timeout_is_retried() -> None:
    inf = fed_informer()
    calls = 0

    async def reconcile(key: str) -> Result | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(10)
        return None

    c = Controller("t-timeout", reconcile, reconcile_timeout=0.05, backoff_base=0.01)
    c.watch(inf)
    t = await run_in_background(c)
    feed(inf, "ADDED", cm("slow"))
    await eventually(lambda: calls == 2)
    await stop(t)


def test_cache_indexes() -> None:
    cache: Cache[Any] = Cache()
    cache.add_indexer("app", label_index("app"))

    def put(name: str, ns: str, app: str | None) -> None:
        labels = {"app": app} if app else None
        cache._put(f"{ns}/{name}", ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels=labels)))

    put("a", "n1", "web")
    put("b", "n1", "db")
    put("c", "n2", "web")
    put("d", "n2", None)
    assert cache.index_keys("namespace", "n1") == ["n1/a", "n1/b"]
    assert cache.index_keys("app", "web") == ["n1/a", "n2/c"]
    put("a", "n1", "db")  # relabel moves it
    assert cache.index_keys("app", "web") == ["n2/c"]
    assert cache.index_keys("app", "db") == ["n1/a", "n1/b"]
    cache._remove("n2/c")
    assert cache.index_keys("app", "web") == []
    assert cache.index_values("app") == ["db"]
    # an index added later covers existing objects
    cache.add_indexer("first-letter", lambda o: [o.metadata.name[0]])
    assert [o.metadata.name for o in cache.by_index("first-letter", "d")] == ["d"]
    assert len(cache.list_namespace("n2")) == 1
    assert cache.get_by_name("a", "n1") is cache.get("n1/a")
    with pytest.raises(ValueError):
        cache.add_indexer("app", label_index("x"))


def test_relist_replace_emits_differences() -> None:
    inf = fed_informer()
    events: list[tuple[str, str]] = []
    inf.add_handler(
        lambda o: events.append(("add", o.metadata.name)),
        lambda a, b: events.append(("update", b.metadata.name)),
        lambda o: events.append(("delete", o.metadata.name)),
    )

    def obj(name: str, rv: str) -> ConfigMap:
        return ConfigMap(metadata=ObjectMeta(name=name, namespace="d", resourceVersion=rv))

    inf._replace({"d/a": obj("a", "1"), "d/b": obj("b", "1")})
    events.clear()
    inf._replace({"d/a": obj("a", "1"), "d/b": obj("b", "2"), "d/c": obj("c", "3")})
    inf._replace({"d/b": obj("b", "2"), "d/c": obj("c", "3")})
    assert events == [("update", "b"), ("add", "c"), ("delete", "a")]
    # a late handler gets the current contents as adds
    late: list[str] = []
    inf.add_handler(on_add=lambda o: late.append(o.metadata.name))
    assert sorted(late) == ["b", "c"]


async def test_a_source_marked_not_initial_is_not_mapped_at_start_but_its_events_count() -> None:
    own, related = fed_informer(), fed_informer()
    own._replace({"default/a": ConfigMap(metadata=ObjectMeta(name="a", namespace="default", resourceVersion="1"))})
    related._replace({"default/r": ConfigMap(metadata=ObjectMeta(name="r", namespace="default", resourceVersion="1"))})
    mapped: list[str] = []
    seen: list[str] = []

    def to_everything(obj: Any) -> list[str]:
        mapped.append(obj.metadata.name)
        return ["default/a"]

    async def reconcile(key: str) -> Result | None:
        seen.append(key)
        return None

    c = Controller("t-initial", reconcile)
    c.watch(own)
    c.watch(related, to_everything, initial=False)
    t = await run_in_background(c)
    await eventually(lambda: seen == ["default/a"])
    assert mapped == []  # the start maps only the sources whose keys are needed
    feed(related, "MODIFIED", cm("r", rv="2"))
    await eventually(lambda: seen == ["default/a", "default/a"])
    assert mapped == ["r", "r"]  # old and new
    await stop(t)


async def test_watch_stream_lines_whatever_the_chunking() -> None:
    """Events are whole lines however the stream is cut: within a line, at its end, many per chunk;
    a line the connection cut short is no event."""
    from isthmus.runtime.informer import _event_lines

    events = [orjson.dumps({"type": "ADDED", "object": {"n": i, "s": "x" * (i * 37 % 500)}}) for i in range(40)]
    stream = b"".join(e + b"\n" for e in events)

    async def chunks(size: int) -> AsyncIterator[bytes]:
        for i in range(0, len(stream), size):
            yield stream[i:i + size]
        yield b'{"type":"ADDED","obj'  # cut short

    for size in (1, 7, 64, 1000, len(stream)):
        assert [line async for line in _event_lines(chunks(size))] == events, size
