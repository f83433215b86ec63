"""Kevin-style score per turn and the discounted multi-turn return.

Per turn (Kevin-32B, arXiv 2507.11948; rlenv.md d.1)::

    S_t = correct_bonus * q_t + s_t * q_t        (correct_bonus = 0.3)

with ``q_t`` = the turn qualifies (``rewards.gate``) and ``s_t`` its speedup (optionally capped: Kevin
itself does not cap; ``speedup_cap`` bounds what an undetected timing hack can earn).

Over a finished episode of ``T`` turns, each turn is credited with the discounted sum of its own and all
later scores (Kevin's "sum" aggregation, gamma = 0.4)::

    R_t = sum_{j >= t} gamma^(j - t) * S_j        i.e.  R_t = S_t + gamma * R_{t+1},  R_T = 0

so a turn that sets up a later correct, fast kernel shares in its score. ``discounted_returns`` works on
any per-turn scores (the ``rewards`` of a trajectory under any reward function); ``episode_returns``
scores the turns first. The env pays ``S_t`` per step; the trainers (``ptxgym.train.rollout``) turn the
scores of a finished episode into ``R_t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardFn, RewardResult, register_reward

KEVIN_GAMMA = 0.4


@dataclass(frozen=True)
class KevinReward:
    """``S_t = correct_bonus * q + min(s, cap) * q``."""

    correct_bonus: float = 0.3
    speedup_cap: float | None = None
    require_target: bool = True

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Score one turn."""
        s = gate.speedup_of(feedback, self.require_target)
        q = gate.qualifies(feedback, self.require_target)
        if s is not None and self.speedup_cap is not None:
            s = min(s, self.speedup_cap)
        comp = {"correct": self.correct_bonus * q, "speedup": s if s is not None else 0.0}
        comp = {k: float(v) for k, v in comp.items()}
        return RewardResult(total=sum(comp.values()), components=comp)


def discounted_returns(scores: Sequence[float], gamma: float = KEVIN_GAMMA) -> list[float]:
    """``R_t = S_t + gamma * R_{t+1}`` for every turn of one finished episode (same length as ``scores``)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    out = [0.0] * len(scores)
    acc = 0.0
    for t in range(len(scores) - 1, -1, -1):
        acc = float(scores[t]) + gamma * acc
        out[t] = acc
    return out


def episode_scores(feedbacks: Sequence[Feedback], reward: RewardFn) -> list[float]:
    """Score each turn of an episode with ``reward``, each seeing the turns before it as history."""
    return [reward(fb, feedbacks[:t]).total for t, fb in enumerate(feedbacks)]


def episode_returns(
    feedbacks: Sequence[Feedback], reward: RewardFn | None = None, gamma: float = KEVIN_GAMMA
) -> list[float]:
    """Discounted returns of an episode's turns, scored with ``reward`` (default: the Kevin score)."""
    return discounted_returns(episode_scores(feedbacks, reward or KevinReward()), gamma)


@register_reward("kevin")
def _kevin(
    require_target: bool = True, correct_bonus: float = 0.3, kevin_speedup_cap: float | None = None
) -> KevinReward:
    return KevinReward(
        correct_bonus=correct_bonus, speedup_cap=kevin_speedup_cap, require_target=require_target
    )
