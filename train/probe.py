"""A quick check of what a policy's first answers are worth in the environment (before/after training).

``probe(policy, task_ids)`` plays one turn per task (and prompt variant) through ``gymnasium.make`` and
``env.step``, exactly as an episode's first turn, and reports the share of answers that compiled
(passed extract, source screen and nvcc) and that qualified as correct (``ptxgym.rewards.gate``). With no
GPU evaluator only the compile rate means anything; correctness needs the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ptxgym.rewards import gate


@dataclass
class ProbeResult:
    """Per-task statuses and the rates over all probed turns."""

    statuses: dict[str, str] = field(default_factory=dict)
    compiled: float = 0.0
    correct: float = 0.0

    def line(self) -> str:
        """One human-readable line."""
        detail = ", ".join(f"{k}: {v}" for k, v in self.statuses.items())
        return f"compiled {self.compiled:.2f}, correct {self.correct:.2f} ({detail})"


def probe(
    policy: Any, task_ids: Sequence[str], evaluator: Any = "none", variants: Sequence[str | None] = (None,)
) -> ProbeResult:
    """One env turn per (task, variant) answered by ``policy``; see the module docstring."""
    import gymnasium

    from ptxgym.envs.registration import register_envs
    from ptxgym.evaluation.choose import select_evaluator
    from ptxgym.evaluation.trusted.base import Evaluator
    from ptxgym.policies.history import Conversation
    from ptxgym.records.tasks import get_task

    register_envs()

    own = not isinstance(evaluator, Evaluator)
    ev = select_evaluator(evaluator) if own else evaluator
    res = ProbeResult()
    compiled = correct = 0
    try:
        for tid in task_ids:
            for variant in variants:
                env = gymnasium.make(get_task(tid).env_id, evaluator=ev, max_turns=1, variant=variant)
                obs, info = env.reset(seed=0)
                action = policy.act(obs, Conversation.from_prompt(info["prompt"], task_id=tid))
                _, _, _, _, step_info = env.step(action.text)
                fb = step_info["feedback"]
                res.statuses[f"{tid}/{variant or 'none'}"] = fb.status.value
                compiled += gate.compiled(fb)
                correct += gate.qualifies(fb)
    finally:
        if own:
            ev.close()
    n = max(len(res.statuses), 1)
    res.compiled, res.correct = compiled / n, correct / n
    return res
