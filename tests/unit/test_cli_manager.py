"""The pieces of `isthmus controller-manager`: which controllers run, several parts as one component,
and tokens renewed before they expire."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import typer

from isthmus.cli.app import Background, Together
from isthmus.cli.manager import parse_controllers
from isthmus.kube import tokens
from isthmus.kube.tokens import Lifetime, ServiceAccountToken


def test_controllers_are_chosen_as_kube_controller_manager_chooses_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_controllers("*") == ["lb", "mcsvc", "egress-operator"]
    assert parse_controllers("egress-operator, lb") == ["lb", "egress-operator"]  # start order, not flag order
    assert parse_controllers("*,-mcsvc") == ["lb", "egress-operator"]
    for bad, message in (("lb,dns", "unknown controller dns"), ("", "names no controller"),
                         ("lb,-lb", "leaves no controller")):
        with pytest.raises(typer.Exit) as err:
            parse_controllers(bad)
        assert err.value.exit_code == 2, bad
        assert message in capsys.readouterr().err, bad


async def test_together_is_ready_when_every_part_is_and_ends_with_the_first_part_that_ends() -> None:
    ready = {"a": False, "b": True}
    stopped: list[str] = []
    finish = asyncio.Event()

    async def forever() -> None:
        await asyncio.Event().wait()

    async def fails() -> None:
        await finish.wait()
        raise RuntimeError("b broke")

    async def on_stop(name: str) -> None:
        stopped.append(name)

    together = Together([Background("a", forever, lambda: ready["a"], on_stop=lambda: on_stop("a")),
                         Background("b", fails, lambda: ready["b"], on_stop=lambda: on_stop("b"))])
    await together.start()
    assert not together.ready
    ready["a"] = True
    assert together.ready
    waiting = asyncio.ensure_future(together.wait())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    finish.set()
    with pytest.raises(RuntimeError, match="b broke"):
        await asyncio.wait_for(waiting, 2)
    await together.stop()
    assert sorted(stopped) == ["a", "b"]
    assert together.parts[0]._task is not None and together.parts[0]._task.cancelled()


async def test_a_token_is_renewed_at_80_percent_of_its_life_and_failures_are_retried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[Any] = [("one", 3600.0), RuntimeError("apiserver away"), ("two", 3600.0)]
    asked: list[float] = []
    second = asyncio.Event()

    async def fake_request(issuer: Any, namespace: str, name: str, **_: Any) -> tuple[str, Lifetime]:
        asked.append(time.time())
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        token, ttl = answer
        if token == "two":
            second.set()
        now = time.time()
        return token, Lifetime(now - 0.8 * ttl + 0.05, now + 0.2 * ttl + 0.05)  # due again in 0.05 s

    monkeypatch.setattr(tokens, "request_token", fake_request)
    monkeypatch.setattr(tokens, "RETRY_SECONDS", (0.05, 0.1))
    auth = ServiceAccountToken(None, "isthmus-system", "isthmus-lb")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no token"):
        auth.bearer_header()
    await auth.fetch()
    assert auth.bearer_header() == "Bearer one"
    assert auth.username == "system:serviceaccount:isthmus-system:isthmus-lb"
    renewing = asyncio.ensure_future(auth.keep_fresh())
    try:
        await asyncio.wait_for(second.wait(), 3)
        assert auth.bearer_header() == "Bearer two"  # the failure kept the old token, the retry got a new one
        assert len(asked) == 3 and asked[1] - asked[0] >= 0.04
    finally:
        renewing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await renewing


def test_the_refresh_rule_is_the_kubelets() -> None:
    assert Lifetime(1000.0, 1000.0 + 3600).refresh_at == pytest.approx(1000.0 + 0.8 * 3600)
    assert Lifetime(0.0, 365 * 86400.0).refresh_at == 24 * 3600.0  # an extended token: renewed daily


async def test_a_refused_token_is_renewed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    issued: list[str] = []
    renewed = asyncio.Event()

    async def fake_request(issuer: Any, namespace: str, name: str, **_: Any) -> tuple[str, Lifetime]:
        issued.append(f"t{len(issued) + 1}")
        if len(issued) == 2:
            renewed.set()
        now = time.time()
        return issued[-1], Lifetime(now, now + 3600)  # not due for 48 minutes

    monkeypatch.setattr(tokens, "request_token", fake_request)
    auth = ServiceAccountToken(None, "isthmus-system", "isthmus-lb")  # type: ignore[arg-type]
    await auth.fetch()
    renewing = asyncio.ensure_future(auth.keep_fresh())
    try:
        await asyncio.sleep(0.05)
        assert issued == ["t1"]  # nothing due yet
        assert auth.bearer_header(force=True) == "Bearer t1"  # the transport's word for a 401
        await asyncio.wait_for(renewed.wait(), 2)
        await asyncio.sleep(0)
        assert auth.bearer_header() == "Bearer t2"
    finally:
        renewing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await renewing
