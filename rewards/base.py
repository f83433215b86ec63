"""Reward interface and the by-name registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ptxgym.feedback import Feedback


@dataclass(frozen=True)
class RewardResult:
    """The scalar reward of a turn and the named components it was made of."""

    total: float
    components: dict[str, float] = field(default_factory=dict)


class RewardFn(Protocol):
    """``(feedback of this turn, feedbacks of earlier turns) -> RewardResult``; pure."""

    def __call__(self, feedback: Feedback, history: Sequence[Feedback]) -> RewardResult: ...


_REGISTRY: dict[str, Callable[[], RewardFn]] = {}


def register_reward(name: str) -> Callable[[Callable[[], RewardFn]], Callable[[], RewardFn]]:
    """Register a factory under ``name`` (decorator)."""

    def wrap(factory: Callable[[], RewardFn]) -> Callable[[], RewardFn]:
        _REGISTRY[name] = factory
        return factory

    return wrap


def reward_names() -> list[str]:
    """Names ``resolve_reward`` accepts."""
    _load_builtins()
    return sorted(_REGISTRY)


def resolve_reward(spec: str | RewardFn | None) -> RewardFn:
    """A reward function from a registered name, a callable, or None (the default, ``staged``)."""
    if spec is None:
        spec = "staged"
    if callable(spec):
        return spec
    _load_builtins()
    if spec not in _REGISTRY:
        raise KeyError(f"unknown reward {spec!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[spec]()


def _load_builtins() -> None:
    from ptxgym.rewards import staged  # noqa: F401 - registers on import
