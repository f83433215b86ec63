"""The timed exchange off the interpreter's lock (``trusted/exchange.py``, ``runner/exchange.cc``).

Its failures must be the worker's usual exceptions (the fake worker's modes, as ``test_pool.py`` plays
them through ``request``), and its wall must not hold another Python thread's time.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from ptxgym.evaluation.child_errors import ProtocolViolation, WorkerDied, WorkerTimeout
from ptxgym.evaluation.protocol import Call
from ptxgym.evaluation.trusted import exchange as ex
from ptxgym.evaluation.trusted.pool import WorkerHandle


@pytest.fixture(scope="module", autouse=True)
def _library():
    why = ex.unavailable()
    if why:
        pytest.fail(f"the exchange library must build on a host with a C++ compiler: {why}")


def _handle(argv: list[str], tmp_path) -> WorkerHandle:
    handle = WorkerHandle(argv, None, tmp_path)
    assert handle.receive(30.0).ok
    return handle


def test_a_timed_request_gets_the_reply_and_its_walls(fake_worker_argv, tmp_path):
    handle = _handle(fake_worker_argv("slow", "--delay", "0.05"), tmp_path)
    try:
        for _ in range(3):
            reply, request_ms, wall_ms = handle.timed_request(Call(), 10.0, (), 0)
            assert reply.ok and reply.seq == handle.seq and reply.call is not None
            assert 45.0 <= request_ms <= wall_ms < 2000.0  # the worker's 50 ms delay is inside
        assert not handle.pending
        assert handle.request(Call(), 10.0).ok  # the plain path goes on where the exchange left it
    finally:
        handle.kill()


def test_the_wall_holds_no_other_python_threads_time(fake_worker_argv, tmp_path):
    """A thread running Python without pause held up the reply's reader in the Python path.

    With the interpreter's switch interval at 50 ms, a reply read in Python waits for the busy thread
    to let go of the lock; read in the exchange, it does not.
    """
    import sys

    handle = _handle(fake_worker_argv("echo"), tmp_path)
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.05)
    busy = threading.Thread(target=spin, daemon=True)
    busy.start()
    try:
        native, python = [], []
        for _ in range(8):
            native.append(handle.timed_request(Call(), 10.0, (), 0)[2])
            t0 = time.perf_counter()
            handle.request(Call(), 10.0)
            python.append((time.perf_counter() - t0) * 1e3)
    finally:
        stop.set()
        busy.join()
        sys.setswitchinterval(old)
        handle.kill()
    native.sort()
    python.sort()
    assert native[4] < 20.0, native  # the fake worker answers in well under a millisecond
    assert python[4] > 10 * native[4], (python, native)  # ~50 ms against ~0.2 on a 2-core host


@pytest.mark.parametrize(
    ("mode", "raised", "words"),
    [
        ("hang", WorkerTimeout, "no reply within 0.5 s"),
        ("crash", WorkerDied, "signal SIGSEGV"),
        ("exit", WorkerDied, "exit code 3"),
        ("garbage", ProtocolViolation, "malformed reply"),
        ("wrong_seq", ProtocolViolation, "was awaited"),
        ("oversize", ProtocolViolation, "oversized reply"),
        ("stall", WorkerTimeout, "stalled"),
    ],
)
def test_failures_are_the_workers_usual_exceptions(fake_worker_argv, tmp_path, mode, raised, words):
    handle = _handle(fake_worker_argv(mode), tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(raised) as info:
            handle.timed_request(Call(), 0.5, (), 0)
        assert words in info.value.message
        assert time.monotonic() - start < 10.0
    finally:
        handle.kill()


def test_a_reply_sent_ahead_is_refused_before_the_exchange(fake_worker_argv, tmp_path):
    handle = _handle(fake_worker_argv("ahead"), tmp_path)
    try:
        assert handle.timed_request(Call(), 5.0, (), 0)[0].ok
        time.sleep(0.3)
        with pytest.raises(ProtocolViolation, match="before its command was sent"):
            handle.timed_request(Call(), 5.0, (), 0)
    finally:
        handle.kill()


def test_the_library_reports_each_failure_by_its_code():
    """The C side's codes, on bare pipes: a closed reader, an ended channel, a bad length, a stall."""
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(ex.ExchangeError) as info:
        ex.exchange(w, b"\0\0\0\1x", 1.0, w, 1.0, 0.1)
    assert info.value.status == ex.WRITE_ERROR
    os.close(w)

    def peer(reply: bytes, close: bool) -> tuple[int, int]:
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        os.write(rep_w, reply)
        if close:
            os.close(rep_w)
        return cmd_w, rep_r

    cases = [
        (b"", True, ex.EOF),
        (b"\x7f\xff\xff\xff", False, ex.BAD_LENGTH),
        (b"\0\0\0\x10abc", False, ex.STALLED),
        (b"", False, ex.NO_REPLY),
    ]
    for reply, close, status in cases:
        cmd_w, rep_r = peer(reply, close)
        t0 = time.monotonic()
        with pytest.raises(ex.ExchangeError) as info:
            ex.exchange(cmd_w, b"\0\0\0\1x", 1.0, rep_r, 0.2, 0.1)
        assert info.value.status == status, (reply, info.value)
        assert time.monotonic() - t0 < 2.0
    cmd_w, rep_r = peer(b"\xff\xff\xff\xff" + (5).to_bytes(8, "big") + b"hello", False)
    done = ex.exchange(cmd_w, b"\0\0\0\1x", 1.0, rep_r, 1.0, 0.1)
    assert done.raw == b"hello" and 0 <= done.request_ms <= done.wall_ms


def test_a_worker_that_stops_reading_commands_times_the_exchange_out(fake_worker_argv, tmp_path):
    """Its command pipe full, the exchange's write waits the call's time limit, not longer."""
    handle = _handle(fake_worker_argv("hang"), tmp_path)
    try:
        for _ in range(5000):  # fill the command pipe (64 KiB) without waiting for replies
            try:
                handle.send(Call(), timeout_s=0.2)
            except WorkerTimeout:
                break
        handle.pending.clear()  # the exchange must not drain replies that never come
        start = time.monotonic()
        with pytest.raises(WorkerTimeout, match="took no command within 0.5 s"):
            handle.timed_request(Call(), 0.5, (), 0)
        assert time.monotonic() - start < 3.0
    finally:
        handle.kill()
