"""The hardware-counted call (``Call.hw_count``, issue 11) in the trusted ``Session``, on CPU buffers.

Driven against the in-process worker (``inprocess_worker.py``) as ``test_counted_position.py`` drives the
SASS-counted call: the counters are made up by the stand-in (the GPU tests read real ones). What is
checked is where the call goes and how it is judged: once per step, at a secret place that is never the
counted call's, on fresh values, verified, untimed; without ``hw_count`` the
step is what it was. Inside the activity trial by default (``hw_count_in_trial``).
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402
from inprocess_worker import COUNTED_ROW, HW_COUNTS, IN_BAND_KERNEL, InProcessWorker  # noqa: E402

from ptxgym.evaluation.protocol import Load  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import CUPTI, EVENTS  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402

SETTINGS = EvalSettings(warmup=1, iterations=3, trials=2, correctness_sets=2, rotate_sets=3)
VERIFIED = SETTINGS.trials * SETTINGS.verified_per_trial


def _gemm(A, B):
    return (A.float() @ B.float().T).to(torch.bfloat16)


def _honest(A, B, C):
    C.copy_(_gemm(A, B))


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    task = tiny_task("Gemm-sm90a", M=16, N=16, K=16)
    return Arena(task, [1, 2, 3], "cpu", tmp_path_factory.mktemp("arena"))


def _timing(arena, fake, seed, backend=EVENTS, settings=SETTINGS, **kw):
    arena.restore()
    session = Session(fake, arena, settings, backend, seed, 10.0)
    session.attach(1, cupti=backend == CUPTI)
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    result = SessionResult()
    session.timing(result, crosscheck=False, **kw)
    return result


def test_one_verified_untimed_call_at_a_place_of_its_own(arena, tmp_path):
    places = Counter()
    for seed in range(30):
        fake = InProcessWorker(_honest, tmp_path)
        result = _timing(arena, fake, seed, count=True, hw_count=True)
        assert result.failure is None
        assert len(fake.hw_counted_calls) == 1 and len(fake.counted_calls) == 1
        assert result.hw_counts == HW_COUNTS and result.hw_count_error == ""
        assert result.sass_rows == [COUNTED_ROW]
        assert [len(t) for t in result.trials] == [SETTINGS.iterations] * SETTINGS.trials  # no sample lost
        assert result.calls_checked == VERIFIED + 2  # both extra calls verified
        assert fake.calls == SETTINGS.trials * (SETTINGS.warmup + SETTINGS.iterations) + 2
        hw_call, counted_call = fake.hw_counted_calls[0][0], fake.counted_calls[0][0]
        assert hw_call != counted_call and result.hw_counted.call == hw_call
        assert result.hw_counted.in_trial is False and "outside activity trials" in result.hw_counted.outside
        places[hw_call] += 1
    assert len(places) >= 5  # the place varies over steps


def test_without_hw_count_no_such_call_is_made(arena, tmp_path):
    plain = InProcessWorker(_honest, tmp_path)
    first = _timing(arena, plain, 4, count=True)
    assert first.hw_counted is None and first.hw_counts is None and plain.hw_counted_calls == []
    assert not any(c.startswith("hw:") for c in plain.transcript)


def test_outside_the_activity_trial_when_asked(arena, tmp_path):
    """``hw_count_in_trial`` off: the trial is closed around the call, and its kernels join no census."""
    fake = InProcessWorker(_honest, tmp_path)
    fake.spans = True
    outside = SETTINGS.model_copy(update={"hw_count_in_trial": False})
    result = _timing(arena, fake, 8, backend=CUPTI, settings=outside, hw_count=True)
    assert result.failure is None and result.missing_spans == 0
    assert fake.hw_counted_calls[0][1] is False  # no activity trial open during it
    assert result.hw_window is None
    i = fake.transcript.index(next(c for c in fake.transcript if c.startswith("hw:")))
    assert fake.transcript[i - 1] == "trial_end" and fake.transcript[i + 1] == "trial_begin"
    assert result.kernels == {IN_BAND_KERNEL: SETTINGS.trials * SETTINGS.iterations}  # timed calls only


def test_inside_the_activity_trial_by_default(arena, tmp_path):
    """``hw_count_in_trial`` (the default): the trial stays open around the call, its kernels counted."""
    fake = InProcessWorker(_honest, tmp_path)
    fake.spans = True
    assert SETTINGS.hw_count_in_trial
    result = _timing(arena, fake, 8, backend=CUPTI, hw_count=True)
    assert result.failure is None and result.missing_spans == 0
    assert fake.hw_counted_calls[0][1] is True and result.hw_counted.in_trial is True
    assert result.hw_counted.outside == ""
    i = fake.transcript.index(next(c for c in fake.transcript if c.startswith("hw:")))
    assert fake.transcript[i - 1] != "trial_end"  # the trial was not closed before it,
    assert fake.transcript.count("trial_begin") == SETTINGS.trials  # nor begun again after it
    assert result.kernels == {IN_BAND_KERNEL: SETTINGS.trials * SETTINGS.iterations + 1}  # and its own
    assert result.hw_window == (1, 1)  # its window's GPU activities beside its trial's busiest timed call
    assert [len(t) for t in result.trials] == [SETTINGS.iterations] * SETTINGS.trials  # not a latency


def test_a_wrong_result_on_the_hw_counted_call_is_a_wrong_timed_call(arena, tmp_path):
    fake = InProcessWorker(None, tmp_path)

    def wrong_when_watched(A, B, C):
        _honest(A, B, C)
        if fake.hw_counting:
            C.zero_()

    fake.candidate = wrong_when_watched
    result = _timing(arena, fake, 5, hw_count=True)
    assert result.failure is not None and result.failure.stage is Stage.TIME
    assert result.failure.status in (Status.INCORRECT_NUMERICAL, Status.UNWRITTEN)
    assert result.hw_counts is None  # the counters of a failed call prove nothing


def test_the_reason_travels_when_there_are_no_counters(arena, tmp_path):
    fake = InProcessWorker(_honest, tmp_path)
    fake.hw_error = "HwCountError: the Python worker reads no hardware counters"
    result = _timing(arena, fake, 2, hw_count=True)
    assert result.failure is None and result.hw_counts is None and result.hw_count_error == fake.hw_error
    silent = InProcessWorker(_honest, tmp_path)
    silent.hw_counts = None
    result = _timing(arena, silent, 2, hw_count=True)
    assert result.hw_counts is None and "no counters and no reason" in result.hw_count_error


def test_a_cut_short_step_still_makes_it_among_the_verified_calls(arena, tmp_path):
    settings = SETTINGS.model_copy(update={"trials": 3})
    for seed in range(40):
        fake = InProcessWorker(_honest, tmp_path)
        result = _timing(arena, fake, seed, settings=settings, count=True, hw_count=True, baseline_ms=0.05)
        assert result.shortened and result.failure is None
        assert len(fake.hw_counted_calls) == 1 and len(fake.counted_calls) == 1
        if result.hw_counted.trial > 0 and result.counted.trial == result.hw_counted.trial:
            return
    pytest.fail("no seed put both extra calls in one cut-short trial")
