"""The local GPU evaluator on the H200 with real candidates (``-m gpu``; skipped without a GPU).

One evaluator serves every test of this module, in order, on the real GEMM workload (8192x7168x5120):
honest kernels (naive, TMA, decoy wgmma), then hostile ones, then a check that it is still healthy and
that GPU memory came back. Timing settings are reduced (3 warm-up + 10 timed calls, 2 trials) to keep
the run short; the bench uses the defaults.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode, TargetMode  # noqa: E402
from ptxgym.records.feedback import Proof, Stage, Status, Verdict  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402

SETTINGS = EvalSettings(
    warmup=3,
    iterations=10,
    trials=2,
    call_timeout_s=10.0,
    memcheck=MemcheckMode.NEVER,
    target_mode=TargetMode.EXECUTED,
    ncu_crosscheck_fraction=0.0,  # the in-band counts are the proof; the TMA test cross-checks them
    guard_pages=True,
    module_census=True,
    seed=1234,
    # every test here runs its candidate for real and times it in full; the cost guards have their tests
    # at the end of the module
    verdict_cache_entries=0,
    slow_cutoff_speedup=0.0,
)


@pytest.fixture(scope="module")
def evaluator():
    import torch

    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    ev = LocalGpuEvaluator(settings=SETTINGS, spares=3)
    ev.spare_refill = "each"  # whatever PTXGYM_SPARE_REFILL says: the spares test expects each replaced
    ev.free_at_start = None
    yield ev
    ev.close()
    torch.cuda.synchronize()


@pytest.fixture(scope="module")
def gemm():
    return get_task("Gemm-sm90a")


def _evaluate(evaluator, task, name, **kw):
    from ptxgym.audit.corpus import candidate

    verdict = evaluator.evaluate(task, candidate(name, task, **kw))
    print(f"\n{name}: {verdict.status.value} [{verdict.stage.value}] {verdict.message[:300]}")
    return verdict


def _free_gib(evaluator) -> float:
    """Free device memory with every spare worker warm and the evaluator's allocator cache emptied."""
    import torch

    evaluator.settle()
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(evaluator.device)[0] / 2**30


def test_mha_fwd_naive_passes(evaluator):
    task = get_task("MhaFwd-sm90a")
    evaluator.settings = SETTINGS.model_copy(
        update={"target_mode": TargetMode.STATIC, "iterations": 3, "warmup": 1, "trials": 1}
    )
    try:
        verdict = _evaluate(evaluator, task, "mha_fwd_naive")
    finally:
        evaluator.settings = SETTINGS
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.timing.baseline is not None and verdict.timing.speedup < 1.0
    assert verdict.correctness.rel_norm_error < 1e-2


def test_naive_gemm_passes_with_target_no(evaluator, gemm):
    verdict = _evaluate(evaluator, gemm, "naive")
    evaluator.free_at_start = _free_gib(evaluator)
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.correctness.calls_checked >= 3 + 2 * 3
    assert verdict.correctness.rel_norm_error < 1e-2
    t = verdict.timing
    assert t.baseline is not None and t.baseline.median_ms > t.floor_ms
    assert t.candidate.n == 20 and t.candidate.median_ms > t.baseline.median_ms
    assert 0 < t.speedup < 0.5
    assert t.backend in ("cupti", "events+device-sync")
    assert verdict.details["wall_path"] == "native", verdict.details["wall_path"]  # exchange.py
    matched = verdict.details["calibration_matched"]  # a no-op about as long as the baseline's call
    assert matched is not None and matched["busy_memsets"] > 0, verdict.details
    assert 0.5 < matched["latency_ms"] / t.baseline.median_ms < 1.5, (matched, t.baseline.median_ms)
    if t.backend == "cupti":  # the in-band census saw only the module's kernel, from the module's image
        census = verdict.details["census"]
        assert census["kernels"] == {"_Z10gemm_tiledPK13__nv_bfloat16S1_PS_iii": 20}, census
        assert census["error"] == "" and census["modules_loaded"] >= 1, census
        assert Proof.CUPTI_IN_BAND in verdict.evidence.kernel_census
    assert verdict.target.static is False and verdict.target.executed is Verdict.NO
    assert verdict.environment.gpu and verdict.environment.driver and verdict.environment.torch
    assert verdict.environment.sandbox is not None and set(verdict.environment.sandbox) - {"process"} == {
        "no_new_privs",
        "network",
        "filesystem",
        "rlimits",
        "environment",
    }
    assert verdict.seed is not None


def test_no_spare_starts_or_warms_while_a_subject_is_timed(evaluator, gemm, monkeypatch):
    """Spares are replaced after the timed calls; runner spares are warm before a set-up (QUIET_SPARES)."""
    from ptxgym.evaluation.trusted.session import Session

    seen: list[tuple[str, list[int], list[int]]] = []
    real = Session.timing

    def look(what: str) -> None:
        pools = evaluator._pools()
        warming = [sum(1 for h in p._ready if h.pending) for p in pools]
        seen.append((what, [p.spawned for p in pools], warming))

    def timing(self, *args, **kwargs):
        look("start")
        try:
            return real(self, *args, **kwargs)
        finally:
            look("end")

    monkeypatch.setattr(Session, "timing", timing)
    assert evaluator.quiet_spares
    verdict = _evaluate(evaluator, gemm, "naive")
    assert verdict.status is Status.PASSED, verdict.message
    (_, spawned_start, warming_start), (_, spawned_end, _) = seen
    assert spawned_start == spawned_end, seen  # nothing started during the timing
    if evaluator.native.pool is not None:  # the runners' spares are awaited, the Python workers' not
        assert warming_start[-1] == 0, seen
    assert all(len(p._ready) == p.spares for p in evaluator._pools())  # replaced afterwards
    assert "spares" in verdict.stage_wall_s


def test_tma_gemm_passes_with_target_yes(evaluator, gemm):
    """In-band counts are the proof; this candidate is cross-checked by Nsight Compute, which agrees."""
    evaluator.settings = SETTINGS.model_copy(update={"ncu_crosscheck_fraction": 1.0})
    try:
        verdict = _evaluate(evaluator, gemm, "tma_gemm")
    finally:
        evaluator.settings = SETTINGS
    print(f"IN_BAND {verdict.details.get('in_band_target')}")
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.target.static is True
    assert verdict.target.executed is Verdict.YES, verdict.target.message
    assert verdict.target.counts.get("UTMALDG", 0) > 0
    # TMA loads feed SIMT math: the target executed, but its MMAs did none of the work, so no target credit
    assert verdict.target.work is Verdict.NO and verdict.target.mma_share == 0.0
    assert verdict.evidence.target_executed == [Proof.CUPTI_IN_BAND, Proof.NCU_OFFLINE]
    assert verdict.evidence.target_work == [Proof.CUPTI_IN_BAND, Proof.NCU_OFFLINE]
    assert Proof.CUPTI_IN_BAND in verdict.evidence.kernel_census
    assert "in-band" in verdict.target.message
    _assert_gated(verdict, "execute")


def _assert_gated(verdict, stage: str) -> None:
    """The proof ran after the turn: its tool started up with no GPU held, then held it for its GPU phase."""
    walls = verdict.stage_wall_s
    print(
        f"GATED {stage}: "
        + ", ".join(
            f"{k}={walls.get(k)}"
            for k in (stage, "proof_boot", "proof_queue", "proof_gpu", "gpu_turn", "gpu_total")
        )
    )
    assert walls["proof_boot"] > 0 and walls["proof_gpu"] > 0 and walls[stage] > walls["proof_gpu"]
    assert walls["gpu_total"] == pytest.approx(walls["gpu_turn"] + walls["proof_gpu"], abs=2e-4)


def test_decoy_wgmma_is_static_yes_executed_no(evaluator, gemm):
    verdict = _evaluate(evaluator, gemm, "decoy_wgmma")
    print(f"IN_BAND {verdict.details.get('in_band_target')}")
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.target.static is True
    assert verdict.target.executed is Verdict.NO, verdict.target.message
    assert verdict.evidence.target_executed == [Proof.CUPTI_IN_BAND]  # no Nsight Compute run
    assert "execute" not in verdict.stage_wall_s or verdict.stage_wall_s["execute"] < 1.0


HOSTILE = [
    ("noop", {Status.UNWRITTEN}, "never written"),
    ("half_written", {Status.UNWRITTEN}, "never written"),
    ("nan_output", {Status.NONFINITE}, "NaN"),
    ("input_mutating", {Status.INPUT_MUTATED}, "input"),
    ("timed_scratch", {Status.INPUT_MUTATED}, "input"),  # past the correctness calls only
    ("pointer_cache", {Status.INCORRECT_NUMERICAL}, "timed call"),
    ("call_counting", {Status.UNWRITTEN}, "timed call"),
    ("hang", {Status.TIMEOUT}, "did not return"),
    ("illegal_address", {Status.RUNTIME_ERROR}, "illegal"),
    ("exit_process", {Status.CRASH}, "exit code 3"),
    ("device_reset", {Status.RUNTIME_ERROR, Status.CRASH}, ""),
    ("huge_alloc", {Status.RUNTIME_ERROR}, "GiB"),
]


@pytest.mark.parametrize(("name", "statuses", "words"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_candidate_gets_the_right_status(evaluator, gemm, name, statuses, words):
    verdict = _evaluate(evaluator, gemm, name)
    assert verdict.status in statuses, verdict.message
    assert words in verdict.message
    assert verdict.timing is None or verdict.timing.speedup is None


def test_deferred_call_checks_find_timed_writes_put_back_or_not(gemm):
    """The guard and input checks queued after each timed call, read at the trial's end (its own evaluator).

    Plain blob (no guard pages), so a write past C lands in its guard region: flipped on one timed call
    and put back on the next, it is a MEMORY_ERROR all the same; 64 KiB of A as scratch on timed calls is
    INPUT_MUTATED; the honest naive GEMM PASSES.
    """
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    settings = SETTINGS.model_copy(update={"deferred_call_checks": True, "guard_pages": False})
    with LocalGpuEvaluator(settings=settings, spares=1) as ev:
        honest = _evaluate(ev, gemm, "naive")
        overrun = _evaluate(ev, gemm, "timed_overrun")
        scratch = _evaluate(ev, gemm, "timed_scratch")
    assert honest.status is Status.PASSED, honest.message
    assert overrun.status is Status.MEMORY_ERROR and overrun.stage is Stage.TIME, overrun.message
    assert "found at the trial's end" in overrun.message, overrun.message
    assert overrun.timing is None or overrun.timing.speedup is None
    assert scratch.status is Status.INPUT_MUTATED, scratch.message


def test_module_loaded_from_memory_under_an_own_name_is_foreign(gemm):
    """A module loaded from PTX at run time defines (and runs) a kernel under the built kernel's name.

    Its own evaluator, with the module census on (workers record module loads from their start); the
    honest naive GEMM beside it earns the in-band census evidence.
    """
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    with LocalGpuEvaluator(settings=SETTINGS.model_copy(update={"module_census": True}), spares=1) as ev:
        honest = _evaluate(ev, gemm, "naive")
        if ev.backend != "cupti":  # decided on the first evaluation
            pytest.skip("the in-band census needs the CUPTI timing backend")
        verdict = _evaluate(ev, gemm, "module_from_memory")
    assert honest.status is Status.PASSED, honest.message
    assert Proof.CUPTI_IN_BAND in honest.evidence.kernel_census, honest.details.get("census")
    assert honest.details["census"]["modules_loaded"] >= 1
    process = str((verdict.environment.sandbox or {}).get("process", ""))
    print(f"module_from_memory in {process or 'python'}: {verdict.status.value}: {verdict.message[:300]}")
    if process.startswith("native") and verdict.status is Status.RUNTIME_ERROR:
        # the runner's jail maps no PTX JIT compiler (H200, 2026-12-05): the module is never even loaded
        assert verdict.timing is None or verdict.timing.speedup is None
        return
    assert verdict.status is Status.FOREIGN_KERNEL, (verdict.message, verdict.details.get("census"))
    assert "different module images" in verdict.message and verdict.stage.value == "time"
    assert verdict.timing is None or verdict.timing.speedup is None


def test_candidate_after_an_input_mutating_one_sees_intact_inputs(evaluator, gemm):
    """The shared inputs a mutating candidate wrote are restored before the next candidate runs."""
    assert _evaluate(evaluator, gemm, "input_mutating").status is Status.INPUT_MUTATED
    verdict = _evaluate(evaluator, gemm, "naive")
    assert verdict.status is Status.PASSED, verdict.message


def test_side_stream_is_charged_its_real_time(evaluator, gemm):
    verdict = _evaluate(evaluator, gemm, "side_stream")
    assert verdict.status in (Status.PASSED, Status.TIMING_ANOMALY), verdict.message
    if verdict.status is Status.PASSED:
        assert verdict.timing.speedup < 0.5  # the naive kernel's true speed, not the caller stream's


def test_host_side_work_is_not_hidden(evaluator, gemm):
    verdict = _evaluate(evaluator, gemm, "host_hidden")
    if evaluator.backend == "cupti":
        assert verdict.status is Status.TIMING_ANOMALY, verdict.message
        assert "exceeds the reported GPU time" in verdict.message
    else:
        assert verdict.status is Status.PASSED and verdict.timing.candidate.median_ms > 5.0


def test_host_sandbox_contains_hostile_host_code(evaluator, gemm):
    """A candidate that dials 127.0.0.1 and writes files in /tmp and $HOME: all fail, the GEMM passes.

    ``sandbox_escape`` spoils its own output for every attempt that works (a file written outside
    scratch: UNWRITTEN; a socket opened: NONFINITE), so PASSED means that nothing got out.
    """
    import socket
    from pathlib import Path

    from ptxgym.audit.corpus import SANDBOX_ESCAPE_PORT, sandbox_escape_markers

    if evaluator.sandbox_mode == "off":
        pytest.skip("PTXGYM_SANDBOX=off")
    markers = sandbox_escape_markers(Path.home())
    for marker in markers:
        marker.unlink(missing_ok=True)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", SANDBOX_ESCAPE_PORT))
        server.listen(4)
        server.setblocking(False)
        listening = True
    except OSError:
        listening = False
    try:
        verdict = _evaluate(evaluator, gemm, "sandbox_escape")
        escaped = [str(m) for m in markers if m.exists()]
        if listening:
            with pytest.raises(BlockingIOError):
                server.accept()
    finally:
        server.close()
        for marker in markers:
            marker.unlink(missing_ok=True)
    layers = verdict.environment.sandbox
    print(f"sandbox: {layers}")
    assert layers is not None and layers["network"].startswith("active"), layers
    assert verdict.status is not Status.NONFINITE, verdict.message
    if layers["filesystem"].startswith("unavailable"):
        pytest.skip(f"no Landlock on the GPU host, so files outside scratch are not contained: {layers}")
    assert verdict.status is Status.PASSED, verdict.message
    assert escaped == []


@pytest.mark.parametrize("probe", [0, 8])
def test_far_slower_candidate_is_timed_with_one_trial_and_every_verified_call(evaluator, gemm, probe):
    """Without a probe the first trial decides; with one (the default), the probe's 8 calls do.

    Either way the other trials shrink to their verified calls; the probe's own latencies only decide
    (``Session._probe``), so a probed candidate is timed by every trial's verified calls alone.
    """
    cut = {"slow_cutoff_speedup": 0.1, "slow_probe_calls": probe}
    evaluator.settings = SETTINGS.model_copy(update=cut)
    try:
        verdict = _evaluate(evaluator, gemm, "naive")  # ~26 ms per call: far under 0.1x cuBLAS
    finally:
        evaluator.settings = SETTINGS
    assert verdict.status is Status.PASSED, verdict.message
    t = verdict.timing
    want = "a probe of 8 calls" if probe else "1 of 2 trials"
    assert t.speedup < 0.1 and t.shortened and want in t.shortened, t.shortened
    s, verified = SETTINGS, SETTINGS.verified_per_trial
    # the verified calls of every trial, or one full trial of timed calls and the others' verified calls
    assert t.candidate.n == (s.trials * verified if probe else s.iterations + (s.trials - 1) * verified)
    assert verdict.correctness.calls_checked >= 3 + 2 * 3  # the same verified calls as in full
    assert "cut-off" in verdict.message


def test_verdict_cache_answers_a_known_wrong_artifact_without_the_gpu(evaluator, gemm):
    from ptxgym.evaluation.trusted.verdict_cache import VerdictCache

    evaluator.verdicts = VerdictCache(8)
    try:
        first = _evaluate(evaluator, gemm, "nan_output")
        again = _evaluate(evaluator, gemm, "nan_output")
    finally:
        evaluator.verdicts = VerdictCache(0)
    assert first.status is again.status is Status.NONFINITE
    assert not first.cache_hit and again.cache_hit and "reused" in again.message
    assert "gpu_total" in first.stage_wall_s and again.stage_wall_s == {}


def test_still_healthy_and_memory_returned(evaluator, gemm):
    verdict = _evaluate(evaluator, gemm, "naive")
    assert verdict.status is Status.PASSED, verdict.message
    if evaluator.free_at_start is None:  # a selection (-k) without the module's first test
        pytest.skip(
            "the free memory at the start is taken by test_naive_gemm_passes_with_target_no, not run here"
        )
    assert abs(_free_gib(evaluator) - evaluator.free_at_start) < 1.0


def test_guard_pages_fault_accesses_past_a_buffer_in_the_worker(evaluator, gemm):
    """With an unmapped page after every buffer, an honest GEMM passes; reads or writes past a buffer fault.

    The module's evaluator has guard pages on (the default). ``unobserved_oob_read`` reads past A only
    when no sanitizer is mapped in its process, so memcheck would find it clean; in the worker the read
    must fault. Memcheck does not run on the honest one (``MemcheckMode.AUTO`` with guard pages).
    """
    evaluator.settings = SETTINGS.model_copy(update={"memcheck": MemcheckMode.AUTO})
    try:
        honest = _evaluate(evaluator, gemm, "naive")
        read = _evaluate(evaluator, gemm, "unobserved_oob_read")
        write = _evaluate(evaluator, gemm, "guard_overrun")
    finally:
        evaluator.settings = SETTINGS
    print(f"guard pages: {honest.details.get('guard_pages')}")
    assert honest.status is Status.PASSED, honest.message
    assert honest.details["guard_pages"].startswith("on"), honest.details["guard_pages"]
    assert honest.memcheck is None or not honest.memcheck.ran
    faulted = {Status.RUNTIME_ERROR, Status.CRASH, Status.MEMORY_ERROR}
    assert read.status in faulted and read.timing is None, read.message
    assert write.status in faulted and write.timing is None, write.message


# The last two tests use a plain blob (a second GEMM arena, ~2 GiB with its references): after the memory
# check above, which compares against the free memory with only the guard-page arena resident.


def test_memcheck_clean_and_error(evaluator, gemm):
    evaluator.settings = SETTINGS.model_copy(  # a plain blob: with guard pages oob_read faults first
        update={"memcheck": MemcheckMode.ALWAYS, "target_mode": TargetMode.STATIC, "guard_pages": False}
    )
    try:
        clean = _evaluate(evaluator, gemm, "naive")
        bad = _evaluate(evaluator, gemm, "oob_read")
    finally:
        evaluator.settings = SETTINGS
    assert clean.status is Status.PASSED and clean.memcheck.ran and clean.memcheck.clean is True
    _assert_gated(clean, "memcheck")
    assert bad.status is Status.MEMORY_ERROR, bad.message
    assert bad.memcheck.clean is False and "read" in bad.memcheck.first_error.lower()


def test_a_write_past_the_output_is_a_memory_error(evaluator, gemm):
    """4 bytes past C on every call: the outputs and inputs check out, the guard region after C does not.

    A plain blob (no guard pages), where the write lands in the guard region instead of faulting.
    """
    evaluator.settings = SETTINGS.model_copy(update={"guard_pages": False})
    try:
        verdict = _evaluate(evaluator, gemm, "guard_overrun")
    finally:
        evaluator.settings = SETTINGS
    assert verdict.status is Status.MEMORY_ERROR, verdict.message
    assert verdict.stage is Stage.CHECK and "past the end of output C of input set 0" in verdict.message
    assert verdict.timing is None  # never timed, so no speed to pay
    assert verdict.details["guard_pages"].startswith("off"), verdict.details["guard_pages"]
