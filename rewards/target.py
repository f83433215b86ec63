"""Target-instruction bonus: pays when a correct kernel is proven to execute the target family.

``r = bonus * 1[status = PASSED and target credit]`` (bonus 1 by default), the target credit being
``gate.target_credit``: the family executed and its MMA FLOPs are at least ``MIN_MMA_SHARE`` of the task's.
Unlike the other rewards this one always needs run-time proof, whatever ``require_target`` says
elsewhere: an ``unknown`` verdict (profiling failed), static SASS presence alone (a never-launched wgmma
shows up in the SASS, FACTS.md) or a token wgmma (one per call) never pays. Source: PTXBench's
target-instruction turn correctness, the paper's headline metric (ptxbench.md 4.2 and 7.4); Dr. Kernel's
profiling-based bonus for kernels that really run (rlenv.md d.3) is the same idea on Triton.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback, Status
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardResult, register_reward


@dataclass(frozen=True)
class TargetBonus:
    """``bonus`` when PASSED and the target credit is earned (``gate.target_credit``), else 0."""

    bonus: float = 1.0

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn."""
        hit = feedback.status is Status.PASSED and gate.target_credit(feedback)
        v = self.bonus if hit else 0.0
        return RewardResult(total=v, components={"target_executed": v})


@register_reward("target")
def _target(target_bonus: float = 1.0) -> TargetBonus:
    return TargetBonus(bonus=target_bonus)
