"""bench/throughput.py's summary of the wall cross-checks (the GPU run is the bench)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import throughput  # noqa: E402

from ptxgym.records.feedback import Status  # noqa: E402


def _verdict(
    over: float, timed: dict, calibration: dict, status: str = "PASSED", cached: bool = False, median=0.75
):
    details = {
        "crosscheck": {"median_overhead_ms": 0.5 + over, "allowed_ms": 0.8, "tight_allowed_ms": 0.52},
        "calibration_used": "trivial",
        "wall_path": "native",
        "calibration": {"overhead_ms": 0.5, "parts_ms": calibration},
        "wall_parts": timed,
    }
    if status == "TIMING_ANOMALY":
        details["retimed"] = "failed its wall cross-check by the allowance"
    timing = SimpleNamespace(candidate=SimpleNamespace(median_ms=median))
    message = "its median GPU time rose" if status == "TIMING_ANOMALY" else ""
    return SimpleNamespace(
        details=details, cache_hit=cached, status=Status(status), timing=timing, message=message
    )


_PASS = {
    "envs": 16,
    "candidates": 2,
    "wall_s": 1.0,
    "per_min": 1.0,
    "correct_per_min": 1.0,
    "correct": 1,
    "build_s": 0,
    "queue_s": 0,
    "check_s": 0,
    "time_s": 0,
    "proofs_s": 0,
    "proofs_gpu_s": 0,
    "gpu_s": 0,
    "gpu_busy": 0.5,
    "shortened": 0,
    "statuses": {},
}


def test_the_excess_says_where_the_walls_went_for_timed_calls_and_calibrations():
    got = throughput.excess(
        [
            _verdict(0.01, {"request": 1.0, "copy": 0.2}, {"request": 0.9}),
            _verdict(0.3, {"request": 1.4, "copy": 0.2}, {"request": 1.1}, "TIMING_ANOMALY", median=0.5),
            _verdict(9.0, {"request": 99.0}, {"request": 99.0}, cached=True),  # answered from the cache
        ]
    )
    assert got["n"] == 2 and got["anomalies"] == 1
    assert got["max"] == pytest.approx(0.3) and got["allowed"] == pytest.approx(0.3)
    assert got["parts"] == {"calibration request": 1.0, "timed copy": 0.2, "timed request": 1.2}
    assert got["each"] == [pytest.approx((0.5, 0.3, 0.02, 0.3)), pytest.approx((0.75, 0.01, 0.02, 0.3))]
    assert got["wall_paths"] == {"native": 2}
    line = throughput.format_pass({**_PASS, "excess": got})
    assert any("timed request 1.2000" in part and "calibration request 1.0000" in part for part in line)
    assert any("0.500: 0.300/0.020/0.300, 0.750: 0.010/0.020/0.300" in part for part in line)
    assert any("walls read by {'native': 2}" in part for part in line)
    why = "its median GPU time rose [timed twice: failed its wall cross-check by the allowance]"
    assert got["why"] == [why]
    assert sum("anomaly: its median GPU time rose" in part for part in line) == 1
    assert throughput.excess([]) == {}


def test_the_trial_ends_are_summed_over_the_pass_but_not_from_the_cache():
    first = _verdict(0.0, {}, {})
    first.details["trial_ends"] = {"trials": 5, "waited": 1, "incomplete": 2, "ran_in": 3}
    second = _verdict(0.0, {}, {})
    second.details["trial_ends"] = {"trials": 4, "waited": 0, "incomplete": 0}
    cached = _verdict(0.0, {}, {}, cached=True)
    cached.details["trial_ends"] = {"trials": 9, "waited": 9, "incomplete": 9}
    got = throughput.trial_ends([first, second, cached, _verdict(0.0, {}, {})])
    assert got == {"trials": 9, "waited": 1, "incomplete": 2, "ran_in": 3}
    line = "\n".join(throughput.format_pass({**_PASS, "trial_ends": got}))
    assert "9 trials, 1 waited past one default flush, 2 incomplete records, 3 kernel records" in line
