"""A host command run from the event loop, bounded in time: what the kernel dataplanes (the egress
gateway's and the proxy's nftables modes) use to call `nft`, `ip` and `conntrack`."""

from __future__ import annotations

import asyncio

__all__ = ["CommandError", "run_command"]


class CommandError(Exception):
    """The command could not be started, or did not finish in time; the message names it."""


async def run_command(*argv: str, stdin: str | None = None, timeout: float = 15.0,  # noqa: ASYNC109
                      netns: str | None = None, ip: str = "ip") -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `argv`, inside the named network namespace `netns` if given
    (`ip netns exec`). A command still running after `timeout` seconds is killed."""
    cmd = [*((ip, "netns", "exec", netns) if netns else ()), *argv]
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as err:
        raise CommandError(f"{' '.join(cmd)}: {err}") from err
    try:
        # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancellation that arrives as the
        # command ends, and a loop calling this (the proxy's table check) then never stops.
        async with asyncio.timeout(timeout):
            out, err_ = await proc.communicate(stdin.encode() if stdin is not None else None)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise CommandError(f"{' '.join(cmd)}: no answer in {timeout:.0f}s") from None
    rc = proc.returncode if proc.returncode is not None else -1
    return rc, out.decode(errors="replace"), err_.decode(errors="replace")
