"""Metric functions against hand-computed values (paper definitions)."""

from __future__ import annotations

import pytest

from ptxgym.records.feedback import Feedback, Stage, Status
from ptxgym.records.turns import TurnRecord
from ptxgym.runner.metrics import (
    best_speedup,
    fast_p,
    fast_p_curve,
    summarize,
    target_turn_correctness,
    turn_correctness,
    variant_band,
)


def row(
    traj: str,
    variant: str,
    turn: int,
    status: str,
    speedup: float | None = None,
    target: str = "not_checked",
    task: str = "Gemm-sm90a",
) -> dict:
    return {
        "task_id": task,
        "variant": variant,
        "trajectory_id": traj,
        "turn": turn,
        "status": status,
        "correct": status == "PASSED",
        "target_executed": target,
        "speedup": speedup,
    }


# Gemm: 6 turns, 3 correct (0.5 yes, 1.1 unknown, 0.9 yes); one turn had no code at all.
GEMM = [
    row("g/v1/0", "v1", 0, "COMPILE_ERROR"),
    row("g/v1/0", "v1", 1, "PASSED", 0.5, "yes"),
    row("g/v1/0", "v1", 2, "PASSED", 1.1, "unknown"),
    row("g/v1/0", "v1", 3, "EXTRACT_ERROR"),
    row("g/v2/0", "v2", 0, "PASSED", 0.9, "yes"),
    row("g/v2/0", "v2", 1, "INCORRECT_NUMERICAL", 7.0, "yes"),  # a speed on a wrong turn never counts
]


def test_turn_correctness_within_k_turns() -> None:
    assert turn_correctness(GEMM, 1) == pytest.approx(1 / 2)  # turn 0: CE, PASSED
    assert turn_correctness(GEMM, 2) == pytest.approx(2 / 4)
    assert turn_correctness(GEMM, 3) == pytest.approx(3 / 5)
    assert turn_correctness(GEMM) == pytest.approx(3 / 6)  # the no-code turn is in the denominator
    assert turn_correctness([], 4) is None


def test_target_turn_correctness_never_counts_unknown() -> None:
    assert target_turn_correctness(GEMM, 1) == pytest.approx(1 / 2)
    assert target_turn_correctness(GEMM, 3) == pytest.approx(2 / 5)  # the 1.1x turn is "unknown"
    assert target_turn_correctness(GEMM) == pytest.approx(2 / 6)


def test_best_speedup() -> None:
    assert best_speedup(GEMM) == pytest.approx(1.1)
    assert best_speedup(GEMM, require_target=True) == pytest.approx(0.9)
    assert best_speedup(GEMM, max_turns=2) == pytest.approx(0.9)
    assert best_speedup([row("x", "v", 0, "COMPILE_ERROR")]) is None


def test_fast_p_is_strictly_above_p_over_all_turns() -> None:
    assert fast_p(GEMM, 0.0) == pytest.approx(3 / 6)
    assert fast_p(GEMM, 0.5) == pytest.approx(2 / 6)  # 0.5 itself is not > 0.5
    assert fast_p(GEMM, 0.5, require_target=True) == pytest.approx(1 / 6)
    assert fast_p(GEMM, 1.0) == pytest.approx(1 / 6)
    assert fast_p(GEMM, 1.0, require_target=True) == 0.0
    assert fast_p_curve(GEMM, [0.0, 0.95, 2.0]) == pytest.approx([3 / 6, 1 / 6, 0.0])


def test_variant_band_mean_min_max() -> None:
    band = variant_band(GEMM, [0.0, 0.5, 1.0])
    # v1: 4 turns with speedups 0.5, 1.1; v2: 2 turns with 0.9.
    assert band.per_variant["v1"] == pytest.approx([2 / 4, 1 / 4, 1 / 4])
    assert band.per_variant["v2"] == pytest.approx([1 / 2, 1 / 2, 0.0])
    assert band.mean == pytest.approx([0.5, 0.375, 0.125])
    assert band.lo == pytest.approx([0.5, 0.25, 0.0]) and band.hi == pytest.approx([0.5, 0.5, 0.25])
    inst = variant_band(GEMM, [0.5], require_target=True)
    assert inst.per_variant == {"v1": [0.0], "v2": [0.5]}


def test_summary_rows_and_turn_records() -> None:
    mha = [
        row("m/v1/0", "v1", 0, "NOT_EVALUATED", task="MhaFwd-sm90a"),
        row("m/v1/0", "v1", 1, "COMPILE_ERROR", task="MhaFwd-sm90a"),
    ]
    fb = Feedback(task_id="Gemm-sm90a", status=Status.EXTRACT_ERROR, stage=Stage.EXTRACT).to_json()
    records = [TurnRecord(run_id="r", policy="p", action="", feedback_json=fb, **r) for r in GEMM + mha]
    s = summarize(records, ks=[1, 4, 8])
    gemm, mha_row = s.rows
    assert (gemm.task, gemm.trajectories, gemm.turns) == ("Gemm-sm90a", 2, 6)
    assert gemm.correct_at == {1: pytest.approx(0.5), 4: pytest.approx(0.5), 8: pytest.approx(0.5)}
    assert gemm.target_at[4] == pytest.approx(2 / 6)
    assert gemm.best_speedup == pytest.approx(1.1) and gemm.best_speedup_target == pytest.approx(0.9)
    assert mha_row.not_evaluated == 1 and mha_row.correct_at[8] == 0.0 and mha_row.best_speedup is None
    assert s.overall.turns == 8 and s.overall.correct_at[8] == pytest.approx(3 / 8)
    assert s.gpu_evaluated
    cpu_only = summarize([r for r in records if r.status in ("NOT_EVALUATED", "COMPILE_ERROR")])
    assert not cpu_only.gpu_evaluated
