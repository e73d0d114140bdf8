"""Batched UDP datagram I/O: Linux recvmmsg/sendmmsg through ctypes.

Python's socket module has no recvmmsg, so one query costs two syscalls (recvfrom + sendto) and
under load the kernel side of those dominates. `MmsgSocket` receives up to `batch` datagrams in
one call and sends their answers in one call. Everything the kernel reads or writes is allocated
once per socket and reused: the mmsghdr arrays, one iovec per slot, the peers' sockaddrs, and the
datagram buffers (anonymous mmaps, so untouched pages cost no memory).

A reply goes back to the very sockaddr bytes the kernel wrote on receipt: no address is decoded
into a Python tuple and encoded again. Replies are packed into send slots in order; when a query
gets no answer the following peers' sockaddrs are moved down to their reply's slot.

`load()` returns None off Linux, or when libc lacks the calls: the server then uses
recvfrom/sendto (see server.py).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ADDR", "SLOT", "LibMmsg", "MmsgSocket", "load"]

SLOT = 65536
"""Bytes per datagram buffer: the largest UDP payload fits, so a query is never truncated."""
ADDR = 32
"""Bytes per sockaddr slot (sockaddr_in6 is 28)."""


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.c_void_p),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _Msghdr), ("msg_len", ctypes.c_uint)]


class LibMmsg:
    """libc's recvmmsg and sendmmsg. They are called with the GIL held (PyDLL): with MSG_DONTWAIT
    and a non-blocking socket they never block, and dropping and retaking the GIL twice per batch
    would cost more than the call itself on a busy server."""

    def __init__(self, libc: Any) -> None:
        self.recvmmsg: Callable[..., int] = libc.recvmmsg
        self.sendmmsg: Callable[..., int] = libc.sendmmsg
        for f in (self.recvmmsg, self.sendmmsg):
            f.restype = ctypes.c_int
        self.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
        self.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]


def load() -> LibMmsg | None:
    """libc's recvmmsg/sendmmsg, or None (not Linux, or a libc without them)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.PyDLL(None, use_errno=True)
        return LibMmsg(libc)
    except (OSError, AttributeError):
        return None


class MmsgSocket:
    """Buffers and headers for batched I/O on one bound, non-blocking UDP socket.

    The caller's loop (server.py `_Udp._readable_batched`) reads `lens`, slices `rbuf`, writes
    replies into `sbuf`, their lengths into `slens`, and calls `recv()` / `send()`; the attributes
    are plain so the hot loop can bind them to locals.
    """

    def __init__(self, sock: socket.socket, lib: LibMmsg, batch: int) -> None:
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self.sock = sock
        self.lib = lib
        self.batch = batch
        self.fd = sock.fileno()
        namelen = 28 if sock.family == socket.AF_INET6 else 16
        self.rbuf = mmap.mmap(-1, batch * SLOT)
        self.sbuf = mmap.mmap(-1, batch * SLOT)
        self.addrs = bytearray(batch * ADDR)
        self._rbuf_c = ctypes.c_char.from_buffer(self.rbuf)
        self._sbuf_c = ctypes.c_char.from_buffer(self.sbuf)
        self._addrs_c = (ctypes.c_char * len(self.addrs)).from_buffer(self.addrs)
        rbase = ctypes.addressof(self._rbuf_c)
        sbase = ctypes.addressof(self._sbuf_c)
        abase = ctypes.addressof(self._addrs_c)
        self._riov = (_Iovec * batch)()
        self._siov = (_Iovec * batch)()
        self._rhdr = (_Mmsghdr * batch)()
        self._shdr = (_Mmsghdr * batch)()
        for i in range(batch):
            self._riov[i].iov_base = rbase + i * SLOT
            self._riov[i].iov_len = SLOT
            self._siov[i].iov_base = sbase + i * SLOT
            for hdr, iov in ((self._rhdr[i].msg_hdr, self._riov), (self._shdr[i].msg_hdr, self._siov)):
                hdr.msg_name = abase + i * ADDR
                hdr.msg_namelen = namelen
                hdr.msg_iov = ctypes.addressof(iov) + i * ctypes.sizeof(_Iovec)
                hdr.msg_iovlen = 1
        # The kernel writes msg_len (recv) and msg_namelen; one socket family means one namelen.
        u32 = ctypes.sizeof(ctypes.c_uint)
        step = ctypes.sizeof(_Mmsghdr)
        assert step % u32 == 0 and _Mmsghdr.msg_len.offset % u32 == 0
        self.lens = memoryview(self._rhdr).cast("B").cast("I")
        """The receive headers as uint32s: `lens[len_index[i]]` is datagram i's length."""
        self.len_index = [i * (step // u32) + _Mmsghdr.msg_len.offset // u32 for i in range(batch)]
        szt = ctypes.sizeof(ctypes.c_size_t)
        siov = memoryview(self._siov).cast("B")
        self.slens = siov.cast("Q") if szt == 8 else siov.cast("I")
        """Item 2*j+1 is reply slot j's length (iovec = base, len)."""
        assert ctypes.sizeof(_Iovec) == 2 * szt and _Iovec.iov_len.offset == szt
        self._rhdr_p = ctypes.addressof(self._rhdr)
        self._shdr_p = ctypes.addressof(self._shdr)
        self._step = step

    def recv(self) -> int:
        """Datagrams received into slots 0.. (0: none waiting). Other errors raise OSError."""
        n = self.lib.recvmmsg(self.fd, self._rhdr_p, self.batch, socket.MSG_DONTWAIT, None)
        if n >= 0:
            return n
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
            return 0
        raise OSError(err, os.strerror(err))

    def send(self, count: int) -> int:
        """Send reply slots 0..count-1; returns how many the kernel refused (full buffer, an
        unreachable peer): like sendto, a refused UDP reply is dropped and the client retries."""
        sent = 0
        failed = 0
        sendmmsg = self.lib.sendmmsg
        while sent < count:
            r = sendmmsg(self.fd, self._shdr_p + sent * self._step, count - sent, 0)
            if r > 0:
                sent += r
                continue
            if r < 0 and ctypes.get_errno() == errno.EINTR:
                continue
            failed += 1  # sendmmsg stops at the first failing message: skip it
            sent += 1
        return failed

    def close(self) -> None:
        """Release the buffers (the socket is the caller's)."""
        self.lens.release()
        self.slens.release()
        del self._rbuf_c, self._sbuf_c, self._addrs_c
        self.rbuf.close()
        self.sbuf.close()


