"""The bpf(2) calls and the small assembler the proxy's kernel programs share (splice.py, socketlb.py).

No libbpf and no compiler: a program is a list of 8-byte instructions built here, and the kernel's
verifier checks it when it is loaded. Maps are read and written through the same syscall.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

__all__ = ["END", "assemble", "insn", "ld_map", "load", "map_create", "map_delete", "map_lookup", "map_update", "syscall"]

_NR_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
_ATTR_SIZE = 128
_libc = ctypes.CDLL(None, use_errno=True)

# commands (uapi/linux/bpf.h)
MAP_CREATE, MAP_LOOKUP, MAP_UPDATE, MAP_DELETE, PROG_LOAD, PROG_ATTACH, LINK_CREATE = 0, 1, 2, 3, 5, 8, 28
NOEXIST = 1
# opcodes
MOV64_REG, MOV64_IMM, ADD64_IMM = 0xBF, 0xB7, 0x07
LDX_W, STX_W, STX_DW, LD_IMM64 = 0x61, 0x63, 0x7B, 0x18
MOD32_REG, ADD32_REG = 0x9C, 0x0C
ATOMIC_ADD_DW = 0xDB
JEQ_IMM, JNE_IMM, CALL, EXIT = 0x15, 0x55, 0x85, 0x95
R0, R1, R2, R3, R4, R6, R7, R8, R10 = 0, 1, 2, 3, 4, 6, 7, 8, 10
# helpers
LOOKUP, UPDATE, PRANDOM, SOCKET_COOKIE, SK_REDIRECT_HASH, SK_RELEASE, NETNS_COOKIE = 1, 2, 7, 46, 72, 86, 122
END = -32768
"""Jump offset placeholder: to the program's final `return 1` (SK_PASS; "allow" for cgroup hooks)."""


def syscall(cmd: int, attr: bytes) -> int:
    """bpf(cmd, attr); OSError with the kernel's errno."""
    if _NR_BPF is None:
        raise OSError(38, f"no bpf(2) number known for {platform.machine()}")
    buf = ctypes.create_string_buffer(attr, _ATTR_SIZE)
    r = _libc.syscall(_NR_BPF, cmd, buf, _ATTR_SIZE)
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(r)


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def ld_map(reg: int, fd: int) -> list[bytes]:
    """`reg = &map` (a two-slot load of the map's fd, which the kernel resolves)."""
    return [insn(LD_IMM64, reg, 1, imm=fd), insn(0)]


def assemble(body: list[bytes]) -> bytes:
    """Append `return 1` and point every `END` jump at it."""
    end = len(body)
    body = [*body, insn(MOV64_IMM, R0, imm=1), insn(EXIT)]
    for i, ins in enumerate(body):
        code, regs, off, imm = struct.unpack("<BBhi", ins)
        if off == END:
            body[i] = struct.pack("<BBhi", code, regs, end - i - 1, imm)
    return b"".join(body)


def map_create(kind: int, key_size: int, value_size: int, entries: int) -> int:
    return syscall(MAP_CREATE, struct.pack("<IIIII", kind, key_size, value_size, entries, 0))


def load(prog_type: int, code: bytes, attach_type: int, name: bytes) -> int:
    """Load a program (the verifier checks it); its fd."""
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"Dual MIT/GPL")
    return syscall(PROG_LOAD, struct.pack(
        "<IIQQIIQII16sII", prog_type, len(code) // 8, ctypes.addressof(insns), ctypes.addressof(lic),
        0, 0, 0, 0, 0, name, 0, attach_type))


def _elem(cmd: int, fd: int, key: bytes, value: ctypes.Array[ctypes.c_char] | None, flags: int) -> None:
    k = ctypes.create_string_buffer(key, len(key))
    syscall(cmd, struct.pack("<IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(value) if value is not None else 0,
                             flags))


def map_update(fd: int, key: bytes, value: bytes, flags: int = 0) -> None:
    _elem(MAP_UPDATE, fd, key, ctypes.create_string_buffer(value, len(value)), flags)


def map_delete(fd: int, key: bytes) -> None:
    _elem(MAP_DELETE, fd, key, None, 0)


def map_lookup(fd: int, key: bytes, value_size: int) -> bytes:
    """The value under `key`; FileNotFoundError if there is none."""
    v = ctypes.create_string_buffer(value_size)
    _elem(MAP_LOOKUP, fd, key, v, 0)
    return v.raw
