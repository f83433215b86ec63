"""Dr. Kernel-style correctness plus improvement, over the best earlier turn of the episode.

Formula, with ``q_t`` = the turn qualifies (``rewards.gate``) and ``s_t`` its speedup::

    best_{<t} = max(initial_reference, max{ s_j : j < t, q_j })
    r_t = w_correct * q_t + w_improve * q_t * 1[s_t >= (1 + eps) * best_{<t}]

Defaults ``w_correct = w_improve = 0.5``, ``eps = 0.01``, ``initial_reference = 1.0``. On the first
correct turn the reference is the baseline, which is exactly Dr. Kernel's default reward
``0.5 c + 0.5 1[s >= 1 + eps]`` (KernelGYM ``calculate_reward_weighted``; rlenv.md d.3); later turns are
paid for beating the episode's best so far, so a model cannot farm the improvement term by resubmitting
its best kernel. ``initial_reference = 0`` pays the first correct kernel as an improvement too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardResult, register_reward


@dataclass(frozen=True)
class DrKernelReward:
    """Correctness plus a bonus for improving on the best earlier speedup (module docstring)."""

    correct_weight: float = 0.5
    improve_weight: float = 0.5
    epsilon: float = 0.01
    initial_reference: float = 1.0
    require_target: bool = True

    def best_before(self, history: Sequence[Feedback]) -> float:
        """The reference speedup a turn must beat: the best qualifying earlier turn, or the initial one."""
        earlier = [gate.speedup_of(fb, self.require_target) for fb in history]
        return max([self.initial_reference, *(s for s in earlier if s is not None)])

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn given the earlier turns of its episode."""
        q = gate.qualifies(feedback, self.require_target)
        s = gate.speedup_of(feedback, self.require_target)
        improved = s is not None and s >= (1.0 + self.epsilon) * self.best_before(history)
        comp = {"correct": self.correct_weight * q, "improved": self.improve_weight * improved}
        comp = {k: float(v) for k, v in comp.items()}
        return RewardResult(total=sum(comp.values()), components=comp)


@register_reward("drkernel")
def _drkernel(
    require_target: bool = True, epsilon: float = 0.01, initial_reference: float = 1.0
) -> DrKernelReward:
    return DrKernelReward(epsilon=epsilon, initial_reference=initial_reference, require_target=require_target)
