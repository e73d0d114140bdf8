"""core/v1 Events and events.k8s.io/v1 Events are one resource, as in kube (/registry/events).

An Event written through either API is read, listed, watched, selected, updated and deleted
through the other, converted as kube's pkg/apis/events/v1 conversion does (regarding ↔
involvedObject, note ↔ message, reportingController ↔ reportingComponent, deprecated* ↔ the core
fields); events.k8s.io/v1 field selectors are kube's field label conversion onto the core fields.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import aiohttp
import pytest

from tests.harness.apiserver import RunningApiServer

Obj = dict[str, Any]

CORE = "/api/v1/namespaces/default/events"
V1 = "/apis/events.k8s.io/v1/namespaces/default/events"

CORE_EVENT: Obj = {
    "apiVersion": "v1", "kind": "Event",
    "metadata": {"name": "web.core", "namespace": "default"},
    "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default", "fieldPath": "spec.containers{web}"},
    "reason": "Pulled", "message": "image pulled", "type": "Normal",
    "source": {"component": "kubelet", "host": "node-1"},
    "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z", "count": 3,
    "reportingComponent": "kubelet", "reportingInstance": "node-1",
}

V1_EVENT: Obj = {
    "apiVersion": "events.k8s.io/v1", "kind": "Event",
    "metadata": {"name": "db.v1", "namespace": "default"},
    "eventTime": "2026-01-01T00:00:00.000000Z",
    "regarding": {"kind": "StatefulSet", "name": "db", "namespace": "default"},
    "related": {"kind": "Pod", "name": "db-0", "namespace": "default"},
    "note": "scaled up", "reason": "Scaled", "action": "Scale", "type": "Warning",
    "reportingController": "example.com/scaler", "reportingInstance": "scaler-1",
    "series": {"count": 2, "lastObservedTime": "2026-01-01T00:05:00.000000Z"},
}


async def _req(srv: RunningApiServer, method: str, path: str, body: Any = None,
               ctype: str = "application/json") -> tuple[int, Any]:
    headers = {"Content-Type": ctype} if body is not None else {}
    data = json.dumps(body) if body is not None else None
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, data=data, headers=headers) as r:
        raw = await r.read()
        return r.status, json.loads(raw) if raw else None


async def _ok(srv: RunningApiServer, method: str, path: str, body: Any = None,
              ctype: str = "application/json") -> Any:
    status, out = await _req(srv, method, path, body, ctype)
    assert status in (200, 201), (method, path, status, out)
    return out


async def _first_watch_event(srv: RunningApiServer, path: str) -> Obj:
    async with aiohttp.ClientSession() as s, s.get(srv.url + path, params={"watch": "true"}) as r:
        assert r.status == 200
        line = await asyncio.wait_for(r.content.readline(), 30)
        event: Obj = json.loads(line)
        return event


async def kubectl(srv: RunningApiServer, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", srv.kubeconfig, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def test_a_core_event_is_read_through_events_k8s_io(apiserver: RunningApiServer) -> None:
    created = await _ok(apiserver, "POST", CORE, CORE_EVENT)
    got = await _ok(apiserver, "GET", f"{V1}/web.core")
    assert got["apiVersion"] == "events.k8s.io/v1" and got["kind"] == "Event"
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert got["regarding"] == CORE_EVENT["involvedObject"]
    assert got["note"] == "image pulled"
    assert got["deprecatedSource"] == {"component": "kubelet", "host": "node-1"}
    assert got["deprecatedFirstTimestamp"] == "2026-01-01T00:00:00Z"
    assert got["deprecatedLastTimestamp"] == "2026-01-01T00:01:00Z"
    assert got["deprecatedCount"] == 3
    assert got["reportingController"] == "kubelet" and got["reportingInstance"] == "node-1"
    assert (got["reason"], got["type"]) == ("Pulled", "Normal")
    for core_only in ("involvedObject", "message", "source", "firstTimestamp", "lastTimestamp", "count",
                      "reportingComponent"):
        assert core_only not in got, core_only

    listed = await _ok(apiserver, "GET", V1)
    assert listed["kind"] == "EventList" and listed["apiVersion"] == "events.k8s.io/v1"
    assert [(i["apiVersion"], i["metadata"]["name"], i["note"]) for i in listed["items"]] == [
        ("events.k8s.io/v1", "web.core", "image pulled")]

    event = await _first_watch_event(apiserver, V1)
    assert event["type"] == "ADDED"
    assert event["object"]["apiVersion"] == "events.k8s.io/v1" and event["object"]["regarding"]["name"] == "web"


async def test_an_events_k8s_io_event_is_read_as_a_core_event(apiserver: RunningApiServer) -> None:
    created = await _ok(apiserver, "POST", V1, V1_EVENT)
    assert created["apiVersion"] == "events.k8s.io/v1" and created["note"] == "scaled up"
    got = await _ok(apiserver, "GET", f"{CORE}/db.v1")
    assert got["apiVersion"] == "v1" and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["involvedObject"] == V1_EVENT["regarding"] and got["related"] == V1_EVENT["related"]
    assert got["message"] == "scaled up"
    assert got["reportingComponent"] == "example.com/scaler" and got["reportingInstance"] == "scaler-1"
    assert got["eventTime"] == "2026-01-01T00:00:00.000000Z"
    assert (got["action"], got["reason"], got["type"]) == ("Scale", "Scaled", "Warning")
    assert got["series"] == V1_EVENT["series"]
    for v1_only in ("regarding", "note", "reportingController"):
        assert v1_only not in got, v1_only

    listed = await _ok(apiserver, "GET", CORE)
    assert [(i["apiVersion"], i["metadata"]["name"], i["message"]) for i in listed["items"]] == [
        ("v1", "db.v1", "scaled up")]
    all_ns = await _ok(apiserver, "GET", "/api/v1/events")
    assert [i["metadata"]["name"] for i in all_ns["items"]] == ["db.v1"]

    event = await _first_watch_event(apiserver, CORE)
    assert event["type"] == "ADDED"
    assert event["object"]["apiVersion"] == "v1" and event["object"]["involvedObject"]["name"] == "db"


async def test_a_watch_of_each_version_sees_writes_through_the_other(apiserver: RunningApiServer) -> None:
    async with aiohttp.ClientSession() as s, \
            s.get(apiserver.url + CORE, params={"watch": "true"}) as core_watch, \
            s.get(apiserver.url + V1, params={"watch": "true"}) as v1_watch:
        await _ok(apiserver, "POST", V1, V1_EVENT)
        await _ok(apiserver, "POST", CORE, CORE_EVENT)
        seen_core = [json.loads(await asyncio.wait_for(core_watch.content.readline(), 30)) for _ in range(2)]
        seen_v1 = [json.loads(await asyncio.wait_for(v1_watch.content.readline(), 30)) for _ in range(2)]
    assert [(e["type"], e["object"]["apiVersion"], e["object"]["metadata"]["name"], e["object"]["message"])
            for e in seen_core] == [("ADDED", "v1", "db.v1", "scaled up"), ("ADDED", "v1", "web.core", "image pulled")]
    assert [(e["type"], e["object"]["apiVersion"], e["object"]["metadata"]["name"], e["object"]["note"])
            for e in seen_v1] == [("ADDED", "events.k8s.io/v1", "db.v1", "scaled up"),
                                  ("ADDED", "events.k8s.io/v1", "web.core", "image pulled")]


async def test_field_selectors_of_each_version(apiserver: RunningApiServer) -> None:
    await _ok(apiserver, "POST", CORE, CORE_EVENT)
    await _ok(apiserver, "POST", V1, V1_EVENT)

    async def names(path: str, selector: str) -> list[str]:
        out = await _ok(apiserver, "GET", f"{path}?fieldSelector={selector}")
        return [i["metadata"]["name"] for i in out["items"]]

    assert await names(CORE, "involvedObject.name=db") == ["db.v1"]
    assert await names(CORE, "involvedObject.kind=Pod") == ["web.core"]
    assert await names(CORE, "reportingComponent=example.com/scaler") == ["db.v1"]
    assert await names(CORE, "type=Warning") == ["db.v1"]
    assert await names(CORE, "source=kubelet") == ["web.core"]
    assert await names(CORE, "source=example.com/scaler") == ["db.v1"]  # no source: the reporting controller
    assert await names(V1, "regarding.name=web") == ["web.core"]
    assert await names(V1, "regarding.kind=StatefulSet,reason=Scaled") == ["db.v1"]
    assert await names(V1, "reportingController=kubelet") == ["web.core"]
    assert await names(V1, "type!=Warning") == ["web.core"]
    assert await names(V1, "metadata.name=db.v1") == ["db.v1"]
    # as kube: each version accepts its own field labels only
    status, out = await _req(apiserver, "GET", f"{V1}?fieldSelector=involvedObject.name=web")
    assert status == 400 and out["message"] == "field label not supported: involvedObject.name"
    status, out = await _req(apiserver, "GET", f"{CORE}?fieldSelector=regarding.name=web")
    assert status == 400 and out["message"] == "field label not supported: regarding.name"

    async with aiohttp.ClientSession() as s, s.get(apiserver.url + V1, params={
            "watch": "true", "fieldSelector": "regarding.name=db"}) as r:
        event = json.loads(await asyncio.wait_for(r.content.readline(), 30))
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "db.v1")


async def test_an_update_through_one_version_shows_in_the_other(apiserver: RunningApiServer) -> None:
    await _ok(apiserver, "POST", CORE, CORE_EVENT)
    await _ok(apiserver, "POST", V1, V1_EVENT)
    # an events.k8s.io/v1 event updated (PUT) through its own version: kube lets the series and
    # the metadata change there (the rest is immutable in events.k8s.io/v1)
    v1 = await _ok(apiserver, "GET", f"{V1}/db.v1")
    v1["series"] = {"count": 3, "lastObservedTime": "2026-01-01T00:10:00.000000Z"}
    v1["metadata"]["labels"] = {"seen": "3"}
    updated = await _ok(apiserver, "PUT", f"{V1}/db.v1", v1)
    assert updated["apiVersion"] == "events.k8s.io/v1" and updated["series"]["count"] == 3
    core = await _ok(apiserver, "GET", f"{CORE}/db.v1")
    assert core["series"] == v1["series"] and core["metadata"]["labels"] == {"seen": "3"}
    assert core["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    assert core["message"] == "scaled up" and core["involvedObject"] == V1_EVENT["regarding"]
    # the same event updated (PUT, then merge patch) through core/v1, read back in events.k8s.io/v1
    core["message"] = "scaled down"
    await _ok(apiserver, "PUT", f"{CORE}/db.v1", core)
    await _ok(apiserver, "PATCH", f"{CORE}/db.v1", {"metadata": {"labels": {"a": "b"}}},
              "application/merge-patch+json")
    v1 = await _ok(apiserver, "GET", f"{V1}/db.v1")
    assert v1["note"] == "scaled down" and v1["metadata"]["labels"] == {"seen": "3", "a": "b"}
    assert v1["reportingController"] == "example.com/scaler" and v1["regarding"] == V1_EVENT["regarding"]
    # a core event patched in events.k8s.io/v1 field names, read back in core/v1
    await _ok(apiserver, "PATCH", f"{V1}/web.core", {"metadata": {"annotations": {"x": "y"}}},
              "application/merge-patch+json")
    await _ok(apiserver, "PATCH", f"{CORE}/web.core", {"count": 4}, "application/merge-patch+json")
    core = await _ok(apiserver, "GET", f"{CORE}/web.core")
    assert core["metadata"]["annotations"] == {"x": "y"} and core["count"] == 4
    assert core["source"] == CORE_EVENT["source"] and core["involvedObject"] == CORE_EVENT["involvedObject"]
    assert (await _ok(apiserver, "GET", f"{V1}/web.core"))["deprecatedCount"] == 4


async def test_a_delete_through_one_version_removes_it_from_both(apiserver: RunningApiServer) -> None:
    await _ok(apiserver, "POST", CORE, CORE_EVENT)
    await _ok(apiserver, "POST", V1, V1_EVENT)
    # one name, one object: a create through the other version is a conflict
    status, out = await _req(apiserver, "POST", V1, {**V1_EVENT, "metadata": {"name": "web.core"}})
    assert status == 409, out
    deleted = await _ok(apiserver, "DELETE", f"{V1}/web.core")
    assert deleted["apiVersion"] == "events.k8s.io/v1"
    assert (await _req(apiserver, "GET", f"{CORE}/web.core"))[0] == 404
    assert (await _req(apiserver, "GET", f"{V1}/web.core"))[0] == 404
    await _ok(apiserver, "DELETE", f"{CORE}/db.v1")
    assert (await _req(apiserver, "GET", f"{V1}/db.v1"))[0] == 404
    assert (await _ok(apiserver, "GET", V1))["items"] == []
    assert (await _ok(apiserver, "GET", CORE))["items"] == []


async def test_deleting_the_namespace_deletes_each_event_once(apiserver: RunningApiServer) -> None:
    await _ok(apiserver, "POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
    for path, body in (("/api/v1/namespaces/gone/events", CORE_EVENT),
                       ("/apis/events.k8s.io/v1/namespaces/gone/events", V1_EVENT)):
        await _ok(apiserver, "POST", path, {**body, "metadata": {**body["metadata"], "namespace": "gone"}})
    async with aiohttp.ClientSession() as s, s.get(apiserver.url + "/api/v1/namespaces/gone/events", params={
            "watch": "true", "resourceVersion": "0"}) as r:
        await _ok(apiserver, "DELETE", "/api/v1/namespaces/gone")
        seen = []
        while len([e for e in seen if e["type"] == "DELETED"]) < 2:
            seen.append(json.loads(await asyncio.wait_for(r.content.readline(), 30)))
    assert sorted(e["object"]["metadata"]["name"] for e in seen if e["type"] == "DELETED") == ["db.v1", "web.core"]
    assert [e["type"] for e in seen].count("DELETED") == 2
    assert (await _ok(apiserver, "GET", "/apis/events.k8s.io/v1/events"))["items"] == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_get_events_lists_both_kinds_of_event(apiserver: RunningApiServer) -> None:
    await _ok(apiserver, "POST", CORE, CORE_EVENT)
    await _ok(apiserver, "POST", V1, V1_EVENT)
    for resource in ("events", "events.v1.events.k8s.io"):
        rc, out = await kubectl(apiserver, "get", resource, "-n", "default")
        assert rc == 0, out
        lines = [" ".join(line.split()) for line in out.splitlines()]
        assert lines[0] == "LAST SEEN TYPE REASON OBJECT MESSAGE", resource
        rows = sorted(" ".join(line.split()[1:]) for line in lines[1:])  # without LAST SEEN
        assert rows == ["Normal Pulled pod/web image pulled", "Warning Scaled statefulset/db scaled up"], out
        rc, out = await kubectl(apiserver, "get", resource, "-n", "default", "-o", "json")
        assert rc == 0, out
        items = json.loads(out)["items"]
        want = "v1" if resource == "events" else "events.k8s.io/v1"
        assert sorted((i["apiVersion"], i["metadata"]["name"]) for i in items) == [
            (want, "db.v1"), (want, "web.core")]
    rc, out = await kubectl(apiserver, "get", "events.v1.events.k8s.io", "-n", "default",
                            "--field-selector", "regarding.name=web", "-o", "name")
    assert rc == 0 and out.split() == ["event.events.k8s.io/web.core"], out
    rc, out = await kubectl(apiserver, "get", "events", "-n", "default",
                            "--field-selector", "involvedObject.name=db", "-o", "name")
    assert rc == 0 and out.split() == ["event/db.v1"], out


async def test_events_kept_apart_by_an_older_data_dir_join_the_core_ones(apiserver: RunningApiServer) -> None:
    """A data dir from before the two were one resource kept events.k8s.io Events under their own key."""
    stored = {**V1_EVENT, "metadata": {**V1_EVENT["metadata"], "uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    apiserver.store.create("events.k8s.io/events", stored)
    apiserver.store.create("events.k8s.io/events", {**stored, "metadata": {**stored["metadata"], "name": "web.core"}})
    await _ok(apiserver, "POST", CORE, CORE_EVENT)
    await apiserver.restart()
    got = await _ok(apiserver, "GET", f"{CORE}/db.v1")
    assert (got["apiVersion"], got["message"], got["metadata"]["uid"]) == ("v1", "scaled up", "u-1")
    assert (await _ok(apiserver, "GET", f"{V1}/web.core"))["note"] == "image pulled"  # the core one kept
    assert sorted(i["metadata"]["name"] for i in (await _ok(apiserver, "GET", V1))["items"]) == ["db.v1", "web.core"]
    assert apiserver.store.list("events.k8s.io/events") == []


async def test_events_expire_event_ttl_after_their_last_write(tmp_path: Any) -> None:
    """kube-apiserver's --event-ttl: an Event lasts that long after its last write, then is
    deleted; a write renews it."""
    srv = RunningApiServer(tmp_path / "apiserver", event_ttl=3.0)
    await srv.start()

    async def names() -> list[str]:
        return [e["metadata"]["name"] for e in (await _ok(srv, "GET", CORE))["items"]]

    try:
        await _ok(srv, "POST", CORE, CORE_EVENT)
        await _ok(srv, "POST", V1, V1_EVENT)
        await asyncio.sleep(1.5)
        await _ok(srv, "PATCH", f"{CORE}/web.core", {"message": "pulled again"},
                  ctype="application/merge-patch+json")
        async with asyncio.timeout(10):
            while "db.v1" in await names():  # noqa: ASYNC110 - polling the API, not an event
                await asyncio.sleep(0.1)
        assert await names() == ["web.core"]  # renewed 1.5 s after the other was written
        async with asyncio.timeout(10):
            while await names():  # noqa: ASYNC110 - polling the API
                await asyncio.sleep(0.1)
        assert (await _ok(srv, "GET", V1))["items"] == []
    finally:
        await srv.close()
