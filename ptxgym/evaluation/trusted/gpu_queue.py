"""First-come, first-served access to one GPU, with a bounded queue (issue 12's ordering and back-pressure).

What needs the GPU alone. Timing must be exclusive, and from the moment a candidate's code is loaded its
process can put work on the GPU from any thread until it is killed, so every phase that runs candidate
code (load, check, timing, counted calls, and the memcheck and Nsight Compute runs) holds the GPU, and
two candidates' phases never overlap: a candidate's process alive beside another's timing could slow it
down (in a group-relative RL update, slowing the rest of the group pays). What shares the host instead
of the GPU: builds (the build pool), and the start-up of a proof's tool and driver process (the tool's
front end, the interpreter, the imports and the input file) and the read-back of its report, which run
outside any turn (``tools.Gate``). So a candidate's evaluation is one ``turn`` (set-up to the last
counted call) and, when a proof is due, one more short turn per proof run, taken with ``resume=True``.

What the queue adds over a plain lock:

* **order**: new callers are served in the order they arrived (a ticket each), so no env starves
  behind others that keep arriving (a plain ``threading.Lock`` promises no order); a caller *resuming*
  an evaluation already under way (its proof's GPU phase) goes before every new caller, so work in
  flight finishes first and its verdict is not held back by a full queue;
* **back-pressure**: at most ``capacity`` new callers wait; one more blocks before it takes a ticket,
  so a producer faster than the GPU (an RL sampler) is slowed down instead of queueing without bound
  (callers blocked there are admitted as room frees, in no particular order among themselves);
  resuming callers are not counted (each belongs to an evaluation that was admitted);
* **accounting**: ``turn`` yields nothing but records the seconds a caller waited (``last_wait_s`` per
  thread), which the evaluator reports as the ``queue`` stage of a verdict (``proof_queue`` for resumes);
* **cores**: with ``cpus``, the thread holding the GPU runs on those cores for its turn (the ones kept
  apart from builds, ``confine/cores.py``), and where it ran before after it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ptxgym.confine import cores

log = logging.getLogger(__name__)


class GpuQueue:
    """FIFO exclusive access with at most ``capacity`` waiting callers, resumed evaluations first."""

    def __init__(self, capacity: int = 64, cpus: tuple[int, ...] = ()) -> None:
        if capacity < 1:
            raise ValueError(f"the GPU queue needs room for at least one waiting caller, got {capacity}")
        self.capacity = capacity
        self.cpus = cpus
        """Where the thread holding the GPU runs during its turn (empty: where it was)."""
        self._cond = threading.Condition()
        self._next = 0
        """The ticket the next new caller gets."""
        self._serving = 0
        """The ticket of the next new caller allowed to hold the GPU."""
        self._busy = False
        self._abandoned: set[int] = set()
        """Tickets whose caller stopped waiting (an exception in ``wait``): skipped when reached."""
        self._resuming = 0
        """Resuming callers waiting (served before any ticket)."""
        self._local = threading.local()
        self.served = 0

    @property
    def waiting(self) -> int:
        """Callers waiting for the GPU: new callers holding a ticket, and resuming ones."""
        with self._cond:
            return self._next - self._serving - len(self._abandoned) + self._resuming

    @property
    def last_wait_s(self) -> float:
        """Seconds this thread's last ``turn`` waited (admission and ticket), 0 before any."""
        return getattr(self._local, "wait_s", 0.0)

    @contextmanager
    def turn(self, resume: bool = False) -> Iterator[None]:
        """Hold the GPU for the enclosed block, after every new caller that arrived earlier.

        ``resume``: a later GPU phase of an evaluation already served once goes before every new caller.
        """
        t0 = time.perf_counter()
        with self._cond:
            if resume:
                self._resuming += 1
                try:
                    while self._busy:
                        self._cond.wait()
                finally:
                    self._resuming -= 1
                    self._cond.notify_all()  # a ticket holder may have gone back to sleep behind it
            else:
                while self._next - self._serving - len(self._abandoned) >= self.capacity:  # admission
                    self._cond.wait()
                ticket = self._next
                self._next += 1
                try:
                    while self._busy or self._resuming or self._serving != ticket:
                        self._cond.wait()
                except BaseException:
                    self._abandoned.add(ticket)  # interrupted while waiting: its turn is skipped
                    self._skip()
                    raise
                self._serving += 1
            self._busy = True
        self._local.wait_s = time.perf_counter() - t0
        before: tuple[int, ...] = ()
        try:
            if self.cpus:
                before = tuple(os.sched_getaffinity(0))
                if not cores.pin(0, self.cpus):
                    before = ()
            yield
        finally:
            if before and not cores.pin(0, before):
                log.warning("a thread could not leave the GPU turn's cores %s", self.cpus)
            with self._cond:
                self._busy = False
                self.served += 1
                self._skip()
                self._cond.notify_all()

    def _skip(self) -> None:
        """Pass over abandoned tickets at the head of the line (called with the lock held)."""
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        self._cond.notify_all()
