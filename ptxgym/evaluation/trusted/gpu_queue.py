"""First-come, first-served access to one GPU, with a bounded queue (issue 12's ordering and back-pressure).

Every evaluation holds the GPU alone from its worker's set-up to its last proof: the timing must be
exclusive, and the check and the counted call use the arena's one set of shared buffers, so two
evaluations on one evaluator cannot overlap. What the queue adds over a plain lock:

* **order**: callers are served in the order they arrived (a ticket each), so no env starves behind
  others that keep arriving (a plain ``threading.Lock`` promises no order);
* **back-pressure**: at most ``capacity`` callers wait; one more blocks before it takes a ticket, so a
  producer faster than the GPU (an RL sampler) is slowed down instead of queueing without bound
  (callers blocked there are admitted as room frees, in no particular order among themselves);
* **accounting**: ``turn`` yields nothing but records the seconds a caller waited (``last_wait_s`` per
  thread), which the evaluator reports as the ``queue`` stage of a verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class GpuQueue:
    """FIFO exclusive access with at most ``capacity`` waiting callers."""

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 1:
            raise ValueError(f"the GPU queue needs room for at least one waiting caller, got {capacity}")
        self.capacity = capacity
        self._cond = threading.Condition()
        self._next = 0
        """The ticket the next arrival gets."""
        self._serving = 0
        """The ticket allowed to hold the GPU."""
        self._local = threading.local()
        self.served = 0

    @property
    def waiting(self) -> int:
        """Callers holding a ticket that is not being served yet."""
        with self._cond:
            return max(0, self._next - self._serving - 1)

    @property
    def last_wait_s(self) -> float:
        """Seconds this thread's last ``turn`` waited (admission and ticket), 0 before any."""
        return getattr(self._local, "wait_s", 0.0)

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the GPU for the enclosed block, after every caller that arrived earlier."""
        t0 = time.perf_counter()
        with self._cond:
            # admission: tickets issued but not yet served, beyond the one being served, are the waiters
            while self._next - self._serving > self.capacity:
                self._cond.wait()
            ticket = self._next
            self._next += 1
            while self._serving != ticket:
                self._cond.wait()
        self._local.wait_s = time.perf_counter() - t0
        try:
            yield
        finally:
            with self._cond:
                self._serving += 1
                self.served += 1
                self._cond.notify_all()
