"""Process management with a fake worker: hangs, crashes, exits, garbage and forged replies.

The fake worker speaks the real protocol; these tests cover only the error paths of our own code, and
that a killed worker leaves no process behind (its whole process group goes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from evaltest_helpers import greeted_handle

from ptxgym.evaluation.child_errors import ProtocolViolation, WorkerDied, WorkerTimeout
from ptxgym.evaluation.protocol import Call
from ptxgym.evaluation.trusted.pool import WorkerPool
from ptxgym.evaluation.trusted.verdicts import worker_error_verdict
from ptxgym.records.feedback import EnvironmentInfo, Stage, Status


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _live_members(pgid: int) -> list[int]:
    """Processes of a process group that are not dead (zombies awaiting a reaper count as dead)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def test_echo_round_trip(fake_worker_argv, tmp_path):
    handle = greeted_handle(fake_worker_argv("echo"), tmp_path)
    reply = handle.request(Call(), 10.0)
    assert reply.ok and reply.seq == handle.seq
    handle.kill()
    assert _gone(handle.pid)


def test_file_descriptors_travel_with_a_command(fake_worker_argv, tmp_path):
    """A guard-page blob's allocation reaches the worker as an fd over its stdin socket (SCM_RIGHTS)."""
    handle = greeted_handle(fake_worker_argv("fds"), tmp_path)
    try:
        for text in ("first blob", "second blob"):
            r, w = os.pipe()
            os.write(w, text.encode())
            os.close(w)
            reply = handle.request(Call(), 10.0, fds=[r])
            os.close(r)
            assert reply.ok and reply.error == text  # the worker read our pipe through its own descriptor
    finally:
        handle.kill()


def test_hang_times_out_and_kill_reaps_the_group(fake_worker_argv, tmp_path):
    handle = greeted_handle(fake_worker_argv("child"), tmp_path)
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout) as info:
        handle.request(Call(), 0.5)
    assert 0.4 < time.monotonic() - t0 < 5.0
    assert "no reply within 0.5 s" in info.value.message
    handle.kill()
    assert _gone(handle.pid)
    time.sleep(0.2)
    assert _live_members(handle.pid) == []  # the forked grandchild went with the group


@pytest.mark.parametrize(("mode", "expected"), [("crash", "signal SIGSEGV"), ("exit", "exit code 3")])
def test_death_reports_how(fake_worker_argv, tmp_path, mode, expected):
    handle = greeted_handle(fake_worker_argv(mode), tmp_path)
    with pytest.raises(WorkerDied) as info:
        handle.request(Call(), 10.0)
    assert expected in info.value.message
    if mode == "exit":
        assert "about to exit" in info.value.log_tail
    handle.kill()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("garbage", "malformed reply"), ("wrong_seq", "was awaited"), ("oversize", "oversized reply")],
)
def test_protocol_violations(fake_worker_argv, tmp_path, mode, expected):
    handle = greeted_handle(fake_worker_argv(mode), tmp_path)
    with pytest.raises(ProtocolViolation) as info:
        handle.request(Call(), 10.0)
    assert expected in info.value.message
    handle.kill()


def test_a_reply_sent_before_its_command_is_a_protocol_violation(fake_worker_argv, tmp_path):
    """A worker that answers ahead (sequence numbers are predictable) is caught at the next command.

    Answering ahead while no longer reading commands had the evaluator write into a full pipe, blocked
    forever (a reviewer's find).
    """
    handle = greeted_handle(fake_worker_argv("ahead"), tmp_path)
    try:
        assert handle.request(Call(), 5.0).ok
        time.sleep(0.3)  # the trusted side's work between calls (prepare, checks)
        with pytest.raises(ProtocolViolation, match="before its command was sent"):
            handle.request(Call(), 5.0)
    finally:
        handle.kill()


def test_a_worker_that_stops_reading_commands_times_the_sender_out(fake_worker_argv, tmp_path):
    handle = greeted_handle(fake_worker_argv("hang"), tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(WorkerTimeout, match="took no command"):
            for _ in range(5000):  # the command pipe (64 KiB) fills after a few hundred
                handle.send(Call(), timeout_s=0.5)
        assert time.monotonic() - start < 10.0
    finally:
        handle.kill()


def test_replies_are_read_whatever_the_descriptor_number(fake_worker_argv, tmp_path):
    """``select.select`` refuses descriptors >= 1024 (FD_SETSIZE): a busy evaluator's pipes get there."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        handle = greeted_handle(fake_worker_argv("echo"), tmp_path)
        try:
            assert handle._from.fileno() >= 1024 and handle.request(Call(), 5.0).ok
        finally:
            handle.kill()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_reply_frame_that_never_completes_times_out(fake_worker_argv, tmp_path):
    """A header promising more bytes than follow held the evaluator (and its GPU turn) forever."""
    handle = greeted_handle(fake_worker_argv("stall"), tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(WorkerTimeout, match="stalled after 10 of its 4096 bytes"):
            handle.request(Call(), 1.0)
        assert time.monotonic() - start < 5.0
    finally:
        handle.kill()


@pytest.mark.parametrize(
    ("mode", "status", "words"),
    [
        ("hang", Status.TIMEOUT, "did not return"),
        ("crash", Status.CRASH, "SIGSEGV"),
        ("exit", Status.CRASH, "exit code 3"),
        ("garbage", Status.RUNTIME_ERROR, "protocol"),
    ],
)
def test_worker_errors_become_verdicts(fake_worker_argv, tmp_path, mode, status, words):
    handle = greeted_handle(fake_worker_argv(mode), tmp_path)
    try:
        handle.request(Call(), 0.5)
    except (WorkerTimeout, WorkerDied, ProtocolViolation) as exc:
        verdict = worker_error_verdict(exc, Stage.CHECK, 0.5, EnvironmentInfo(evaluator="test"))
    finally:
        handle.kill()
    assert verdict.status is status
    assert words in verdict.message and "during a correctness call" in verdict.message


def test_pool_replaces_what_it_hands_out(fake_worker_argv, tmp_path):
    pool = WorkerPool(spares=2, argv=fake_worker_argv("echo"), log_dir=tmp_path)
    pool.fill()
    first = pool.take()
    assert pool.spawned == 3
    first.drain(30.0)
    assert first.request(Call(), 10.0).ok
    first.discard()
    primed = []
    pool.primer = lambda handle: primed.append(handle.pid)
    pool.prime_all()
    assert len(primed) == 2
    pids = [h.pid for h in pool._ready]
    pool.close()
    assert all(_gone(p) for p in [*pids, first.pid])


def test_take_without_refill_leaves_the_replacement_to_the_caller(fake_worker_argv, tmp_path):
    """The evaluator takes a worker without starting its replacement, and fills the pool itself.

    No spare may warm beside a timing: the evaluator refills once the subject's timed calls are over.
    """
    pool = WorkerPool(spares=1, argv=fake_worker_argv("echo"), log_dir=tmp_path)
    pool.fill()
    taken = pool.take(refill=False)
    assert pool.spawned == 1 and not pool._ready
    pool.fill()
    assert pool.spawned == 2 and len(pool._ready) == 1
    taken.discard()
    pool.close()


def test_settle_waits_for_every_spare_and_drops_a_dead_one(fake_worker_argv, tmp_path):
    pool = WorkerPool(spares=2, argv=fake_worker_argv("echo"), log_dir=tmp_path)
    pool.fill()
    dead = pool._ready[0]
    os.kill(dead.pid, 9)
    dead.proc.wait(10.0)
    greeted = []

    def ready(handle):
        hello = handle.drain(30.0)  # a dead spare raises WorkerDied here, once its hello is read
        handle.drain(1.0)
        greeted.append((handle.pid, hello))

    assert pool.settle(ready) == 2
    alive = [h for h in pool._ready]
    assert [h.pid for h in alive] == [pid for pid, _ in greeted if pid != dead.pid]
    assert dead.dead and dead not in pool._ready
    pool.close()
