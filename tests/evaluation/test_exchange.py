"""The timed exchange off the interpreter's lock (``trusted/exchange.py``, ``runner/exchange.cc``).

Its failures must be the worker's usual exceptions (the fake worker's modes, as ``test_pool.py`` plays
them through ``request``), and its wall must not hold another Python thread's time.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from evaltest_helpers import greeted_handle

from ptxgym.evaluation.child_errors import ProtocolViolation, WorkerDied, WorkerTimeout
from ptxgym.evaluation.protocol import Call
from ptxgym.evaluation.trusted import exchange as ex


@pytest.fixture(scope="module", autouse=True)
def _library():
    why = ex.unavailable()
    if why:
        pytest.fail(f"the exchange library must build on a host with a C++ compiler: {why}")


def test_a_timed_request_gets_the_reply_and_its_walls(fake_worker_argv, tmp_path):
    handle = greeted_handle(fake_worker_argv("slow", "--delay", "0.05"), tmp_path)
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
    """A thread holding the interpreter's lock when the reply arrives lengthened the Python path's wall.

    3 ms after the caller starts, once its command is written, the holder sleeps 40 ms through ``PyDLL``
    (which keeps the lock), while the fake worker answers after 10 ms: the exchange's wall stays near
    10 ms although the caller itself resumes only after the holder (measured, so the lock was really
    held), and the Python path's wall holds the holder's time.
    """
    import ctypes

    holds = ctypes.PyDLL(None).usleep
    go, stop = threading.Event(), threading.Event()

    def holder() -> None:
        while True:
            go.wait()
            go.clear()
            if stop.is_set():
                return
            time.sleep(0.003)  # the command is written meanwhile (the caller is in the exchange or a poll)
            holds(40000)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    handle = greeted_handle(fake_worker_argv("slow", "--delay", "0.01"), tmp_path)
    native, resumed, python = [], [], []
    try:
        for _ in range(7):
            go.set()
            t0 = time.perf_counter()
            native.append(handle.timed_request(Call(), 10.0, (), 0)[2])
            resumed.append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.05)
            go.set()
            t0 = time.perf_counter()
            handle.request(Call(), 10.0)
            python.append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.05)
    finally:
        stop.set()
        go.set()
        thread.join(5.0)
        handle.kill()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    assert med(resumed) >= 38.0, resumed  # the holder had the lock when the reply came
    assert 9.5 <= med(native) < 30.0, native  # the 10 ms answer, without the holder's 40 ms
    assert med(python) >= 38.0, python


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
    handle = greeted_handle(fake_worker_argv(mode), tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(raised) as info:
            handle.timed_request(Call(), 0.5, (), 0)
        assert words in info.value.message
        assert time.monotonic() - start < 10.0
    finally:
        handle.kill()


def test_a_reply_sent_ahead_is_refused_before_the_exchange(fake_worker_argv, tmp_path):
    handle = greeted_handle(fake_worker_argv("ahead"), tmp_path)
    try:
        assert handle.timed_request(Call(), 5.0, (), 0)[0].ok
        time.sleep(0.3)
        with pytest.raises(ProtocolViolation, match="before its command was sent"):
            handle.timed_request(Call(), 5.0, (), 0)
    finally:
        handle.kill()


def _peer(reply: bytes, close: bool = False) -> tuple[int, int, threading.Thread]:
    """Bare pipes (command write end, reply read end) and a thread that answers the first command."""
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()

    def answer() -> None:
        os.read(cmd_r, 64)
        if reply:
            os.write(rep_w, reply)
        if close:
            os.close(rep_w)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return cmd_w, rep_r, thread


def test_the_library_reports_each_failure_by_its_code():
    """The C side's codes, on bare pipes: a closed reader, an ended channel, a bad length, a stall."""
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(ex.ExchangeError) as info:
        ex.exchange(w, b"\0\0\0\1x", 1.0, w, 1.0, 0.1)
    assert info.value.status == ex.WRITE_ERROR
    os.close(w)
    cases = [
        (b"", True, ex.EOF),
        (b"\x7f\xff\xff\xff", False, ex.BAD_LENGTH),
        (b"\0\0\0\x10abc", False, ex.STALLED),
        (b"", False, ex.NO_REPLY),
        (b"\0\0", False, ex.STALLED),  # inside the length
        (b"\xff\xff\xff\xff" + (1 << 40).to_bytes(8, "big"), False, ex.BAD_LENGTH),  # wide, past the cap
        (b"\xff\xff\xff\xfe", False, ex.BAD_LENGTH),  # negative
    ]
    for reply, close, status in cases:
        cmd_w, rep_r, thread = _peer(reply, close)
        t0 = time.monotonic()
        with pytest.raises(ex.ExchangeError) as info:
            ex.exchange(cmd_w, b"\0\0\0\1x", 1.0, rep_r, 0.2, 0.1)
        assert info.value.status == status, (reply, info.value)
        assert time.monotonic() - t0 < 2.0
        thread.join(2.0)
    cmd_w, rep_r, _ = _peer(b"\xff\xff\xff\xff" + (5).to_bytes(8, "big") + b"hello")
    done = ex.exchange(cmd_w, b"\0\0\0\1x", 1.0, rep_r, 1.0, 0.1)
    assert done.raw == b"hello" and 0 <= done.request_ms <= done.wall_ms
    cmd_w, rep_r, _ = _peer(b"\0\0\0\0")
    assert ex.exchange(cmd_w, b"\0\0\0\1x", 1.0, rep_r, 1.0, 0.1).raw == b""  # an empty frame


def test_a_reply_waiting_before_the_command_is_refused_unsent():
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    os.write(rep_w, b"\0\0\0\2{}")  # a whole reply already there: sent ahead of the command
    with pytest.raises(ex.ExchangeError) as info:
        ex.exchange(cmd_w, b"\0\0\0\1x", 1.0, rep_r, 1.0, 0.1)
    assert info.value.status == ex.AHEAD
    os.set_blocking(cmd_r, False)
    with pytest.raises(BlockingIOError):
        os.read(cmd_r, 16)  # the command was never written
    for fd in (cmd_r, cmd_w, rep_r, rep_w):
        os.close(fd)


def test_a_cached_library_someone_else_may_write_is_built_again(tmp_path):
    """The library is loaded into the evaluator: a planted file in the cache is not used.

    A group-writable file or a link is built over; the copy that is loaded is taken through a file
    opened without following links and checked on the open file (``build.private_copy``).
    """
    from ptxgym.evaluation.runner.build import build_exchange, private_copy

    first = build_exchange(tmp_path)
    os.chmod(first, 0o777)
    again = build_exchange(tmp_path)
    assert again == first and (again.stat().st_mode & 0o777) == 0o755
    planted = tmp_path / "planted.so"
    planted.write_bytes(first.read_bytes())
    planted.chmod(0o755)
    first.unlink()
    first.symlink_to(planted)  # ours, 0755, but a link
    again = build_exchange(tmp_path)
    assert not again.is_symlink() and again.is_file()
    link = tmp_path / "link.so"
    link.symlink_to(planted)
    with pytest.raises(OSError):  # ELOOP: never followed
        private_copy(link)
    planted.chmod(0o775)
    with pytest.raises(PermissionError):
        private_copy(planted)
    planted.chmod(0o755)
    copy = private_copy(planted)
    assert copy.read_bytes() == planted.read_bytes() and (copy.parent.stat().st_mode & 0o077) == 0


def test_a_frame_never_sent_leaves_no_command_awaited(fake_worker_argv, tmp_path):
    """A frame made but never sent (its synchronisation or the step's budget failed) is not awaited.

    ``Session._call`` makes the frame before the inputs' synchronisation.
    """
    handle = greeted_handle(fake_worker_argv("echo"), tmp_path)
    try:
        handle.timed_frame(Call(), 5.0)  # made, then abandoned
        assert not handle.pending
        reply, _, _ = handle.timed_request(Call(), 5.0, (), 0)
        assert reply.ok and reply.seq == handle.seq and not handle.pending
        assert handle.request(Call(), 5.0).ok
    finally:
        handle.kill()
