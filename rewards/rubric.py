"""Weighted combination of reward functions; every term is logged by name, even at weight 0.

``total = sum_i w_i * r_i.total``. ``components`` holds, for each term ``name``, its unweighted total under
``name`` and each of its own parts under ``name.part``; the env copies them into ``info``. Source: the
verifiers/OpenEnv ``Rubric`` idea (weighted reward functions, weight-0 functions as metrics; rlenv.md a, f).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ptxgym.records.feedback import Feedback
from ptxgym.rewards.base import RewardFn, RewardResult


@dataclass(frozen=True)
class WeightedReward:
    """``{name: (reward function, weight)}`` -> one reward function."""

    terms: Mapping[str, tuple[RewardFn, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("a WeightedReward needs at least one term")
        for name in self.terms:
            if "." in name:
                raise ValueError(f"term names may not contain '.', got {name!r}")

    @property
    def require_target(self) -> bool:
        """Whether every term requires the target proven (what an env asks of a reward: ``gate``)."""
        return all(getattr(fn, "require_target", True) for fn, _ in self.terms.values())

    @property
    def weights(self) -> dict[str, float]:
        """Term name -> weight."""
        return {name: w for name, (_, w) in self.terms.items()}

    def __call__(self, feedback: Feedback, history: Sequence[Feedback] = ()) -> RewardResult:
        """Evaluate every term and combine them."""
        total = 0.0
        comp: dict[str, float] = {}
        for name, (fn, weight) in self.terms.items():
            res = fn(feedback, history)
            total += weight * res.total
            comp[name] = float(res.total)
            for part, value in res.components.items():
                comp[f"{name}.{part}"] = float(value)
        return RewardResult(total=total, components=comp)
