"""Gymnasium environments of ptxgym and the task data they serve (``envs/data``).

Importing this package is cheap: the env class is loaded by Gymnasium from its entry point string
when an env is made; ``make_vec`` and ``step_many`` (``vector.py``) load on first use.
"""

from typing import Any

from ptxgym.envs.registration import register_envs

__all__ = ["make_vec", "register_envs", "step_many"]


def __getattr__(name: str) -> Any:
    """``make_vec`` and ``step_many`` (``ptxgym.envs.vector``), loaded on first use."""
    if name in ("make_vec", "step_many"):
        from ptxgym.envs import vector

        return getattr(vector, name)
    raise AttributeError(f"module 'ptxgym.envs' has no attribute {name!r}")
