"""`isthmus ui` against a real clusterset in this process (tests.harness.clusterset: a broker, c1, c2, agents):
the HTTP and SSE endpoints, and the page in a real browser (Playwright driving Debian's chromium).

The tests share one clusterset and one UI server and run in order; the last one stops c2's
apiserver (and restarts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from isthmus.kube.client import KubeConfigError, load_config
from isthmus.ui.kinds import BROKER_ROLE, MEMBER_ROLE
from isthmus.ui.model import UNREACHABLE, apply_delta, cluster_health, parse_time
from isthmus.ui.server import UiServer
from isthmus.ui.watch import Source, discover
from tests.harness.clusterset import ClusterSet, service, service_export
from tests.harness.polling import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")
NS = "ui-test"
CONFLICT = "TCP/80 in cluster c1 (oldest) but TCP/8080 in cluster c2"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("ui"), n=2) as cs:
        for i in range(len(cs.clusters)):
            await cs.ensure_namespace(i, NS)
        yield cs


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def web_conflict(cs: ClusterSet) -> None:
    """Service web exported from c1 (port 80) and, a second later, from c2 (port 8080): c1's wins."""
    await _export(cs, 0, "web", 80)
    await asyncio.sleep(1.1)  # the oldest export wins: make c1's clearly older
    await _export(cs, 1, "web", 8080)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ui(cs: ClusterSet) -> AsyncIterator[UiServer]:
    assert cs.broker is not None
    sources = [Source("broker", BROKER_ROLE, load_config(cs.broker.kubeconfig))]
    sources += [Source(m.id, MEMBER_ROLE, load_config(m.server.kubeconfig)) for m in cs.clusters]
    server = UiServer(sources, "127.0.0.1", 0)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class Stream:
    """The page's side of /api/events: the snapshot, then every delta applied."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.view: dict[str, Any] = {}
        self.events: list[str] = []
        self.server_time: str = ""

    async def next_event(self) -> None:
        event, data = "", ""
        while True:
            line = (await self.response.content.readline()).decode()
            if not line:
                raise ConnectionError("the stream ended")
            line = line.rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
            elif line == "" and event:
                break
        payload = json.loads(data)
        self.events.append(event)
        self.server_time = payload["serverTime"]
        if event == "snapshot":
            self.view = payload["view"]
        else:
            apply_delta(self.view, payload["delta"])

    async def until(self, predicate: Any, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while not predicate(self.view):
                await self.next_event()


@contextlib.asynccontextmanager
async def stream(ui: UiServer) -> AsyncIterator[Stream]:
    async with aiohttp.ClientSession() as session, session.get(f"{ui.url}api/events") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        s = Stream(response)
        await s.next_event()
        assert s.events == ["snapshot"]
        yield s


async def _export(cs: ClusterSet, i: int, name: str, port: int) -> None:
    client = cs.clusters[i].client
    await client.create(service(name, NS, ports=[{"name": "http", "port": port}]))
    await client.create(service_export(name, NS))


async def test_the_snapshot_shows_every_cluster_healthy(ui: UiServer) -> None:
    async with stream(ui) as s:
        await s.until(lambda v: all(c["synced"] and c.get("heartbeat", True) for c in v["clusters"].values()))
        now = parse_time(s.server_time)
        assert now is not None
        assert sorted(s.view["clusters"]) == ["broker", "c1", "c2"]
        for c in s.view["clusters"].values():
            assert c["error"] is None and c["problems"] == [], c
            assert cluster_health(c, now) == "healthy"
        assert s.view["clusters"]["c1"]["cidrs"]
    async with aiohttp.ClientSession() as session, session.get(f"{ui.url}api/snapshot") as r:
        assert sorted((await r.json())["view"]["clusters"]) == ["broker", "c1", "c2"]


async def test_an_export_reaches_the_stream_and_a_conflict_shows_its_message(
    cs: ClusterSet, ui: UiServer, web_conflict: None
) -> None:
    async with stream(ui) as s:
        await _export(cs, 0, "fresh", 82)
        await s.until(lambda v: "c1" in v["services"].get(f"{NS}/fresh", {}).get("exporters", {}))
        # Each exporter's agent marks its own export in conflict, c1's (the older) maybe first: wait for c2's.
        await s.until(lambda v: "c2" in {c["cluster"] for c in v["services"].get(f"{NS}/web", {}).get("conflicts", [])},
                      timeout=20)
        conflicts = s.view["services"][f"{NS}/web"]["conflicts"]
        assert all(CONFLICT in c["message"] for c in conflicts)
        await s.until(lambda v: set(v["services"][f"{NS}/web"]["importers"]) == {"c1", "c2"}, timeout=20)
        assert s.events[0] == "snapshot" and set(s.events[1:]) == {"delta"}


async def test_an_object_comes_with_its_yaml_conditions_and_events(
    cs: ClusterSet, ui: UiServer, web_conflict: None
) -> None:
    await cs.clusters[1].client.create(Event(
        metadata=ObjectMeta(name="web.ui-test-1", namespace=NS), type="Warning", reason="PortConflict",
        message="seen by the test", count=2,
        involvedObject=ObjectReference(kind="ServiceExport", name="web", namespace=NS,
                                       apiVersion="multicluster.x-k8s.io/v1beta1")))
    url = f"{ui.url}api/object?cluster=c2&kind=ServiceExport&namespace={NS}&name=web"
    await eventually(lambda: _has_conflict(ui), timeout=20, what="c2's export in conflict")
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as r:
            assert r.status == 200
            body = await r.json()
        assert "kind: ServiceExport" in body["yaml"] and "managedFields" not in body["yaml"]
        assert any(c["type"] == "Conflict" and CONFLICT in c["message"] for c in body["conditions"])
        assert body["eventsError"] is None
        assert {"type": "Warning", "reason": "PortConflict", "message": "seen by the test"}.items() <= \
            next(e for e in body["events"] if e["message"] == "seen by the test").items()
        async with session.get(f"{ui.url}api/object?cluster=c2&kind=ServiceExport&namespace={NS}&name=nope") as r:
            assert r.status == 404
        async with session.get(f"{ui.url}api/object?cluster=c2&kind=Secret&namespace={NS}&name=x") as r:
            assert r.status == 400


async def test_the_server_is_read_only_and_answers_only_loopback_names(ui: UiServer) -> None:
    async with aiohttp.ClientSession() as session:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            async with session.request(method, f"{ui.url}api/object?cluster=c1&kind=ServiceExport") as r:
                assert r.status == 405, method
        async with session.get(f"{ui.url}api/snapshot", headers={"Host": "evil.example:80"}) as r:
            assert r.status == 421
        async with session.get(f"{ui.url}api/snapshot", headers={"Host": f"localhost:{ui.port}"}) as r:
            assert r.status == 200
        async with session.get(ui.url) as r:
            assert r.status == 200 and "static/app.js" in await r.text()
            assert "default-src 'self'" in r.headers["Content-Security-Policy"]
        async with session.get(f"{ui.url}static/app.js") as r:
            assert r.status == 200


def _kubeconfig(path: Any, servers: dict[str, Any]) -> str:
    """One kubeconfig file with a context per embedded apiserver."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for name, srv in servers.items():
        one = srv.server.kubeconfig(name)
        for key in ("clusters", "users", "contexts"):
            merged[key] += one[key]
    merged["current-context"] = next(iter(servers))
    path.write_text(yaml.safe_dump(merged))
    return str(path)


async def test_the_broker_is_found_by_its_broker_object_else_by_a_members_broker_info(
    cs: ClusterSet, tmp_path: Any
) -> None:
    assert cs.broker is not None
    members = {m.id: m.server for m in cs.clusters}
    everything = _kubeconfig(tmp_path / "all", {"c1": members["c1"], "broker": cs.broker, "c2": members["c2"]})
    found = await discover(everything, None)
    assert [(s.name, s.role) for s in found] == [("broker", BROKER_ROLE), ("c1", MEMBER_ROLE), ("c2", MEMBER_ROLE)]
    assert [s.name for s in await discover(everything, ["c2"])] == ["broker", "c2"]
    only_members = _kubeconfig(tmp_path / "members", members)
    found = await discover(only_members, None)
    assert [(s.name, s.role) for s in found] == [("broker", BROKER_ROLE), ("c1", MEMBER_ROLE), ("c2", MEMBER_ROLE)]
    assert found[0].server == cs.broker.url  # from the broker-info join stored in the members
    with pytest.raises(KubeConfigError, match="nope"):
        await discover(everything, ["nope"])


# --- the page in a real browser -----------------------------------------------------------------


def _chromium() -> str:
    path = shutil.which("chromium")
    assert path, "Debian's chromium is missing: `make install` (or apt-get install chromium) installs it"
    return path


async def _has_conflict(ui: UiServer) -> bool:
    return bool(ui.view["services"].get(f"{NS}/web", {}).get("conflicts"))


async def _add_objects_of_every_view(cs: ClusterSet) -> None:
    """In c1: a part (Deployment) whose pod restarted twice, a public pool, a claim waiting for its class."""
    from lightkube.codecs import from_dict
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Pod

    from isthmus.api.egress import SourceIPClaim
    from isthmus.api.lb import LoadBalancerPool
    from isthmus.kube.helpers import install_crds
    from isthmus.kube.resources import resource_for

    client = cs.clusters[0].client
    await install_crds(client)
    await cs.ensure_namespace(0, "isthmus-system")
    labels = {"app.kubernetes.io/name": "isthmus-ui-probe"}
    container = {"name": "main", "image": "isthmus"}
    await client.create(from_dict({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "isthmus-ui-probe", "namespace": "isthmus-system"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}))
    await client.patch(Deployment.Status, "isthmus-ui-probe", {"status": {"replicas": 1, "readyReplicas": 1}},
                       namespace="isthmus-system", patch_type=PatchType.MERGE)
    await client.create(from_dict({"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "isthmus-ui-probe-5d8f9c7b6-x2x4q",
                                                "namespace": "isthmus-system", "labels": labels},
                                   "spec": {"containers": [container]}}))
    await client.patch(Pod.Status, "isthmus-ui-probe-5d8f9c7b6-x2x4q", {"status": {"containerStatuses": [
        {"name": "main", "image": "isthmus", "imageID": "", "ready": True, "restartCount": 2, "state": {}}]}},
        namespace="isthmus-system", patch_type=PatchType.MERGE)
    pool_res: Any = resource_for(LoadBalancerPool)
    await client.create(pool_res.from_dict({"metadata": {"name": "edge"}, "spec": {"role": "slave_public"}}))
    claim_res: Any = resource_for(SourceIPClaim)
    await client.create(claim_res.from_dict({"metadata": {"name": "db", "namespace": NS},
                                             "spec": {"sourceIPClassName": "nosuch"}}))
    await client.patch(claim_res.Status, "db", {"status": {"phase": "Pending", "conditions": [{
        "type": "Ready", "status": "False", "reason": "ClassNotFound", "message": "SourceIPClass 'nosuch' not found",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, namespace=NS, patch_type=PatchType.MERGE)


_LABEL_OVERLAPS = """() => {
  const box = (el) => el.getBoundingClientRect();
  const labels = [...document.querySelectorAll(".graph .edge-label")].map((el) => [el.textContent, box(el)]);
  const nodes = [...document.querySelectorAll(".graph .node")].map((el) => [el.dataset.node, box(el.querySelector("circle"))]);
  const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const out = [];
  labels.forEach(([t, a], i) => {
    labels.slice(i + 1).forEach(([u, b]) => { if (meet(a, b)) out.push(`${t} / ${u}`); });
    nodes.forEach(([n, b]) => { if (meet(a, b)) out.push(`${t} / node ${n}`); });
  });
  // No label is drawn across an arrow, its own or another's: no point of a curve falls inside its box.
  const groups = [...document.querySelectorAll(".graph .edge-group")];
  groups.forEach((g) => {
    const a = box(g.querySelector(".edge-label"));
    groups.forEach((h) => {
      const path = h.querySelector("path.edge"), m = path.getScreenCTM();
      for (let s = 0, n = path.getTotalLength(); s <= n; s += 2) {
        const p = path.getPointAtLength(s), x = m.a * p.x + m.c * p.y + m.e, y = m.b * p.x + m.d * p.y + m.f;
        if (a.left < x && x < a.right && a.top < y && y < a.bottom) {
          out.push(`${g.dataset.edge} / ${h === g ? "its arrow" : `arrow ${h.dataset.edge}`}`);
          break;
        }
      }
    });
  });
  return [labels.length, out];
}"""


async def test_the_page_shows_conflict_badges_restarts_roles_and_labels_apart(
    cs: ClusterSet, ui: UiServer, web_conflict: None
) -> None:
    from playwright.async_api import async_playwright, expect

    await _add_objects_of_every_view(cs)
    await eventually(lambda: _has_conflict(ui), timeout=20, what="web in conflict")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(ui.url)
            # The card's parts say how often they restarted.
            part = page.locator('[data-cluster="c1"] [data-part="isthmus-ui-probe"]')
            await expect(part).to_contain_text("ui-probe 1/1 ↻2", timeout=15000)
            # The arrows' labels: c1→c2 and c2→c1 (web is exported and imported by both) print apart,
            # and off the broker in the middle.
            await expect(page.locator('[data-edge="c2>c1"] .edge-label')).to_have_count(1, timeout=20000)
            await expect(page.locator('[data-edge="c1>c2"] .edge-label')).to_contain_text("in conflict")
            count, overlaps = await page.evaluate(_LABEL_OVERLAPS)
            assert count >= 2 and overlaps == [], overlaps

            await page.click('#tabs button[data-tab="services"]')
            row = page.locator(f'[data-service="{NS}/web"]')
            for c in ("c1", "c2"):  # in conflict: red, whatever Ready says
                await expect(row.locator(f'[data-exporter="{c}"] .badge')).to_have_text("Conflict (PortConflict)",
                                                                                     timeout=20000)
                await expect(row.locator(f'[data-exporter="{c}"] .badge')).to_have_class("badge bad")
            for c in ("c1", "c2"):  # each importer's ServiceImport Ready condition (mcs-api v1beta1)
                await expect(row.locator(f'[data-importer="{c}"] .badge')).to_have_text("Ready True", timeout=20000)
            await row.locator("td b").click()  # the row, not a link: the export whose conflict explains it
            await expect(page.locator("#details-title")).to_contain_text("ServiceExport ui-test/web")
            await expect(page.locator("#details-body")).to_contain_text(CONFLICT)
            await row.locator(".link", has_text="c1").last.click()  # c1's import: its exports' conditions
            await expect(page.locator("#details-title")).to_contain_text("ServiceImport ui-test/web — c1")
            await expect(page.locator("#details-body")).to_contain_text("Conditions of its exports")
            await expect(page.locator("#details-body table.related")).to_contain_text(CONFLICT)

            await page.click('#tabs button[data-tab="pools"]')
            role = page.locator('[data-pool="c1/edge"] td.role')
            await expect(role).to_have_text("public", timeout=10000)
            await expect(role).to_have_attribute("title", "dklb role: slave_public")

            await page.click('#tabs button[data-tab="egress"]')
            state = page.locator(f'[data-egress="c1/SourceIPClaim/{NS}/db"] td.state .badge')
            await expect(state).to_have_text("Pending", timeout=10000)
            await expect(state).to_have_class("badge warn")
            await expect(state).to_have_attribute("title", "SourceIPClass 'nosuch' not found")
            assert errors == []
        finally:
            await browser.close()


async def test_the_page_in_a_browser_shows_exports_conflicts_and_a_dead_cluster(
    cs: ClusterSet, ui: UiServer, web_conflict: None
) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(ui.url)
            await expect(page.locator("#live")).to_have_text("live")
            for name in ("broker", "c1", "c2"):
                await expect(page.locator(f'[data-cluster="{name}"] [data-health]')).to_have_text("healthy",
                                                                                                 timeout=15000)
            await expect(page.locator('[data-node="c1"]')).to_be_visible()  # the graph

            await page.click('#tabs button[data-tab="services"]')
            await _export(cs, 0, "late", 81)
            row = page.locator(f'[data-service="{NS}/late"]')
            await expect(row).to_be_visible(timeout=1000)  # live: within a second of the write
            conflicts = page.locator(f'[data-service="{NS}/web"] .conflicts')
            await expect(conflicts).to_contain_text(CONFLICT, timeout=20000)

            await page.fill("#search", "late")
            await expect(page.locator(f'[data-service="{NS}/web"]')).to_have_count(0)
            await expect(row).to_be_visible()
            await page.fill("#search", "")
            await page.select_option("#filter-namespace", NS)
            await expect(page.locator("[data-service]")).to_have_count(len({k for k in ui.view["services"]
                                                                             if k.startswith(f"{NS}/")}))

            await page.locator(f'[data-service="{NS}/web"] .link').first.click()
            await expect(page.locator("#details-title")).to_contain_text("web")
            await expect(page.locator("#details pre.yaml")).to_contain_text("kind:")

            await page.click('#tabs button[data-tab="overview"]')
            await cs.clusters[1].server.stop()  # c2's API dies
            try:
                card = page.locator('[data-cluster="c2"]')
                await expect(card.locator("[data-health]")).to_have_text(UNREACHABLE, timeout=15000)
                await expect(card).to_contain_text("cannot reach")
                await expect(page.locator('[data-cluster="c1"] [data-health]')).to_have_text("healthy")
            finally:
                await cs.clusters[1].server.restart()
            await expect(card.locator("[data-health]")).to_have_text("healthy", timeout=45000)
            assert errors == []
        finally:
            await browser.close()
