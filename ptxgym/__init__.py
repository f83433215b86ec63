"""ptxgym: GPU-kernel optimisation with architecture-specific PTX as a Gymnasium environment.

``import ptxgym`` registers one Gymnasium id per task (``ptxgym/Gemm-sm90a-v0`` ...). It imports no
torch, trl, vllm or sglang; those load where they are used.
"""

from ptxgym.envs.registration import register_envs
from ptxgym.feedback import Feedback, Stage, Status, Verdict
from ptxgym.tasks import Task, catalog, get_task

__version__ = "0.1.0"
__all__ = ["Feedback", "Stage", "Status", "Task", "Verdict", "catalog", "get_task", "__version__"]

register_envs()
