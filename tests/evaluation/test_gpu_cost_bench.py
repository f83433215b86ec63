"""bench/gpu_cost.py's arithmetic: the timed floor and the per-subject excess (the GPU run is the bench)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gpu_cost  # noqa: E402

from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402


def test_floor_is_calls_times_median_latency():
    s = EvalSettings()
    assert s.calls_per_step == 3 + 3 * (10 + 50)
    assert s.probe_calls == 2 + 8  # the slow cut-off's probe, made before the trials
    assert gpu_cost.floor_s(s, 0.76) == pytest.approx(193 * 0.76e-3)
    assert gpu_cost.floor_s(s, None) is None


def test_summary_counts_only_verified_turns_and_splits_the_one_time_share():
    def row(turn, status, gpu, walls):
        return {"subject": "g", "turn": turn, "status": status, "floor_s": 0.14, "gpu_s": gpu, "walls": walls}

    rows = [
        row(0, "PASSED", 13.0, {"prepare_arena": 1.0, "prepare_baseline": 3.0}),
        row(1, "PASSED", 8.0, {}),
        row(2, "INCORRECT_NUMERICAL", 50.0, {}),
    ]
    lines: list[str] = []
    gpu_cost.summary(rows, lines.append, 0.05)
    assert lines[1] == "g | 2 | 10.50 | 0.14 | 10.36 | 8.36 | - | -"
    drawn = row(
        3,
        "PASSED",
        9.0,
        {"proof_gpu": 2.0, "execute": 7.5, "proof_boot": 3.25, "proof_read": 0.5, "proof_convert": 1.25},
    )
    lines.clear()
    gpu_cost.summary([*rows, {**drawn, "crosscheck": True}], lines.append, 0.05)
    # the drawn turn is not in the means; its proofs' GPU seconds, amortised: 8.36 + 0.05 x 2.0
    drawn_part = "2.00 (execute 7.50, boot 3.25, taken 0.50, converted 1.25)"
    assert lines[1] == f"g | 2 | 10.50 | 0.14 | 10.36 | 8.36 | {drawn_part} | 8.46"
