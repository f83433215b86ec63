"""Speedup rewards: linear (capped) and clipped log-speedup.

``s = T_baseline / T_candidate`` from the evaluator, used only for a qualifying turn (``rewards.gate``);
any other turn pays 0.

- ``speedup``: ``r = min(s, cap)`` (cap 3 by default). Source: Dr. Kernel's ``calculate_reward_speedup``
  clips the speedup to [0, 3] (rlenv.md d.3); the cap bounds what an undetected timing hack can earn.
- ``log_speedup``: ``r = correct_offset + clip(log2(s), -clip, +clip)`` (clip 2, i.e. 0.25x..4x; the
  offset ``clip`` by default, so 0..4). Symmetric in slowdowns and speedups, so halving the time is worth
  as much at 0.1x as at 1x. Source: the community log-speedup variant ``min(0.5 log2 s, 1)`` (rlenv.md
  d.10); here the slow side is kept so a correct but slow kernel is told how slow it is, and the offset
  keeps every correct kernel at or above a turn that does not qualify (0): with no offset a correct
  0.25x kernel got -2, less than a wrong answer or a caught timing hack (a reviewer's find).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardResult, register_reward


@dataclass(frozen=True)
class SpeedupReward:
    """``min(s, cap)`` on a qualifying turn, else 0."""

    cap: float = 3.0
    require_target: bool = True

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn."""
        s = gate.speedup_of(feedback, self.require_target)
        v = min(s, self.cap) if s is not None else 0.0
        return RewardResult(total=v, components={"speedup": v})


@dataclass(frozen=True)
class LogSpeedupReward:
    """``correct_offset + clip(log2 s, -clip, clip)`` on a qualifying turn, else 0."""

    clip: float = 2.0
    correct_offset: float | None = None
    """Added to a qualifying turn's clipped log; None: ``clip`` (no correct turn below a failed one)."""
    require_target: bool = True

    def __post_init__(self) -> None:
        if self.clip <= 0:
            raise ValueError(f"clip must be > 0, got {self.clip}")

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn."""
        s = gate.speedup_of(feedback, self.require_target)
        if s is None:
            return RewardResult(total=0.0, components={"log_speedup": 0.0, "offset": 0.0})
        log_s = gate.clipped_log2(s, self.clip)
        offset = self.clip if self.correct_offset is None else self.correct_offset
        return RewardResult(total=offset + log_s, components={"log_speedup": log_s, "offset": offset})


@register_reward("speedup")
def _speedup(require_target: bool = True, speedup_cap: float = 3.0) -> SpeedupReward:
    return SpeedupReward(cap=speedup_cap, require_target=require_target)


@register_reward("log_speedup")
def _log_speedup(
    require_target: bool = True, log_clip: float = 2.0, correct_offset: float | None = None
) -> LogSpeedupReward:
    return LogSpeedupReward(clip=log_clip, correct_offset=correct_offset, require_target=require_target)
