"""Waiting for a condition in tests: one `eventually` and its few variants.

- `eventually(check)`: poll `check` (sync or async) until it returns something truthy, which is
  returned. The usual "not yet" errors raised inside `check` (AssertionError, ApiError,
  LookupError, TypeError, ValueError, AttributeError, OSError) are retried; after `within`
  seconds an AssertionError names `what` and the last value or error.
- `eventually_passes(probe)`: poll an async `probe` that asserts, until it stops raising
  AssertionError; its result is returned even when falsy (a probe that asserts and returns None).
- `never(check)`: `check` stays falsy (errors count as falsy) for `duration` seconds.
- `eventually_sync(check)`: the blocking form, for tests that drive subprocesses without a loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lightkube import ApiError

T = TypeVar("T")

NOT_YET: tuple[type[BaseException], ...] = (
    AssertionError, ApiError, LookupError, TypeError, ValueError, AttributeError, OSError,
)
"""Errors a check may raise while the condition does not hold yet."""


async def eventually(
    check: Callable[[], Any],
    within: float | None = None,
    what: str = "",
    *,
    interval: float = 0.05,
    timeout: float | None = None,  # noqa: ASYNC109  (the spelling of the discovery and proxy tests)
) -> Any:
    """Poll `check` (sync or async) until it returns a truthy value, and return that value.

    `within` (or `timeout`, the same) is 30 s by default. Errors in NOT_YET count as "not yet";
    on time-out the last failure (or falsy value) is reported, with `what` when given.
    """
    limit = within if within is not None else timeout if timeout is not None else 30.0
    deadline = time.monotonic() + limit
    last: Any = None
    while True:
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            last = f"check returned {value!r}"
        except NOT_YET as err:
            last = err
        if time.monotonic() >= deadline:
            msg = f"not true within {limit}s{' (' + what + ')' if what else ''}: {last}"
            raise AssertionError(msg) from (last if isinstance(last, BaseException) else None)
        await asyncio.sleep(interval)


async def eventually_passes(
    probe: Callable[[], Awaitable[T]],
    timeout: float = 20.0,  # noqa: ASYNC109
    interval: float = 0.05,
) -> T:
    """Await `probe` until it stops raising AssertionError; return its result (even a falsy one).

    After `timeout` seconds the probe's last AssertionError is raised as it is.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await probe()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(interval)


async def never(
    check: Callable[[], Any], duration: float = 1.5, interval: float = 0.1, what: str = ""
) -> None:
    """Assert `check` (sync or async) stays falsy for `duration` seconds; NOT_YET errors count as falsy."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
        except NOT_YET:
            value = None
        assert not value, f"unexpectedly true{' (' + what + ')' if what else ''}: {value!r}"
        await asyncio.sleep(interval)


def eventually_sync(check: Callable[[], Any], within: float = 20.0, interval: float = 0.1, what: str = "") -> Any:
    """The blocking `eventually`: call `check` until it returns a truthy value (returned).

    Errors raised by `check` propagate (a blocking check is a subprocess call, not a racy read).
    """
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not true within {within}s{' (' + what + ')' if what else ''}"
        time.sleep(interval)
