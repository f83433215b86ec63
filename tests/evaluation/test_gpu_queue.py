"""The GPU queue: callers served in arrival order, one at a time, at most ``capacity`` waiting (no GPU)."""

from __future__ import annotations

import threading
import time

import pytest

from ptxgym.evaluation.trusted.gpu_queue import GpuQueue


def _wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


def test_callers_are_served_in_arrival_order_one_at_a_time():
    queue = GpuQueue(capacity=16)
    release = threading.Event()
    order: list[int] = []
    inside = []

    def caller(i: int) -> None:
        with queue.turn():
            inside.append(i)
            assert len(inside) - len(order) == 1  # nobody else holds the GPU
            if i == 0:
                release.wait(10)
            order.append(i)

    threads = [threading.Thread(target=caller, args=(0,))]
    threads[0].start()
    _wait_until(lambda: inside == [0])
    for i in range(1, 8):  # each arrives while the earlier ones wait: a ticket each, in this order
        t = threading.Thread(target=caller, args=(i,))
        t.start()
        threads.append(t)
        _wait_until(lambda i=i: queue.waiting == i)
    release.set()
    for t in threads:
        t.join(10)
    assert order == list(range(8)) and queue.served == 8 and queue.waiting == 0


def test_a_full_queue_holds_the_next_caller_back():
    queue = GpuQueue(capacity=1)
    release = threading.Event()
    admitted = []

    def holder() -> None:
        with queue.turn():
            release.wait(10)

    def caller(name: str) -> None:
        with queue.turn():
            admitted.append(name)

    first = threading.Thread(target=holder)
    first.start()
    _wait_until(lambda: queue.waiting == 0 and queue._next == 1)
    waiter = threading.Thread(target=caller, args=("waiter",))
    waiter.start()
    _wait_until(lambda: queue.waiting == 1)
    extra = threading.Thread(target=caller, args=("extra",))
    extra.start()
    time.sleep(0.2)
    assert queue._next == 2  # the extra caller has no ticket yet: the queue is full
    release.set()
    for t in (first, waiter, extra):
        t.join(10)
    assert admitted == ["waiter", "extra"]


def test_the_wait_is_recorded_per_thread():
    queue = GpuQueue()
    with queue.turn():
        pass
    assert 0 <= queue.last_wait_s < 0.1
    release = threading.Event()
    waited = []

    def holder() -> None:
        with queue.turn():
            release.wait(10)

    def caller() -> None:
        with queue.turn():
            waited.append(queue.last_wait_s)

    h = threading.Thread(target=holder)
    h.start()
    _wait_until(lambda: queue._next == 2)
    c = threading.Thread(target=caller)
    c.start()
    time.sleep(0.3)
    release.set()
    h.join(10)
    c.join(10)
    assert waited and waited[0] >= 0.25


def test_a_failing_holder_still_passes_the_gpu_on():
    queue = GpuQueue()
    with pytest.raises(RuntimeError), queue.turn():
        raise RuntimeError("the evaluation failed")
    with queue.turn():
        pass
    assert queue.served == 2


def test_capacity_must_leave_room():
    with pytest.raises(ValueError, match="at least one"):
        GpuQueue(capacity=0)


def test_a_resumed_evaluation_goes_before_new_callers_and_past_a_full_queue():
    queue = GpuQueue(capacity=2)
    release = threading.Event()
    order: list[str] = []

    def holder() -> None:
        with queue.turn():
            release.wait(10)
        order.append("holder")

    def caller(name: str, resume: bool = False) -> None:
        with queue.turn(resume=resume):
            order.append(name)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    _wait_until(lambda: queue._busy)
    for n, name in enumerate(("new-1", "new-2"), start=1):  # then the queue is full: two tickets
        threads.append(threading.Thread(target=caller, args=(name,)))
        threads[-1].start()
        _wait_until(lambda n=n: queue.waiting == n)
    threads.append(threading.Thread(target=caller, args=("proof", True)))
    threads[-1].start()
    _wait_until(lambda: queue.waiting == 3)  # admitted although the new callers fill the queue
    release.set()
    for t in threads:
        t.join(10)
    assert order.index("proof") < order.index("new-1") < order.index("new-2")
    assert queue.served == 4 and queue.waiting == 0
    assert queue.last_wait_s < 0.1  # this thread never waited


def test_a_caller_interrupted_while_waiting_does_not_block_the_line():
    queue = GpuQueue()
    release = threading.Event()
    real_wait = queue._cond.wait
    got: list[str] = []

    def wait(timeout=None):
        if threading.current_thread().name == "victim":
            raise KeyboardInterrupt  # as an asynchronous exception would, mid-wait
        return real_wait(timeout)

    queue._cond.wait = wait  # type: ignore[method-assign]

    def holder() -> None:
        with queue.turn():
            release.wait(10)

    def caller(name: str) -> None:
        try:
            with queue.turn():
                got.append(name)
        except KeyboardInterrupt:
            got.append(f"{name} interrupted")

    h = threading.Thread(target=holder)
    h.start()
    _wait_until(lambda: queue._busy)
    victim = threading.Thread(target=caller, args=("victim",), name="victim")
    victim.start()
    victim.join(10)
    assert queue.waiting == 0  # its abandoned ticket is nobody waiting, and takes no room
    after = threading.Thread(target=caller, args=("after",))
    after.start()
    _wait_until(lambda: queue._next == 3)
    release.set()
    for t in (h, after):
        t.join(10)
    assert got == ["victim interrupted", "after"] and queue.waiting == 0


def test_a_resumed_caller_interrupted_after_waking_lets_the_next_caller_in():
    """The ticket holder re-checked while the resumed caller was still counted, and went back to sleep."""
    queue = GpuQueue()
    real_wait = queue._cond.wait
    go = threading.Event()
    got: list[str] = []

    def wait(timeout=None):
        if threading.current_thread().name == "resumer":
            real_wait()  # woken by the holder's release
            real_wait(0.3)  # the lock let go: the ticket holder re-checks, sees a resumed caller, sleeps
            raise KeyboardInterrupt  # the interrupt lands now
        return real_wait(timeout)

    queue._cond.wait = wait  # type: ignore[method-assign]

    def holder() -> None:
        with queue.turn():
            go.wait(10)

    def resumer() -> None:
        try:
            with queue.turn(resume=True):
                got.append("resumer")
        except KeyboardInterrupt:
            got.append("resumer interrupted")

    def ticket() -> None:
        with queue.turn():
            got.append("ticket")

    h = threading.Thread(target=holder)
    h.start()
    _wait_until(lambda: queue._busy)
    r = threading.Thread(target=resumer, name="resumer")
    r.start()
    _wait_until(lambda: queue._resuming == 1)
    t = threading.Thread(target=ticket, daemon=True)
    t.start()
    _wait_until(lambda: queue._next == 2)
    go.set()
    for thread in (h, r, t):
        thread.join(5)
    assert got == ["resumer interrupted", "ticket"] and not t.is_alive()
