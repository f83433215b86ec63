"""A timing's last checks wait until its worker is stopped (``EvalSettings.defer_final_checks``).

The last trial's verified calls, the timing's whole check and its input check need no worker, so the
evaluator stops the worker first and runs them after (``Session.finish``): its teardown overlaps their
references. What must hold: nothing is left unchecked, a failure there is the verdict as before, the
order of the checks is the timing's, and in the evaluator no check of them runs before the stop.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import InProcessWorker  # noqa: E402
from test_baseline_path import SETTINGS as EV_SETTINGS  # noqa: E402 - no slow cut-off (a loaded host)
from test_baseline_path import built, cpu_evaluator  # noqa: E402

from ptxgym.evaluation.protocol import Load  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402

SETTINGS = EvalSettings(warmup=2, iterations=12, trials=3, correctness_sets=3, rotate_sets=3)
VERIFIED = SETTINGS.verified_per_trial


def before_last(settings) -> int:
    """Calls before the last trial's first: the correctness calls and every other trial's."""
    return settings.correctness_sets + (settings.trials - 1) * (settings.warmup + settings.iterations)


CALLS_BEFORE_LAST = before_last(SETTINGS)


def gemm_task():
    return tiny_task("Gemm-sm90a", M=128, N=48, K=32)  # 128 rows: the sampled checks and the whole one


class Candidate:
    """Honest, except from call ``wrong_from`` (wrong outputs) or at call ``writes_at`` (an input write)."""

    def __init__(self, wrong_from: int = 0, writes_at: int = 0) -> None:
        self.wrong_from, self.writes_at, self.calls = wrong_from, writes_at, 0

    def __call__(self, A, B, C):
        self.calls += 1
        C.copy_((A.float() @ B.float().T).to(C.dtype))
        if self.wrong_from and self.calls >= self.wrong_from:
            C.mul_(2)
        if self.calls == self.writes_at:
            A[0, 0] += 1


def timed(candidate, tmp_path, monkeypatch, defer=True):
    """Correctness and timing with ``defer_checks``: (result, session, held checks made so far)."""
    checked: list[int] = []
    real = Arena.check_held
    monkeypatch.setattr(Arena, "check_held", lambda self, held: checked.append(1) or real(self, held))
    arena = Arena(gemm_task(), [1, 2, 3], "cpu", tmp_path, sample_share=SETTINGS.verify_sample_share)
    session = Session(InProcessWorker(candidate, tmp_path), arena, SETTINGS, EVENTS, 7, 10.0)
    session.attach(1, cupti=False)
    session.calibrate(n=3)
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    session.defer_checks = defer
    result = SessionResult()
    session.correctness(result)
    assert result.failure is None
    session.timing(result, crosscheck=False)
    return result, session, checked


def test_the_last_trials_checks_wait_for_finish_and_none_is_lost(tmp_path, monkeypatch):
    result, session, checked = timed(Candidate(), tmp_path, monkeypatch)
    assert arena_sampling(session), session.arena.sampling
    assert len(checked) == (SETTINGS.trials - 1) * VERIFIED and session.whole_checks == 0
    session.finish(result)
    assert result.failure is None
    assert len(checked) == SETTINGS.trials * VERIFIED + 1 and session.whole_checks == 1
    assert result.calls_checked == SETTINGS.correctness_sets + SETTINGS.trials * VERIFIED
    session.finish(result)  # nothing twice
    assert len(checked) == SETTINGS.trials * VERIFIED + 1


def arena_sampling(session) -> bool:
    return session.arena.sample_share < 1


def test_without_deferral_the_timing_checks_everything_itself(tmp_path, monkeypatch):
    result, session, checked = timed(Candidate(), tmp_path, monkeypatch, defer=False)
    assert len(checked) == SETTINGS.trials * VERIFIED + 1 and session.whole_checks == 1
    session.finish(result)
    assert len(checked) == SETTINGS.trials * VERIFIED + 1


def test_wrong_outputs_in_the_last_trial_are_the_verdict_at_finish(tmp_path, monkeypatch):
    result, session, _ = timed(Candidate(wrong_from=CALLS_BEFORE_LAST + 1), tmp_path, monkeypatch)
    assert result.failure is None  # not checked yet
    session.finish(result)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL
    assert result.failure.stage is Stage.TIME
    assert "a timed call (fresh values, same buffers)" in result.failure.message


def test_an_input_written_in_the_last_trial_is_found_at_finish(tmp_path, monkeypatch):
    result, session, _ = timed(Candidate(writes_at=CALLS_BEFORE_LAST + 3), tmp_path, monkeypatch)
    assert result.failure is None
    session.finish(result)
    assert result.failure is not None and result.failure.status is Status.INPUT_MUTATED


def test_wrong_outputs_come_before_a_written_input_as_in_the_timing(tmp_path, monkeypatch):
    cheat = Candidate(wrong_from=CALLS_BEFORE_LAST + 1, writes_at=CALLS_BEFORE_LAST + 3)
    result, session, _ = timed(cheat, tmp_path, monkeypatch)
    session.finish(result)
    assert result.failure is not None and result.failure.status is Status.INCORRECT_NUMERICAL


@pytest.mark.parametrize("defer", [True, False])
def test_the_evaluator_stops_the_worker_before_the_deferred_checks(tmp_path, monkeypatch, defer):
    """No check of the last trial runs while the worker lives; with the setting off, all run before."""
    from test_baseline_path import Workers

    workers = Workers(tmp_path)
    settings = EV_SETTINGS.model_copy(update={"defer_final_checks": defer})
    ev = cpu_evaluator(tmp_path, workers, settings)
    task = tiny_task("Gemm-sm90a", M=64, N=48, K=32)
    ev.baseline(task)
    real = Arena.check_held

    def noted(self, held):
        workers.made[-1].transcript.append("check")
        return real(self, held)

    monkeypatch.setattr(Arena, "check_held", noted)
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.PASSED, verdict.message
    log = workers.made[-1].transcript
    per_trial = settings.verified_per_trial
    if not defer:  # stopped only in its discard (early_refill is off here)
        assert "stop" not in log and log.count("check") >= settings.trials * per_trial
        return
    assert log.count("stop") == 1
    before, after = log[: log.index("stop")], log[log.index("stop") + 1 :]
    arena = next(iter(ev._arenas.values()))
    whole = int(arena.sample_share < 1)  # the timing's whole check comes last
    assert not any(c.startswith(("call", "count", "hw")) for c in after)
    if verdict.details.get("retimed"):  # a loaded host's wall check: the first timing's checks came first
        assert after.count("check") >= whole and before.count("check") >= settings.trials * per_trial
    else:
        assert after.count("check") == per_trial + whole, log[-30:]
        assert before.count("check") == (settings.trials - 1) * per_trial
    walls = verdict.stage_wall_s
    assert 0 < walls["finish_verify"] <= walls["finish"] and "time_finish_verify" not in walls


def test_a_wrong_last_trial_fails_the_evaluators_verdict(tmp_path):
    from test_baseline_path import Workers

    settings = EV_SETTINGS.model_copy(update={"slow_probe_calls": 0})
    calls = before_last(settings)
    cheat = Candidate(wrong_from=calls + 1)
    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers, settings)
    task = tiny_task("Gemm-sm90a", M=64, N=48, K=32)
    ev.baseline(task)
    workers.candidate = cheat
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.INCORRECT_NUMERICAL, verdict.message
    assert cheat.calls == calls + settings.warmup + settings.iterations  # it ran to the end


def test_a_memory_hog_wrong_in_its_last_trial_is_paid_nothing(tmp_path, monkeypatch):
    """A process still holding too much GPU memory after its timing ends as the hog, deferred checks unmade.

    The hog's memory could starve the trusted references, so the deferred checks are not run; the verdict
    is the hog's (RUNTIME_ERROR, as for a hog found after the correctness calls), never PASSED.
    """
    from test_baseline_path import Workers

    # no retime either: its first timing's checks run before it, with the worker alive (a loaded host's
    # wall could call for one)
    settings = EV_SETTINGS.model_copy(update={"wall_retries": 0})
    cheat = Candidate(wrong_from=before_last(settings) + 1)
    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers, settings)
    task = tiny_task("Gemm-sm90a", M=64, N=48, K=32)
    ev.baseline(task)
    workers.candidate = cheat
    free = iter([100 * 2**30, 100 * 2**30] + [0] * 100)  # before the load, after the check; then none
    monkeypatch.setattr(ev, "_free_bytes", lambda: next(free))
    finished: list[int] = []
    real = Session.finish

    def noted(self, result, strict=True):
        finished.append(1)
        return real(self, result, strict)

    monkeypatch.setattr(Session, "finish", noted)
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.RUNTIME_ERROR and "GiB of GPU memory" in verdict.message, verdict.message
    assert finished == [] and cheat.calls == before_last(settings) + settings.warmup + settings.iterations
