"""Staged reward over the pipeline stages (placeholder weights; the rewards issue tunes them).

Formula: the furthest stage reached pays its value, ``extracted 0.05 < compiled 0.1 < ran 0.2 <
correct 0.5``; a PASSED turn with an executed target instruction adds 0.2 and ``0.3 * min(speedup, 2) / 2``.
NOT_EVALUATED (no GPU) pays only the CPU stages. A correct turn that fails a required target
instruction is paid as "ran", never as "correct".
"""

from __future__ import annotations

from collections.abc import Sequence

from ptxgym.feedback import Feedback, Status, Verdict
from ptxgym.rewards.base import RewardResult, register_reward


def staged_reward(feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
    """See the module docstring."""
    s = feedback.status
    comp = {"extracted": 0.0, "compiled": 0.0, "ran": 0.0, "correct": 0.0, "target": 0.0, "speed": 0.0}
    if s is not Status.EXTRACT_ERROR:
        comp["extracted"] = 0.05
    if s.compiled and s is not Status.INFRA_ERROR:
        comp["compiled"] = 0.05
    if s.ran:
        comp["ran"] = 0.1
    target_ok = feedback.target_executed is Verdict.YES or (
        feedback.target is not None and feedback.target.mode == "off"
    )
    if s is Status.PASSED and target_ok:
        comp["correct"] = 0.3
        comp["target"] = 0.2
        comp["speed"] = 0.3 * min(feedback.speedup or 0.0, 2.0) / 2.0
    return RewardResult(total=sum(comp.values()), components=comp)


@register_reward("staged")
def _factory():
    return staged_reward
