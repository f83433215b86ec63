"""A seccomp-BPF filter for sockets and cross-process access, assembled here (no libseccomp).

``network_filter`` builds the program: ``socket()`` fails with EACCES for every address family except the
allowed ones; ``io_uring_setup`` (io_uring can open sockets without the socket syscall), ``ptrace``,
``process_vm_readv``/``writev`` and ``pidfd_getfd`` (reaching into another process), and ``setsid`` and
``setpgid`` (leaving the process group that the evaluator kills when a worker, runner or proof run ends:
a forked child could otherwise outlive it and use the GPU beside a later candidate's timing) fail with
EPERM; a syscall of a foreign ABI (x32 numbers, ``int 0x80``) fails with ENOSYS; everything else passes.
``install`` loads it on the calling thread or, with TSYNC, on every thread of the process (which also
spreads ``no_new_privs``). Filters stack and are inherited across fork and exec.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from dataclasses import dataclass

from ptxgym.confine.libc import syscall


@dataclass(frozen=True)
class _Arch:
    audit: int
    """AUDIT_ARCH_* value of seccomp_data.arch for this architecture's native syscalls."""
    x32: bool
    """x86_64: syscall numbers with bit 30 set are the x32 ABI (same arch value), to be refused."""
    nr: dict[str, int]


ARCHES = {
    "x86_64": _Arch(
        0xC000003E,
        True,
        {
            "socket": 41,
            "ptrace": 101,
            "setpgid": 109,
            "setsid": 112,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "seccomp": 317,
            "io_uring_setup": 425,
            "pidfd_getfd": 438,
            "close": 3,
            "dup2": 33,
            "dup3": 292,
            "close_range": 436,
        },
    ),
    "aarch64": _Arch(
        0xC00000B7,
        False,
        {
            "socket": 198,
            "ptrace": 117,
            "setpgid": 154,
            "setsid": 157,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "seccomp": 277,
            "io_uring_setup": 425,
            "pidfd_getfd": 438,
            "close": 57,
            "dup3": 24,
            "close_range": 436,
        },
    ),
}
DENIED = (
    "io_uring_setup",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "setsid",
    "setpgid",
)
"""Syscalls the filter refuses with EPERM."""
LOCAL_FAMILIES = (socket.AF_UNIX, socket.AF_NETLINK)
"""The address families a candidate worker keeps (no network; torch and CUDA use both)."""
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
# classic BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K
LD_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
# offsets in struct seccomp_data: nr, arch, low 32 bits of args[0] and args[1] (little-endian)
OFF_NR, OFF_ARCH, OFF_ARG0, OFF_ARG1 = 0, 4, 16, 24


def syscall_number(name: str, machine: str | None = None) -> int:
    """Number of a syscall the filter knows, on this machine's (or the given) architecture."""
    return ARCHES[machine or os.uname().machine].nr[name]


def network_filter(
    machine: str, families: tuple[int, ...] = LOCAL_FAMILIES, kept_fds: tuple[int, ...] = ()
) -> list[tuple[int, int, int, int]]:
    """The filter for ``x86_64`` or ``aarch64`` as (code, jt, jf, k) rows; ``families`` may open sockets.

    ``kept_fds``: descriptors nothing may close or replace (EPERM for ``close`` of one, ``dup2``/``dup3``
    onto one, a ``close_range`` over one): a native runner's protocol pipes, over which a candidate's
    constructor once put pipes of its own and relayed every reply with smaller GPU times (a reviewer's
    find; it can still write or read them, which breaks the protocol's sequence, or patch the runner's
    memory: the trusted wall clock bounds what that gains).
    """
    arch = ARCHES[machine]
    program: list[tuple | str] = [("ld", OFF_ARCH), ("jeq", arch.audit, None, "enosys"), ("ld", OFF_NR)]
    if arch.x32:
        program.append(("jge", _X32_SYSCALL_BIT, "enosys", None))
    program.append(("jeq", arch.nr["socket"], "socket", None))
    program += [("jeq", arch.nr[name], "eperm", None) for name in DENIED]
    kept: list[tuple | str] = []
    if kept_fds:
        for name, offset in (("close", OFF_ARG0), ("dup2", OFF_ARG1), ("dup3", OFF_ARG1)):
            if name in arch.nr:
                program.append(("jeq", arch.nr[name], f"kept_{name}", None))
                kept += [f"kept_{name}", ("ld", offset), *[("jeq", fd, "eperm", None) for fd in kept_fds]]
                kept.append(("ret", RET_ALLOW))
        program.append(("jeq", arch.nr["close_range"], "kept_range", None))
        kept += ["kept_range", ("ld", OFF_ARG0), ("jge", max(kept_fds) + 1, "allow", None), ("ld", OFF_ARG1)]
        kept += [("jge", min(kept_fds), "eperm", None), ("ret", RET_ALLOW)]
    program += [
        ("ret", RET_ALLOW),
        *kept,
        "socket",
        ("ld", OFF_ARG0),
        *[("jeq", family, "allow", None) for family in families],
        ("ret", RET_ERRNO | errno.EACCES),
        "allow",
        ("ret", RET_ALLOW),
        "eperm",
        ("ret", RET_ERRNO | errno.EPERM),
        "enosys",
        ("ret", RET_ERRNO | errno.ENOSYS),
    ]
    return assemble(program)


def assemble(program: list) -> list[tuple[int, int, int, int]]:
    """Resolve labels (plain strings) into the relative jump offsets of classic BPF."""
    where, pc = {}, 0
    for item in program:
        if isinstance(item, str):
            where[item] = pc
        else:
            pc += 1
    rows = []
    for item in program:
        if isinstance(item, str):
            continue
        op, *rest = item
        if op == "ld":
            rows.append((LD_ABS, 0, 0, rest[0]))
        elif op == "ret":
            rows.append((RET, 0, 0, rest[0]))
        else:
            k, on_true, on_false = rest
            here = len(rows) + 1
            jt = where[on_true] - here if on_true else 0
            jf = where[on_false] - here if on_false else 0
            if not (0 <= jt < 256 and 0 <= jf < 256):
                raise ValueError(f"BPF jump of {max(jt, jf)} rows at row {here - 1}: beyond 255")
            rows.append((JEQ if op == "jeq" else JGE, jt, jf, k))
    return rows


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install(rows: list[tuple[int, int, int, int]], *, tsync: bool) -> int:
    """Load a filter (needs no_new_privs or CAP_SYS_ADMIN) on this thread, or with ``tsync`` on all.

    Returns 0; -errno; or, with ``tsync``, the id of a thread that could not take it (then none did).
    """
    table = (_SockFilter * len(rows))(*(_SockFilter(*row) for row in rows))
    prog = _SockFprog(len(rows), table)
    return syscall(
        syscall_number("seccomp"),
        ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_ulong(_SECCOMP_FILTER_FLAG_TSYNC if tsync else 0),
        ctypes.byref(prog),
    )
