"""The trusted side's arena and session logic on CPU tensors, driven against the fake worker.

No GPU: the arena lives on the CPU and the fake worker answers every call without computing (as a
no-op candidate would). What is checked is our own control flow: perturbation and verification of the
arena, the strict (candidate) and lenient (baseline) handling of failed checks, and the protocol.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import small_task  # noqa: E402

from ptxgym.evaluation.protocol import AttachResult, Load, Reply  # noqa: E402
from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402
from ptxgym.evaluation.trusted.base import EvalSettings  # noqa: E402
from ptxgym.evaluation.trusted.inputs import run_reference  # noqa: E402
from ptxgym.evaluation.trusted.pool import WorkerHandle  # noqa: E402
from ptxgym.evaluation.trusted.session import Session, SessionResult  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402
from ptxgym.records.feedback import Stage, Status  # noqa: E402


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    return Arena(small_task("Gemm-sm90a", M=8), [1, 2, 3], "cpu", tmp_path_factory.mktemp("arena"))


def _compute(arena: Arena, index: int) -> None:
    """Play an honest candidate: write the reference of the current shared inputs into the outputs."""
    s = arena.sets[index]
    out = run_reference(arena.task, arena.namespace, s.shared_in)
    for name, value in out.items():
        s.shared_out[name].copy_(value)


def test_arena_perturbs_in_place_and_verifies(arena):
    gen = torch.Generator().manual_seed(0)
    s = arena.sets[0]
    ptr, before = s.shared_in["A"].data_ptr(), s.shared_in["A"].clone()
    arena.prepare(0, gen)
    assert s.shared_in["A"].data_ptr() == ptr and not torch.equal(s.shared_in["A"], before)
    assert arena.verify(0).status is Status.UNWRITTEN  # poisoned, nothing computed yet
    _compute(arena, 0)
    assert arena.verify(0).passed
    stale = s.shared_out["C"].clone()
    arena.prepare(0, gen)
    s.shared_out["C"].copy_(stale)  # a pointer-keyed cache replays the previous output
    assert arena.verify(0).status is Status.INCORRECT_NUMERICAL
    _compute(arena, 0)
    assert arena.verify(0).passed and arena.mutated_inputs() == []
    s.shared_in["B"][3, 3] += 1  # the candidate writes into an input
    assert arena.verify(0).status is Status.INPUT_MUTATED
    assert arena.mutated_inputs() == ["B"]
    arena.prepare(0, gen)  # later perturbations keep the damage visible
    assert arena.mutated_inputs() == ["B"]
    s.shared_in["B"].copy_(arena.expected_inputs(0)["B"])
    assert arena.mutated_inputs() == []


def test_restore_undoes_a_previous_candidates_writes_to_shared_inputs(arena):
    """The next candidate must not inherit a mutating candidate's damage.

    Seen on the H200: every later candidate was judged INPUT_MUTATED before the evaluator restored the
    inputs between sessions.
    """
    gen = torch.Generator().manual_seed(1)
    arena.prepare(1, gen)
    assert arena.restore() == []  # nothing touched: nothing rewritten
    arena.sets[1].shared_in["A"][0, :4] = 7.0
    arena.sets[2].shared_in["B"].zero_()
    assert arena.mutated_inputs() == ["A", "B"]
    assert arena.restore() == ["A", "B"]
    assert arena.mutated_inputs() == []
    _compute(arena, 1)
    assert arena.verify(1).passed  # an honest candidate afterwards is judged on intact inputs


def _session(arena, fake_worker_argv, tmp_path, settings, mode="echo", flush_bytes=1) -> Session:
    handle = WorkerHandle(fake_worker_argv(mode), None, tmp_path)
    handle.drain(30.0)
    attach = AttachResult(arena=arena.id, cupti=False, flush_bytes=flush_bytes)
    handle.primed = {"arena": arena.id, "reply": Reply(seq=0, ok=True, attach=attach)}
    session = Session(handle, arena, settings, EVENTS, seed=5, timeout_s=10.0)
    session.attach(1, cupti=False)
    return session


def test_candidate_stops_at_the_first_failed_check(arena, fake_worker_argv, tmp_path):
    session = _session(arena, fake_worker_argv, tmp_path, EvalSettings(warmup=1, iterations=4, trials=2))
    try:
        cal = session.calibrate(n=5)
        assert cal.n == 5 and cal.sync_gap_ms == pytest.approx(0.02)
        assert set(cal.parts_ms) == {"request", "copy"}  # the fake worker reports no steps of its own
        assert 0 <= cal.parts_ms["copy"] and 0 < cal.parts_ms["request"] <= cal.overhead_ms + 1.0 + 0.1
        session.load(Load(kind="so", path="x.so", entry="run"))
        result = SessionResult()
        session.correctness(result)
        assert result.failure.status is Status.UNWRITTEN and result.failure.stage is Stage.CHECK
        assert result.calls_checked == 1 and "in a correctness call" in result.failure.message
    finally:
        session.worker.kill()


def test_baseline_is_timed_even_when_a_check_fails(arena, fake_worker_argv, tmp_path):
    settings = EvalSettings(warmup=1, iterations=4, trials=2, correctness_sets=2)
    session = _session(arena, fake_worker_argv, tmp_path, settings)
    try:
        session.calibrate(n=3)
        result = SessionResult()
        session.correctness(result, strict=False)
        session.timing(result, crosscheck=False, strict=False)
        assert result.failure.status is Status.UNWRITTEN  # recorded, not fatal
        assert result.calls_checked == 2 + 2 * 3
        assert [len(t) for t in result.trials] == [4, 4]
        assert all(x == pytest.approx(1.0) for t in result.trials for x in t)
        assert len(result.wall_parts) == len(result.walls) == 8  # the calls behind the walls
    finally:
        session.worker.kill()


def test_matched_calibration_runs_the_no_op_about_as_long_as_the_baseline(arena, fake_worker_argv, tmp_path):
    """The busy no-op lasts about ``match_ms``, and the wall cross-check compares against it.

    Its memsets per call are counted from a probe; the trivial calibration is not the reference then.
    """
    session = _session(arena, fake_worker_argv, tmp_path, EvalSettings(warmup=1, iterations=4), mode="busy")
    try:
        trivial = session.calibrate(n=5, match_ms=0.8)
        matched = session.cal_matched
        assert trivial.busy_memsets == 0 and trivial.latency_ms == pytest.approx(0.005)
        assert matched is not None and matched.n == 5
        assert matched.busy_memsets == round((0.8 - 0.005) / 0.03)  # 26 memsets of 30 us
        assert matched.latency_ms == pytest.approx(0.8, abs=0.015)
        # its overhead is a wall-clock measurement of the fake worker (noisy on a loaded CI host): set a
        # plausible one, so what is under test is the choice and the allowance, not this host's load
        matched = dataclasses.replace(matched, overhead_ms=trivial.overhead_ms, overhead_iqr_ms=0.01)
        session.cal_matched = matched
        session.load(Load(kind="so", path="x.so", entry="run"))
        result = SessionResult()
        session.timing(result, crosscheck=True, strict=False)
        cc = result.crosscheck
        assert cc is not None
        # allowed = the matched calibration's overhead + the slack (max of 0.3 ms, 10 % of 1 ms, 5 IQR)
        slack = max(0.3, 0.1 * 1.0, 5 * matched.overhead_iqr_ms)
        assert session.reference_calibration() is matched
        assert cc.allowed_ms == pytest.approx(matched.overhead_ms + slack)
        # a matched no-op whose wall time did not hold its claimed GPU time is not believed
        session.cal_matched = dataclasses.replace(matched, overhead_ms=-0.5)
        assert session.reference_calibration() is trivial
        # a long baseline call: fewer matched calls (their GPU time is bounded), never fewer than 8
        session.calibrate(n=20, match_ms=20.0)
        assert session.cal_matched is not None and session.cal_matched.n == 8
    finally:
        session.worker.kill()


def test_no_matched_calibration_without_a_baseline_or_a_flush_buffer(arena, fake_worker_argv, tmp_path):
    session = _session(arena, fake_worker_argv, tmp_path, EvalSettings(), mode="busy", flush_bytes=0)
    try:
        session.calibrate(n=3, match_ms=0.8)
        assert session.cal_matched is None  # no buffer for the memsets
        session.flush_bytes = 1
        session.calibrate(n=3)
        assert session.cal_matched is None  # nothing to match
    finally:
        session.worker.kill()


def test_a_call_s_wall_ends_after_the_trusted_copy_of_its_outputs(
    arena, fake_worker_argv, tmp_path, monkeypatch
):
    """The wall ends after the trusted read of the outputs, not at the reply.

    A reply can be sent before the work is done (another thread of the worker writes the channel); the
    trusted read of the outputs cannot (a reviewer's find: pre-sent replies made the walls pipe latencies,
    and the cross-check bounded nothing).
    """
    import time

    session = _session(arena, fake_worker_argv, tmp_path, EvalSettings(warmup=1, iterations=4, trials=2))
    copy = arena.copy_outputs

    def slow_copy(index: int):  # stands for a copy that waits on the GPU for the candidate's kernel
        time.sleep(0.02)
        return copy(index)

    monkeypatch.setattr(arena, "copy_outputs", slow_copy)
    try:
        record, outputs = session._call(0, timed=True)
        assert record.wall_ms >= 20.0 and set(outputs) == set(arena.sets[0].shared_out)
    finally:
        session.worker.kill()


def test_a_call_through_the_exchange_is_timed_there_and_fills_the_slots(
    arena, fake_worker_argv, tmp_path, monkeypatch
):
    """``Session._call`` through the exchange (``exchange.py``): the C call's walls and the slot tensors.

    The arena is on the CPU, so the exchange's CUDA copies are replaced by ready slots (no copies): what
    is checked is the session's wiring; the copies themselves run in the GPU tests.
    """
    from ptxgym.evaluation.trusted import exchange

    settings = EvalSettings(warmup=1, iterations=4, trials=2)
    session = _session(arena, fake_worker_argv, tmp_path, settings, mode="slow")
    slots = {name: t.clone() for name, t in arena.sets[0].shared_out.items()}
    monkeypatch.setattr(arena, "output_slots", lambda index: (slots, []))
    monkeypatch.setattr(exchange, "unavailable", lambda copies=False: "")
    try:
        record, outputs = session._call(0, timed=True)
        assert session.wall_path == "native" and outputs is slots
        assert 200.0 <= record.request_ms <= record.wall_ms < 5000.0  # the fake worker's 0.2 s delay
        session.settings = settings.model_copy(update={"native_wall": False})
        record, outputs = session._call(0, timed=True)
        assert session.wall_path.startswith("python: EvalSettings.native_wall is off")
        assert outputs is not slots and record.wall_ms >= 200.0
    finally:
        session.worker.kill()
