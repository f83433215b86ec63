"""Many ptxgym envs at once: Gymnasium vector envs, and a batch step over envs sharing an evaluator.

Two ways, by where the envs live:

- ``make_vec(env_id, num_envs, vectorization_mode="sync"|"async", ...)``: ``gymnasium.make_vec`` with
  what ptxgym's text observations need (``shared_memory=False`` for ``async``: a Text space has no shared
  memory form). ``async`` steps the envs in parallel processes, each with its own evaluator (fine for
  ``evaluator="none"`` compile-only batches; with a GPU each process would hold its own evaluator).
  ``sync`` steps them one after the other in this process.
- ``step_many(envs, actions)``: one step of several envs of this process as one batch
  (``ptxgym.pipeline.run_batch``): their builds overlap on the build pool and each candidate reaches its
  shared evaluator as soon as it is built, while the others still build. Trainers and the runner use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium

from ptxgym.envs.kernel_env import KernelEnv
from ptxgym.envs.registration import register_envs
from ptxgym.pipeline import run_batch
from ptxgym.records.schema import Solution

StepResult = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


def make_vec(
    env_id: str,
    num_envs: int = 1,
    vectorization_mode: str = "sync",
    vector_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> gymnasium.vector.VectorEnv:
    """``gymnasium.make_vec`` for a ptxgym id; ``async`` defaults to ``shared_memory=False``."""
    register_envs()
    kwargs = dict(vector_kwargs or {})
    if vectorization_mode == "async":
        if kwargs.get("shared_memory"):
            raise ValueError(
                "shared_memory=True cannot hold ptxgym's text observations: leave it out (ptxgym sets False)"
            )
        kwargs["shared_memory"] = False
    return gymnasium.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        vector_kwargs=kwargs,
        **env_kwargs,
    )


def _kernel_env(env: gymnasium.Env) -> KernelEnv:
    inner = env.unwrapped
    if not isinstance(inner, KernelEnv):
        raise TypeError(f"step_many steps ptxgym KernelEnvs, got {type(inner).__name__}")
    return inner


def step_many(
    envs: Sequence[gymnasium.Env], actions: Sequence[str | Solution], max_workers: int | None = None
) -> list[StepResult]:
    """One ``step`` of each env with its action, as one batch; results in input order.

    Each env must appear once (one turn per episode per batch). Equivalent to ``env.step(action)`` for
    each pair, except that the builds run concurrently and each candidate is evaluated once built.
    """
    if len(envs) != len(actions):
        raise ValueError(f"step_many needs one action per env: {len(envs)} envs, {len(actions)} actions")
    inner = [_kernel_env(e) for e in envs]
    if len({id(e) for e in inner}) != len(inner):
        raise ValueError("an env appears twice in one step_many batch: step each episode once per batch")
    subs = [e.begin_step(a) for e, a in zip(inner, actions, strict=True)]
    feedbacks = run_batch([(e.pipeline, s) for e, s in zip(inner, subs, strict=True)], max_workers)
    return [e.end_step(fb) for e, fb in zip(inner, feedbacks, strict=True)]
