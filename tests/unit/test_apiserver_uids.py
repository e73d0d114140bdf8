"""Object uids: version-4 UUIDs, never repeated, not even by a forked child (the local clusterset
forks its apiservers from a zygote)."""

from __future__ import annotations

import os
import re
import uuid

from isthmus.apiserver.apimachinery.meta import new_uid

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_uids_are_distinct_version_4_uuids() -> None:
    uids = [new_uid() for _ in range(5000)]  # several refills of the random pool
    assert len(set(uids)) == len(uids)
    for u in uids:
        assert UUID4.match(u), u
        assert str(uuid.UUID(u)) == u and uuid.UUID(u).version == 4


def test_a_forked_child_does_not_repeat_its_parents_uids() -> None:
    new_uid()  # the pool now holds random bytes the child inherits
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        os.write(w, " ".join(new_uid() for _ in range(10)).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        child = f.read().split()
    os.waitpid(pid, 0)
    parent = [new_uid() for _ in range(10)]
    assert len(child) == 10
    assert not set(child) & set(parent)
