"""``Evaluator.evaluate_many``: the batch contract every backend keeps (order, one verdict each, no raise)."""

from __future__ import annotations

from pathlib import Path

from ptxgym.evaluation.trusted.base import BuiltCandidate, Evaluator, GpuVerdict, NullEvaluator
from ptxgym.records.feedback import Stage, Status
from ptxgym.records.tasks import Task, get_task


def _candidate(i: int) -> BuiltCandidate:
    return BuiltCandidate(
        task_id="Gemm-sm90a",
        so_path=Path(f"/nonexistent/{i}.so"),
        source_sha256=f"{i:064x}",
        artifact_sha256=f"{i:064x}",
        static_target=False,
        turn=i,
    )


class _FailsOnOdd(Evaluator):
    """Error path of our own code: an evaluator that raises for odd turns (a broken backend)."""

    name = "fails-on-odd"

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        if candidate.turn % 2:
            raise RuntimeError(f"backend broke on turn {candidate.turn}")
        return GpuVerdict(status=Status.PASSED, stage=Stage.DONE, message=f"turn {candidate.turn}")


def test_default_evaluate_many_keeps_order_and_turns_exceptions_into_verdicts() -> None:
    task = get_task("Gemm-sm90a")
    verdicts = _FailsOnOdd().evaluate_many([(task, _candidate(i)) for i in range(5)])
    assert [v.status for v in verdicts] == [
        Status.PASSED,
        Status.INFRA_ERROR,
        Status.PASSED,
        Status.INFRA_ERROR,
        Status.PASSED,
    ]
    assert [v.message for v in verdicts[::2]] == ["turn 0", "turn 2", "turn 4"]
    assert "backend broke on turn 3" in verdicts[3].message and "RuntimeError" in verdicts[3].log
    assert verdicts[1].environment.evaluator == "fails-on-odd"


def test_null_evaluator_batch_is_not_evaluated_and_empty_batch_is_empty() -> None:
    task = get_task("Gemm-sm90a")
    verdicts = NullEvaluator().evaluate_many([(task, _candidate(i)) for i in range(3)])
    assert [v.status for v in verdicts] == [Status.NOT_EVALUATED] * 3
    assert NullEvaluator().evaluate_many([]) == []
