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
    # a second turn the draw fell on (4.0 s): the mean of both, 8.36 + 0.05 x 3.0
    natural = row(4, "PASSED", 9.5, {"proof_gpu": 4.0, "execute": 6.0})
    lines.clear()
    gpu_cost.summary(
        [*rows, {**drawn, "crosscheck": True}, {**natural, "crosscheck": True}], lines.append, 0.05
    )
    several = "3.00 (mean of 2 drawn; the first's execute 7.50, boot 3.25, taken 0.50, converted 1.25)"
    assert lines[1] == f"g | 2 | 10.50 | 0.14 | 10.36 | 8.36 | {several} | 8.51"


def test_phase_spy_places_the_gpu_phase_between_the_go_and_the_tools_end():
    out = "\n".join(
        ["==PROF== Connected", "driver: phase go 100.010", "driver: phase ffi 100.600", "noise"]
        + ["driver: phase cuda 100.800", "driver: phase profiled_call 102.000"]
    )
    got = gpu_cost.PhaseSpy.parts(out, taken=100.0, end=102.5)
    assert got == {
        "to_go": 0.01,
        "to_ffi": 0.59,
        "to_cuda": 0.2,
        "to_profiled_call": 1.2,
        "to_end": 0.5,
        "held": 2.5,
    }


def test_phase_spy_adds_phases_to_gated_profiles_only_and_stamps_the_hold(monkeypatch):
    import contextlib
    import time

    from ptxgym.evaluation.trusted import ncu
    from ptxgym.evaluation.trusted.tools import Gate, ToolRun

    seen: list[list[str]] = []

    def fake_run_tool(argv, timeout_s, env=None, cwd=None, gate=None, read=None, pass_fds=()):
        seen.append(list(argv))
        if gate is None:
            return ToolRun(0, "", False, 0.0)
        with gate.hold():
            start = time.monotonic()
            gate.gpu_s += 0.25  # what tools._gated adds: the go to the end, and the read within it
            gate.read_s += 0.05
        return ToolRun(0, f"driver: phase go {start + 0.01:.4f}\n", False, 0.3)

    monkeypatch.setattr(ncu, "run_tool", fake_run_tool)
    gate = Gate(contextlib.nullcontext)
    spy = gpu_cost.PhaseSpy()
    try:
        with spy.active():
            ncu.run_tool(["ncu", "--import", "r"], 1.0)  # a read-back: untouched
            ncu.run_tool(["ncu", "--export", "r", "driver", *gate.argv()], 1.0, gate=gate)
        ncu.run_tool(["ncu", "--export", "r", "driver", *gate.argv()], 1.0, gate=gate)  # after: untouched
    finally:
        gate.close()
    assert [a[-1] == "--phases" for a in seen] == [False, True, False]
    assert ncu.run_tool is fake_run_tool and gate.hold is contextlib.nullcontext
    assert len(spy.runs) == 1
    run = spy.runs[0]
    assert run["held"] == pytest.approx(0.2) and run["to_go"] == pytest.approx(0.01, abs=2e-3)
    assert run["to_end"] == pytest.approx(0.19, abs=2e-3)


def test_summarize_reads_the_turn_rows_back_and_adds_the_later_turns(tmp_path):
    head = "subject | turn | status | median ms | floor s | gpu_total s | excess s | GPU stages | CPU stages"
    text = "\n".join(
        [
            "# gpu cost ...",
            head,
            "m | 0 | PASSED | 2.5000 | 0.50 | 20.00 | 19.50 | prepare=18.00 prepare_arena=8.00 "
            "prepare_baseline=10.00 | cpu: build=9.00",
            "#   m turn 0 calibration: measured in this worker",
            "m | 1 | PASSED | 2.5000 | 0.50 | 1.40 | 0.90 | time=1.20 proof_gpu=0.00 | cpu: build=0.02",
            "m | 2 | PASSED | 2.5000 | 0.50 | 1.50 | 1.00 | time=1.30 proof_gpu=0.00 | cpu: build=0.02",
            "m | 3 | INCORRECT_NUMERICAL | None | - | 0.70 | - | check=0.04 | cpu: build=0.02",
            "m | 4 | PASSED | 2.5000 | 0.50 | 4.45 | 3.95 | time=1.25 execute=9.00 proof_gpu=3.00 | cpu: x=7",
        ]
    )
    path = tmp_path / "gpu_cost.txt"
    path.write_text(text + "\n")
    rows = gpu_cost.rows_from(path)
    assert [(r["turn"], r["status"], r["crosscheck"]) for r in rows] == [
        (0, "PASSED", False),
        (1, "PASSED", False),
        (2, "PASSED", False),
        (3, "INCORRECT_NUMERICAL", False),
        (4, "PASSED", True),  # a proof's GPU phase: the cross-check drawn
    ]
    assert rows[0]["walls"]["prepare_arena"] == 8.0 and rows[0]["walls"]["build"] == 9.0
    assert rows[3]["floor_s"] is None and rows[3]["median_ms"] is None
    lines: list[str] = []
    gpu_cost.summary(rows, lines.append, 0.05)
    # later turns 1 and 2: excess 0.90 and 1.00, mean 0.95; with 0.05 of the drawn 3.00: 1.10
    assert lines[2] == (
        "m later turns | 2 | excess 0.90-1.00, mean 0.95 | expected excess with 0.05 of the drawn "
        "cross-check: 1.10"
    )
    out = tmp_path / "summary.txt"
    assert gpu_cost.main(["--summarize", str(path), "--out", str(out)]) == 0
    assert lines[2] in out.read_text()
