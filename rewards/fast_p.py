"""Fast_p: 1 when the turn is correct and more than ``p`` times faster than the baseline.

``r = 1[q and s > p]`` with ``q`` = the turn qualifies (``rewards.gate``). With ``require_target=True``
(default) this is PTXBench's Fast_p^Inst per turn; with ``False`` it is Fast_p (ptxbench.md 7.4,
``Fast_p = (1/N) sum 1[C_i and s_i > p]``). Source: KernelBench's fast_p metric (rlenv.md d.2). The mean
of this reward over turns is the metric itself. ``p`` defaults to 1.0 (beat the library).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxgym.records.feedback import Feedback
from ptxgym.rewards import gate
from ptxgym.rewards.base import RewardResult, register_reward


@dataclass(frozen=True)
class FastPReward:
    """``1[q and s > p]``."""

    p: float = 1.0
    require_target: bool = True

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Reward one turn."""
        s = gate.speedup_of(feedback, self.require_target)
        v = 1.0 if s is not None and s > self.p else 0.0
        return RewardResult(total=v, components={"fast_p": v})


@register_reward("fast_p")
def _fast_p(require_target: bool = True, p: float = 1.0) -> FastPReward:
    return FastPReward(p=p, require_target=require_target)
