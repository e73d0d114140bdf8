"""Binding SourceIPClaims to SourceIPs against a real embedded apiserver, with its in-process Egress
admission plugin, as kubectl users would see it: phases, addresses, conditions, Events, finalizers,
reclaim policies, and the races (two claims for the last address; a claim deleted while binding)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Namespace
from lightkube.types import PatchType

from isthmus.api.egress import (
    CLAIM_FINALIZER,
    ExternalService,
)
from isthmus.cli import admission_plugins
from isthmus.egress.operator import EgressOperator
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer
from tests.harness.egress import ClaimRes, ClassRes, Env, SipRes
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]

EsRes: Any = resource_for(ExternalService)


@pytest.fixture
async def env(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    disabled = getattr(request, "param", [])  # admission plugins turned off (indirect parametrize)
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build(disabled))
    await srv.start()
    client = srv.client()
    await helpers.install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name="isthmus-system")))
    await client.create(Namespace(metadata=ObjectMeta(name="team-b")))
    op = EgressOperator(client, identity="test", lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
    task = asyncio.create_task(op.run())
    try:
        await eventually(lambda: asyncio.sleep(0, op.ready), 15, "operator leading")
        yield Env(srv, client)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await srv.close()


async def test_a_claim_binds_an_address_of_its_class(env: Env) -> None:
    await env.klass("lab", [("127.32.9.1", "127.32.9.3")])
    await env.claim("db", "lab")
    ip = await env.bound("db")
    assert ip == "127.32.9.1"
    claim = await env.get_claim("db")
    assert claim is not None
    assert CLAIM_FINALIZER in claim["metadata"]["finalizers"]
    assert (await env.ready_reason("db")).startswith("True/Bound")
    sip = (await env.sips())["127.32.9.1"]
    assert sip["spec"]["claimRef"] == {"namespace": "default", "name": "db", "uid": claim["metadata"]["uid"]}

    async def sip_bound() -> bool:
        return ((await env.sips())["127.32.9.1"].get("status") or {}).get("phase") == "Bound"

    await eventually(sip_bound, 10, "SourceIP Bound")

    async def class_status() -> dict[str, Any] | None:
        st = (await env.client.get(ClassRes, "lab")).to_dict().get("status") or {}
        return st if st.get("allocated") == 1 else None

    st = await eventually(class_status, 10, "class status")
    assert st["capacity"] == 3
    # A specific address of the class.
    await env.claim("cache", "lab", "127.32.9.3")
    assert await env.bound("cache") == "127.32.9.3"


async def test_admission_refuses_what_cannot_bind(env: Env) -> None:
    await env.klass("lab", [("127.32.9.1", "127.32.9.3")])
    with pytest.raises(ApiError) as err:
        await env.claim("far", "lab", "127.32.8.1")
    assert err.value.status.code == 422
    assert "spec.sourceIP" in err.value.status.message and "outside every range" in err.value.status.message
    with pytest.raises(ApiError) as err:
        await env.claim("other", "lab", ns="team-b")
    assert "does not allow namespace 'team-b'" in err.value.status.message
    with pytest.raises(ApiError) as err:
        await env.claim("bad", "lab", "not-an-ip")
    assert "must be a valid IP address" in err.value.status.message
    with pytest.raises(ApiError) as err:
        await env.klass("broken", [("127.32.9.9", "127.32.9.1")])
    assert "is before start" in err.value.status.message
    # Nothing of the refused objects was stored.
    assert await env.get_claim("far") is None and await env.get_claim("bad") is None
    # A claim's spec cannot change once made.
    await env.claim("db", "lab")
    await env.bound("db")
    with pytest.raises(ApiError) as err:
        await env.client.patch(ClaimRes, "db", {"spec": {"sourceIP": "127.32.9.2"}}, namespace="default",
                               patch_type=PatchType.MERGE)
    assert "immutable" in err.value.status.message


async def test_an_exhausted_class_leaves_claims_pending_until_an_address_frees(env: Env) -> None:
    await env.klass("tiny", [("127.32.9.1", "127.32.9.1")])
    await env.claim("first", "tiny")
    assert await env.bound("first") == "127.32.9.1"
    await env.claim("second", "tiny")

    async def exhausted() -> bool:
        return "ClassExhausted" in await env.ready_reason("second")

    await eventually(exhausted, 10, "ClassExhausted")
    assert (await env.phase("second"))[0] == "Pending"
    events = [e async for e in env.client.list(Event, namespace="default")]
    assert any(e.reason == "ClassExhausted" and e.involvedObject.name == "second" for e in events)
    await env.client.delete(ClaimRes, "first", namespace="default")
    assert await env.bound("second") == "127.32.9.1"


async def test_two_claims_race_for_the_last_address(env: Env) -> None:
    await env.klass("tiny", [("127.32.9.5", "127.32.9.5")])
    await asyncio.gather(env.claim("a", "tiny"), env.claim("b", "tiny"))

    async def settled() -> list[tuple[str | None, str | None]] | None:
        phases = [await env.phase("a"), await env.phase("b")]
        return phases if sorted(p or "" for p, _ in phases) == ["Bound", "Pending"] else None

    phases = await eventually(settled, 15, "one Bound, one Pending")
    assert [ip for p, ip in phases if p == "Bound"] == ["127.32.9.5"]
    assert len(await env.sips()) == 1


async def test_a_claim_deleted_while_binding_leaves_no_address_behind(env: Env) -> None:
    await env.klass("lab", [("127.32.9.1", "127.32.9.4")])
    for i in range(4):
        await env.claim(f"gone-{i}", "lab")
        await env.client.delete(ClaimRes, f"gone-{i}", namespace="default")

    async def all_freed() -> bool:
        return not await env.sips() and all([await env.get_claim(f"gone-{i}") is None for i in range(4)])

    await eventually(all_freed, 15, "claims and addresses gone")
    await env.claim("next", "lab")
    assert await env.bound("next") == "127.32.9.1"


async def test_retain_keeps_a_released_address_from_a_recreated_claim(env: Env) -> None:
    await env.klass("kept", [("127.32.9.1", "127.32.9.1")], reclaim="Retain")
    await env.claim("db", "kept")
    await env.bound("db")
    await env.client.delete(ClaimRes, "db", namespace="default")

    async def released() -> bool:
        return ((await env.sips()).get("127.32.9.1", {}).get("status") or {}).get("phase") == "Released"

    await eventually(released, 10, "Released")
    await eventually(lambda: _gone(env, "db"), 10, "old claim gone")
    # Same name, new UID: it does not inherit the retained address.
    await env.claim("db", "kept")

    async def exhausted() -> bool:
        return "ClassExhausted" in await env.ready_reason("db")

    await eventually(exhausted, 10, "Pending: the only address is retained")
    # The admin makes it Available again: the waiting claim takes it.
    await env.client.patch(SipRes, "127.32.9.1", {"spec": {"claimRef": None}}, patch_type=PatchType.MERGE)
    assert await env.bound("db") == "127.32.9.1"


async def _gone(env: Env, name: str) -> bool:
    return await env.get_claim(name) is None


async def test_a_claim_in_use_is_kept_until_its_external_service_goes(env: Env) -> None:
    await env.klass("lab", [("127.32.9.1", "127.32.9.4")])
    await env.claim("db", "lab")
    await env.bound("db")
    await env.client.create(EsRes.from_dict({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"targetIP": "127.48.0.10", "sources": [{"service": {"name": "app"}, "sourceIPClaimName": "db"}],
                 "ports": [{"port": 5432}]}}))
    await env.client.delete(ClaimRes, "db", namespace="default")
    await asyncio.sleep(1.0)
    claim = await env.get_claim("db")
    assert claim is not None and claim["metadata"].get("deletionTimestamp")
    assert (await env.phase("db")) == ("Bound", "127.32.9.1")
    await env.client.delete(EsRes, "pg", namespace="default")
    await eventually(lambda: _gone(env, "db"), 15, "claim gone after its ExternalService")

    async def freed() -> bool:
        return not await env.sips()

    await eventually(freed, 10, "address freed (Delete policy)")


async def test_a_bound_claim_whose_address_vanishes_is_lost(env: Env) -> None:
    await env.klass("lab", [("127.32.9.1", "127.32.9.4")])
    await env.claim("db", "lab")
    await env.bound("db")
    # An admin forces the SourceIP away (its protection finalizer stripped).
    await env.client.patch(SipRes, "127.32.9.1", {"metadata": {"finalizers": None}}, patch_type=PatchType.MERGE)
    await env.client.delete(SipRes, "127.32.9.1")

    async def lost() -> bool:
        return (await env.phase("db"))[0] == "Lost"

    await eventually(lost, 10, "Lost")
    assert "no longer exists" in await env.ready_reason("db")


@pytest.mark.parametrize("env", [[admission_plugins.EGRESS]], indirect=True)
async def test_classes_that_overlap_despite_admission_share_nothing(env: Env) -> None:
    """Two classes admitted at once each saw no other (admission off stands for that race): the older
    keeps the shared addresses; the newer says so, counts and hands out only the rest."""
    await env.klass("a-older", [("127.32.9.1", "127.32.9.4")])
    await env.klass("b-newer", [("127.32.9.3", "127.32.9.6")])  # same second: the name decides

    async def status(name: str) -> dict[str, Any]:
        return dict((await env.client.get(ClassRes, name)).to_dict().get("status") or {})

    async def flagged() -> dict[str, Any] | None:
        st = await status("b-newer")
        ready = [c for c in st.get("conditions") or [] if c["type"] == "Ready"]
        return st if ready and ready[0]["reason"] == "RangesOverlap" else None

    st = await eventually(flagged, 10, "b-newer flagged")
    assert st["capacity"] == 2
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["message"].startswith("spec.ranges[0] shares 127.32.9.3-127.32.9.4 with SourceIPClass 'a-older'")
    older = await status("a-older")
    assert older["capacity"] == 4
    assert [(c["status"], c["reason"]) for c in older["conditions"] if c["type"] == "Ready"] == [("True", "Valid")]
    events = [e async for e in env.client.list(Event)]
    assert any(e.reason == "RangesOverlap" and e.involvedObject.name == "b-newer" for e in events)
    # The newer class's claims get only its own addresses, then wait.
    for name in ("n1", "n2", "n3"):
        await env.claim(name, "b-newer")
    assert sorted([await env.bound("n1"), await env.bound("n2")]) == ["127.32.9.5", "127.32.9.6"]

    async def exhausted() -> str | None:
        reason = await env.ready_reason("n3")
        return reason if "ClassExhausted" in reason else None

    assert "(all 2 in use)" in await eventually(exhausted, 10, "n3 ClassExhausted")
    await env.claim("wants-shared", "b-newer", "127.32.9.3")

    async def refused() -> str | None:
        reason = await env.ready_reason("wants-shared")
        return reason if "AddressNotInClass" in reason else None

    assert "belongs to SourceIPClass 'a-older'" in await eventually(refused, 10, "shared address refused")
    # The older class's claims still get every address of theirs.
    for name in ("o1", "o2", "o3", "o4"):
        await env.claim(name, "a-older")
    assert sorted([await env.bound(n) for n in ("o1", "o2", "o3", "o4")]) == [
        "127.32.9.1", "127.32.9.2", "127.32.9.3", "127.32.9.4"]
    # Removing the overlap makes the newer class whole and Ready.
    await env.client.patch(ClassRes, "b-newer", {"spec": {"ranges": [{"start": "127.32.9.5", "end": "127.32.9.7"}]}},
                           patch_type=PatchType.MERGE)

    async def whole() -> dict[str, Any] | None:
        st = await status("b-newer")
        ready = [c for c in st.get("conditions") or [] if c["type"] == "Ready"]
        return st if ready and ready[0]["status"] == "True" and st.get("capacity") == 3 else None

    await eventually(whole, 10, "b-newer Ready with 3 addresses")
    assert await env.bound("n3") == "127.32.9.7"
