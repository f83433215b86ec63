"""ptxgym: GPU-kernel optimisation with architecture-specific PTX as a Gymnasium environment.

``import ptxgym`` registers one Gymnasium id per task (``ptxgym/Gemm-sm90a-v0`` ...). It imports no
torch, trl, vllm or sglang; those load where they are used.

This module is the package's public face: the one module allowed to import from every layer
(README, "Architecture"). No module inside the package imports it.
"""

from typing import Any

from ptxgym.envs.registration import register_envs
from ptxgym.records.feedback import Feedback, Stage, Status, Verdict
from ptxgym.records.tasks import Task, catalog, get_task
from ptxgym.records.version import __version__

__all__ = ["Feedback", "Stage", "Status", "Task", "Verdict", "__version__", "catalog", "get_task", "make_vec"]


def make_vec(env_id: str, num_envs: int = 1, vectorization_mode: str = "sync", **kwargs: Any) -> Any:
    """``gymnasium.make_vec`` for a ptxgym id, text observations handled (``ptxgym.envs.vector``)."""
    from ptxgym.envs.vector import make_vec as _make_vec

    return _make_vec(env_id, num_envs, vectorization_mode, **kwargs)


register_envs()
