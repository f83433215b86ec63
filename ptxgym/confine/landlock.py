"""Landlock (Linux >= 5.13): unprivileged, per-process file-system (and TCP, and scope) restrictions.

A process builds a *ruleset* that names the access rights it wants restricted ("handled"), adds rules that
grant some of them beneath given files or directories, and restricts itself; from then on, it and every
process it starts can use a handled right only where a rule grants it. Rights that are not handled stay
unrestricted. Nothing lifts a restriction; restricting again only narrows. Walking a path, ``stat`` and
``readlink`` are not restricted (so a confined process can tell that a file exists, not read it).

The kernel's ABI version says which rights it knows: 1 (5.13) the basic file rights; 2 ``REFER``
(cross-directory rename/link); 3 ``TRUNCATE``; 4 TCP bind/connect; 5 ``IOCTL_DEV``; 6 scopes (abstract
Unix sockets, signals); 8 ``RESTRICT_SELF_TSYNC`` (restrict every thread, not only the caller).
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from ptxgym.confine.libc import syscall

NR_CREATE_RULESET, NR_ADD_RULE, NR_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8

READ = READ_FILE | READ_DIR
"""Reading files and listing directories."""
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a file (not a directory) may grant."""
_WRITE_V1 = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK
_WRITE_V1 |= MAKE_FIFO | MAKE_BLOCK | MAKE_SYM


def write_rights(abi: int) -> int:
    """Every right that creates, changes or removes a file, as far as the ABI knows them."""
    return _WRITE_V1 | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def fs_rights(abi: int) -> int:
    """Every file-system right the ABI knows except ``IOCTL_DEV`` (device ioctls stay unrestricted)."""
    return EXECUTE | READ | write_rights(abi)


def abi() -> tuple[int, str]:
    """(Landlock ABI version, '') or (0, why Landlock is unavailable)."""
    ret = syscall(NR_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_ulong(_CREATE_RULESET_VERSION))
    if ret > 0:
        return ret, ""
    if -ret == errno.ENOSYS:
        return 0, "the kernel has no Landlock (older than 5.13 or built without CONFIG_SECURITY_LANDLOCK)"
    if -ret == errno.EOPNOTSUPP:
        return 0, "Landlock is built in but disabled (add landlock to the lsm= boot parameter)"
    return 0, f"landlock_create_ruleset: {os.strerror(-ret)}"


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class Ruleset:
    """A Landlock ruleset being built: ``allow`` rules, then ``restrict_self`` once. Use it as a context.

    ``fs``, ``net`` and ``scoped`` are the handled rights; pass only what ``abi`` knows (older kernels
    refuse unknown bits and struct fields). Raises OSError when the kernel refuses the ruleset.
    """

    def __init__(self, abi: int, fs: int, net: int = 0, scoped: int = 0) -> None:
        self.fs = fs
        attr = _RulesetAttr(fs, net, scoped)
        size = 8 if abi < 4 else 16 if abi < 6 else 24
        fd = syscall(NR_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_ulong(0))
        if fd < 0:
            raise OSError(-fd, f"landlock_create_ruleset: {os.strerror(-fd)}")
        self.fd = fd

    def allow(self, path: str | Path, rights: int) -> str:
        """Grant ``rights`` (limited to the handled ones, and to file rights on a file) beneath ``path``.

        Returns '' or the error (a path that cannot be opened, or the kernel's refusal).
        """
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            return f"cannot open {path}: {exc.strerror}"
        try:
            rights &= self.fs
            if not Path(f"/proc/self/fd/{fd}").is_dir():
                rights &= FILE_RIGHTS
            if not rights:
                return ""
            rule = _PathBeneath(rights, fd)
            ret = syscall(
                NR_ADD_RULE,
                ctypes.c_long(self.fd),
                ctypes.c_ulong(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_ulong(0),
            )
        finally:
            os.close(fd)
        return f"landlock_add_rule({path}): {os.strerror(-ret)}" if ret < 0 else ""

    def restrict_self(self, flags: int = 0) -> int:
        """Enforce the ruleset on this thread (on every thread with ``RESTRICT_SELF_TSYNC``); 0 or -errno."""
        return syscall(NR_RESTRICT_SELF, ctypes.c_long(self.fd), ctypes.c_ulong(flags))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Ruleset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
