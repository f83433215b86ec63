"""A worker's calibration serving the next workers of the same arena (``EvalSettings.calibration_reuse``).

Every subject's worker measures the harness's per-call overhead before its candidate is loaded
(``Session.calibrate``: a trivial no-op, a probe, a no-op as long as the baseline's call), and the wall
cross-check compares each timed call against it. That cost 0.08-0.13 s of every GPU turn on an H100
(``worker_calibrate``: the GEMM expert 0.09, the MHA forward expert 0.12-0.13,
``bench/results/gpu_cost_2026-12-07_s57*_h100.txt``), about a tenth of what a verified candidate costs
beyond its timed floor. The overhead belongs to the runner binary, the cores it is pinned to and the
arena's buffers, not to one process: three workers of one evaluator calibrated the GEMM's matched no-op
at 0.5336-0.5431 ms, a spread of 0.01 ms against the cross-check's allowance of 0.3 ms
(``bench/results/wall_allowance_2026-12-06_parts_h100.txt``).

So a calibration measured in one worker serves up to ``uses`` workers in all (its own included), within
``max_age_s`` of its measurement; then the next worker measures again. Nothing a candidate does reaches
it: every calibration is still measured before any candidate code is loaded in the worker that measures
it, and a reused one was measured in a process that candidate never ran in. What reuse gives up is
only the figure's freshness: a host whose load changed since (a build storm on the timing cores) is
calibrated again after at most ``uses`` workers or ``max_age_s``, and a timing that fails the
cross-check by its allowance alone is timed once more (``Session.retime``) as before.

Kept per key: the arena (its id: a rebuilt arena calibrates again), whether the subject is a candidate
or the baseline (never sharing one, so that the baseline's worker gets exactly the commands of a
candidate's first worker: one timing path), the process kind (native runner or Python worker), whether
the worker is sandboxed and how (the calibration runs under the candidate's syscall filter), the timing
backend and the matched calibration's target (the baseline's latency).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ptxgym.evaluation.trusted.timing import Calibration

MAX_KEYS = 32
"""Calibrations kept at once (the oldest key goes first: arenas come and go)."""


@dataclass
class Kept:
    """One measured calibration and how often it has served."""

    cal: Calibration
    matched: Calibration | None
    at: float
    """When it was measured (``time.monotonic``)."""
    served: int = 1
    """Workers it has served, the one that measured it included."""


class CalibrationReuse:
    """Calibrations by key, each serving at most ``uses`` workers within ``max_age_s`` of its measurement."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._kept: collections.OrderedDict[Hashable, Kept] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock

    def take(self, key: Hashable, uses: int, max_age_s: float) -> tuple[Kept, str] | None:
        """A calibration this key's next worker may use instead of measuring one, and a note saying so.

        None: there is none, or it has served ``uses`` workers, or it is older than ``max_age_s`` (then it
        is dropped: the worker measures again and ``put`` keeps the new one).
        """
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            age = self._clock() - kept.at
            if kept.served >= uses or age > max_age_s:
                del self._kept[key]
                return None
            kept.served += 1
            note = (
                f"reused: measured {age:.1f} s ago in an earlier worker of this arena, before its "
                f"candidate loaded (worker {kept.served} of at most {uses})"
            )
            return kept, note

    def put(self, key: Hashable, cal: Calibration, matched: Calibration | None) -> None:
        """Keep the calibration a worker just measured for the next workers of its key."""
        with self._lock:
            self._kept.pop(key, None)
            self._kept[key] = Kept(cal, matched, self._clock())
            while len(self._kept) > MAX_KEYS:
                self._kept.popitem(last=False)
