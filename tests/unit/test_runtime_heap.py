"""glibc's malloc settled for relaying: bursts of 256 KB buffers (what a relay's transport queues)
reuse heap pages instead of faulting fresh ones in on every burst."""

from __future__ import annotations

import subprocess
import sys

import pytest

from isthmus.runtime.heap import settle_for_relaying

BURSTS = """
import resource, sys
if sys.argv[1] == "settle":
    from isthmus.runtime.heap import settle_for_relaying
    assert settle_for_relaying()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = faults()
for _ in range(20):
    queued = [bytearray(256 * 1024) for _ in range(16)]  # a burst queued behind a slow peer, then sent
    del queued
print(faults() - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", BURSTS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_bursts_of_relay_buffers_reuse_heap_pages_once_settled() -> None:
    plain, settled = _faults("plain"), _faults("settle")
    # 20 bursts of 4 MB: unsettled, glibc gives each burst back and faults (much of) the next one in
    # again, 10,000-20,000 faults; settled, only the first burst faults its pages in (about 1,000).
    assert plain > 5_000
    assert settled < plain / 4


def test_settling_twice_is_harmless() -> None:
    assert settle_for_relaying() is settle_for_relaying()
