"""The Ray backend with the local GPU evaluator inside its actor (``-m gpu``; needs ray and a GPU).

One local Ray instance, one actor on the one GPU. The naive GEMM is sent as bytes (as to an actor on
another node) next to a wrong answer, in one batch: the first PASSED with timing, the second UNWRITTEN,
in input order. Timing settings are reduced as in ``test_gpu_evaluator.py``.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ptxgym[ray]')")

from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode, TargetMode  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402

SETTINGS = EvalSettings(
    warmup=3,
    iterations=10,
    trials=2,
    call_timeout_s=10.0,
    memcheck=MemcheckMode.NEVER,
    target_mode=TargetMode.STATIC,
    seed=1234,
)


def test_local_gpu_evaluator_in_a_ray_actor() -> None:
    from ptxgym.audit.corpus import candidate
    from ptxgym.evaluation.trusted.ray_backend import RayEvaluator

    task = get_task("Gemm-sm90a")
    ray.init(num_gpus=1, include_dashboard=False, ignore_reinit_error=True)
    try:
        with RayEvaluator(settings=SETTINGS, actors=1, transfer="bytes") as evaluator:
            naive, noop = evaluator.evaluate_many(
                [(task, candidate("naive", task)), (task, candidate("noop", task))]
            )
    finally:
        ray.shutdown()
    print(
        f"\nnaive: {naive.status.value} {naive.message[:200]}\nnoop: {noop.status.value} {noop.message[:200]}"
    )
    assert naive.status is Status.PASSED, naive.message
    assert naive.timing is not None and 0 < naive.timing.speedup < 0.5
    assert naive.details["ray"]["transfer"] == "bytes"
    assert noop.status is Status.UNWRITTEN, noop.message
