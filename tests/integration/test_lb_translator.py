"""The translator and the pool manager together against a real apiserver, with real HAProxy: the
seed's test phases, shared pools, port conflicts, invalid configs, creation strategies."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, TypeVar

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.networking_v1 import Ingress, IngressClass
from lightkube.types import PatchType

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, LB_NAMESPACE, POOL_CREATED_ANNOTATION
from isthmus.kube.helpers import install_crds
from isthmus.lb.controller import Translator
from tests.harness.lb import NS, POOL, Env, fetch
from tests.harness.polling import eventually_passes

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

T = TypeVar("T")


async def test_phase_1_and_2_tcp_services_internal_and_public(env: Env) -> None:
    a, b = await env.backend("a"), await env.backend("b")
    await env.service("internal", [(18101, a.port)], "role: '*'\n")
    await env.service("public", [(80, b.port), (8080, b.port + 0)],
                      "frontends:\n- port: 18102\n  servicePort: 80\n- port: 18103\n  servicePort: 8080\n")
    internal = await env.lb_address(Service, "internal")
    assert [e["ip"] for e in internal] == [env.private]  # internal: the private address only
    assert internal[0]["ports"] == [{"port": 18101, "protocol": "TCP"}]
    status, body = await fetch(env.private, 18101)
    assert status == 200 and body["backend"] == "a"
    public = await env.lb_address(Service, "public")
    assert [e["ip"] for e in public] == [env.private, env.public]  # private, then public
    assert [p["port"] for p in public[0]["ports"]] == [18102, 18103]
    status, body = await fetch(env.public, 18102)
    assert status == 200 and body["backend"] == "b"
    pool = await env.pool("kube.one--default--public")
    assert pool is None  # dots are not allowed in pool names: the seed's rule is made valid
    pool = await env.pool("kube-one--default--public")
    assert pool is not None and pool.spec.role == "slave_public"
    assert sorted(f.name for f in pool.spec.haproxy.frontends) == ["kube.one:default:public:80",
                                                                   "kube.one:default:public:8080"]
    svc = (await env.client.get(Service, "public", namespace=NS)).to_dict()
    assert svc["metadata"]["annotations"][POOL_CREATED_ANNOTATION] == "kube-one--default--public"
    assert any(r == "Exposed" for _, r, _ in await env.events("public"))


async def test_phase_3_and_4_ingresses_route_by_host_and_path(env: Env) -> None:
    web1, web2 = await env.backend("web1"), await env.backend("web2")
    await env.service("web1", [(80, web1.port)], type_="NodePort")
    await env.service("web2", [(80, web2.port)], type_="NodePort")
    await env.service("plain", [(80, web2.port + 1 if web2.port < 32700 else 31001)], type_="ClusterIP")
    await env.client.create(IngressClass.from_dict({"metadata": {"name": "edgelb"},
                                                    "spec": {"controller": "isthmus.io/edgelb"}}))

    def backend(svc: str) -> dict[str, Any]:
        return {"service": {"name": svc, "port": {"number": 80}}}

    await env.client.create(Ingress.from_dict({
        "metadata": {"name": "site", "namespace": NS,
                     "annotations": {DKLB_CONFIG_ANNOTATION: "role: '*'\nfrontends:\n  http:\n    port: 18110\n"}},
        "spec": {"ingressClassName": "edgelb", "rules": [
            {"host": "foo.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend("web1")},
                {"path": "/bar", "pathType": "Prefix", "backend": backend("web2")},
                {"path": "/exact", "pathType": "Exact", "backend": backend("web2")},
            ]}},
            {"host": "*.wild.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web2")}]}},
            {"http": {"paths": [{"path": "/plain", "pathType": "Prefix", "backend": backend("plain")},
                                {"path": "/gone", "pathType": "Prefix", "backend": backend("nosuch")}]}},
        ]},
    }))  # fmt: skip
    await env.client.create(Ingress.from_dict({  # not ours: nothing happens
        "metadata": {"name": "other", "namespace": NS, "annotations": {"kubernetes.io/ingress.class": "nginx"}},
        "spec": {"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web1")}]}}]},
    }))  # fmt: skip
    addr = (await env.lb_address(Ingress, "site"))[0]["ip"]
    assert addr == env.private
    cases = [("foo.com", "/", 200, "web1"), ("foo.com", "/bar", 200, "web2"), ("foo.com", "/bar/x", 200, "web2"),
             ("foo.com", "/barx", 200, "web1"), ("FOO.com:18110", "/exact", 200, "web2"),
             ("foo.com", "/exact/x", 200, "web1"), ("a.wild.com", "/z", 200, "web2"),
             ("a.b.wild.com", "/z", 404, None), ("other.com", "/", 404, None),
             ("other.com", "/plain", 503, None), ("other.com", "/gone", 503, None)]  # fmt: skip
    for host, path, code, who in cases:
        status, body = await fetch(addr, 18110, path, host)
        assert status == code, (host, path, body)
        if who is not None:
            assert body["backend"] == who, (host, path)
            assert body["headers"]["X-Forwarded-For"] == "127.0.0.1"
            assert body["headers"]["X-Forwarded-Proto"] == "http"
            assert body["headers"]["X-Forwarded-Port"] == "18110"
    warnings = [(r, m) for t, r, m in await env.events("site") if t == "Warning"]
    assert any(r == "InvalidBackendService" and "Service default/plain is of type ClusterIP" in m for r, m in warnings)
    assert any(r == "InvalidBackendService" and "Service default/nosuch does not exist" in m for r, m in warnings)
    other = (await env.client.get(Ingress, "other", namespace=NS)).to_dict()
    assert not ((other.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    # Edit: a new path serves, the old rule goes.
    ing = await env.client.get(Ingress, "site", namespace=NS)
    body = ing.to_dict()
    body["spec"]["rules"][0]["http"]["paths"].append({"path": "/new", "pathType": "Exact", "backend": backend("web2")})
    await env.client.replace(Ingress.from_dict(body))

    async def new_rule() -> None:
        status, got = await fetch(addr, 18110, "/new", "foo.com")
        assert status == 200 and got["backend"] == "web2"

    await eventually_passes(new_rule)


async def test_a_shared_pool_keeps_each_owner_to_its_parts_and_reports_conflicts(env: Env) -> None:
    a = await env.backend("a")
    await env.service("one", [(18120, a.port)], "name: shared\n")
    await env.service("two", [(18121, a.port)], "name: shared\n")
    await env.lb_address(Service, "one")
    await env.lb_address(Service, "two")
    pool = await env.pool("shared")
    assert pool is not None
    assert [f.name for f in pool.spec.haproxy.frontends] == ["kube.one:default:one:18120", "kube.one:default:two:18121"]
    # A third asks for a port "one" binds: refused, reported on it, "one" untouched.
    await env.service("three", [(18120, a.port)], "name: shared\n")

    async def conflict() -> None:
        evs = await env.events("three")
        assert any(r == "PortConflict" and "Service default/one" in m for _, r, m in evs), evs
        svc = (await env.client.get(Service, "three", namespace=NS)).to_dict()
        conds = {c["type"]: c for c in svc["status"].get("conditions") or []}
        assert conds["isthmus.io/LoadBalancerPortsAllocated"]["status"] == "False"

    await eventually_passes(conflict)
    pool = await env.pool("shared")
    assert pool is not None and "kube.one:default:three:18120" not in [f.name for f in pool.spec.haproxy.frontends]
    status, body = await fetch(env.public, 18120)
    assert status == 200 and body["backend"] == "a"
    # Owners leave one by one; the last one out deletes the pool.
    for name in ("one", "three"):
        await env.client.delete(Service, name, namespace=NS)

    async def only_two() -> None:
        p = await env.pool("shared")
        assert p is not None and [f.name for f in p.spec.haproxy.frontends] == ["kube.one:default:two:18121"]
        assert [b.name for b in p.spec.haproxy.backends] == ["kube.one:default:two:18121"]

    await eventually_passes(only_two)
    await env.client.delete(Service, "two", namespace=NS)

    async def deleted() -> None:
        assert await env.pool("shared") is None

    await eventually_passes(deleted)


async def test_invalid_config_is_reported_and_changes_nothing(env: Env) -> None:
    await env.service("bad", [(18130, 31999)], "size: 0\nbogus: 1\n")

    async def reported() -> None:
        evs = await env.events("bad")
        assert any(r == "InvalidConfig" and 'unknown field "bogus"' in m and "size" in m for _, r, m in evs), evs

    await eventually_passes(reported)
    assert await env.pool("kube-one--default--bad") is None


async def test_creation_strategies_after_an_out_of_band_delete(env: Env) -> None:
    a = await env.backend("a")
    await env.service("again", [(18140, a.port)], "strategies:\n  creation: IfNotPresent\n")
    await env.service("once", [(18141, a.port)], "strategies:\n  creation: Once\n")
    await env.service("never", [(18142, a.port)], "strategies:\n  creation: Never\n")
    await env.lb_address(Service, "again")
    await env.lb_address(Service, "once")
    assert await env.pool("kube-one--default--never") is None

    async def never_reported() -> None:
        assert any(r == "PoolMissing" and "strategy Never" in m for _, r, m in await env.events("never"))

    await eventually_passes(never_reported)
    for name in ("again", "once"):
        await env.client.delete(POOL, f"kube-one--default--{name}")

    async def recreated() -> None:
        assert await env.pool("kube-one--default--again") is not None
        evs = await env.events("once")
        assert any(r == "PoolMissing" and "not re-creating" in m for _, r, m in evs), evs

    await eventually_passes(recreated)
    await asyncio.sleep(1.0)
    assert await env.pool("kube-one--default--once") is None


async def test_only_one_translator_acts(apiserver: Any, tmp_path: Path) -> None:
    client = apiserver.client()
    await install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name=LB_NAMESPACE)))
    t1 = Translator(client, "c1", identity="one", lease_duration=3, renew_deadline=2, retry_period=0.5)
    t2 = Translator(client, "c1", identity="two", lease_duration=3, renew_deadline=2, retry_period=0.5)
    tasks = [asyncio.create_task(t1.run()), asyncio.create_task(t2.run())]
    try:
        async def one_leads() -> None:
            assert [t1.ready, t2.ready].count(True) == 1

        await eventually_passes(one_leads)
        await asyncio.sleep(1.5)
        assert [t1.ready, t2.ready].count(True) == 1
    finally:
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


async def test_a_service_that_stops_being_a_load_balancer_leaves_its_pool_and_a_paused_one_is_left_alone(
        env: Env) -> None:
    a = await env.backend("a")
    await env.service("flip", [(18150, a.port)])
    await env.lb_address(Service, "flip")
    # Paused: a config change is not applied while the annotation says so.
    await env.client.patch(Service, "flip", {"metadata": {"annotations": {
        "isthmus.io/lb-paused": "true", DKLB_CONFIG_ANNOTATION: "frontends: [{port: 18151, servicePort: 18150}]"}}},
        namespace=NS, patch_type=PatchType.MERGE)
    await asyncio.sleep(1.0)
    pool = await env.pool("kube-one--default--flip")
    assert pool is not None and [f.bind_port for f in pool.spec.haproxy.frontends] == [18150]
    # Unpaused: applied.
    await env.client.patch(Service, "flip", {"metadata": {"annotations": {"isthmus.io/lb-paused": None}}},
                           namespace=NS, patch_type=PatchType.MERGE)

    async def moved() -> None:
        p = await env.pool("kube-one--default--flip")
        assert p is not None and [f.bind_port for f in p.spec.haproxy.frontends] == [18151]

    await eventually_passes(moved)
    # No longer of type LoadBalancer: its parts go (the pool with them) and its status is cleared.
    await env.client.patch(Service, "flip", {"spec": {"type": "NodePort"}}, namespace=NS, patch_type=PatchType.MERGE)

    async def left() -> None:
        assert await env.pool("kube-one--default--flip") is None
        svc = (await env.client.get(Service, "flip", namespace=NS)).to_dict()
        assert not ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")

    await eventually_passes(left)


async def test_a_pool_stored_under_a_name_ending_in_a_newline_is_deleted_with_its_owner(
        env: Env, apiserver: Any) -> None:
    """Issue 40, item 3: `name: "abcd\\n"` passed validation, the pool was stored under it, and nothing
    could delete it afterwards. The config is refused now; a pool stored so (by an older version:
    put in the apiserver's store directly, as the apiserver refuses the name today) goes with its
    owner."""
    a = await env.backend("a")
    legacy = "abcd\n"
    part = "kube.one:default:legacy:18170"
    await env.client.create(POOL.from_dict({"apiVersion": "isthmus.io/v1alpha1", "kind": "LoadBalancerPool",
                                            "metadata": {"name": "template"}, "spec": {"haproxy": {
        "frontends": [{"name": part, "bindPort": 18170, "linkBackend": {"defaultBackend": part}}],
        "backends": [{"name": part, "servers": [{"address": "127.0.0.1", "port": a.port}]}]}}}))  # fmt: skip
    stored = (await env.client.get(POOL, "template")).to_dict()
    stored["metadata"] = {**stored["metadata"], "name": legacy, "uid": "legacy-uid-2",
                          "annotations": {"isthmus.io/lb-pool-creator": "Service/default/legacy"}}
    stored["metadata"].pop("resourceVersion")
    apiserver.store.create("isthmus.io/loadbalancerpools", stored)
    await env.client.delete(POOL, "template")
    await env.service("legacy", [(18170, a.port)], 'name: "abcd\\n"\n')

    async def refused() -> None:
        evs = await env.events("legacy")
        assert any(r == "InvalidConfig" and "is not a valid pool name" in m for _, r, m in evs), evs

    await eventually_passes(refused)
    await env.client.delete(Service, "legacy", namespace=NS)

    async def deleted() -> None:
        assert legacy not in [p.metadata.name async for p in env.client.list(POOL)]

    await eventually_passes(deleted)


async def test_a_service_of_another_class_is_never_touched(env: Env) -> None:
    """Issue 43, defect 1: a Service of class io.cilium/l2-announcer keeps the status its controller
    wrote (the translator cleared it on every change before) and gets no pool, next to ours."""
    a = await env.backend("a")
    await env.service("cilium", [(80, a.port)], load_balancer_class="io.cilium/l2-announcer")
    theirs = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10", "ipMode": "VIP"}]}}
    await env.client.patch(Service.Status, "cilium", {"status": theirs}, namespace=NS, patch_type=PatchType.MERGE,
                           field_manager="cilium-operator")
    await env.service("ours", [(80, a.port)], "role: '*'\nfrontends:\n- port: 18140\n  servicePort: 80\n",
                      load_balancer_class="isthmus.io/edgelb")
    await env.lb_address(Service, "ours")
    # A change to theirs reaches the translator (it watches every Service); then one of ours, whose
    # address shows that the queue moved past it.
    await env.client.patch(Service, "cilium", {"metadata": {"labels": {"touched": "1"}}}, namespace=NS,
                           patch_type=PatchType.MERGE)
    await env.service("ours-too", [(80, a.port)], "role: '*'\nfrontends:\n- port: 18141\n  servicePort: 80\n",
                      load_balancer_class="isthmus.io/edgelb")
    await env.lb_address(Service, "ours-too")
    svc = (await env.client.get(Service, "cilium", namespace=NS)).to_dict()
    assert svc["status"]["loadBalancer"] == theirs["loadBalancer"]
    assert "conditions" not in svc["status"]
    assert await env.pool("kube-one--default--cilium") is None
    assert DKLB_CONFIG_ANNOTATION not in (svc["metadata"].get("annotations") or {})
    assert not [e for e in await env.events("cilium")]
