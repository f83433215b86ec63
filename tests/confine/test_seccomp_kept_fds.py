"""The seccomp filter's kept descriptors (``seccomp.network_filter(kept_fds=...)``).

A native runner's protocol pipes cannot be closed or replaced by the candidate's code (a reviewer
relayed every reply of the runner through pipes it put over them with ``dup2``, reporting smaller GPU
times).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from ptxgym.confine import seccomp

pytestmark = pytest.mark.skipif(
    platform.machine() not in seccomp.ARCHES or not sys.platform.startswith("linux"),
    reason="seccomp filter rows exist for Linux x86_64 and aarch64 only",
)

CHILD = r"""
import ctypes, errno, json, os, sys
from ptxgym.confine import seccomp
from ptxgym.confine.libc import set_no_new_privs

kept_r, kept_w = os.pipe()
other_r, other_w = os.pipe()
assert not set_no_new_privs()
rows = seccomp.network_filter(os.uname().machine, kept_fds=(kept_r, kept_w))
assert seccomp.install(rows, tsync=False) == 0
libc = ctypes.CDLL(None, use_errno=True)

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]

def close_range(first, last):
    if libc.syscall(seccomp.syscall_number("close_range"), first, last, 0) != 0:
        raise OSError(ctypes.get_errno(), "close_range")

spare_r, spare_w = os.pipe()
out = {
    "dup2_onto_kept": attempt(lambda: os.dup2(spare_w, kept_w)),  # dup2, or dup3 where there is no dup2
    "dup3_onto_kept": attempt(lambda: os.dup2(spare_w, kept_w, inheritable=False)),
    "close_kept": attempt(lambda: os.close(kept_r)),
    "close_range_over_kept": attempt(lambda: close_range(min(kept_r, kept_w), min(kept_r, kept_w))),
    "close_range_from_below": attempt(lambda: close_range(1000, 2000)),
    "dup2_onto_other": attempt(lambda: os.dup2(spare_w, other_w)),
    "close_other": attempt(lambda: os.close(other_r)),
}
os.write(kept_w, b"x")
out["kept_still_works"] = os.read(kept_r, 1) == b"x"
print(json.dumps(out))
"""


def test_kept_descriptors_cannot_be_closed_or_replaced() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["dup2_onto_kept"] == out["dup3_onto_kept"] == "EPERM", out
    assert out["close_kept"] == out["close_range_over_kept"] == "EPERM", out
    assert out["close_range_from_below"] == out["dup2_onto_other"] == out["close_other"] == "ok", out
    assert out["kept_still_works"]


def test_without_kept_descriptors_the_filter_is_unchanged() -> None:
    assert seccomp.network_filter("x86_64") == seccomp.network_filter("x86_64", kept_fds=())
    assert len(seccomp.network_filter("x86_64", kept_fds=(5, 7))) > len(seccomp.network_filter("x86_64"))
