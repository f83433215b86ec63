"""The one rule every reward obeys before it pays for correctness or speed.

A turn *qualifies* when its status is PASSED and, where the task requires one (``require_target=True``,
the default), the target instruction family is proven:

| ``feedback.target.mode`` | qualifies when |
| --- | --- |
| ``executed`` (default) | the target credit (``Feedback.target_credited``): ``target.executed == yes`` |
|  | (predicate-true threads counted at run time) and ``target.work == yes`` (the family's executed MMA |
|  | FLOPs are at least ``MIN_MMA_SHARE`` = 0.5 of the task's FLOPs); a v1 record: ``executed == yes`` |
| ``static`` | ``target.static`` is true (the evaluator was configured to accept SASS presence) |
| ``off`` | always (the evaluator was configured not to check) |
| no target record | never |

So NOT_EVALUATED (no GPU), TIMING_ANOMALY, every INCORRECT_*, an ``unknown`` or ``no`` verdict, and a
kernel whose wgmma does a token part of the work (one per call, a decoy) pay no correctness and no
speed. This is PTXBench's "target-instruction turn correctness" (ptxbench.md 7.4: C_i and I_i, NCU
unknowns never count), with the work share added. Stage credit (extracted, compiled, ran) is not gated
by the target: it is how a staged reward shapes the failures.

Forfeits. FOREIGN_KERNEL (a kernel not from the candidate's module ran during its calls) and PROOF_FAILED
(a proof tool failed or timed out on the candidate) pay nothing at all: ``extracted``, ``compiled`` and
``ran`` are false for them too, so every reward gives them its lowest value (0 for the staged, speed and
bonus rewards; the failure penalty of the milestone rewards: -1 for cuda_agent, -0.5 for kernrl). So does
an INFRA_ERROR after the candidate's code was loaded (``Feedback.candidate_ran``: an exception in the
evaluator's proofs, a Ray actor that died running it twice): a candidate that breaks the evaluator's own
code must not earn more than one its proofs caught. One before that (a worker that could not start, a
build tool, the machine) keeps its build credit; training drops it (``skip_infra``).

``speedup_of`` is the speedup a reward may use: a finite positive number for a qualifying turn, else None.
"""

from __future__ import annotations

import math

from ptxgym.records.feedback import Feedback, Status

FORFEITS = frozenset({Status.FOREIGN_KERNEL, Status.PROOF_FAILED})
"""Statuses that pay nothing, not even stage credit (see the module docstring)."""


def evaluator_fault(feedback: Feedback) -> bool:
    """An INFRA_ERROR from before the candidate's code was loaded: the evaluator's fault alone."""
    return feedback.status is Status.INFRA_ERROR and not feedback.candidate_ran


def forfeited(feedback: Feedback) -> bool:
    """Whether the turn forfeits every credit (FOREIGN_KERNEL, PROOF_FAILED; INFRA_ERROR once it ran)."""
    if feedback.status is Status.INFRA_ERROR:
        return feedback.candidate_ran
    return feedback.status in FORFEITS


def target_credit(feedback: Feedback) -> bool:
    """The target family executed and did the task's work (``Feedback.target_credited``)."""
    return not forfeited(feedback) and feedback.target_credited


def target_proven(feedback: Feedback) -> bool:
    """Whether the target-instruction requirement is met under the evaluator's configured mode."""
    t = feedback.target
    if t is None:
        return False
    if t.mode == "off":
        return True
    if t.mode == "static":
        return bool(t.static)
    return target_credit(feedback)


def qualifies(feedback: Feedback, require_target: bool = True) -> bool:
    """PASSED, and the target instruction proven where required (see the module docstring)."""
    if feedback.status is not Status.PASSED:
        return False
    return target_proven(feedback) if require_target else True


def speedup_of(feedback: Feedback, require_target: bool = True) -> float | None:
    """Speedup over the baseline of a qualifying turn (finite, > 0), else None."""
    if not qualifies(feedback, require_target):
        return None
    s = feedback.speedup
    if s is None or not math.isfinite(s) or s <= 0.0:
        return None
    return float(s)


def extracted(feedback: Feedback) -> bool:
    """A code block was found in the response (false for a forfeited turn)."""
    if forfeited(feedback):
        return False
    if feedback.status is Status.INFRA_ERROR:
        return feedback.source_sha256 is not None
    return feedback.status is not Status.EXTRACT_ERROR


def compiled(feedback: Feedback) -> bool:
    """The candidate passed the source screen and nvcc produced a shared object (false when forfeited)."""
    if forfeited(feedback):
        return False
    if feedback.status is Status.INFRA_ERROR:
        return feedback.compile is not None and feedback.compile.ok
    return feedback.status.compiled


def ran(feedback: Feedback) -> bool:
    """The candidate ran to completion at least once without a runtime fault (false when forfeited)."""
    return feedback.status.ran and not forfeited(feedback)


def static_target(feedback: Feedback) -> bool:
    """A target-family opcode appears in the SASS (necessary, never sufficient: see FACTS.md)."""
    return compiled(feedback) and feedback.sass is not None and feedback.sass.static_target


def clipped_log2(x: float, clip: float) -> float:
    """``clip(log2(x), -clip, clip)``."""
    return max(-clip, min(clip, math.log2(x)))
