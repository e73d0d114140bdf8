"""The embedded apiserver through lightkube's AsyncClient and raw HTTP, as controllers will use it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from lightkube import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.types import CascadeType, PatchType

from tests.harness.apiserver import RunningApiServer

GADGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}},
                "status": {"type": "object", "properties": {"ready": {"type": "integer"}}},
            }}},
        }],
    },
}
Gadget = create_namespaced_resource("example.com", "v1", "Gadget", "gadgets")


async def _install_gadgets(srv: RunningApiServer) -> None:
    async with aiohttp.ClientSession() as s:
        r = await s.post(f"{srv.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=GADGET_CRD)
        assert r.status == 201, await r.text()


def cm(name: str, ns: str = "default", **labels: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels=labels or None), data={"k": name})


async def test_list_then_watch_sees_every_change(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    await c.create(cm("a"))
    listed = c.list(ConfigMap, namespace="default")
    names = [o.metadata.name async for o in listed]
    assert names == ["a"]
    rv = listed.resourceVersion
    events: list[tuple[str, str]] = []

    async def consume() -> None:
        async for typ, obj in c.watch(ConfigMap, namespace="default", resource_version=rv):
            events.append((typ, obj.metadata.name))
            if typ == "DELETED":
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    await c.create(cm("b"))
    await c.patch(ConfigMap, "b", {"data": {"k": "changed"}}, namespace="default")
    await c.delete(ConfigMap, "b", namespace="default")
    await asyncio.wait_for(task, 5)
    assert events == [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]


async def test_watch_from_compacted_version_gets_410(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    await c.create(cm("a"))
    old = int(apiserver.store.rv)
    await c.create(cm("b"))
    apiserver.store.compact()
    async with aiohttp.ClientSession() as s:
        r = await s.get(f"{apiserver.url}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={old}"
                        "&timeoutSeconds=2")
        line = await r.content.readline()
    ev = json.loads(line)
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired"
    # the relist that follows works and shows everything
    names = [o.metadata.name async for o in c.list(ConfigMap, namespace="default")]
    assert names == ["a", "b"]


async def test_stale_update_conflicts(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    first = await c.create(cm("a"))
    first.data = {"k": "one"}
    await c.replace(first)
    first.data = {"k": "two"}  # still carries the old resourceVersion
    with pytest.raises(ApiError) as e:
        await c.replace(first)
    assert e.value.status.code == 409 and "the object has been modified" in e.value.status.message
    assert (await c.get(ConfigMap, "a", namespace="default")).data == {"k": "one"}


async def test_no_op_update_keeps_resource_version(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    a = await c.create(cm("a"))
    again = await c.patch(ConfigMap, "a", {"data": {"k": "a"}}, namespace="default")
    assert again.metadata.resourceVersion == a.metadata.resourceVersion


async def test_server_side_apply_ownership(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s", "namespace": "default"},
           "data": {"x": "1", "y": "2"}}
    await c.apply(ConfigMap.from_dict(obj), field_manager="alice")
    got = await c.get(ConfigMap, "s", namespace="default")
    owners = {m.manager: m.operation for m in got.metadata.managedFields}
    assert owners == {"alice": "Apply"}
    # alice stops applying y: it goes away
    await c.apply(ConfigMap.from_dict({**obj, "data": {"x": "1"}}), field_manager="alice")
    assert (await c.get(ConfigMap, "s", namespace="default")).data == {"x": "1"}
    # bob changing alice's field conflicts; force takes it over
    with pytest.raises(ApiError) as e:
        await c.apply(ConfigMap.from_dict({**obj, "data": {"x": "9"}}), field_manager="bob")
    assert e.value.status.code == 409 and ".data.x" in e.value.status.message
    await c.apply(ConfigMap.from_dict({**obj, "data": {"x": "9"}}), field_manager="bob", force=True)
    assert (await c.get(ConfigMap, "s", namespace="default")).data == {"x": "9"}


async def test_status_subresource_and_generation(apiserver: RunningApiServer) -> None:
    await _install_gadgets(apiserver)
    c = apiserver.client()
    for _ in range(50):
        try:
            await c.create(Gadget(metadata=ObjectMeta(name="g", namespace="default"),
                                  spec={"replicas": 1}, status={"ready": 99}))
            break
        except ApiError as e:
            if e.status.code != 404:
                raise
            await asyncio.sleep(0.05)
    g = await c.get(Gadget, "g", namespace="default")
    assert g.status in (None, {}) and g.metadata.generation == 1  # status dropped on create
    await c.patch(Gadget.Status, "g", {"status": {"ready": 1}}, namespace="default",
                  patch_type=PatchType.MERGE)
    g = await c.get(Gadget, "g", namespace="default")
    assert g.status == {"ready": 1} and g.metadata.generation == 1
    # spec through /status is ignored; status through the main resource is ignored
    await c.patch(Gadget, "g", {"spec": {"replicas": 5}, "status": {"ready": 7}}, namespace="default",
                  patch_type=PatchType.MERGE)
    g = await c.get(Gadget, "g", namespace="default")
    assert g.spec == {"replicas": 5} and g.status == {"ready": 1} and g.metadata.generation == 2
    with pytest.raises(ApiError) as e:
        await c.patch(Gadget, "g", {"spec": {"replicas": -1}}, namespace="default",
                      patch_type=PatchType.MERGE)
    assert e.value.status.code == 422 and "spec.replicas" in e.value.status.message


async def test_status_writes_prune_default_and_validate_the_status(apiserver: RunningApiServer) -> None:
    """A status write is normalized where it writes: unknown status fields are dropped (with the
    warning fieldValidation asks for), status defaults applied, bad status values refused (422),
    while an unchanged spec that a newer schema would refuse does not block it (kube validates a
    custom resource's status writes with the status schema alone)."""
    await _install_gadgets(apiserver)
    base = f"{apiserver.url}/apis/example.com/v1/namespaces/default/gadgets"
    merge = {"Content-Type": "application/merge-patch+json"}
    async with aiohttp.ClientSession() as s:
        for _ in range(50):
            r = await s.post(base, json={"apiVersion": "example.com/v1", "kind": "Gadget",
                                         "metadata": {"name": "h"}, "spec": {"replicas": 2}})
            if r.status != 404:
                break
            await asyncio.sleep(0.05)
        assert r.status == 201, await r.text()
        r = await s.patch(f"{base}/h/status?fieldValidation=Warn", headers=merge,
                          json={"status": {"ready": 1, "bogus": True}})
        assert r.status == 200 and (await r.json())["status"] == {"ready": 1}
        assert r.headers.get("Warning") == '299 - "unknown field \\"status.bogus\\""'
        r = await s.patch(f"{base}/h/status?fieldValidation=Strict", headers=merge, json={"status": {"bogus": 1}})
        assert r.status == 400 and "status.bogus" in (await r.json())["message"], await r.text()
        r = await s.patch(f"{base}/h/status", headers=merge, json={"status": {"ready": "many"}})
        assert r.status == 422 and "status.ready" in (await r.json())["message"]

        # The schema now wants at least 5 replicas and defaults status.phase.
        crd = await (await s.get(f"{apiserver.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                 "gadgets.example.com")).json()
        props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        props["spec"]["properties"]["replicas"]["minimum"] = 5
        props["status"]["properties"]["phase"] = {"type": "string", "default": "Pending"}
        r = await s.put(f"{apiserver.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                        "gadgets.example.com", json=crd)
        assert r.status == 200, await r.text()
        for _ in range(50):
            r = await s.patch(f"{base}/h/status", headers=merge, json={"status": {"ready": 2}})
            body = await r.json()
            if body.get("status", {}).get("phase"):
                break
            await asyncio.sleep(0.05)
        assert r.status == 200 and body["status"] == {"ready": 2, "phase": "Pending"} and body["spec"] == {"replicas": 2}
        r = await s.patch(f"{base}/h", headers=merge, json={"spec": {"replicas": 3}})
        assert r.status == 422 and "spec.replicas" in (await r.json())["message"]


async def test_label_and_field_selectors(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    await c.create(Namespace(metadata=ObjectMeta(name="other")))
    await c.create(cm("a", tier="web", env="prod"))
    await c.create(cm("b", tier="db", env="prod"))
    await c.create(cm("c", "other", tier="web"))

    async def names(**kw: Any) -> list[str]:
        return sorted([o.metadata.name async for o in c.list(ConfigMap, **kw)])

    assert await names(namespace="*", labels={"tier": "web"}) == ["a", "c"]
    assert await names(namespace="default", labels={"env": "prod", "tier": ("db",)}) == ["b"]
    assert await names(namespace="*", fields={"metadata.namespace": "other"}) == ["c"]
    assert await names(namespace="*", fields={"metadata.name": "b"}) == ["b"]
    async with aiohttp.ClientSession() as s:
        r = await s.get(f"{apiserver.url}/api/v1/configmaps?labelSelector=tier+notin+(web),!missing")
        assert sorted(i["metadata"]["name"] for i in (await r.json())["items"]) == ["b"]
        r = await s.get(f"{apiserver.url}/api/v1/configmaps?labelSelector=a+in+(b")
        assert r.status == 400 and (await r.json())["reason"] == "BadRequest"
        r = await s.get(f"{apiserver.url}/api/v1/configmaps?fieldSelector=spec.bogus=1")
        assert r.status == 400


async def test_pagination(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    for i in range(25):
        await c.create(cm(f"p{i:02d}"))
    seen: list[str] = []
    cont = ""
    async with aiohttp.ClientSession() as s:
        while True:
            r = await s.get(f"{apiserver.url}/api/v1/namespaces/default/configmaps?limit=10&continue={cont}")
            body = await r.json()
            seen += [i["metadata"]["name"] for i in body["items"]]
            cont = body["metadata"].get("continue", "")
            if not cont:
                break
    assert seen == [f"p{i:02d}" for i in range(25)]


async def test_finalizers_hold_deletion(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    await c.create(ConfigMap(metadata=ObjectMeta(name="f", namespace="default", finalizers=["example.com/hold"])))
    await c.delete(ConfigMap, "f", namespace="default")
    held = await c.get(ConfigMap, "f", namespace="default")
    assert held.metadata.deletionTimestamp is not None
    with pytest.raises(ApiError) as e:  # no new finalizers while deleting
        await c.patch(ConfigMap, "f", {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
                      namespace="default", patch_type=PatchType.MERGE)
    assert e.value.status.code == 422
    await c.patch(ConfigMap, "f", {"metadata": {"finalizers": None}}, namespace="default",
                  patch_type=PatchType.MERGE)
    with pytest.raises(ApiError) as e:
        await c.get(ConfigMap, "f", namespace="default")
    assert e.value.status.code == 404


async def _gone(c: Any, name: str) -> bool:
    deadline = asyncio.get_running_loop().time() + 5
    while asyncio.get_running_loop().time() < deadline:
        try:
            await c.get(ConfigMap, name, namespace="default")
        except ApiError as e:
            if e.status.code == 404:
                return True
        await asyncio.sleep(0.05)
    return False


async def test_garbage_collection_background_foreground_orphan(apiserver: RunningApiServer) -> None:
    c = apiserver.client()

    async def family(owner: str) -> None:
        o = await c.create(cm(owner))
        ref = OwnerReference(apiVersion="v1", kind="ConfigMap", name=owner, uid=o.metadata.uid)
        await c.create(ConfigMap(metadata=ObjectMeta(name=f"{owner}-child", namespace="default",
                                                     ownerReferences=[ref])))

    await family("bg")
    await c.delete(ConfigMap, "bg", namespace="default")
    assert await _gone(c, "bg-child")

    await family("fg")
    await c.delete(ConfigMap, "fg", namespace="default", cascade=CascadeType.FOREGROUND)
    assert await _gone(c, "fg-child") and await _gone(c, "fg")

    await family("or")
    await c.delete(ConfigMap, "or", namespace="default", cascade=CascadeType.ORPHAN)
    assert await _gone(c, "or")
    await asyncio.sleep(0.2)
    child = await c.get(ConfigMap, "or-child", namespace="default")
    assert not child.metadata.ownerReferences

    # a dependent whose owner does not exist is collected
    ghost = OwnerReference(apiVersion="v1", kind="ConfigMap", name="ghost", uid="00000000-0000-0000-0000-000000000000")
    await c.create(ConfigMap(metadata=ObjectMeta(name="orphaned", namespace="default", ownerReferences=[ghost])))
    assert await _gone(c, "orphaned")


async def test_generate_name(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    a = await c.create(ConfigMap(metadata=ObjectMeta(generateName="gen-", namespace="default")))
    b = await c.create(ConfigMap(metadata=ObjectMeta(generateName="gen-", namespace="default")))
    assert a.metadata.name.startswith("gen-") and len(a.metadata.name) == 9 and a.metadata.name != b.metadata.name


async def test_restart_keeps_objects_and_resource_versions(apiserver: RunningApiServer) -> None:
    c = apiserver.client()
    await _install_gadgets(apiserver)
    await c.create(cm("keep"))
    await c.create(cm("gone"))
    await c.delete(ConfigMap, "gone", namespace="default")
    before = await c.get(ConfigMap, "keep", namespace="default")
    rv_before = int(apiserver.store.rv)
    await apiserver.restart()
    c2 = apiserver.client()
    after = await c2.get(ConfigMap, "keep", namespace="default")
    assert after.metadata.resourceVersion == before.metadata.resourceVersion
    assert after.metadata.uid == before.metadata.uid
    assert int(apiserver.store.rv) == rv_before  # the sequence continues, never goes back
    created = await c2.create(cm("new"))
    assert int(created.metadata.resourceVersion) == rv_before + 1
    # the CRD is served again right away
    await c2.create(Gadget(metadata=ObjectMeta(name="g2", namespace="default"), spec={"replicas": 2}))
    # a watch from before the restart either resumes or gets 410 — here: 410, then relist works
    async with aiohttp.ClientSession() as s:
        r = await s.get(f"{apiserver.url}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1"
                        "&timeoutSeconds=1")
        first = await r.content.readline()
    assert b'"ERROR"' in first and b"410" in first
    # a watch from the restored version resumes with what happened after it
    events: list[str] = []

    async def consume() -> None:
        async for typ, obj in c2.watch(ConfigMap, namespace="default", resource_version=str(rv_before)):
            events.append(f"{typ} {obj.metadata.name}")
            if obj.metadata.name == "later":
                return

    await asyncio.wait_for(asyncio.gather(consume(), c2.create(cm("later"))), 5)
    assert events == ["ADDED new", "ADDED later"]


async def _raw(srv: RunningApiServer, method: str, path: str, body: bytes | None = None,
               ctype: str = "application/json", headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s:
        r = await s.request(method, srv.url + path, data=body, headers={"Content-Type": ctype, **(headers or {})})
        return r.status, await r.json(content_type=None)


async def test_bad_input_gets_status_and_changes_nothing(apiserver: RunningApiServer) -> None:
    await _install_gadgets(apiserver)
    c = apiserver.client()
    await c.create(cm("stable"))
    await asyncio.sleep(0.2)
    rv = int(apiserver.store.rv)
    base = "/api/v1/namespaces/default/configmaps"
    cases: list[tuple[str, str, bytes, str, int, str]] = [
        ("POST", base, b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {', "application/json", 400, "BadRequest"),
        ("POST", base, b"metadata: [unclosed", "application/yaml", 400, "BadRequest"),
        ("POST", base, b'{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}', "application/json", 400, "BadRequest"),
        ("POST", base, b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}', "application/json", 422, "Invalid"),
        ("POST", base, b"[1,2]", "application/json", 400, "BadRequest"),
        ("PATCH", base + "/stable", b'{"data": ', "application/merge-patch+json", 400, "BadRequest"),
        ("PATCH", base + "/stable", b'[{"op":"explode"}]', "application/json-patch+json", 0, ""),
        ("PATCH", base + "/stable", b'{"data":{"a":1}}', "application/merge-patch+json", 422, "Invalid"),
        ("PATCH", base + "/stable", b"{}", "text/plain", 415, "UnsupportedMediaType"),
        ("POST", "/apis/example.com/v1/namespaces/default/gadgets",
         b'{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"replicas":"many"}}',
         "application/json", 422, "Invalid"),
        ("POST", "/apis/example.com/v1/namespaces/default/nonsense", b"{}", "application/json", 404, "NotFound"),
        ("PUT", base + "/stable", b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"}}',
         "application/json", 400, "BadRequest"),
    ]
    for method, path, body, ctype, code, reason in cases:
        status, out = await _raw(apiserver, method, path, body, ctype)
        assert out["kind"] == "Status" and out["status"] == "Failure", (path, body, out)
        if code:
            assert (status, out["reason"]) == (code, reason), (path, body, status, out)
        else:
            assert 400 <= status < 500, (path, body, status, out)
    status, out = await _raw(apiserver, "POST", base, b'{"metadata":{"name":"big"},"data":{"x":"' + b"a" * (4 << 20)
                             + b'"}}')
    assert status == 413 and out["reason"] == "RequestEntityTooLarge"
    assert int(apiserver.store.rv) == rv
    assert (await c.get(ConfigMap, "stable", namespace="default")).data == {"k": "stable"}


async def test_bad_token(tmp_path: Any) -> None:
    srv = RunningApiServer(tmp_path / "tok", token="s3cret")
    await srv.start()
    try:
        status, out = await _raw(srv, "GET", "/api/v1/namespaces")
        assert status == 401 and out["reason"] == "Unauthorized"
        status, out = await _raw(srv, "GET", "/api/v1/namespaces", headers={"Authorization": "Bearer nope"})
        assert status == 401
        status, out = await _raw(srv, "GET", "/api/v1/namespaces", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and out["kind"] == "NamespaceList"
        names = [o.metadata.name async for o in srv.client().list(Namespace)]
        assert "default" in names and "kube-system" in names
    finally:
        await srv.close()


async def test_discovery_and_openapi(apiserver: RunningApiServer) -> None:
    await _install_gadgets(apiserver)
    await asyncio.sleep(0.1)
    for path, kind in [("/api", "APIVersions"), ("/apis", "APIGroupList"), ("/api/v1", "APIResourceList"),
                       ("/apis/example.com/v1", "APIResourceList"), ("/apis/apps/v1", "APIResourceList")]:
        status, out = await _raw(apiserver, "GET", path)
        assert status == 200 and out["kind"] == kind, path
    status, out = await _raw(apiserver, "GET", "/apis/example.com/v1")
    assert {r["name"] for r in out["resources"]} == {"gadgets", "gadgets/status"}
    for path in ["/version", "/version/", "/openapi/v2", "/openapi/v3", "/openapi/v3/apis/example.com/v1",
                 "/openapi/v3/api/v1"]:
        status, _ = await _raw(apiserver, "GET", path)
        assert status == 200, path


async def test_restart_keeps_dependents_of_custom_resources(apiserver: RunningApiServer) -> None:
    """The GC must not take a custom resource's dependents for orphans after a restart."""
    await _install_gadgets(apiserver)
    c = apiserver.client()
    owner = None
    for _ in range(50):
        try:
            owner = await c.create(Gadget(metadata=ObjectMeta(name="owner", namespace="default"), spec={}))
            break
        except ApiError as e:
            if e.status.code != 404:
                raise
            await asyncio.sleep(0.05)
    assert owner is not None
    ref = OwnerReference(apiVersion="example.com/v1", kind="Gadget", name="owner", uid=owner.metadata.uid)
    await c.create(ConfigMap(metadata=ObjectMeta(name="dependent", namespace="default", ownerReferences=[ref])))
    await apiserver.restart()
    c2 = apiserver.client()
    await asyncio.sleep(0.5)  # give a wrongful collection every chance to happen
    assert (await c2.get(ConfigMap, "dependent", namespace="default")).metadata.ownerReferences
    await c2.delete(Gadget, "owner", namespace="default")  # and real collection still works
    assert await _gone(c2, "dependent")
