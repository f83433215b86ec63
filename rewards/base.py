"""Reward interface, the by-name registry and the spec parser.

A reward function is ``(feedback of this turn, feedbacks of the earlier turns) -> RewardResult``: pure, no
I/O, no randomness. ``resolve_reward`` turns what a user passes to ``gymnasium.make(..., reward=...)`` into
one:

- a registered name: ``"staged"``, ``"speedup"``, ``"log_speedup"``, ``"fast_p"``, ``"target"``,
  ``"kevin"``, ``"drkernel"``, ``"cuda_agent"``, ``"kernrl"``, ``"correct"``, ``"compiled"``;
- a weighted sum written as text: ``"staged + 0.5*log_speedup + 0*fast_p"`` (a term at weight 0 is still
  computed and logged);
- a mapping ``{"staged": 1.0, "fast_p": 0.5}``;
- any callable with the signature above;
- ``None``: the default, ``"staged"``.

Keyword options (``require_target=False``, ``p=1.2``, ...) go to every named term's factory that accepts
them; an option that no term accepts is an error, so a typo never goes unnoticed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ptxgym.records.feedback import Feedback


@dataclass(frozen=True)
class RewardResult:
    """The scalar reward of a turn and the named components it was made of.

    ``components`` holds every part by name, unweighted, including parts whose weight is 0, so a run can
    log what each term would have paid.
    """

    total: float
    components: dict[str, float] = field(default_factory=dict)


class RewardFn(Protocol):
    """``(feedback of this turn, feedbacks of earlier turns) -> RewardResult``; pure."""

    def __call__(self, feedback: Feedback, history: Sequence[Feedback]) -> RewardResult: ...


RewardFactory = Callable[..., RewardFn]
RewardSpec = str | Mapping[str, float] | RewardFn | None

_REGISTRY: dict[str, RewardFactory] = {}
DEFAULT_REWARD = "staged"


def register_reward(name: str) -> Callable[[RewardFactory], RewardFactory]:
    """Register a factory under ``name`` (decorator). The factory takes keyword options only."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"reward names are lower_snake_case identifiers, got {name!r}")

    def wrap(factory: RewardFactory) -> RewardFactory:
        _REGISTRY[name] = factory
        return factory

    return wrap


def reward_names() -> list[str]:
    """Names ``resolve_reward`` accepts."""
    return sorted(_REGISTRY)


def resolve_reward(spec: RewardSpec = None, **options: Any) -> RewardFn:
    """A reward function from a name, a weighted-sum text, a ``{name: weight}`` mapping or a callable.

    ``options`` are passed to each named term's factory that accepts them (see the module docstring).
    Raises ``KeyError`` for an unknown name and ``ValueError`` for a malformed spec or an unused option.
    """
    if spec is None:
        spec = DEFAULT_REWARD
    if callable(spec) and not isinstance(spec, str):
        if options:
            raise ValueError(f"options {sorted(options)} cannot be applied to a reward callable")
        return spec
    if isinstance(spec, str) and not re.search(r"[+*]", spec):
        terms = {spec.strip(): 1.0}  # a single name: an unknown one is a KeyError listing the registry
    else:
        terms = parse_spec(spec) if isinstance(spec, str) else dict(spec)
    if not terms:
        raise ValueError(f"empty reward spec {spec!r}")
    used: set[str] = set()
    built = {name: _build(name, options, used) for name in terms}
    unused = set(options) - used
    if unused:
        raise ValueError(f"reward options {sorted(unused)} are not accepted by any of {sorted(terms)}")
    if len(terms) == 1:
        ((name, weight),) = terms.items()
        if weight == 1.0:
            return built[name]
    from ptxgym.rewards.rubric import WeightedReward

    return WeightedReward({name: (built[name], terms[name]) for name in terms})


def parse_spec(text: str) -> dict[str, float]:
    """``"staged + 0.5*log_speedup"`` -> ``{"staged": 1.0, "log_speedup": 0.5}``; no name twice."""
    terms: dict[str, float] = {}
    for raw in text.split("+"):
        part = raw.strip()
        m = re.fullmatch(r"(?:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?([a-z][a-z0-9_]*)", part)
        if m is None:
            raise ValueError(
                f"cannot parse reward term {part!r} in {text!r}; "
                "write terms as NAME or WEIGHT*NAME joined by '+'"
            )
        weight, name = float(m.group(1)) if m.group(1) else 1.0, m.group(2)
        if name in terms:
            raise ValueError(f"reward term {name!r} appears twice in {text!r}")
        terms[name] = weight
    return terms


def _build(name: str, options: Mapping[str, Any], used: set[str]) -> RewardFn:
    if name not in _REGISTRY:
        raise KeyError(f"unknown reward {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    factory = _REGISTRY[name]
    accepted = _accepted_options(factory, options)
    used.update(accepted)
    return factory(**accepted)


def _accepted_options(factory: RewardFactory, options: Mapping[str, Any]) -> dict[str, Any]:
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}
