"""The slow cut-off: a candidate far slower than the baseline is timed with a short probe only.

The decision (``timing.slow_cutoff``) is pure; the session's control flow is driven against the fake
worker on CPU tensors (its calls report 1.0 ms each), as in ``test_session_cpu.py``.
"""

from __future__ import annotations

import pytest

from ptxgym.evaluation.trusted.timing import slow_cutoff


def test_decision_cuts_only_far_slower_candidates() -> None:
    first = [10.0, 11.0, 9.0]  # median 10 ms
    reason = slow_cutoff(first, baseline_ms=0.5, cutoff=0.1, trials=3)  # 0.05x
    assert "1 of 3 trials" in reason and "0.050x" in reason and "0.1x cut-off" in reason
    assert slow_cutoff(first, baseline_ms=1.0, cutoff=0.1, trials=3) == ""  # exactly 0.1x: timed in full
    assert slow_cutoff(first, baseline_ms=5.0, cutoff=0.1, trials=3) == ""  # 0.5x
    assert slow_cutoff(first, baseline_ms=0.5, cutoff=0.0, trials=3) == ""  # turned off
    assert slow_cutoff(first, baseline_ms=0.5, cutoff=0.1, trials=1) == ""  # nothing to cut
    assert slow_cutoff(first, baseline_ms=None, cutoff=0.1, trials=3) == ""  # no baseline latency
    assert slow_cutoff([], baseline_ms=0.5, cutoff=0.1, trials=3) == ""
    assert slow_cutoff([0.0], baseline_ms=0.5, cutoff=0.1, trials=3) == ""


torch = pytest.importorskip("torch")

from evaltest_helpers import small_task  # noqa: E402

from ptxgym.evaluation.protocol import AttachResult, Reply  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.pool import WorkerHandle  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    return Arena(small_task("Gemm-sm90a", M=8), [1, 2, 3], "cpu", tmp_path_factory.mktemp("arena"))


def _timed(arena, fake_worker_argv, tmp_path, baseline_ms: float | None, probe: int = 8) -> SessionResult:
    settings = EvalSettings(warmup=1, iterations=4, trials=3, correctness_sets=2, slow_probe_calls=probe)
    handle = WorkerHandle(fake_worker_argv("echo"), None, tmp_path)
    handle.drain(30.0)
    attach = AttachResult(arena=arena.id, cupti=False, flush_bytes=1)
    handle.primed = {"arena": arena.id, "reply": Reply(seq=0, ok=True, attach=attach)}
    session = Session(handle, arena, settings, EVENTS, seed=5, timeout_s=10.0)
    try:
        session.attach(1, cupti=False)
        session.calibrate(n=3)
        result = SessionResult()
        session.timing(result, crosscheck=False, strict=False, baseline_ms=baseline_ms)
        return result
    finally:
        session.worker.kill()


@pytest.mark.slow  # ~9 s
def test_session_times_one_trial_and_keeps_every_verified_call(arena, fake_worker_argv, tmp_path):
    full = _timed(arena, fake_worker_argv, tmp_path, baseline_ms=0.5, probe=0)  # the fake's 1 ms: 0.5x
    assert full.shortened == "" and [len(t) for t in full.trials] == [4, 4, 4]
    cut = _timed(arena, fake_worker_argv, tmp_path, baseline_ms=0.05, probe=0)  # 0.05x
    # the first trial, then the other trials' verified calls, timed too
    assert "1 of 3 trials" in cut.shortened and [len(t) for t in cut.trials] == [4, 3, 3]
    assert cut.calls_checked == full.calls_checked == 3 * 3  # the same verified calls either way


@pytest.mark.slow  # ~9 s
def test_a_probe_decides_before_the_first_trial(arena, fake_worker_argv, tmp_path):
    """The probe's 8 calls time a far slower candidate; a candidate above the cut-off loses only them."""
    full = _timed(arena, fake_worker_argv, tmp_path, baseline_ms=0.5)
    assert full.shortened == "" and [len(t) for t in full.trials] == [4, 4, 4]  # the probe dropped
    assert len(full.walls) == 12
    cut = _timed(arena, fake_worker_argv, tmp_path, baseline_ms=0.05)
    assert "a probe of 8 calls" in cut.shortened and "0.050x" in cut.shortened, cut.shortened
    # no full trial ran; the probe's unverified calls only decided: the verified calls time it
    assert [len(t) for t in cut.trials] == [3, 3, 3] and len(cut.walls) == 9
    assert cut.calls_checked == full.calls_checked == 3 * 3  # every trial's verified calls still made
    no_baseline = _timed(arena, fake_worker_argv, tmp_path, baseline_ms=None)  # no probe: nothing to cut
    assert [len(t) for t in no_baseline.trials] == [4, 4, 4]


class FastWrongInTheProbe:
    """A reviewer's cheat: zeros, fast, on the probe's calls (fixed call numbers); correct and slow after."""

    def __init__(self, settings: EvalSettings, probe_ms: float, real_ms: float) -> None:
        self.first, self.last = settings.correctness_sets, settings.correctness_sets + settings.probe_calls
        self.probe_ms, self.real_ms, self.calls = probe_ms, real_ms, 0

    def __call__(self, A, B, C):
        import time

        self.calls += 1
        fast = self.first < self.calls <= self.last
        if not fast:
            C.copy_((A.float() @ B.float().T).to(C.dtype))
        else:
            C.zero_()
        end = time.perf_counter() + (self.probe_ms if fast else self.real_ms) * 1e-3
        while time.perf_counter() < end:
            pass


def test_a_probe_that_was_fast_and_wrong_buys_no_speed(tmp_path):
    """The probe's calls are never verified: its latencies only decide, the verified calls time it."""
    import statistics

    from evaltest_helpers import tiny_task
    from inprocess_worker import InProcessWorker

    from ptxgym.evaluation.protocol import Load

    settings = EvalSettings()
    arena = Arena(tiny_task("Gemm-sm90a", M=64, N=48, K=32), [1, 2, 3], "cpu", tmp_path)
    cheat = FastWrongInTheProbe(settings, probe_ms=5.0, real_ms=30.0)  # the probe: ~0.08x, under 0.1x
    session = Session(InProcessWorker(cheat, tmp_path, measured=True), arena, settings, EVENTS, 3, 10.0)
    session.attach(1, cupti=False)
    session.calibrate(n=3)
    session.load(Load(kind="so", path="c.so", entry="run"))
    result = SessionResult()
    session.correctness(result)
    session.timing(result, crosscheck=False, baseline_ms=0.5)
    assert result.failure is None and "a probe" in result.shortened, result.shortened
    median = statistics.median(x for t in result.trials for x in t)
    assert median > 25.0, (median, result.shortened)  # its real ~31 ms, not the probe's ~6 ms
