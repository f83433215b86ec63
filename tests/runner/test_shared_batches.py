"""``SharedEvaluator``: trajectory threads' candidates reach a non-thread-safe evaluator in batches."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict
from ptxgym.records.feedback import Stage, Status
from ptxgym.records.tasks import Task, get_task
from ptxgym.runner import SharedEvaluator


def _candidate(i: int) -> BuiltCandidate:
    return BuiltCandidate(
        task_id="Gemm-sm90a",
        so_path=Path(f"/nonexistent/{i}.so"),
        source_sha256=f"{i:064x}",
        artifact_sha256=f"{i:064x}",
        static_target=False,
        turn=i,
    )


class _Slow(Evaluator):
    """Our own batching under test: a slow, non-thread-safe evaluator that records overlap and batches."""

    name = "slow"

    def __init__(self, fail_batch: bool = False) -> None:
        self.active = 0
        self.max_active = 0
        self.batches: list[list[int]] = []
        self.fail_batch = fail_batch
        self._count = threading.Lock()

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        return GpuVerdict(status=Status.PASSED, stage=Stage.DONE, message=f"turn {candidate.turn}")

    def evaluate_many(self, task_candidates):  # type: ignore[no-untyped-def]
        with self._count:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.batches.append([c.turn for _, c in task_candidates])
            time.sleep(0.2)
            if self.fail_batch and len(self.batches) == 1:
                raise RuntimeError("GPU fell off the bus")
            return super().evaluate_many(task_candidates)
        finally:
            with self._count:
                self.active -= 1


def test_concurrent_candidates_are_batched_one_batch_at_a_time() -> None:
    inner = _Slow()
    shared = SharedEvaluator(inner)
    task = get_task("Gemm-sm90a")
    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda i: shared.evaluate(task, _candidate(i)), range(8)))
    assert [v.message for v in verdicts] == [f"turn {i}" for i in range(8)]  # each gets its own verdict
    assert inner.max_active == 1  # never two calls into the evaluator at once
    assert sorted(t for b in inner.batches for t in b) == list(range(8))
    assert max(len(b) for b in inner.batches) > 1  # the waiting candidates went as one batch
    assert shared.batches == [len(b) for b in inner.batches]


def test_a_failing_batch_answers_every_waiting_candidate() -> None:
    inner = _Slow(fail_batch=True)
    shared = SharedEvaluator(inner)
    task = get_task("Gemm-sm90a")
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(lambda i: shared.evaluate(task, _candidate(i)), range(4)))
    first = set(inner.batches[0])
    for i, v in enumerate(verdicts):
        if i in first:
            assert v.status is Status.INFRA_ERROR and "fell off the bus" in v.message
        else:
            assert v.status is Status.PASSED
    assert shared.evaluate_many([]) == []
