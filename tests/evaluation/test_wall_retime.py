"""A timing that fails the wall cross-check by its allowance alone is timed once more (``Session.retime``).

On an H100 an honest expert's per-call wall went past its allowance under load (16 envs streaming, 1 of 16
fast candidates; an MHA forward's first turn beside its task's preparation), and it lost its reward. A
host's transient load rarely lasts through a second timing, while work a candidate hides outside the GPU
timer goes with it: here a worker spends host time outside the GPU time it reports, in the first timing
only (a loaded host) or in every one (a hider). A forged figure (GPU time above the wall) is never retried.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

import test_baseline_path as tb  # noqa: E402
from inprocess_worker import IN_BAND_KERNEL, InProcessWorker  # noqa: E402
from test_counted_position import Honest, _loaded, arena  # noqa: E402, F401 - arena: a fixture

from ptxgym.evaluation.protocol import Call, Load, Reply, Spans, TrialBegin, TrialEnd  # noqa: E402
from ptxgym.evaluation.trusted.sass_join import Census  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import CUPTI, CrossCheck  # noqa: E402
from ptxgym.records.feedback import Status  # noqa: E402

DELAY_S = 0.08
"""Host time a slowed timed call spends outside its reported GPU time: far past the tests' 25 ms slack."""
SETTINGS = tb.SETTINGS.model_copy(update={"warmup": 1, "iterations": 4, "trials": 2, "slow_probe_calls": 0})


class Loaded(InProcessWorker):
    """Honest outputs; in its first ``slow_trials`` timed trials each timed call also spends ``DELAY_S``."""

    def __init__(self, *a, slow_trials: int, **k) -> None:
        super().__init__(*a, **k)
        self.slow_trials, self.trials_seen, self.subject, self.slowed = slow_trials, 0, False, 0

    def request(self, cmd, timeout_s, pickler=None, fds=()):
        if isinstance(cmd, Load):
            self.subject = cmd.kind == "so"
        if isinstance(cmd, TrialBegin) and self.subject:
            self.trials_seen += 1
        if isinstance(cmd, Call) and self.subject and cmd.timed and self.trials_seen <= self.slow_trials:
            self.slowed += 1
            until = time.perf_counter() + DELAY_S
            while time.perf_counter() < until:
                pass
        return super().request(cmd, timeout_s, pickler, fds)


class Mover(Loaded):
    """Hides ``DELAY_S`` outside its GPU time in its first timing; once timed again, does it inside."""

    def request(self, cmd, timeout_s, pickler=None, fds=()):
        if not (isinstance(cmd, Call) and self.subject and cmd.timed and self.trials_seen > self.slow_trials):
            return super().request(cmd, timeout_s, pickler, fds)
        inner = self.candidate

        def slow(*args):  # the measured worker reports the candidate's own time as GPU time
            until = time.perf_counter() + DELAY_S
            while time.perf_counter() < until:
                pass
            return inner(*args)

        self.candidate, self.slowed = slow, self.slowed + 1
        try:
            return super().request(cmd, timeout_s, pickler, fds)
        finally:
            self.candidate = inner


def _evaluate(tmp_path, slow_trials: int, retries: int, kind: type[Loaded] = Loaded):
    made: list[InProcessWorker] = []

    def make():
        if not made:  # the baseline
            worker = InProcessWorker(tb.honest, tmp_path, measured=True)
        else:
            worker = kind(tb.honest, tmp_path, measured=True, slow_trials=slow_trials)
        made.append(worker)
        return worker

    settings = SETTINGS.model_copy(update={"wall_retries": retries})
    evaluator = tb.cpu_evaluator(tmp_path, make, settings)
    task = tb.gemm_task()
    verdict = evaluator.evaluate(task, tb.built(task))
    assert made[-1].slowed > 0, "the subject's timed calls must have been slowed"
    return verdict


def test_a_timing_slowed_by_a_transient_load_is_timed_again_and_paid(tmp_path) -> None:
    verdict = _evaluate(tmp_path, slow_trials=SETTINGS.trials, retries=1)
    assert verdict.status is Status.PASSED, verdict.message
    assert "exceeds the reported GPU time" in verdict.details["retimed"], verdict.details["retimed"]
    assert "timed again after a wall cross-check" in verdict.message
    assert verdict.details["crosscheck"]["ok"] is True  # the second timing's
    assert verdict.timing.speedup is not None


def test_without_retries_the_same_timing_is_an_anomaly(tmp_path) -> None:
    verdict = _evaluate(tmp_path, slow_trials=SETTINGS.trials, retries=0)
    assert verdict.status is Status.TIMING_ANOMALY, verdict.message
    assert verdict.details["retimed"] is None and verdict.timing.speedup is None


def test_work_hidden_in_every_timing_is_still_an_anomaly(tmp_path) -> None:
    verdict = _evaluate(tmp_path, slow_trials=10**6, retries=1)
    assert verdict.status is Status.TIMING_ANOMALY, verdict.message
    assert verdict.details["retimed"], "it was timed again, and failed again"
    assert verdict.timing.speedup is None


def test_a_forged_figure_or_a_failed_subject_is_never_timed_again() -> None:
    session = Session.__new__(Session)
    session.clock = None
    allowance = CrossCheck(False, 2.0, 1.0, "past its allowance")
    assert session.retime_due(SessionResult(crosscheck=allowance), 0.5)
    assert not session.retime_due(SessionResult(crosscheck=CrossCheck(True, 0.1, 1.0)), 0.5)
    forged = CrossCheck(False, -3.0, 0.0, "a forged timing", forged=True)
    assert not session.retime_due(SessionResult(crosscheck=forged), 0.5)
    assert not session.retime_due(SessionResult(crosscheck=allowance, missing_spans=1), 0.5)


def test_no_second_timing_past_the_step_budget() -> None:
    class Clock:
        def __init__(self, left: float) -> None:
            self.left = left

        def run_left(self) -> float:
            return self.left

    session = Session.__new__(Session)
    result = SessionResult(crosscheck=CrossCheck(False, 2.0, 1.0, "past its allowance"))
    session.clock = Clock(3.0)
    assert session.retime_due(result, 1.0)  # room for twice the timing
    session.clock = Clock(1.5)
    assert not session.retime_due(result, 1.0)


def test_work_moved_inside_the_timer_once_timed_again_is_still_an_anomaly(tmp_path) -> None:
    """A hider whose first timing failed moves the work inside the timer: its GPU time rose by it."""
    verdict = _evaluate(tmp_path, slow_trials=SETTINGS.trials, retries=1, kind=Mover)
    assert verdict.status is Status.TIMING_ANOMALY, verdict.message
    assert "median GPU time rose" in verdict.message and verdict.details["retimed"]


def test_the_counted_calls_of_a_second_timing_are_at_new_secret_slots(arena, tmp_path) -> None:  # noqa: F811
    """The first timing's counted slots are known to the subject once it ran; the second draws again."""
    same = 0
    for seed in range(12):
        fake = InProcessWorker(Honest(), tmp_path)
        session = _loaded(arena, fake, seed)
        result = SessionResult()
        session.correctness(result)
        session.timing(result, crosscheck=False, count=True, hw_count=True)
        first = (result.counted.trial, result.counted.slot, result.hw_counted.trial, result.hw_counted.slot)
        session.retime(result)
        second = (result.counted.trial, result.counted.slot, result.hw_counted.trial, result.hw_counted.slot)
        assert len(fake.counted_calls) == 2 and len(fake.hw_counted_calls) == 2
        same += first == second
    assert same < 12, "every counted call of a second timing sat where the first's had been"


class Banker(InProcessWorker):
    """CUPTI census: its target kernel twice per timed call in ``phase`` 1, a non-target kernel in 2."""

    phase = 1

    def request(self, cmd, timeout_s, pickler=None, fds=()):
        if not isinstance(cmd, TrialEnd):
            return super().request(cmd, timeout_s, pickler, fds)
        self.seq += 1
        self.in_trial = False
        name, per = (IN_BAND_KERNEL, 2) if self.phase == 1 else ("fast_fma_kernel", 1)
        spans = Spans(
            spans=dict.fromkeys(self.windows, 1.0),
            activities=dict.fromkeys(self.windows, 1),
            kernels={name: per * len(self.windows)} if self.windows else {},
        )
        return Reply(seq=self.seq, ok=True, spans=spans)


def test_the_census_vouching_for_the_paid_calls_is_the_paid_timings(arena, tmp_path) -> None:  # noqa: F811
    """Launches banked in the discarded timing cannot make up for a paid timing without the target."""
    fake = Banker(Honest(), tmp_path)
    fake.spans = True
    session = _loaded(arena, fake, 5, backend=CUPTI)
    result = SessionResult()
    session.correctness(result)
    session.timing(result, crosscheck=False)
    fake.phase = 2
    session.retime(result)
    census = Census(result.kernels, result.census_calls, result.census_error)
    # sass_join.in_band_info: a target kernel launched fewer times than the timed calls is a decoy
    assert census.launches(IN_BAND_KERNEL) < census.calls, dict(result.kernels)
    assert "fast_fma_kernel" in result.kernels and IN_BAND_KERNEL in result.kernels  # the name stays
