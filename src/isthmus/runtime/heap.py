"""glibc's malloc settled for a process that relays bulk data.

A relay's transport queues what its peer has not taken yet: each queued chunk is a new buffer of up
to 256 KB. glibc serves allocations of 128 KB and more with a fresh mmap until a freed one teaches
it a higher threshold, and gives the top of its heap back above a trim threshold it also adapts: so
a new process copies its first streams into fresh pages, one page fault per 4 KB. Measured on an
egress forwarder's first bulk stream: page faults were half of its CPU and the stream ran at 30-90
MB/s, where later streams (glibc adapted) ran at 800-1,000. Fixed thresholds keep those buffers on
the heap from the start, reused instead of faulted in again.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["settle_for_relaying"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20
"""Allocations below this come from the heap (glibc's own ceiling for its adaptive threshold is 32 MB)."""
TRIM_THRESHOLD = 16 << 20
"""Free heap kept before any is given back: a few MB of queued relay data, not returned and faulted in
again on every burst."""


def settle_for_relaying() -> bool:
    """Fix glibc's mmap and trim thresholds for this process; False where there is no glibc
    `mallopt` (musl, other platforms): nothing changes there."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
