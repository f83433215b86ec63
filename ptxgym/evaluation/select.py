"""Choosing an evaluator: the local GPU evaluator when a GPU is usable, else a NullEvaluator that says why.

(Owned by the evaluator work; the env calls ``select_evaluator(choice, settings=...)``.)
"""

from __future__ import annotations

from ptxgym import config
from ptxgym.errors import EvaluatorUnavailableError
from ptxgym.evaluation.base import EvalSettings, Evaluator, NullEvaluator


def gpu_unavailable_reason() -> str | None:
    """None when a local GPU evaluator can run here, else the precise reason it cannot."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install 'ptxgym[gpu]')"
    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch"
    return "the local GPU evaluator is not built yet"


def select_evaluator(choice: str | None = None, *, settings: EvalSettings | None = None) -> Evaluator:
    """``auto`` (default, from PTXGYM_EVALUATOR), ``none`` or ``local``."""
    choice = (choice or config.evaluator_choice()).lower()
    if choice == "none":
        return NullEvaluator("the evaluator was set to 'none'")
    reason = gpu_unavailable_reason()
    if choice == "local" and reason:
        raise EvaluatorUnavailableError(f"the local GPU evaluator cannot run here: {reason}")
    if choice not in {"auto", "local"}:
        raise ValueError(f"evaluator must be auto, none or local, got {choice!r}")
    return NullEvaluator(reason or "unknown")
