"""Staged reward: credit for each pipeline stage the turn got through.

Formula (indicators 1[.], ``q`` = the turn qualifies, see ``rewards.gate``)::

    r = w_extract * 1[extracted] + w_compile * 1[compiled] + w_ran * 1[ran]
      + w_correct * q + w_target * q * 1[target credit]
      + w_speed * q * min(s, s_cap) / s_cap
      + w_static * 1[target opcode in SASS]

Defaults 0.05, 0.10, 0.10, 0.30, 0.15, 0.30 (``s_cap`` = 2), ``w_static`` = 0, so the total lies in
[0, 1] and a correct, target-executing kernel at 2x the baseline earns 1. The target credit
(``gate.target_credit``) is the family executed and doing at least ``MIN_MMA_SHARE`` of the task's FLOPs.
FOREIGN_KERNEL and PROOF_FAILED turns earn 0 in every part (``gate.forfeited``). The static-target part is
logged but unpaid by default: a never-launched wgmma puts the opcode in the SASS (FACTS.md), so paying it
invites a hack; raise it only for CPU-only shaping.

Source: the staged "format -> compile -> correctness -> speed" presets of kernel-RL reward code
(rlenv.md d.10: TritonForge +0.1 compile / +0.3 correct / speed bonus; the community log-speedup staged
presets), with PTXBench's target-instruction requirement (ptxbench.md 7.4) as a gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardResult, register_reward


@dataclass(frozen=True)
class StagedReward:
    """Stage credits (see the module docstring); every stage is logged as a component."""

    extracted: float = 0.05
    compiled: float = 0.10
    ran: float = 0.10
    correct: float = 0.30
    target: float = 0.15
    speed: float = 0.30
    static_target: float = 0.0
    speedup_cap: float = 2.0
    require_target: bool = True

    def __post_init__(self) -> None:
        if self.speedup_cap <= 0:
            raise ValueError(f"speedup_cap must be > 0, got {self.speedup_cap}")

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn; ``history`` is unused (the staged reward is Markov)."""
        s = gate.speedup_of(feedback, self.require_target)
        q = gate.qualifies(feedback, self.require_target)
        comp = {
            "extracted": self.extracted * gate.extracted(feedback),
            "compiled": self.compiled * gate.compiled(feedback),
            "ran": self.ran * gate.ran(feedback),
            "correct": self.correct * q,
            "target": self.target * (q and gate.target_credit(feedback)),
            "speed": self.speed * (min(s, self.speedup_cap) / self.speedup_cap if s is not None else 0.0),
            "static_target": self.static_target * gate.static_target(feedback),
        }
        comp = {k: float(v) for k, v in comp.items()}
        return RewardResult(total=sum(comp.values()), components=comp)


def staged_reward(feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
    """The staged reward with its default weights."""
    return StagedReward()(feedback, history)


@register_reward("staged")
def _staged(
    require_target: bool = True, speedup_cap: float = 2.0, static_target: float = 0.0
) -> StagedReward:
    return StagedReward(require_target=require_target, speedup_cap=speedup_cap, static_target=static_target)


@dataclass(frozen=True)
class StageIndicator:
    """1 when the turn got through one stage (``compiled`` or ``correct``), else 0; for metrics and CPU RL."""

    stage: str
    require_target: bool = True

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Indicator of the stage."""
        if self.stage == "compiled":
            v = gate.compiled(feedback)
        elif self.stage == "correct":
            v = gate.qualifies(feedback, self.require_target)
        else:
            raise ValueError(f"unknown stage {self.stage!r}; use compiled or correct")
        return RewardResult(total=float(v), components={self.stage: float(v)})


@register_reward("compiled")
def _compiled() -> StageIndicator:
    return StageIndicator("compiled")


@register_reward("correct")
def _correct(require_target: bool = True) -> StageIndicator:
    return StageIndicator("correct", require_target=require_target)
