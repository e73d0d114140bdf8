"""Informers against the embedded apiserver: events, 410 recovery, server restart, CRDs, sharing."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace

from isthmus.runtime import Informer, SharedInformerFactory, label_index, metrics
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(60)


class Recorder:
    def __init__(self, inf: Informer[Any]) -> None:
        self.events: list[tuple[str, str]] = []
        inf.add_handler(
            lambda o: self.events.append(("add", o.metadata.name)),
            lambda old, new: self.events.append(("update", new.metadata.name)),
            lambda o: self.events.append(("delete", o.metadata.name)),
        )

    def has(self, kind: str, name: str) -> bool:
        return (kind, name) in self.events


def cm(name: str, ns: str = "default", **data: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=ns), data=data or None)


async def test_sees_create_update_delete(apiserver: Any) -> None:
    c = apiserver.client()
    await c.create(cm("before", x="1"))
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, page_size=2)  # paginated list
    rec = Recorder(inf)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        assert inf.cache.get("default/before") is not None
        assert rec.events == [("add", "before")]
        await c.create(cm("a", x="1"))
        await eventually(lambda: rec.has("add", "a"))
        obj = await c.get(ConfigMap, "a", namespace="default")
        obj.data = {"x": "2"}
        await c.replace(obj)
        await eventually(lambda: rec.has("update", "a"))
        cached = inf.cache.get("default/a")
        assert cached is not None and cached.data == {"x": "2"}
        await c.delete(ConfigMap, "a", namespace="default")
        await eventually(lambda: rec.has("delete", "a"))
        assert "default/a" not in inf.cache
        assert inf.relists == 0
    finally:
        await inf.stop()


async def test_watched_events_large_and_small_arrive_whole(apiserver: Any) -> None:
    """Events are lines of the watch stream: one larger than any read spans many chunks, small
    ones share a chunk; each reaches the cache whole, in order."""
    c = apiserver.client()
    inf: Informer[ConfigMap] = Informer(c, ConfigMap)
    rec = Recorder(inf)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        big = "x" * 900_000 + "\u00e9\n{}"  # JSON escapes, a newline inside a string (kube: ≤ 1 MiB)
        await c.create(cm("big", v=big))
        await asyncio.gather(*(c.create(cm(f"small-{i}", v=str(i))) for i in range(20)))
        await eventually(lambda: all(rec.has("add", f"small-{i}") for i in range(20)))
        await eventually(lambda: rec.has("add", "big"))
        cached = inf.cache.get("default/big")
        assert cached is not None and cached.data == {"v": big}
        assert [e for e in rec.events if e[1] == "big"] == [("add", "big")]
        assert inf.relists == 0
    finally:
        await inf.stop()


async def test_namespace_scope_and_indexes(apiserver: Any) -> None:
    c = apiserver.client()
    await c.create(Namespace(metadata=ObjectMeta(name="other")))
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, "other")
    everywhere: Informer[ConfigMap] = Informer(c, ConfigMap)
    everywhere.add_indexer("app", label_index("app"))
    for i in (inf, everywhere):
        i.start()
    try:
        await c.create(ConfigMap(metadata=ObjectMeta(name="x", namespace="other", labels={"app": "web"})))
        await c.create(ConfigMap(metadata=ObjectMeta(name="y", namespace="default", labels={"app": "web"})))
        await eventually(lambda: "default/y" in everywhere.cache and "other/x" in everywhere.cache)
        await eventually(lambda: "other/x" in inf.cache)
        assert [k for k in inf.cache.keys() if not k.startswith("other/")] == []
        assert everywhere.cache.index_keys("app", "web") == ["default/y", "other/x"]
        assert [
            o.metadata.name for o in everywhere.cache.list_namespace("other") if o.metadata.name == "x"
        ] == ["x"]
        labelled: Informer[ConfigMap] = Informer(c, ConfigMap, labels={"app": "web"})
        labelled.start()
        assert await labelled.wait_synced(10)
        assert sorted(labelled.cache.keys()) == ["default/y", "other/x"]
        await labelled.stop()
    finally:
        await inf.stop()
        await everywhere.stop()


async def test_recovers_from_forced_410(apiserver: Any) -> None:
    c = apiserver.client()
    await c.create(cm("gone-soon"))
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, "default")
    rec = Recorder(inf)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        before = metrics.INFORMER_RELISTS.labels(inf.name, "default", "expired")._value.get()
        # Changes the informer cannot see: written straight to the store, then history forgotten and
        # every watch dropped, all without yielding to the event loop. The informer resumes from its
        # last resourceVersion, which is now older than the history: 410 Gone, so it must relist.
        store = apiserver.store
        store.delete("/configmaps", "default", "gone-soon")
        store.create(
            "/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "while-away", "namespace": "default", "uid": "u-while-away"},
            },
        )
        store.compact()
        store.close_watches()
        await eventually(lambda: inf.relists >= 1)
        await eventually(lambda: rec.has("add", "while-away") and rec.has("delete", "gone-soon"))
        assert sorted(k for k in inf.cache.keys() if k.startswith("default/")) == ["default/while-away"]
        assert metrics.INFORMER_RELISTS.labels(inf.name, "default", "expired")._value.get() >= before + 1
        # and it keeps watching afterwards
        await c.create(cm("after"))
        await eventually(lambda: rec.has("add", "after"))
    finally:
        await inf.stop()


async def test_compaction_without_disconnect_is_harmless(apiserver: Any) -> None:
    c = apiserver.client()
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, "default")
    rec = Recorder(inf)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        apiserver.store.compact()
        await c.create(cm("live"))
        await eventually(lambda: rec.has("add", "live"))
    finally:
        await inf.stop()


async def test_recovers_from_server_restart(apiserver: Any) -> None:
    c = apiserver.client()
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, "default", backoff_base=0.1, backoff_cap=1.0)
    rec = Recorder(inf)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        await c.create(cm("one"))
        await eventually(lambda: rec.has("add", "one"))
        await apiserver.restart()
        c2 = apiserver.client()
        await c2.create(cm("two"))
        await c2.delete(ConfigMap, "one", namespace="default")
        await eventually(lambda: rec.has("add", "two") and rec.has("delete", "one"), within=20)
        assert "default/one" not in inf.cache and "default/two" in inf.cache
    finally:
        await inf.stop()


async def test_bookmarks_advance_resource_version(apiserver: Any) -> None:
    c = apiserver.client()
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, "default")
    inf.start()
    try:
        assert await inf.wait_synced(10)
        rv0 = int(inf.resource_version or 0)
        await c.create(Namespace(metadata=ObjectMeta(name="elsewhere")))  # bumps the global rv, not ours
        await eventually(lambda: int(inf.resource_version or 0) > rv0, within=5)  # bookmark every 1 s
    finally:
        await inf.stop()


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.isthmus.io"},
    "spec": {
        "group": "test.isthmus.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}

Widget = create_namespaced_resource("test.isthmus.io", "v1", "Widget", "widgets")


async def test_generic_resource_crd(apiserver: Any) -> None:
    c = apiserver.client()
    await c.create(CustomResourceDefinition.from_dict(CRD))
    await asyncio.sleep(0.1)
    await c.create(Widget(metadata=ObjectMeta(name="w1", namespace="default"), spec={"size": 1}))
    inf: Informer[Any] = Informer(c, Widget)
    inf.add_indexer("size", lambda o: [str(o["spec"]["size"])])
    rec = Recorder(inf)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        assert inf.cache.get("default/w1")["spec"] == {"size": 1}  # type: ignore[index]
        await c.create(Widget(metadata=ObjectMeta(name="w2", namespace="default"), spec={"size": 2}))
        await eventually(lambda: rec.has("add", "w2"))
        assert inf.cache.index_keys("size", "2") == ["default/w2"]
        await c.delete(Widget, "w1", namespace="default")
        await eventually(lambda: rec.has("delete", "w1"))
    finally:
        await inf.stop()


async def test_shared_factory_one_informer_per_kind_and_scope(apiserver: Any) -> None:
    c = apiserver.client()
    f = SharedInformerFactory(c)
    a = f.informer(ConfigMap)
    assert f.informer(ConfigMap) is a
    assert f.informer(ConfigMap, "default") is not a
    assert f.informer(Namespace) is not a
    with pytest.raises(ValueError):
        f.informer(Namespace, "default")  # cluster-scoped
    f.start()
    try:
        assert await f.wait_synced(10)
        late = f.informer(ConfigMap, "kube-system")  # created after start: starts at once
        assert await late.wait_synced(10) and f.synced
        assert "default" in f.informer(Namespace).cache
    finally:
        await f.stop()


def test_cached_objects_are_compacted() -> None:
    """managedFields dropped, repeated strings shared (dict objects and typed ones alike)."""
    from lightkube.core import decoders
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.resources.discovery_v1 import EndpointSlice as Slice

    from isthmus.runtime.informer import _compact

    thing = create_namespaced_resource("x.io", "v1", "Thing", "things")
    raw = (b'{"apiVersion":"x.io/v1","kind":"Thing","metadata":{"name":"a","namespace":"ns-%d",'
           b'"labels":{"app.kubernetes.io/name":"long-enough-value"},"managedFields":[{"manager":"m"}]},'
           b'"spec":{"items":[{"protocol":"TCP-ish"}]}}')
    a, b = (decoders.decode_object(raw % 1, thing), decoders.decode_object(raw % 1, thing))
    _compact(a)
    _compact(b)
    assert "managedFields" not in a["metadata"]
    assert a["metadata"]["labels"]["app.kubernetes.io/name"] is b["metadata"]["labels"]["app.kubernetes.io/name"]
    assert a["spec"]["items"][0]["protocol"] is b["spec"]["items"][0]["protocol"]

    raw = (b'{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","addressType":"IPv4","endpoints":[],'
           b'"metadata":{"name":"s","namespace":"some-namespace","labels":{"kubernetes.io/service-name":"svc-x"},'
           b'"managedFields":[{"manager":"m"}]},"ports":[{"name":"http-port-name","port":80,"protocol":"TCP"}]}')
    s1, s2 = decoders.decode_object(raw, Slice), decoders.decode_object(raw, Slice)
    _compact(s1)
    _compact(s2)
    assert s1.metadata.managedFields is None
    assert s1.metadata.labels == {"kubernetes.io/service-name": "svc-x"}
    assert s1.metadata.namespace is s2.metadata.namespace
    assert s1.ports[0].name is s2.ports[0].name


def test_cached_objects_drop_the_metadata_their_readers_never_need() -> None:
    """`drop_metadata`: gone from dict and typed objects alike; what is kept is untouched, and one
    owner's uid is shared by every object it owns."""
    from lightkube.core import decoders
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.resources.discovery_v1 import EndpointSlice as Slice

    from isthmus.runtime.informer import _compact

    drop = frozenset({"uid", "creationTimestamp", "generation", "ownerReferences"})
    thing = create_namespaced_resource("x.io", "v1", "Thing", "things")
    raw = (b'{"apiVersion":"x.io/v1","kind":"Thing","metadata":{"name":"a","namespace":"ns","uid":"u-1",'
           b'"creationTimestamp":"2026-11-28T00:00:00Z","generation":3,"resourceVersion":"42",'
           b'"labels":{"k":"v"},"ownerReferences":[{"kind":"Cluster","name":"c1","uid":"c-1"}]},"spec":{"x":1}}')
    t = decoders.decode_object(raw, thing)
    _compact(t, drop)
    assert t["metadata"] == {"name": "a", "namespace": "ns", "resourceVersion": "42", "labels": {"k": "v"}}
    assert t["spec"] == {"x": 1}

    raw = (b'{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","addressType":"IPv4","endpoints":[],'
           b'"metadata":{"name":"s","namespace":"ns","uid":"u-%d","creationTimestamp":"2026-11-28T00:00:00Z",'
           b'"generation":1,"resourceVersion":"7","ownerReferences":[{"apiVersion":"isthmus.io/v1alpha1",'
           b'"kind":"Cluster","name":"c1","uid":"d263a99d-e5b8-4fd2-aa71-065a59054caf"}]}}')
    s1, s2 = decoders.decode_object(raw % 1, Slice), decoders.decode_object(raw % 2, Slice)
    _compact(s1, frozenset({"uid", "creationTimestamp", "generation"}))
    _compact(s2, frozenset({"uid", "creationTimestamp", "generation"}))
    assert (s1.metadata.uid, s1.metadata.creationTimestamp, s1.metadata.generation) == (None, None, None)
    assert (s1.metadata.name, s1.metadata.resourceVersion) == ("s", "7")
    assert s1.metadata.ownerReferences is not None and s2.metadata.ownerReferences is not None
    assert s1.metadata.ownerReferences[0].uid == "d263a99d-e5b8-4fd2-aa71-065a59054caf"
    assert s1.metadata.ownerReferences[0].uid is s2.metadata.ownerReferences[0].uid


async def test_a_shared_informer_must_drop_the_same_metadata_for_every_user(apiserver: Any) -> None:
    f = SharedInformerFactory(apiserver.client())
    f.informer(ConfigMap, "default", drop_metadata={"uid"})
    assert f.informer(ConfigMap, "default", drop_metadata=("uid",)) is f.informer(ConfigMap, "default",
                                                                                  drop_metadata={"uid"})
    with pytest.raises(ValueError, match="drop_metadata"):
        f.informer(ConfigMap, "default")


async def test_a_transform_changes_listed_and_watched_objects_before_they_are_cached(apiserver: Any) -> None:
    """`set_transform`: applied after compaction to what a list and a watch bring, before handlers
    see it; one per informer, set before it starts."""
    c = apiserver.client()
    await c.create(cm("t-listed", x="1"))
    f = SharedInformerFactory(c)
    inf = f.informer(ConfigMap, "default")
    seen: list[tuple[str, dict[str, str] | None, bool]] = []

    def mark(obj: Any) -> None:
        seen.append((obj.metadata.name, dict(obj.data or {}), obj.metadata.managedFields is None))
        obj.data = {**(obj.data or {}), "marked": "yes"}

    inf.set_transform(mark)
    inf.set_transform(mark)  # the same one again (a second user of the shared informer): fine
    with pytest.raises(ValueError, match="already has a transform"):
        inf.set_transform(lambda obj: None)
    rec = Recorder(inf)
    f.start()
    try:
        assert await f.wait_synced(10)
        with pytest.raises(RuntimeError, match="before"):
            inf.set_transform(mark)
        await c.create(cm("t-watched", x="2"))
        await eventually(lambda: rec.has("add", "t-watched"))
        for name in ("t-listed", "t-watched"):
            cached = inf.cache.get(f"default/{name}")
            assert cached is not None and cached.data is not None and cached.data["marked"] == "yes"
        assert ("t-listed", {"x": "1"}, True) in seen and ("t-watched", {"x": "2"}, True) in seen  # after compaction
    finally:
        await f.stop()


def test_cached_objects_share_the_small_values_they_repeat() -> None:
    """Ports, endpoint conditions and lists of flat records are one instance across cached objects,
    equal by value and kind (a JSON `true` never stands in for a `1`); larger or varied lists are not."""
    from lightkube.core import decoders
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.resources.discovery_v1 import EndpointSlice as Slice

    from isthmus.runtime.informer import _compact

    thing = create_namespaced_resource("x.io", "v1", "Thing", "things")
    raw = (b'{"apiVersion":"x.io/v1","kind":"Thing","metadata":{"name":"t%d","namespace":"ns"},'
           b'"spec":{"ports":[{"name":"http","protocol":"TCP","port":80}],"flags":[{"on":%s}],'
           b'"conditions":[{"type":"Ready","status":"True","reason":"Ok","message":"m","lastTransitionTime":"%s"}]},'
           b'"status":{"clusters":[{"cluster":"c1"},{"cluster":"c2"}]}}')
    a = decoders.decode_object(raw % (1, b"true", b"2026-11-28T00:00:01Z"), thing)
    b = decoders.decode_object(raw % (2, b"1", b"2026-11-28T00:00:02Z"), thing)
    _compact(a)
    _compact(b)
    assert a["spec"]["ports"] is b["spec"]["ports"] and a["spec"]["ports"] == [{"name": "http", "protocol": "TCP", "port": 80}]
    assert a["status"]["clusters"] is b["status"]["clusters"]
    assert a["spec"]["flags"] == [{"on": True}] and b["spec"]["flags"] == [{"on": 1}]
    assert a["spec"]["flags"] is not b["spec"]["flags"] and type(b["spec"]["flags"][0]["on"]) is int
    assert a["spec"]["conditions"] is not b["spec"]["conditions"]

    raw = (b'{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","addressType":"IPv4","metadata":{"name":"s%d"},'
           b'"endpoints":[{"addresses":["127.0.0.%d"],"conditions":{"ready":true,"serving":true}}],'
           b'"ports":[{"name":"http","port":%d,"protocol":"TCP"}]}')
    s1, s2, s3 = (decoders.decode_object(raw % (i, i, port), Slice) for i, port in ((1, 80), (2, 80), (3, 81)))
    for s in (s1, s2, s3):
        _compact(s)
    assert s1.ports is s2.ports and s1.ports is not s3.ports and s3.ports[0].port == 81
    assert s1.endpoints[0].conditions is s2.endpoints[0].conditions
    assert s1.endpoints[0].addresses == ["127.0.0.1"] and s2.endpoints[0].addresses == ["127.0.0.2"]


def test_cache_index_files_one_or_many_keys_under_a_value() -> None:
    """An index value holds one key or several as objects come, change and go; lookups see the
    same either way, and a value with no key left is gone."""
    from isthmus.runtime.informer import Cache

    cache: Cache[dict[str, Any]] = Cache()
    cache.add_indexer("app", lambda o: [o["app"]] if o.get("app") else [])

    def put(name: str, app: str | None) -> None:
        cache._put(f"ns/{name}", {"metadata": {"name": name, "namespace": "ns"}, "app": app})

    put("a", "web")
    assert cache.index_keys("app", "web") == ["ns/a"]
    put("a", "web")  # re-filed under the same value
    assert cache.index_keys("app", "web") == ["ns/a"]
    put("b", "web")
    put("c", "db")
    assert cache.index_keys("app", "web") == ["ns/a", "ns/b"] and cache.index_values("app") == ["db", "web"]
    put("a", "db")  # moves
    assert cache.index_keys("app", "web") == ["ns/b"] and cache.index_keys("app", "db") == ["ns/a", "ns/c"]
    cache._remove("ns/b")
    assert cache.index_keys("app", "web") == [] and cache.index_values("app") == ["db"]
    put("d", None)
    assert [o["metadata"]["name"] for o in cache.by_index("app", "db")] == ["a", "c"]
    assert cache.list_namespace("ns") == [cache.get(k) for k in ("ns/a", "ns/c", "ns/d")]
    cache.add_indexer("late", lambda o: ["all"])  # built over what is there
    assert cache.index_keys("late", "all") == ["ns/a", "ns/c", "ns/d"]
    for k in ("ns/a", "ns/c", "ns/d"):
        cache._remove(k)
    assert cache.index_values("app") == [] and cache.index_values("namespace") == []


def test_cached_services_share_ports_families_and_an_empty_status() -> None:
    from lightkube.core import decoders
    from lightkube.resources.core_v1 import Service

    from isthmus.runtime.informer import _compact

    raw = (b'{"apiVersion":"v1","kind":"Service","metadata":{"name":"s%d","namespace":"ns"},'
           b'"spec":{"clusterIP":"10.0.0.%d","ipFamilies":["IPv4"],'
           b'"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":%s}]},"status":%s}')
    a, b = (decoders.decode_object(raw % (i, i, b"8080", b'{"loadBalancer":{}}'), Service) for i in (1, 2))
    c = decoders.decode_object(raw % (3, 3, b'"8080"', b'{"loadBalancer":{"ingress":[{"ip":"127.0.0.9"}]}}'), Service)
    for s in (a, b, c):
        _compact(s)
    assert a.spec.ports is b.spec.ports and a.spec.ipFamilies is b.spec.ipFamilies and a.status is b.status
    assert (a.spec.clusterIP, b.spec.clusterIP) == ("10.0.0.1", "10.0.0.2")
    assert c.spec.ports is not a.spec.ports and c.spec.ports[0].targetPort == "8080"  # a name, not the number
    assert c.status is not a.status and c.status.loadBalancer.ingress[0].ip == "127.0.0.9"


def test_cached_services_share_an_empty_status_only_with_the_same_shape() -> None:
    """`ingress: []` and no ingress at all read the same, but are not the same object on the wire."""
    from lightkube.core import decoders
    from lightkube.resources.core_v1 import Service

    from isthmus.runtime.informer import _compact

    raw = b'{"apiVersion":"v1","kind":"Service","metadata":{"name":"s%d","namespace":"ns"},"status":%s}'
    shapes = [b'{"loadBalancer":{}}', b'{"loadBalancer":{"ingress":[]}}', b"{}", b'{"loadBalancer":{}}']
    got = [decoders.decode_object(raw % (i, shape), Service) for i, shape in enumerate(shapes)]
    for s in got:
        _compact(s)
    assert got[0].status is got[3].status
    assert len({id(s.status) for s in got[:3]}) == 3
    assert got[1].status.loadBalancer.ingress == [] and got[2].status.loadBalancer is None


async def test_the_cyclic_gc_pauses_while_a_list_runs_and_what_it_brought_is_frozen(apiserver: Any) -> None:
    c = apiserver.client()
    for i in range(5):
        await c.create(cm(f"gc-{i}"))
    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, page_size=2)
    during: list[bool] = []
    inf.add_handler(lambda o: during.append(gc.isenabled()), None, None)
    inf.start()
    try:
        assert await inf.wait_synced(10)
        assert during == [False] * 5, "the listed objects arrive with the GC paused"
        assert gc.isenabled(), "and it runs again once the list ends"
        assert gc.get_freeze_count() > frozen_before
    finally:
        await inf.stop()
        gc.unfreeze()


async def test_a_failing_list_lets_the_gc_run_again(apiserver: Any) -> None:
    missing = create_namespaced_resource("example.com", "v1", "Missing", "missings")
    inf: Informer[Any] = Informer(apiserver.client(), missing)
    inf.start()
    try:
        await eventually(lambda: inf.last_error is not None)
        assert gc.isenabled()
    finally:
        await inf.stop()


async def test_a_paged_list_asks_for_the_next_page_while_it_caches_the_current_one(apiserver: Any) -> None:
    """The next page is on its way (the server making it) while this process caches the current one:
    every object of seven pages is cached once, and each page's objects are transformed after the
    request of the page behind it was sent."""
    c = apiserver.client()
    await c.create(Namespace(metadata=ObjectMeta(name="paged")))
    for i in range(20):
        await c.create(cm(f"p{i:02d}", "paged", i=str(i)))
    inf: Informer[ConfigMap] = Informer(c, ConfigMap, "paged", page_size=3)
    gc_client: Any = c._client
    sent: list[int] = []
    send = gc_client.send

    async def counting_send(*args: Any, **kwargs: Any) -> Any:
        sent.append(1)
        return await send(*args, **kwargs)

    gc_client.send = counting_send
    asked_when_cached: list[int] = []
    inf.set_transform(lambda obj: asked_when_cached.append(len(sent)))
    inf.start()
    try:
        assert await inf.wait_synced(10)
        assert sorted(inf.cache.keys()) == [f"paged/p{i:02d}" for i in range(20)]
        pages = [asked_when_cached[i:i + 3] for i in range(0, 20, 3)]
        assert len(pages) == 7
        for n, page in enumerate(pages[:-1], start=1):
            assert set(page) == {n + 1}, asked_when_cached  # page n cached once page n + 1 was asked for
        assert set(pages[-1]) == {7}  # the last page: nothing more to ask for
    finally:
        gc_client.send = send
        await inf.stop()
