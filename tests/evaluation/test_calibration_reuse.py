"""A calibration measured in one worker serves the next workers of its kind (``calibration_reuse.py``).

The unit half drives ``CalibrationReuse`` with a hand-set clock; the other half runs the real
``LocalGpuEvaluator`` stages on the CPU (``test_baseline_path.cpu_evaluator``) and reads which workers
loaded the calibration's no-op subjects.
"""

from __future__ import annotations

import pytest

from ptxgym.evaluation.trusted.calibration_reuse import MAX_KEYS, CalibrationReuse
from ptxgym.evaluation.trusted.timing import Calibration

CAL = Calibration(overhead_ms=0.54, overhead_iqr_ms=0.01, sync_gap_ms=0.002, n=20, latency_ms=0.01)
MATCHED = Calibration(0.53, 0.01, 0.002, 20, 0.75, busy_memsets=12)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_calibration_serves_at_most_uses_workers_its_own_included() -> None:
    reuse = CalibrationReuse(Clock())
    assert reuse.take("k", 3, 60.0) is None  # nothing measured yet
    reuse.put("k", CAL, MATCHED)  # the first worker's
    notes = []
    for _ in range(2):
        found = reuse.take("k", 3, 60.0)
        assert found is not None
        kept, note = found
        assert kept.cal is CAL and kept.matched is MATCHED
        notes.append(note)
    assert "worker 2 of at most 3" in notes[0] and "worker 3 of at most 3" in notes[1]
    assert reuse.take("k", 3, 60.0) is None  # the fourth measures again
    reuse.put("k", MATCHED, None)
    found = reuse.take("k", 3, 60.0)
    assert found is not None and found[0].cal is MATCHED and found[0].matched is None
    assert CalibrationReuse(Clock()).take("k", 1, 60.0) is None  # uses 1: every worker measures


def test_an_old_calibration_is_measured_again_and_keys_do_not_mix() -> None:
    clock = Clock()
    reuse = CalibrationReuse(clock)
    reuse.put(("arena-a", True), CAL, None)
    assert reuse.take(("arena-b", True), 8, 60.0) is None  # another arena
    assert reuse.take(("arena-a", False), 8, 60.0) is None  # another process kind
    clock.now += 30.0
    found = reuse.take(("arena-a", True), 8, 60.0)
    assert found is not None and "30.0 s ago" in found[1]
    clock.now += 31.0  # 61 s after its measurement
    assert reuse.take(("arena-a", True), 8, 60.0) is None
    assert reuse.take(("arena-a", True), 8, 1e9) is None  # dropped when found too old


def test_the_oldest_key_goes_first() -> None:
    reuse = CalibrationReuse(Clock())
    for i in range(MAX_KEYS + 1):
        reuse.put(i, CAL, None)
    assert reuse.take(0, 8, 60.0) is None
    assert reuse.take(1, 8, 60.0) is not None and reuse.take(MAX_KEYS, 8, 60.0) is not None


torch = pytest.importorskip("torch")


def _calibrated(transcript: list[str]) -> int:
    """How many no-op subjects a worker loaded before its subject: the calibration's (0 when reused)."""
    return transcript.count("load:noop")


def test_candidates_reuse_a_calibration_and_the_baseline_measures_its_own(tmp_path) -> None:
    from test_baseline_path import SETTINGS, Workers, built, cpu_evaluator, gemm_task

    from ptxgym.records.feedback import Status

    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers, SETTINGS.model_copy(update={"calibration_reuse": 3}))
    task = gemm_task()
    verdicts = []
    for turn in range(5):
        cand = built(task, turn).model_copy(update={"artifact_sha256": f"{turn:064x}"})
        verdicts.append(ev.evaluate(task, cand))
    assert all(v.status is Status.PASSED for v in verdicts), [v.message for v in verdicts]
    base, *cands = workers.made
    assert "load:baseline" in base.transcript and _calibrated(base.transcript) == 1  # trivial only
    assert [_calibrated(w.transcript) for w in cands] == [3, 0, 0, 3, 0]  # trivial, probe, matched
    sources = [v.details["calibration_source"] for v in verdicts]
    assert sources[0] == sources[3] == "measured in this worker"
    assert "reused" in sources[1] and "worker 3 of at most 3" in sources[2]
    assert verdicts[1].details["calibration"] == verdicts[0].details["calibration"]
    assert verdicts[2].details["calibration_matched"] == verdicts[0].details["calibration_matched"]
    assert verdicts[0].details["calibration_matched"] is not None


def test_with_reuse_1_every_worker_calibrates(tmp_path) -> None:
    from test_baseline_path import SETTINGS, Workers, built, cpu_evaluator, gemm_task

    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers, SETTINGS.model_copy(update={"calibration_reuse": 1}))
    task = gemm_task()
    for turn in range(3):
        ev.evaluate(task, built(task, turn).model_copy(update={"artifact_sha256": f"{turn:064x}"}))
    assert [_calibrated(w.transcript) for w in workers.made] == [1, 3, 3, 3]


def test_a_candidate_never_reuses_the_baselines_calibration(tmp_path) -> None:
    """A baseline's and a candidate's worker never share a calibration.

    Without the matched calibration their keys would differ by the subject alone: the first candidate's
    worker still gets exactly the baseline worker's commands (one timing path).
    """
    from test_baseline_path import SETTINGS, Workers, built, cpu_evaluator, gemm_task

    workers = Workers(tmp_path)
    same = SETTINGS.model_copy(update={"matched_calibration": False, "slow_probe_calls": 0})
    ev = cpu_evaluator(tmp_path, workers, same)
    task = gemm_task()
    for turn in range(2):
        ev.evaluate(task, built(task, turn).model_copy(update={"artifact_sha256": f"{turn:064x}"}))
    base, first, second = (w.transcript for w in workers.made)
    assert base == [c.replace("load:so", "load:baseline") for c in first]
    assert [_calibrated(t) for t in (base, first, second)] == [1, 1, 0]
