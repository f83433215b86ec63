"""The wall budget of one step: loading, checking, timing and proving one candidate.

Each command to a worker has its own limit (``EvalSettings.call_timeout_s``), but that alone lets a
candidate whose every call returns slowly (a printf flood held one step for 219 s on the H200) or that
hangs cost far more GPU time than an honest one. So the step has one wall budget, from one formula
(``StepBudget.for_step``, the only place it is computed), recorded in every verdict's
``details["step_budget"]`` and spelled out in the message of a step that runs past it::

    run_s   = base_s + calls x (slowdown x latency + call_s) + verified x reference_s
    total_s = min(cap_s, run_s + proofs_s)

* ``latency``: the larger of the baseline's median latency and the task's physical floor on this GPU;
* ``calls``: correctness calls + trials x (warm-up + timed calls); ``verified``: the verified timed calls;
* ``reference_s``: the wall time of one reference run, measured when the arena was built (each verified
  timed call runs the reference for its fresh values);
* ``proofs_s``: the proofs' allowance, counted only if memcheck or the executed-instruction proof may run
  for this candidate;
* ``slowdown``, ``base_s``, ``call_s``, ``proofs_s``, ``cap_s``: ``EvalSettings.budget_*``.

The clock starts when the candidate is loaded. The load, the correctness calls and the timed calls must
end within ``min(run_s, total_s)``: every command waits at most what is left of it, so a hang costs at
most that too, not ``call_timeout_s``. The proofs get what is left of ``total_s``. A step past its run
budget is TIMEOUT (the worker is killed), with the formula and its numbers in the message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ptxgym.evaluation.child_errors import WorkerTimeout
from ptxgym.evaluation.trusted.base import EvalSettings, GpuVerdict
from ptxgym.evaluation.trusted.verdicts import worker_error_verdict
from ptxgym.records.feedback import EnvironmentInfo, Stage

FORMULA = (
    "run_s = base_s + calls x (slowdown x latency + call_s) + verified x reference_s; "
    "total_s = min(cap_s, run_s + proofs_s)"
)


@dataclass(frozen=True)
class StepBudget:
    """One step's wall budget and the numbers it came from."""

    latency_ms: float
    """Larger of the baseline's median latency and the physical floor."""
    calls: int
    verified: int
    reference_s: float
    slowdown: float
    base_s: float
    call_s: float
    proofs_s: float
    """The proofs' allowance (0 when no proof may run for this candidate)."""
    cap_s: float
    run_s: float
    """Load, check and time must end within this many seconds of the load (already capped)."""
    total_s: float
    """The whole step, proofs included."""

    @classmethod
    def for_step(
        cls,
        settings: EvalSettings,
        baseline_ms: float | None,
        floor_ms: float,
        reference_s: float,
        proofs: bool,
    ) -> StepBudget:
        """The budget of one step (the formula in the module docstring; its only implementation)."""
        latency_ms = max(floor_ms, baseline_ms or 0.0)
        calls = settings.calls_per_step + settings.probe_calls
        verified = settings.trials * settings.verified_per_trial
        per_call = settings.budget_slowdown * latency_ms / 1e3 + settings.budget_call_s
        run = settings.budget_base_s + calls * per_call + verified * reference_s
        proofs_s = settings.budget_proofs_s if proofs else 0.0
        total = min(settings.budget_cap_s, run + proofs_s)
        return cls(
            latency_ms=latency_ms,
            calls=calls,
            verified=verified,
            reference_s=reference_s,
            slowdown=settings.budget_slowdown,
            base_s=settings.budget_base_s,
            call_s=settings.budget_call_s,
            proofs_s=proofs_s,
            cap_s=settings.budget_cap_s,
            run_s=min(run, total),
            total_s=total,
        )

    def explain(self) -> str:
        """The formula with this step's numbers."""
        return (
            f"load, check and time within {self.run_s:.1f} s = {self.base_s:g} s + {self.calls} calls x "
            f"({self.slowdown:g} x {self.latency_ms:.3f} ms baseline latency + {self.call_s * 1e3:g} ms "
            f"harness) + {self.verified} verified calls x {self.reference_s:.3f} s reference; whole step "
            f"within {self.total_s:.1f} s with {self.proofs_s:g} s for proofs, capped at {self.cap_s:g} s"
        )

    def record(self) -> dict[str, Any]:
        """The form kept in a verdict's details."""
        return {**asdict(self), "formula": FORMULA}


class StepClock:
    """A started budget: how much of the run and of the whole step is left."""

    def __init__(self, budget: StepBudget, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self._clock = clock
        self.start = clock()

    def elapsed(self) -> float:
        """Seconds since the clock started."""
        return self._clock() - self.start

    def run_left(self) -> float:
        """Seconds left for load, check and time (negative once past)."""
        return self.budget.run_s - self.elapsed()

    def total_left(self) -> float:
        """Seconds left for the whole step."""
        return self.budget.total_s - self.elapsed()

    def exclude(self, seconds: float) -> None:
        """Leave out of the step's time ``seconds`` the trusted side spent on its own work meanwhile.

        The candidate's process idled then (``LocalGpuEvaluator._settle_late``: the spares' wait).
        """
        self.start += max(0.0, seconds)


class StepBudgetExceeded(WorkerTimeout):
    """The step ran past its run budget; the command in flight was abandoned."""

    def __init__(self, clock: StepClock, log_tail: str = "") -> None:
        self.budget = clock.budget
        self.elapsed_s = clock.elapsed()
        super().__init__(
            f"the step ran past its wall budget after {self.elapsed_s:.1f} s ({self.budget.explain()})",
            log_tail,
        )


def exceeded_verdict(exc: StepBudgetExceeded, stage: Stage, env: EnvironmentInfo, **extra) -> GpuVerdict:
    """TIMEOUT for a step past its budget, the message stating the budget and how it was derived."""
    verdict = worker_error_verdict(exc, stage, exc.budget.run_s, env, **extra)
    b = exc.budget
    message = (
        f"the candidate did not return in time: its step ran past its wall budget in stage {stage.value} "
        f"after {exc.elapsed_s:.1f} s and its process was killed; its calls were too slow in total (a call "
        f"may take about {b.slowdown:g}x the baseline latency, {b.slowdown * b.latency_ms:.1f} ms, plus "
        f"{b.call_s * 1e3:g} ms of harness time), or it hung or printed without end. Budget: {b.explain()}."
    )
    return verdict.model_copy(update={"message": message})
