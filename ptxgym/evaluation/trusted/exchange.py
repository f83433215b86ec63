"""A timed call's exchange with its worker, off the interpreter's lock (``runner/exchange.cc``).

The trusted wall clock of a call (``Session._call``) runs from its command to the end of the trusted
copies of its outputs. Read in Python, it also held every wait for the interpreter's lock in between:
the reply arrives, but the thread that reads it runs again only when another Python thread of the
evaluator (an env's build, a trainer's step) lets go of the lock, up to the switch interval (5 ms)
later; and the copies are queued only after that. On a 2-core host a reply read in Python beside a
thread holding the lock waited for it (``tests/evaluation/test_exchange.py``); on an H100 with two busy
Python threads in the evaluator's process the calibration's overhead was 1.14-1.53 ms through Python
against 0.63 ms through this exchange (``bench/results/wall_allowance_2026-12-06_busy2_h100.txt``). Such
noise widens the wall cross-check's allowance (``timing.cross_check``), which a forged GPU time can
hide in.

Here the whole exchange is one C call made through ``ctypes``, which releases the lock for its
duration: the command frame is written, the reply frame read, the output copies queued on the trusted
side's stream and awaited, and the clock read at each end, without the interpreter. The reply is then
parsed and checked by ``pool.WorkerHandle`` exactly as before. The library is compiled on first use
(``runner.build.build_exchange``); where it cannot be (no C++ compiler), or ``EvalSettings.native_wall``
is off, the Python path measures as before and ``unavailable()`` says why.
"""

from __future__ import annotations

import ctypes
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.evaluation.protocol import MAX_REPLY_BYTES

STATUS = {
    1: "the command pipe stayed full",
    2: "the worker stopped reading commands",
    3: "no reply within the call's time limit",
    4: "a reply began but its frame never completed",
    5: "the reply channel ended",
    6: "a reply frame's length is out of bounds",
    7: "the reply channel broke",
    8: "the CUDA driver's copy entry points were not found",
    9: "the trusted copies of the outputs failed",
    10: "a reply was waiting before the command was written",
}
"""``ptxgym_timed_exchange``'s failure codes, as ``ExchangeError.status`` carries them."""
WRITE_TIMEOUT, WRITE_ERROR, NO_REPLY, STALLED, EOF, BAD_LENGTH, READ_ERROR = range(1, 8)
NO_CUDA, CUDA_ERROR, AHEAD = range(8, 11)


class ExchangeError(Exception):
    """The exchange failed before a whole reply (and the copies) were in: ``status`` says how."""

    def __init__(self, status: int, cuda_code: int = 0) -> None:
        self.status, self.cuda_code = status, cuda_code
        what = STATUS.get(status, f"unknown status {status}")
        super().__init__(f"{what} (CUDA error {cuda_code})" if cuda_code else what)


@dataclass(frozen=True)
class Exchanged:
    """A finished exchange: the reply frame's bytes and the two walls, in ms."""

    raw: bytes
    request_ms: float
    """Command to the reply's last byte."""
    wall_ms: float
    """Command to the output copies' end (the call's trusted wall)."""


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_why = ""
_cuda: bool | None = None
_buffers = threading.local()


def _library() -> ctypes.CDLL | None:
    global _lib, _why
    with _lock:
        if _lib is None and not _why:
            try:
                from ptxgym.evaluation.runner.build import build_exchange, private_copy

                copy = private_copy(build_exchange())
                lib = ctypes.CDLL(str(copy))
                shutil.rmtree(copy.parent, ignore_errors=True)  # mapped now: the file is not needed
                fn = lib.ptxgym_timed_exchange
                fn.restype = ctypes.c_int
                fn.argtypes = [
                    ctypes.c_int,
                    ctypes.c_char_p,
                    ctypes.c_size_t,
                    ctypes.c_double,
                    ctypes.c_int,
                    ctypes.c_void_p,
                    ctypes.c_size_t,
                    ctypes.c_double,
                    ctypes.c_double,
                    ctypes.c_void_p,
                    ctypes.c_int,
                    ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_double),
                    ctypes.POINTER(ctypes.c_uint64),
                    ctypes.POINTER(ctypes.c_int),
                ]
                lib.ptxgym_exchange_cuda.restype = ctypes.c_int
                _lib = lib
            except Exception as exc:  # noqa: BLE001 - no compiler or a failed build: the Python path measures
                _why = f"the timed exchange library is unavailable: {exc}"[:500]
        return _lib


def unavailable(copies: bool = False) -> str:
    """Why the exchange cannot be used ('' when it can); ``copies``: also the CUDA driver's copies."""
    global _cuda, _why
    lib = _library()
    if lib is None:
        return _why
    if copies:
        with _lock:
            if _cuda is None:
                _cuda = lib.ptxgym_exchange_cuda() == 0
        if not _cuda:
            return STATUS[NO_CUDA]
    return ""


def _reply_buffer() -> ctypes.Array:
    buf = getattr(_buffers, "reply", None)
    if buf is None:
        buf = _buffers.reply = ctypes.create_string_buffer(MAX_REPLY_BYTES)
    return buf


def exchange(
    cmd_fd: int,
    frame: bytes,
    write_timeout_s: float,
    rep_fd: int,
    reply_timeout_s: float,
    grace_s: float,
    copies: Sequence[tuple[int, int, int]] = (),
    stream: int = 0,
) -> Exchanged:
    """Write ``frame``, read one reply frame, run ``copies`` (destination, source, bytes) on ``stream``.

    Raises ``ExchangeError`` (its ``status`` one of this module's codes) when it cannot finish; the caller
    turns that into the worker's usual exceptions (``pool.WorkerHandle.timed_request``).
    """
    lib = _library()
    if lib is None:
        raise RuntimeError(_why)
    flat = (ctypes.c_uint64 * (3 * len(copies)))(*(v for c in copies for v in c))
    times = (ctypes.c_double * 3)()
    size, code = ctypes.c_uint64(0), ctypes.c_int(0)
    buf = _reply_buffer()
    status = lib.ptxgym_timed_exchange(
        cmd_fd,
        frame,
        len(frame),
        write_timeout_s,
        rep_fd,
        ctypes.cast(buf, ctypes.c_void_p),
        MAX_REPLY_BYTES,
        reply_timeout_s,
        grace_s,
        ctypes.cast(flat, ctypes.c_void_p),
        len(copies),
        ctypes.c_void_p(stream or None),
        times,
        ctypes.byref(size),
        ctypes.byref(code),
    )
    if status != 0:
        raise ExchangeError(status, code.value)
    return Exchanged(
        raw=ctypes.string_at(buf, size.value),
        request_ms=(times[1] - times[0]) * 1e3,
        wall_ms=(times[2] - times[0]) * 1e3,
    )
