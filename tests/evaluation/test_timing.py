"""Latency statistics, per-call latency, calibration, the wall-clock cross-check and CUPTI windows."""

from __future__ import annotations

import math

import pytest

from ptxgym.evaluation.sandboxed.cupti_spans import spans_by_window
from ptxgym.evaluation.trusted.timing import (
    CUPTI,
    EVENTS,
    Calibration,
    calibrate,
    call_latency,
    cross_check,
    iqr,
    latency_stats,
    tight_allowance,
)


def test_latency_stats_median_over_all_calls_and_worst_trial_cv():
    stats = latency_stats([[1.0, 1.0, 1.0, 1.0], [2.0, 2.2, 1.8, 2.0]])
    assert stats.median_ms == pytest.approx(1.4)  # (1.0 + 1.8) / 2
    assert stats.n == 8 and stats.min_ms == 1.0
    assert stats.trials_median_ms == [1.0, 2.0]
    assert stats.cv == pytest.approx(0.0707, abs=1e-3)
    assert iqr([1, 2, 3, 4, 5]) == pytest.approx(2.0)


def test_call_latency_backends():
    assert call_latency(CUPTI, 0.01, 5.0, 4.9, 0.02) == 4.9
    assert call_latency(CUPTI, 0.01, 5.0, None, 0.02) is None
    # honest: all work on the caller stream, device sync costs its calibrated gap
    assert call_latency(EVENTS, 1.00, 1.02, None, 0.02) == pytest.approx(1.00)
    # side stream: the stream event returns at once, the device-wide sync waits for the real work
    assert call_latency(EVENTS, 0.01, 26.7, None, 0.02) == pytest.approx(26.68)


def _cal():
    walls = [0.30 + 0.01 * (i % 3) for i in range(20)]
    lat = [0.005] * 20
    return calibrate(walls, lat, [0.005] * 20, [0.02] * 20)


def test_calibration():
    cal = _cal()
    assert cal.overhead_ms == pytest.approx(0.305, abs=0.006)
    assert cal.sync_gap_ms == pytest.approx(0.015)
    assert cal.n == 20


def test_cross_check_accepts_honest_calls():
    cal = _cal()
    lat = [0.78] * 50
    walls = [x + cal.overhead_ms + 0.05 for x in lat]
    check = cross_check(walls, lat, cal, slack_ms=0.3, slack_fraction=0.1)
    assert check.ok and check.message == ""


def test_cross_check_catches_time_hidden_from_the_gpu_timer():
    cal = _cal()
    lat = [0.01] * 50  # what the worker claims
    walls = [0.78 + cal.overhead_ms] * 50  # what the evaluator's clock saw
    check = cross_check(walls, lat, cal, slack_ms=0.3, slack_fraction=0.1)
    assert not check.ok
    assert "exceeds the reported GPU time" in check.message and "0.770 ms per call" in check.message


def test_spans_cover_all_activity_in_a_window():
    # two kernels on two streams, then a memset and a kernel
    records = [(100, 150, "k"), (120, 400, "k"), (405, 420, ""), (1000, 1100, "k")]
    windows = [(7, 90, 402), (8, 500, 900), (9, 950, 1200)]
    spans, counts = spans_by_window(records, windows)
    assert spans == {7: pytest.approx(300 / 1e6), 8: None, 9: pytest.approx(100 / 1e6)}
    assert counts == {7: 2, 8: 0, 9: 1}


def test_tight_allowance_shrinks_with_the_number_of_calls_and_is_only_recorded():
    """The statistical allowance: calibrated overhead + 4 standard errors of the two medians' difference."""
    cal = Calibration(overhead_ms=0.5, overhead_iqr_ms=0.1, sync_gap_ms=0.0, n=20)
    few = tight_allowance([0.45, 0.5, 0.55, 0.5], cal)
    many = tight_allowance([0.45, 0.5, 0.55, 0.5] * 50, cal)
    assert 0.5 < many < few
    se_cal = 1.2533 * (0.1 / 1.349) / math.sqrt(20)
    assert many > 0.5 + 4 * se_cal  # the calibration's own error stays
    quiet = Calibration(overhead_ms=0.5, overhead_iqr_ms=0.0, sync_gap_ms=0.0, n=20)
    assert tight_allowance([0.5] * 100, quiet) == pytest.approx(0.5 + 0.01)  # the floor
    # recorded beside the verdict, which the slack floors still decide
    cc = cross_check([1.0 + 0.62] * 100, [1.0] * 100, cal, slack_ms=0.3, slack_fraction=0.1)
    assert cc.ok and cc.tight_allowed_ms is not None and cc.median_overhead_ms > cc.tight_allowed_ms


def test_a_noisy_calibration_widens_the_allowance_by_its_error_not_its_spread():
    """A noisy calibration widens the allowance by its median's error, not by 5 x its IQR.

    Beside busy Python threads (IQR 0.3 ms per call) the old term allowed 1.5 ms per 0.76 ms call.
    """
    noisy = Calibration(overhead_ms=0.6, overhead_iqr_ms=0.3, sync_gap_ms=0.0, n=20)
    lat = [0.76] * 150
    hider = cross_check([0.76 + 0.6 + 0.7] * 150, lat, noisy, slack_ms=0.3, slack_fraction=0.1)
    assert not hider.ok, hider  # 0.7 ms hidden per call: the old 1.5 ms allowance passed it
    se = 1.2533 * (0.3 / 1.349) / math.sqrt(20)
    assert hider.allowed_ms == pytest.approx(0.6 + max(0.3, 4 * se), rel=1e-6)
    honest = cross_check([0.76 + 0.6 + 0.1] * 150, lat, noisy, slack_ms=0.3, slack_fraction=0.1)
    assert honest.ok, honest
    wide = Calibration(overhead_ms=0.6, overhead_iqr_ms=2.0, sync_gap_ms=0.0, n=20)  # 4 SE > the floor
    assert cross_check([0.76 + 0.6 + 0.55] * 150, lat, wide, slack_ms=0.3, slack_fraction=0.1).ok
    capped = cross_check([0.76 + 0.6 + 0.65] * 150, lat, wide, slack_ms=0.3, slack_fraction=0.1)
    assert not capped.ok and capped.allowed_ms == pytest.approx(0.6 + 2 * 0.3)  # at most twice the floors


def test_a_subject_cannot_widen_its_allowance_with_its_own_spread():
    """A hider that slows 45% of its calls by 5 ms (its IQR ~5 ms) and hides 0.5 ms in the rest.

    The subject's spread enters ``tight_allowance`` (4 SE of ~0.38 ms: 1.5 ms of room), which would pass
    it; the cross-check's statistical term is the calibration's alone (a reviewer's find).
    """
    cal = Calibration(overhead_ms=0.6, overhead_iqr_ms=0.02, sync_gap_ms=0.0, n=20)
    lat = [0.76] * 200
    extra = [5.0] * 90 + [0.5] * 110
    check = cross_check([0.76 + 0.6 + e for e in extra], lat, cal, slack_ms=0.3, slack_fraction=0.1)
    assert not check.ok, check
    assert check.tight_allowed_ms is not None and check.tight_allowed_ms - 0.6 > 0.5  # what it would pass
