"""`run_command`: bounded host commands, and a cancellation that always stops the caller."""

from __future__ import annotations

import asyncio

import pytest

from isthmus.runtime.commands import CommandError, run_command


async def test_output_exit_code_and_stdin() -> None:
    assert await run_command("sh", "-c", "cat; echo err >&2; exit 3", stdin="in") == (3, "in", "err\n")


async def test_a_command_that_hangs_is_killed_and_a_missing_one_is_named() -> None:
    with pytest.raises(CommandError, match="no answer in 0s"):
        await run_command("sleep", "30", timeout=0.2)
    with pytest.raises(CommandError, match="no-such-command-here"):
        await run_command("no-such-command-here")


async def test_a_cancellation_that_lands_as_the_command_ends_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy's table check calls this in a loop. Python 3.11's wait_for returned the command's
    result when the cancellation arrived just as the command ended, so the loop went on and
    `stop()` waited for it forever. Here the command ends and its caller is cancelled in the same
    step, every time."""

    class Ending:
        returncode = 0

        async def communicate(self, _stdin: bytes | None) -> tuple[bytes, bytes]:
            # The caller's cancellation runs next, before anything else sees the command's end.
            asyncio.get_running_loop().call_soon(caller[0].cancel)
            return b"", b""

    async def spawn(*_a: object, **_k: object) -> Ending:
        return Ending()

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
    caller: list[asyncio.Task[None]] = []
    calls = 0

    async def loop() -> None:
        nonlocal calls
        while calls < 100:
            calls += 1
            await run_command("nft", "list", "chain", "ip", "x", "y")
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(loop())
    caller.append(task)
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done and task.cancelled() and calls == 1, calls
