"""The C library through ctypes: raw system calls and ``no_new_privs``."""

from __future__ import annotations

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
_PR_SET_NO_NEW_PRIVS = 38


def syscall(nr: int, *args: object) -> int:
    """``syscall(nr, ...)``; returns the result, or ``-errno`` on failure."""
    ctypes.set_errno(0)
    ret = LIBC.syscall(ctypes.c_long(nr), *args)
    return -ctypes.get_errno() if ret == -1 else int(ret)


def set_no_new_privs() -> str:
    """Set no_new_privs on the calling thread (exec can never gain privileges again); '' or the error."""
    one, zero = ctypes.c_ulong(1), ctypes.c_ulong(0)
    ctypes.set_errno(0)
    if LIBC.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), one, zero, zero, zero) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
    return ""
