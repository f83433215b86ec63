"""The GPU side of the pipeline, split at the trust boundary.

- ``trusted/``: the evaluator process. It owns every parameter, inputs and references, checks outputs,
  keeps the clock, and writes the verdict (``base.Evaluator`` is the interface, ``local`` the local GPU
  backend).
- ``sandboxed/``: code that runs inside the disposable candidate process (``worker``, the profiler
  ``driver``, the host ``sandbox``, CUPTI spans, the library baselines). Nothing it reports is trusted
  without a check on the trusted side.
- ``protocol``: the typed messages between the two; ``compare``: the pure output comparison both use.
- ``choose.select_evaluator``: which backend an env attaches.

No module imported here pulls in torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public names, loaded on first use so that the candidate worker, which imports this package, loads
#: nothing of the trusted side.
_LAZY = {
    "BuiltCandidate": "ptxgym.evaluation.trusted.base",
    "EvalSettings": "ptxgym.evaluation.trusted.base",
    "Evaluator": "ptxgym.evaluation.trusted.base",
    "GpuVerdict": "ptxgym.evaluation.trusted.base",
    "NullEvaluator": "ptxgym.evaluation.trusted.base",
    "select_evaluator": "ptxgym.evaluation.choose",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ptxgym.evaluation' has no attribute {name!r}")
