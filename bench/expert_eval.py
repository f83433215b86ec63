"""Evaluate the shipped expert solutions through the real pipeline and the local GPU evaluator.

Prints one JSON line per task (status, latencies, speedup, TFLOP/s, target verdict) as each finishes, so
a run cut short still reports what it measured. Memcheck is off (a separate stage); everything else uses
the evaluator's default protocol (3 input sets, 10 warm-up + 50 timed calls x 3 trials, ncu check).

    python bench/expert_eval.py [TASK ...]      # default: every sm_90a task with a shipped solution
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode
from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
from ptxgym.pipeline import Pipeline
from ptxgym.records.tasks import get_task

SOLUTIONS = Path(__file__).resolve().parents[1] / "knowledge_packs" / "sm90a" / "solutions"


def summary(task, fb) -> dict:  # noqa: ANN001 - Task, Feedback
    t = fb.timing
    out = {
        "task": task.id,
        "status": fb.status.value,
        "message": fb.message[:300],
        "target_static": fb.target.static if fb.target else None,
        "target_executed": fb.target_executed.value,
        "target_counts": fb.target.counts if fb.target else {},
        "stage_wall_s": fb.stage_wall_s,
    }
    if fb.correctness:
        out["max_abs_error"] = fb.correctness.max_abs_error
        out["rel_norm_error"] = fb.correctness.rel_norm_error
    if t and t.candidate:
        out.update(
            candidate_ms=t.candidate.median_ms,
            speedup=t.speedup,
            backend=t.backend,
            candidate_tflops=task.flops / (t.candidate.median_ms * 1e-3) / 1e12,
        )
    if t and t.baseline:
        out.update(
            baseline_ms=t.baseline.median_ms,
            baseline_tflops=task.flops / (t.baseline.median_ms * 1e-3) / 1e12,
        )
    out["gpu"] = fb.environment.gpu
    return out


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem for p in SOLUTIONS.glob("*.cu"))
    settings = EvalSettings(memcheck=MemcheckMode.NEVER, call_timeout_s=40.0)
    with LocalGpuEvaluator(settings=settings) as evaluator:
        for name in names:
            task = get_task(f"{name}-sm90a")
            t0 = time.perf_counter()
            source = (SOLUTIONS / f"{name}.cu").read_text()
            fb = Pipeline(task, evaluator).run(f"```cpp\n{source}\n```")
            row = summary(task, fb) | {"wall_s": round(time.perf_counter() - t0, 1)}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
