"""Coalesced rebuilds: informer events mark keys dirty, one flush per loop turn takes them all.

For components that rebuild derived state in memory (DNS answers, proxy listeners) rather than
writing to an API: many events about one key between two loop turns cost one rebuild, and a
rebuild always reads the caches as they are then, so the newest state wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from isthmus.runtime.informer import Informer


class DirtyKeys:
    """Keys waiting for a rebuild. `on_flush` calls `take()` and rebuilds what it gets.

    Until `armed`, keys only accumulate: the owner does its first full build itself after the
    initial sync, then arms, and from then on every touch schedules a flush on the next turn.
    """

    def __init__(self, on_flush: Callable[[], None]) -> None:
        self._on_flush = on_flush
        self._keys: set[str] = set()
        self._scheduled = False
        self.armed = False

    def watch(self, informer: Informer[Any], keys_of: Callable[[Any], Iterable[str]]) -> None:
        """Touch keys_of(obj) on add and delete, and of both the old and new object on update (a
        relabelled object leaves its old key)."""
        informer.add_handler(
            lambda obj: self.touch(*keys_of(obj)),
            lambda old, new: self.touch(*keys_of(old), *keys_of(new)),
            lambda obj: self.touch(*keys_of(obj)),
        )

    def touch(self, *keys: str) -> None:
        self._keys.update(keys)
        if keys and self.armed and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._on_flush)

    def add(self, keys: Iterable[str]) -> None:
        """Mark keys without scheduling (the owner flushes itself)."""
        self._keys.update(keys)

    @property
    def pending(self) -> bool:
        return bool(self._keys)

    def take(self) -> set[str]:
        """Every dirty key, clearing the set (a flush already scheduled then finds nothing)."""
        self._scheduled = False
        keys, self._keys = self._keys, set()
        return keys
