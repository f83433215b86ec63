"""The step's wall budget: its formula, and slow or hanging workers ended within it as TIMEOUT.

The workers are the fake worker (``fake_worker.py``) driven by the real ``Session`` over the real pipes,
against a CPU arena; the trusted side's baseline path (lenient: failed checks do not stop it) is used
so that every call of the step is made, as for a candidate whose outputs are right but slow to come.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import tiny_task  # noqa: E402

from ptxgym.evaluation.child_errors import WorkerTimeout  # noqa: E402
from ptxgym.evaluation.protocol import AttachResult, Call, Load, Reply  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.budget import (  # noqa: E402
    FORMULA,
    StepBudget,
    StepBudgetExceeded,
    exceeded_verdict,
)
from ptxgym.evaluation.trusted.pool import MAX_OUTPUT_BYTES, TAIL_BYTES, WorkerHandle  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402
from ptxgym.records.feedback import EnvironmentInfo, Stage, Status  # noqa: E402

# 3 correctness calls + 3 x (2 + 20) timed calls = 69 calls; at 0.1 s a reply the step would take ~7 s.
SETTINGS = EvalSettings(
    warmup=2,
    iterations=20,
    trials=3,
    correctness_sets=3,
    budget_base_s=1.0,
    budget_slowdown=10.0,
    budget_call_s=0.005,
    budget_proofs_s=30.0,
    budget_cap_s=30.0,
)


def test_the_formula():
    assert EvalSettings().verified_per_trial == 3  # the default: 9 verified timed calls per step
    s = EvalSettings(verify_timed_fraction=0.25)  # 13 per trial, to exercise the verified term
    b = StepBudget.for_step(s, baseline_ms=0.768, floor_ms=0.608, reference_s=0.01, proofs=True)
    calls = 3 + 3 * (10 + 50) + 2 + 8  # checks, trials, the slow cut-off's probe
    assert (b.calls, b.verified, b.latency_ms) == (calls, 3 * 13, 0.768)
    run = 10.0 + calls * (50 * 0.768e-3 + 0.02) + 39 * 0.01
    assert b.run_s == pytest.approx(run) and b.total_s == pytest.approx(run + 60.0)
    assert b.total_s < 120.0
    # no proof to run: no allowance; no baseline: the floor; a slow baseline: the cap binds both
    assert StepBudget.for_step(s, 0.768, 0.608, 0.01, proofs=False).total_s == pytest.approx(run)
    assert StepBudget.for_step(s, None, 0.608, 0.0, proofs=False).latency_ms == 0.608
    slow = StepBudget.for_step(s, 50.0, 0.6, 0.1, proofs=True)
    assert slow.total_s == 120.0 and slow.run_s == 120.0
    assert b.record()["formula"] == FORMULA
    text = b.explain()
    for part in (f"{b.run_s:.1f} s", "193 calls", "50 x 0.768 ms", "39 verified", "capped at 120 s"):
        assert part in text


def _session(arena, argv, tmp_path, timeout_s: float = 60.0) -> Session:
    handle = WorkerHandle(argv, None, tmp_path)
    handle.drain(30.0)
    attach = AttachResult(arena=arena.id, cupti=False, flush_bytes=1)
    handle.primed = {"arena": arena.id, "reply": Reply(seq=0, ok=True, attach=attach)}
    session = Session(handle, arena, SETTINGS, EVENTS, seed=5, timeout_s=timeout_s)
    session.attach(1, cupti=False)
    return session


def _step(session: Session) -> None:
    session.load(Load(kind="so", path="candidate.so", entry="run"))
    result = SessionResult()
    session.correctness(result, strict=False)
    session.timing(result, crosscheck=False, strict=False)


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    return Arena(tiny_task("Gemm-sm90a", M=16, N=16, K=16), [1, 2, 3], "cpu", tmp_path_factory.mktemp("a"))


def test_slow_replies_end_as_timeout_within_the_budget(arena, fake_worker_argv, tmp_path):
    """Each reply comes in 0.1 s, far under the per-command limit (60 s); the step as a whole is cut."""
    budget = StepBudget.for_step(SETTINGS, baseline_ms=0.5, floor_ms=0.1, reference_s=0.0, proofs=True)
    assert 1.0 < budget.run_s < 2.0 and budget.total_s > 30.0 - 1e-9
    session = _session(arena, fake_worker_argv("slow", "--delay", "0.1"), tmp_path)
    session.start_clock(budget)
    t0 = time.monotonic()
    try:
        with pytest.raises(StepBudgetExceeded) as info:
            _step(session)
    finally:
        session.worker.kill()
    spent = time.monotonic() - t0
    assert budget.run_s - 0.05 <= spent <= budget.run_s + 1.0
    assert session.worker.seq < 3 + SETTINGS.calls_per_step  # it did not get to the end
    verdict = exceeded_verdict(info.value, Stage.TIME, EnvironmentInfo(evaluator="test"))
    assert verdict.status is Status.TIMEOUT
    assert "did not return in time" in verdict.message and budget.explain() in verdict.message


def test_a_hang_costs_the_budget_not_the_command_limit(arena, fake_worker_argv, tmp_path):
    budget = StepBudget.for_step(SETTINGS, baseline_ms=0.5, floor_ms=0.1, reference_s=0.0, proofs=False)
    session = _session(arena, fake_worker_argv("hang"), tmp_path)
    session.start_clock(budget)
    t0 = time.monotonic()
    try:
        with pytest.raises(StepBudgetExceeded):
            _step(session)
    finally:
        session.worker.kill()
    assert time.monotonic() - t0 <= budget.run_s + 1.0  # not the 60 s of call_timeout_s


def test_without_a_budget_the_command_limit_still_applies(arena, fake_worker_argv, tmp_path):
    session = _session(arena, fake_worker_argv("hang"), tmp_path, timeout_s=0.5)
    try:
        with pytest.raises(WorkerTimeout) as info:
            _step(session)
    finally:
        session.worker.kill()
    assert not isinstance(info.value, StepBudgetExceeded)


def test_captured_output_is_capped(fake_worker_argv, tmp_path):
    """A printf flood: 3 MiB per command; the log keeps 1 MiB, memory the last 64 KiB."""
    handle = WorkerHandle(fake_worker_argv("flood", "--flood-mib", "3"), None, tmp_path)
    try:
        handle.drain(30.0)
        for _ in range(2):
            assert handle.request(Call(), 30.0).ok
        handle.output.settle(0.5)
        assert handle.log_path.stat().st_size == MAX_OUTPUT_BYTES
        tail = handle.log_tail(200)
        assert tail.rstrip().endswith("END OF FLOOD")
        assert "bytes of output past the first" in tail
        assert len(handle.output.text(10 * TAIL_BYTES)) < TAIL_BYTES + 200
    finally:
        handle.kill()
