"""Discrete milestone rewards with penalties, as two published kernel-RL systems define them.

Both treat a PASSED turn that does not qualify (target instruction not proven where required, see
``rewards.gate``) and a TIMING_ANOMALY as incorrect. NOT_EVALUATED (no GPU) and an INFRA_ERROR before
the candidate's code was loaded (the evaluator failed) carry no information about the candidate and pay 0.
FOREIGN_KERNEL, PROOF_FAILED and an INFRA_ERROR after it was loaded (``Feedback.candidate_ran``) get the
lowest value (``gate.forfeited``: -1 and -0.5), never more than an honest failure.

``cuda_agent`` (CUDA Agent, arXiv 2602.24286; rlenv.md d.5)::

    r = -1 (failed or incorrect) | +1 (correct) | +2 (correct and s > 1)

The paper's +3 tier (faster than both eager and torch.compile) has no counterpart: each ptxgym task has
one library baseline.

``kernrl`` (OpenEnv kernrl environment as merged; rlenv.md d.10)::

    r = -0.5 (did not compile) | -0.25 (compiled, not correct)
      | 0.5 (s - 1) (correct, s <= 1) | min(s - 1, 2) (correct, s > 1)

As published, it pays a correct kernel slower than 0.5x less than a compiled wrong one (-0.25), so on a
hard task a policy trained on it gains by failing; kept for comparison with that system (the rewards of
our own design order every correct turn above every failed one: tests/rewards/test_reward_catalogue.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback, Status
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardResult, register_reward


def _neutral(feedback: Feedback) -> bool:
    """No information about the candidate: no GPU, or the evaluator's own fault (``gate.evaluator_fault``)."""
    return feedback.status is Status.NOT_EVALUATED or gate.evaluator_fault(feedback)


@dataclass(frozen=True)
class CudaAgentReward:
    """-1 / +1 / +2 milestones."""

    require_target: bool = True

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn."""
        if _neutral(feedback):
            v = 0.0
        else:
            s = gate.speedup_of(feedback, self.require_target)
            q = gate.qualifies(feedback, self.require_target)
            v = -1.0 if not q else (2.0 if s is not None and s > 1.0 else 1.0)
        return RewardResult(total=v, components={"milestone": v})


@dataclass(frozen=True)
class KernrlReward:
    """-0.5 / -0.25 / speed-shaped."""

    require_target: bool = True

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn."""
        if _neutral(feedback):
            v = 0.0
        elif not gate.compiled(feedback):
            v = -0.5
        elif not gate.qualifies(feedback, self.require_target):
            v = -0.25
        else:
            s = gate.speedup_of(feedback, self.require_target) or 0.0
            v = 0.5 * (s - 1.0) if s <= 1.0 else min(s - 1.0, 2.0)
        return RewardResult(total=v, components={"kernrl": v})


@register_reward("cuda_agent")
def _cuda_agent(require_target: bool = True) -> CudaAgentReward:
    return CudaAgentReward(require_target=require_target)


@register_reward("kernrl")
def _kernrl(require_target: bool = True) -> KernrlReward:
    return KernrlReward(require_target=require_target)
