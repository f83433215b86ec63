"""Latencies a worker reports are its word: a NaN, an infinity, a negative or an impossible one pays nothing.

A reviewer's find: the protocol took NaN and -Infinity, and NaN breaks sorting, so the median of the
latencies and the median of the wall overheads could come from different calls. Fifteen NaNs among 150
timed calls put the latency median next to the floor while the overhead median read about -890 ms, under
every allowance: a correct kernel 1 ms slower than the baseline was paid 1.865x. Three guards now: the
reply schema (finite, non-negative), ``call_latency`` (not a latency: a missing one), and the wall
cross-check (a call's GPU time cannot exceed its wall time).
"""

from __future__ import annotations

import json
import math
import time

import pytest
from pydantic import ValidationError

from ptxgym.evaluation.protocol import CallResult, Reply
from ptxgym.evaluation.trusted.timing import CUPTI, EVENTS, Calibration, call_latency, cross_check

BAD = ("NaN", "Infinity", "-Infinity", "-1.0")


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize(
    "shape",
    [
        '{{"seq": 1, "ok": true, "call": {{"ev_stream_ms": {v}, "ev_device_ms": 1.0, "host_ms": 1.0}}}}',
        '{{"seq": 1, "ok": true, "call": {{"ev_stream_ms": 1.0, "ev_device_ms": {v}, "host_ms": 1.0}}}}',
        '{{"seq": 1, "ok": true, "spans": {{"spans": {{"4": {v}}}}}}}',
        '{{"seq": 1, "ok": true, "hw_counts": {{"metrics": {{"m.sum": {v}}}, "passes": 1, "ranges": 1}}}}',
    ],
)
def test_a_reply_with_a_value_that_is_no_measurement_is_refused(shape: str, bad: str) -> None:
    raw = shape.format(v=bad)
    with pytest.raises(ValidationError):
        Reply.model_validate_json(raw)
    assert Reply.model_validate_json(shape.format(v="0.5")).seq == 1  # the same reply with a real value


def test_negative_counts_are_refused() -> None:
    row = {"function": "k", "pc": 16, "inst": -5, "threads": 0}
    with pytest.raises(ValidationError):
        Reply.model_validate_json(json.dumps({"seq": 1, "ok": True, "counts": [row]}))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.5])
def test_call_latency_is_missing_for_a_value_that_is_no_latency(bad: float) -> None:
    assert call_latency(CUPTI, 1.0, 1.0, bad, 0.0) is None
    assert call_latency(EVENTS, bad, bad, None, 0.0) is None
    assert call_latency(CUPTI, 1.0, 1.0, 0.7, 0.0) == 0.7


def test_a_call_whose_gpu_time_exceeds_its_wall_time_fails_the_cross_check() -> None:
    cal = Calibration(overhead_ms=0.1, overhead_iqr_ms=0.01, sync_gap_ms=0.0, n=20)
    walls = [1.1] * 30
    honest = [1.0] * 30
    assert cross_check(walls, honest, cal, 0.3, 0.1).ok
    forged = honest[:29] + [5.0]  # one call claims 5 ms inside a 1.1 ms wall
    got = cross_check(walls, forged, cal, 0.3, 0.1)
    assert not got.ok and "exceeds the evaluator's wall time" in got.message


torch = pytest.importorskip("torch")

import test_baseline_path as tb  # noqa: E402
from inprocess_worker import InProcessWorker  # noqa: E402

from ptxgym.evaluation.protocol import Call, Load, TrialBegin  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode, TargetMode  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402

# The reviewer's layout of 150 timed calls: each call's rank in the sorted order the forger aims at (N: a
# NaN). With it the old code paid a correct kernel 1 ms slower than its claim 1.865x the baseline.
RANKS = (
    "72,115,56,118,100,N,82,128,14,91,N,28,N,15,110,3,73,26,70,113,0,59,78,N,46,77,116,27,105,2,95,"
    "39,112,94,102,42,93,N,67,96,45,57,89,87,29,N,48,33,12,90,108,86,130,19,134,124,21,61,1,83,133,"
    "43,11,123,4,22,20,75,23,25,76,79,35,71,55,50,8,120,51,17,106,N,129,N,66,9,97,N,88,13,101,63,"
    "85,111,60,127,N,54,62,36,5,114,126,52,6,99,7,30,121,10,132,117,109,104,40,84,32,65,N,24,N,103,"
    "122,125,16,131,37,107,N,81,69,38,N,41,74,64,80,44,68,98,49,N,119,18,47,92,58,34,31,53"
)


def _forged(rank: str) -> float:
    if rank == "N":
        return math.nan
    r, e, s = int(rank), 20, 0.62
    return -10.0 * (e - r) if r < e else s if r == e else s + 0.001 if r == e + 1 else 10.0 * (r - e)


PATTERN = [_forged(r) for r in RANKS.split(",")]


class NanForger(InProcessWorker):
    """Right outputs, 1 ms slower than it says; after the probe its timed calls report ``PATTERN``.

    ``model_construct`` stands for a reply the schema did not check: the timing's own guards must hold.
    """

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.forged_trials, self.timed, self.subject = 0, 0, False

    def request(self, cmd, timeout_s, pickler=None, fds=()):
        if isinstance(cmd, Load):
            self.subject = cmd.kind == "so"
        if isinstance(cmd, TrialBegin) and self.subject:
            self.forged_trials += 1
        if not (isinstance(cmd, Call) and self.subject and not cmd.count and not cmd.hw_count):
            return super().request(cmd, timeout_s, pickler, fds)
        until = time.perf_counter() + 1.0e-3
        while time.perf_counter() < until:
            pass
        reply = super().request(cmd, timeout_s, pickler, fds)
        ms = 1.2
        if cmd.timed and self.forged_trials >= 2:
            self.timed += 1
            ms = PATTERN[(self.timed - 1) % len(PATTERN)]
        forged = CallResult.model_construct(ev_stream_ms=ms, ev_device_ms=ms, host_ms=1.0)
        return reply.model_copy(update={"call": forged})


def test_nan_latencies_from_a_worker_are_never_paid(tmp_path) -> None:
    settings = EvalSettings(memcheck=MemcheckMode.NEVER, target_mode=TargetMode.OFF, seed=5)
    made: list[InProcessWorker] = []

    def make():
        worker = (NanForger if made else InProcessWorker)(tb.honest, tmp_path, measured=True)  # 1st: baseline
        made.append(worker)
        return worker

    evaluator = tb.cpu_evaluator(tmp_path, make, settings)
    task = tb.gemm_task()
    verdict = evaluator.evaluate(task, tb.built(task))
    assert made[-1].timed > 0, "the forger must have been timed"
    assert verdict.status is not Status.PASSED, (verdict.status, verdict.message)
    assert verdict.status is Status.TIMING_ANOMALY, verdict.message
