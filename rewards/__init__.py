"""Reward shaping: small pure functions of the Feedback record (and the episode so far).

A reward function takes the turn's Feedback and the Feedbacks of earlier turns of the episode and returns
a ``RewardResult``: the total and every named component (logged even at weight 0). Envs look rewards up
by name with ``resolve_reward`` (``"staged"``, ``"staged + 0.5*log_speedup"``, a mapping or a callable).
No reward pays for correctness or speed unless the turn qualifies (``rewards.gate``: PASSED, with the
target instruction proven where required: executed, and its MMA FLOPs at least ``MIN_MMA_SHARE`` = 0.5 of
the task's FLOPs). FOREIGN_KERNEL (a kernel not from the candidate's module ran during its calls) and
PROOF_FAILED (a proof tool failed or timed out on the candidate) pay nothing in any reward: every credit,
stage credits included, is withheld, so each reward gives them its lowest value.

| name | module | formula (short) |
| --- | --- | --- |
| staged | staged | stage credits extracted/compiled/ran/correct/target + capped speed |
| compiled, correct | staged | 0/1 indicators |
| speedup | speedup | min(s, cap) |
| log_speedup | speedup | clip(log2 s, -c, c) |
| fast_p | fast_p | 1[s > p] |
| target | target | bonus when the target family executed and did >= 0.5 of the FLOPs |
| kevin | kevin | 0.3 c + s c per turn; ``discounted_returns`` over an episode |
| drkernel | drkernel | 0.5 c + 0.5 1[s >= (1+eps) best earlier] |
| cuda_agent, kernrl | milestones | discrete milestones with penalties |

| status | staged | speedup, log_speedup, fast_p, target, kevin, drkernel | cuda_agent | kernrl |
| --- | --- | --- | --- | --- |
| FOREIGN_KERNEL | 0 | 0 | -1 | -0.5 |
| PROOF_FAILED | 0 | 0 | -1 | -0.5 |
"""

from ptxgym.rewards.base import (
    RewardFn,
    RewardResult,
    parse_spec,
    register_reward,
    resolve_reward,
    reward_names,
)
from ptxgym.rewards.drkernel import DrKernelReward
from ptxgym.rewards.fast_p import FastPReward
from ptxgym.rewards.gate import qualifies, speedup_of
from ptxgym.rewards.kevin import KevinReward, discounted_returns, episode_returns
from ptxgym.rewards.milestones import CudaAgentReward, KernrlReward
from ptxgym.rewards.rubric import WeightedReward
from ptxgym.rewards.speedup import LogSpeedupReward, SpeedupReward
from ptxgym.rewards.staged import StagedReward, StageIndicator, staged_reward
from ptxgym.rewards.target import TargetBonus

__all__ = [
    "CudaAgentReward",
    "DrKernelReward",
    "FastPReward",
    "KernrlReward",
    "KevinReward",
    "LogSpeedupReward",
    "RewardFn",
    "RewardResult",
    "SpeedupReward",
    "StageIndicator",
    "StagedReward",
    "TargetBonus",
    "WeightedReward",
    "discounted_returns",
    "episode_returns",
    "parse_spec",
    "qualifies",
    "register_reward",
    "resolve_reward",
    "reward_names",
    "speedup_of",
    "staged_reward",
]
