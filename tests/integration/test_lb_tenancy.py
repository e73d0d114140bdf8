"""Pools across namespaces (issue 40, item 2): one namespace must never freeze another's pool.

The translator and a real pool manager running real HAProxy against a real apiserver (the harness
in tests/harness/lb.py): a part the pool manager would refuse is never written (conflicts are
settled on the newcomer), and a pool is joined from another namespace only where its creator's
config or an admin allows it — automatic `<cluster>--<ns>--<name>` pools never."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Namespace, Service
from lightkube.resources.networking_v1 import Ingress, IngressClass
from lightkube.types import PatchType

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION
from tests.harness.lb import POOL, Env, fetch
from tests.harness.polling import eventually_passes

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

VICTIM_POOL = "kube-one--default--site"
ADMITTED = "isthmus.io/LoadBalancerPoolAdmitted"
PORTS = "isthmus.io/LoadBalancerPortsAllocated"


def _ingress(paths: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "site", "namespace": "default",
                     "annotations": {DKLB_CONFIG_ANNOTATION: "frontends:\n  http:\n    port: 18160\n"}},
        "spec": {"ingressClassName": "edgelb", "rules": [{"host": "foo.com", "http": {"paths": [
            {"path": p, "pathType": "Prefix", "backend": {"service": {"name": s, "port": {"number": 80}}}}
            for p, s in paths]}}]},
    }  # fmt: skip


async def _service(env: Env, ns: str, name: str, ports: list[tuple[int, int]], config: str) -> None:
    await env.client.create(Service.from_dict({
        "metadata": {"name": name, "namespace": ns, "annotations": {DKLB_CONFIG_ANNOTATION: config}},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"name": f"p{p}", "port": p, "targetPort": p, "nodePort": np} for p, np in ports]},
    }))  # fmt: skip


async def _conditions(env: Env, ns: str, name: str) -> dict[str, dict[str, Any]]:
    svc = (await env.client.get(Service, name, namespace=ns)).to_dict()
    return {c["type"]: c for c in (svc.get("status") or {}).get("conditions") or []}


async def _serves(address: str, port: int, backend: str, path: str = "/", host: str = "x") -> None:
    try:
        status, got = await fetch(address, port, path, host)
    except aiohttp.ClientError as e:
        raise AssertionError(f"{address}:{port}: {e}") from None
    assert status == 200 and got["backend"] == backend, (status, got)


async def _events(env: Env, ns: str, name: str) -> list[tuple[str, str]]:
    out = []
    async for e in env.client.list(Event, namespace=ns):
        if e.involvedObject.name == name:
            out.append((e.reason or "", e.message or ""))
    return out


async def test_another_namespace_cannot_freeze_an_automatic_pool(env: Env) -> None:
    """The issue's scenario: a Service in namespace `bad` names `<cluster>--default--site` (another
    namespace's automatic pool) with the port that pool binds and a port another pool binds. The
    second port was placed in the victim's pool, the pool manager refused it (that port is another
    pool's on the host), kept the previous config, and the victim's edits went unapplied."""
    web1, web2 = await env.backend("web1"), await env.backend("web2")
    await env.service("web1", [(80, web1.port)], type_="NodePort")
    await env.service("web2", [(80, web2.port)], type_="NodePort")
    await env.service("other", [(18161, web1.port + 0)])  # another pool, binding 18161
    await env.client.create(IngressClass.from_dict({"metadata": {"name": "edgelb"},
                                                    "spec": {"controller": "isthmus.io/edgelb"}}))
    await env.client.create(Ingress.from_dict(_ingress([("/", "web1")])))
    addr = (await env.lb_address(Ingress, "site"))[0]["ip"]
    await env.lb_address(Service, "other")
    await env.client.create(Namespace(metadata=ObjectMeta(name="bad")))
    await _service(env, "bad", "grab", [(80, web2.port), (18161, web2.port)],
                   f"name: {VICTIM_POOL}\nfrontends:\n- port: 18160\n  servicePort: 80\n")

    async def refused() -> None:
        conds = await _conditions(env, "bad", "grab")
        assert conds.get(ADMITTED, {}).get("status") == "False", conds
        assert "only its own Service or Ingress may use" in conds[ADMITTED]["message"]
        assert any(r == "PoolNotShared" for r, _ in await _events(env, "bad", "grab"))

    await eventually_passes(refused)
    pool = await env.pool(VICTIM_POOL)
    assert pool is not None
    names = [p.name for p in [*pool.spec.haproxy.frontends, *pool.spec.haproxy.backends]]
    assert not any(":bad:" in n for n in names), names  # nothing of the newcomer was written
    # The victim edits its Ingress while the attacker exists: the edit is applied and served.
    ing = (await env.client.get(Ingress, "site", namespace="default")).to_dict()
    ing["spec"] = _ingress([("/", "web1"), ("/two", "web2")])["spec"]
    await env.client.replace(Ingress.from_dict(ing))

    async def edit_applied() -> None:
        await _serves(addr, 18160, "web2", "/two", "foo.com")
        p = await env.pool(VICTIM_POOL)
        assert p is not None and p.status.ready == "1/1", p.status.to_dict() if p else None
        assert not any(i.message for i in p.status.instances), p.status.to_dict()

    await eventually_passes(edit_applied)
    # An object of the pool's own namespace may still join it by name.
    await _service(env, "default", "sidecar", [(18168, web2.port)], f"name: {VICTIM_POOL}\n")

    async def joined() -> None:
        await _serves(addr, 18168, "web2")

    await eventually_passes(joined)


async def test_a_named_pool_is_joined_from_another_namespace_only_when_shared(env: Env) -> None:
    a = await env.backend("a")
    await env.service("maker", [(18162, a.port)], "name: shop\n")
    await env.lb_address(Service, "maker")
    await env.client.create(Namespace(metadata=ObjectMeta(name="team")))
    await _service(env, "team", "joiner", [(18163, a.port)], "name: shop\n")

    async def refused() -> None:
        conds = await _conditions(env, "team", "joiner")
        assert conds.get(ADMITTED, {}).get("status") == "False", conds
        assert "belongs to namespace default" in conds[ADMITTED]["message"]
        assert "sharedWith" in conds[ADMITTED]["message"]

    await eventually_passes(refused)
    pool = await env.pool("shop")
    assert pool is not None and [f.name for f in pool.spec.haproxy.frontends] == ["kube.one:default:maker:18162"]
    # The creator shares it with `team`: the joiner is admitted and served.
    await env.client.patch(Service, "maker", {"metadata": {"annotations": {
        DKLB_CONFIG_ANNOTATION: "name: shop\nsharedWith: [team]\n"}}}, namespace="default",
        patch_type=PatchType.MERGE)  # fmt: skip

    async def admitted() -> None:
        conds = await _conditions(env, "team", "joiner")
        assert conds.get(ADMITTED, {}).get("status") == "True", conds
        await _serves(env.public, 18163, "a")

    await eventually_passes(admitted)
    # An admin can allow a namespace too, on the pool itself.
    await env.client.create(Namespace(metadata=ObjectMeta(name="ops")))
    await env.client.patch(POOL, "shop", {"metadata": {"annotations": {
        "isthmus.io/lb-pool-allowed-namespaces": "ops"}}}, patch_type=PatchType.MERGE)
    await _service(env, "ops", "tool", [(18164, a.port)], "name: shop\n")

    async def ops_served() -> None:
        await _serves(env.public, 18164, "a")

    await eventually_passes(ops_served)


async def test_a_port_another_pool_binds_is_refused_to_the_newcomer(env: Env) -> None:
    a, b = await env.backend("a"), await env.backend("b")
    await env.service("first", [(18165, a.port)])
    await env.lb_address(Service, "first")
    await env.service("second", [(18165, b.port), (18166, b.port)])

    async def conflict() -> None:
        conds = await _conditions(env, "default", "second")
        assert conds.get(PORTS, {}).get("status") == "False", conds
        assert "Service default/first in pool kube-one--default--first" in conds[PORTS]["message"]
        evs = await _events(env, "default", "second")
        assert any(r == "PortConflict" and "pool kube-one--default--first" in m for r, m in evs), evs

    await eventually_passes(conflict)

    async def both_served() -> None:  # the holder keeps its port, the newcomer's other port serves
        await _serves(env.public, 18165, "a")
        await _serves(env.public, 18166, "b")

    await eventually_passes(both_served)

    async def second_ready() -> None:  # the newcomer's pool serves what it was given, Ready
        second = await env.pool("kube-one--default--second")
        assert second is not None and second.status.ready == "1/1", second.status.to_dict() if second else None
        assert [f.bind_port for f in second.spec.haproxy.frontends] == [18166]

    await eventually_passes(second_ready)
