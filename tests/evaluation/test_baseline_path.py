"""One timing path: the baseline is timed through the candidate's own stages, once per evaluator.

The real ``LocalGpuEvaluator`` stages (``_prepare``, ``_run_candidate``, ``_measure``, ``_timed_verdict``,
``measure_baseline``, ``_baseline``) run on the CPU against the in-process worker (``inprocess_worker.py``):
a real ``Arena`` and ``Session`` on CPU tensors, the real ``library_baselines.gemm_cublas`` as the
library (``torch.matmul`` on the CPU). Only the GPU facts, the worker pool and the free-memory probe are
stand-ins, set on an evaluator made without its GPU constructor (``cpu_evaluator``).
"""

from __future__ import annotations

import collections
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import small_gqa, tiny_task  # noqa: E402
from inprocess_worker import InProcessWorker  # noqa: E402

import ptxgym.evaluation.trusted.local as local  # noqa: E402
from ptxgym.confine.cores import CoreSplit  # noqa: E402
from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, MemcheckMode, TargetMode  # noqa: E402
from ptxgym.evaluation.trusted.baseline_store import (  # noqa: E402
    BaselineRecord,
    BaselineStore,
    installed,
    with_fallback,
)
from ptxgym.evaluation.trusted.calibration_reuse import CalibrationReuse  # noqa: E402
from ptxgym.evaluation.trusted.gpu_queue import GpuQueue  # noqa: E402
from ptxgym.evaluation.trusted.gpuinfo import GpuFacts  # noqa: E402
from ptxgym.evaluation.trusted.native_worker import NativeRunners  # noqa: E402
from ptxgym.evaluation.trusted.timing import EVENTS  # noqa: E402
from ptxgym.evaluation.trusted.verdict_cache import VerdictCache  # noqa: E402
from ptxgym.records.arch import arch_for_capability  # noqa: E402
from ptxgym.records.feedback import LatencyStats, Status  # noqa: E402

SETTINGS = EvalSettings(
    warmup=2,
    iterations=12,
    trials=2,
    correctness_sets=3,
    rotate_sets=3,
    memcheck=MemcheckMode.NEVER,
    target_mode=TargetMode.OFF,
    seed=5,
    # the walls here are the host's (a busy 2-core machine): its scheduling noise, not what these tests
    # check, must not fail the cross-check (test_timing and test_forged_latencies test that)
    wall_slack_ms=25.0,
    # nor cut a timing short: a fake candidate's first trial can trail the fake baseline by 10x there
    # (test_slow_cutoff and test_counted_position test the cut-off)
    slow_cutoff_speedup=0.0,
)
FACTS = GpuFacts(0, "NVIDIA H200", (9, 0), 132, 50 << 20, 140 << 30, "580", "13.0", "2.13")


def gemm_task():
    return tiny_task("Gemm-sm90a", M=64, N=48, K=32)


def honest(A, B, C):
    C.copy_((A.float() @ B.float().T).to(C.dtype))


def wrong(A, B, C):
    C.copy_((A.float() @ B.float().T * 1.5).to(C.dtype))


class _Pool:
    primer = None

    def prime_all(self) -> None:
        """Nothing to prime: workers are made on demand."""

    def fill(self) -> None:
        """Nothing to refill: workers are made on demand."""

    def settle(self, ready) -> int:
        """No spare to wait for."""
        return 0


def cpu_evaluator(tmp_path, make_worker, settings: EvalSettings = SETTINGS) -> local.LocalGpuEvaluator:
    """The local evaluator's stages without a GPU: workers from ``make_worker``, arenas on the CPU."""
    ev = local.LocalGpuEvaluator.__new__(local.LocalGpuEvaluator)
    ev.settings, ev.device, ev.facts = settings, "cpu", FACTS  # type: ignore[assignment]
    ev.arch = arch_for_capability(9, 0)
    ev.flush_bytes, ev.start_timeout_s, ev.max_arenas = 1 << 20, 10.0, 5
    ev.scratch, ev.sandbox_mode, ev.pool = tmp_path, "on", _Pool()  # type: ignore[assignment]
    ev.backend, ev.cupti_error, ev.guard_pages_error, ev.count_outside = EVENTS, "", "", ""
    ev._arenas, ev._current, ev._held = collections.OrderedDict(), None, None
    ev.quiet_spares, ev.spares_wait_s, ev.spares_range, ev.spare_refill = True, 0.0, (2, 2), "each"
    ev.baselines = BaselineStore(tmp_path / "baselines", FACTS.key)
    ev.queue, ev.cores = GpuQueue(), CoreSplit()
    ev.verdicts = VerdictCache(0)
    ev.calibrations = CalibrationReuse()
    ev.proof_slots = threading.BoundedSemaphore(local.PROOF_RUNS_AT_ONCE)
    ev._inflight, ev._inflight_lock = {}, threading.Lock()
    ev.native = NativeRunners(False, 0, 0, tmp_path, False)  # candidates in the (fake) Python worker
    ev._take_worker = lambda arena, pool=None: make_worker()  # type: ignore[method-assign]
    ev._free_bytes = lambda: 0  # type: ignore[method-assign]
    return ev


class Workers:
    """Makes in-process workers and keeps them, to read their transcripts after."""

    def __init__(self, tmp_path, candidate=honest, **kw) -> None:
        self.made: list[InProcessWorker] = []
        self.tmp_path, self.candidate, self.kw = tmp_path, candidate, kw

    def __call__(self) -> InProcessWorker:
        worker = InProcessWorker(self.candidate, self.tmp_path, measured=True, **self.kw)
        self.made.append(worker)
        return worker


def built(task, turn: int = 0) -> BuiltCandidate:
    return BuiltCandidate(
        task_id=task.id,
        so_path=task.id + ".so",
        source_sha256="0",
        artifact_sha256="0",
        static_target=False,
        turn=turn,
        episode_id="e",
    )


def test_baseline_and_candidate_send_the_same_commands(tmp_path):
    """The baseline's worker sees exactly a candidate's commands (sandbox included); only the load differs.

    Two additions a candidate gets because the baseline's latency is known by then are turned off here
    and checked below: the matched calibration and the slow cut-off's probe.
    """
    workers = Workers(tmp_path)
    same = SETTINGS.model_copy(update={"matched_calibration": False, "slow_probe_calls": 0})
    ev = cpu_evaluator(tmp_path, workers, same)
    task = gemm_task()
    record = ev.baseline(task)
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.PASSED, verdict.message
    assert len(workers.made) == 2
    base, cand = (w.transcript for w in workers.made)
    assert "load:baseline" in base and "load:so" in cand
    assert base == [c.replace("load:so", "load:baseline") for c in cand]
    cut = EvalSettings.model_fields["slow_cutoff_speedup"].default  # the defaults: both additions
    full = cpu_evaluator(tmp_path, workers, SETTINGS.model_copy(update={"slow_cutoff_speedup": cut}))
    assert full.evaluate(task, built(task)).status is Status.PASSED
    extra = workers.made[-1].transcript
    assert extra.count("load:noop") == 3  # trivial, probe of the matched no-op, matched
    assert extra.count("trial_begin") == cand.count("trial_begin") + 3  # probe, matched no-op: + probe
    assert [c for c in extra if c.startswith("call")][-cand.count("call:0:True:True") :] != []
    assert verdict.details["calibration_matched"] is None
    matched = full.evaluate(task, built(task, turn=1)).details["calibration_matched"]
    assert matched is not None and matched["busy_memsets"] >= 1
    assert "sandbox" in base and base.index("sandbox") < base.index("load:baseline")
    assert record.sandboxed is True and record.correct is True and record.anomaly == ""
    assert record.stats is not None and record.stats.n == SETTINGS.trials * SETTINGS.iterations
    assert workers.made[0].calls == SETTINGS.calls_per_step  # library called like a candidate
    assert verdict.timing is not None and verdict.timing.baseline == record.stats


def test_disk_record_is_a_warm_start_and_each_evaluator_measures_again(tmp_path):
    task = gemm_task()
    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers)
    key = ev.baselines.key(task, SETTINGS, ev.flush_bytes, ev.backend)
    stale = BaselineRecord(name="cublas", stats=LatencyStats(median_ms=123.0, n=3, cv=0.0), correct=True)
    ev.baselines.put(key, stale)  # as an earlier evaluator would have left it on disk
    ev.baselines = BaselineStore(tmp_path / "baselines", FACTS.key)
    seen = []
    budget = ev._budget
    ev._budget = lambda turn: seen.append(turn.baseline.stats) or budget(turn)  # type: ignore[method-assign]

    record = ev.baseline(task)
    assert record.source == "measured" and record.warm_start_ms == 123.0
    assert record.stats is not None and record.stats.median_ms < 100.0  # measured now, not the 123 ms
    assert seen == [stale.stats]  # the warm start seeded the re-measurement's step budget
    assert ev.baseline(task) is record and len(workers.made) == 1  # once in this evaluator's life

    again = cpu_evaluator(tmp_path, workers)  # a new evaluator: measured again, not read back
    assert again.baseline(task).source == "measured" and len(workers.made) == 2
    off = cpu_evaluator(tmp_path, workers, SETTINGS.model_copy(update={"baseline_from_disk": False}))
    assert off.baseline(task).warm_start_ms is None


def test_a_baseline_missing_the_tolerance_is_timed_a_candidate_is_not(tmp_path):
    """Strictness is the one difference kept: the library's failed check is recorded, its latency too."""
    task = gemm_task()
    ev = cpu_evaluator(tmp_path, Workers(tmp_path, candidate=wrong, library=wrong))
    record = ev.baseline(task)
    assert record.correct is False and "correctness call" in record.message
    assert record.stats is not None and record.stats.n == SETTINGS.trials * SETTINGS.iterations
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.INCORRECT_NUMERICAL and verdict.timing is None


def test_sandboxed_baseline_failure_is_retried_unsandboxed_and_recorded(tmp_path):
    task = gemm_task()
    error = "cuDNN: could not open engine library"
    workers = Workers(tmp_path, library=honest, sandboxed_library_error=error)
    ev = cpu_evaluator(tmp_path, workers)
    record = ev.baseline(task)
    assert record.sandboxed is False and record.stats is not None and record.correct is True
    assert "sandboxed attempt failed" in record.message and "could not open engine" in record.message
    assert [("sandbox" in w.transcript) for w in workers.made] == [True, False]


@pytest.mark.parametrize("pool", [0, None], ids=["no-pool", "pool"])
def test_prepare_is_per_arena_not_per_candidate(tmp_path, monkeypatch, pool):
    """Inputs, fp32 references and the baseline are made on a task's first turn only.

    With the verified pool (``verified_pool.py``) the baseline's verified calls take its entries (their
    references were run once with the arena); candidates in the Python worker draw new values.
    """
    import ptxgym.evaluation.trusted.arena as arena_module

    made, references = [], []
    real_init, real_reference = local.Arena.__init__, arena_module.run_reference

    def counting_init(self, *a, **kw):
        made.append(1)
        real_init(self, *a, **kw)

    def counting_reference(*a, **kw):
        references.append(1)
        return real_reference(*a, **kw)

    monkeypatch.setattr(local.Arena, "__init__", counting_init)
    monkeypatch.setattr(arena_module, "run_reference", counting_reference)
    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers, SETTINGS.model_copy(update={"verified_pool": pool}))
    assert ev._pool_usable() is False  # no runner wanted: no pool is built for the baseline alone
    ev._pool_usable = lambda: True  # type: ignore[method-assign] - as where a jailed runner serves
    task = gemm_task()
    first = ev.evaluate(task, built(task, 0))
    after_first = len(references)
    second = ev.evaluate(task, built(task, 1))
    assert first.status is second.status is Status.PASSED
    assert len(made) == 1 and len(workers.made) == 3  # one arena; baseline + two candidates
    seeded = max(SETTINGS.correctness_sets, SETTINGS.rotate_sets)
    arena = ev._arenas[next(iter(ev._arenas))]
    seeded += arena.sampling_runs  # sampled checks' self-test (sampled.py)
    verified = SETTINGS.trials * SETTINGS.verified_per_trial
    verified += arena.sample_share < 1  # a timing's one whole check beside its sampled ones
    if pool == 0:
        assert after_first == seeded + 2 * verified  # seeded sets once; fresh draws of baseline and turn 1
    else:  # the baseline's verified calls: pool entries (but one new draw a trial); turn 1: fresh draws
        baseline = SETTINGS.trials * SETTINGS.pool_new_draws_per_trial + (arena.sample_share < 1)
        assert after_first == seeded + verified + baseline
        assert first.details["verified_pool"]["session"].startswith("new draws: the Python worker")
        assert ev._arenas[next(iter(ev._arenas))].build_s["pool"] > 0
    assert len(references) - after_first == verified  # turn 2: only its own verified fresh calls
    for key in ("prepare", "prepare_arena", "prepare_baseline"):
        assert key in first.stage_wall_s and key in second.stage_wall_s
    assert second.stage_wall_s["prepare"] < 0.05 < first.stage_wall_s["prepare"]
    assert 0 <= second.stage_wall_s["queue"] < 0.05 and ev.queue.served == 2  # nobody else was waiting
    parts = ("time_inputs", "time_inputs_wait", "time_calls", "time_verify", "time_guards")
    for key in parts:  # the trusted side's own work while timing, and the calls' round trips
        assert 0 <= second.stage_wall_s[key] < second.stage_wall_s["time"]  # rounded to 0.1 ms: may be 0
    assert second.stage_wall_s["time_calls"] > 0 and second.stage_wall_s["time_verify"] > 0
    assert sum(second.stage_wall_s[k] for k in parts) <= second.stage_wall_s["time"]
    arena = next(iter(ev._arenas.values()))
    assert arena.build_s["inputs"] > 0 and arena.build_s["references"] > 0


def test_an_arena_built_without_the_pool_is_not_reused_once_the_pool_is_usable(tmp_path):
    """Turning ``verified_pool_partial_jail`` on between calls gets an arena with a pool, not the old one.

    (On the H200 a long-lived evaluator's Gemm arena, built before the setting changed, served a runner
    with the pool 'off'.)
    """
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), SETTINGS.model_copy(update={"verified_pool": None}))
    usable = [False]
    ev._pool_usable = lambda: usable[0]  # type: ignore[method-assign] - as a jailed runner's settings flip
    task = gemm_task()
    without = ev._arena(task)
    assert ev._arena(task) is without and not without.pool.active
    usable[0] = True
    pooled = ev._arena(task)
    assert pooled is not without and pooled.pool.active, pooled.pool.describe()
    usable[0] = False
    assert ev._arena(task) is without  # each kept under its own key


def test_native_candidates_fall_back_to_the_worker_with_the_reason_recorded(tmp_path):
    """``candidate_process`` native: where no runner serves, the Python worker does; the verdict says why."""
    task = gemm_task()
    ev = cpu_evaluator(tmp_path, Workers(tmp_path))
    ev.native = NativeRunners(True, 0, 0, tmp_path, False)
    verdict = ev.evaluate(task, built(task, 0))  # this CPU arena has no guard pages
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.environment.sandbox["process"].startswith("python: the arena has no guard pages")
    assert verdict.details["candidate_process"] == verdict.environment.sandbox["process"]

    runners = _Pool()
    ev.native.choose = lambda *a: runners  # type: ignore[method-assign]
    workers = Workers(tmp_path)

    def take(arena, pool=None):
        if pool is not None:
            raise local.WorkerSetupError("the runner's attach failed: cannot open libcuda.so.1")
        return workers()

    ev._take_worker = take  # type: ignore[method-assign]
    verdict = ev.evaluate(task, built(task, 1))
    assert verdict.status is Status.PASSED, verdict.message
    why = "python: a native runner could not be set up: the runner's attach failed: cannot open libcuda.so.1"
    assert verdict.environment.sandbox["process"] == why and ev.native.why in why
    assert runners.primer is not None  # the runners' pool was primed with this evaluator's arena


# ------------------------------------------------------------------ which baseline runs (FlashInfer's)


def gqa_reference_candidate(task):
    """A "candidate" that writes the definition's reference outputs (it passes every check)."""
    from ptxgym.evaluation.sandboxed.library_baselines import torch_reference

    n_in = len(task.definition.inputs)
    options = {"reference_source": task.definition.reference, "input_names": list(task.definition.inputs)}

    def run(*args):
        for dst, src in zip(args[n_in:], torch_reference(*args, **options), strict=True):
            dst.copy_(src)

    return run


def needing(task, module: str):
    """The task with its FlashInfer baseline made to require ``module`` instead (data, not a double)."""
    return task.model_copy(update={"baseline": task.baseline.model_copy(update={"requires": module})})


def test_a_missing_library_times_the_fallback_and_the_verdict_names_it(tmp_path):
    task = needing(small_gqa("GqaPagedDecode", tiny=True), "ptxgym_absent_module_for_tests")
    workers = Workers(tmp_path, candidate=gqa_reference_candidate(task))
    ev = cpu_evaluator(tmp_path, workers)
    record = ev.baseline(task)
    assert (record.name, record.function) == ("torch_reference", "torch_reference")
    assert "'ptxgym_absent_module_for_tests', which is not installed" in record.fallback
    assert record.stats is not None and record.correct is True and len(workers.made) == 1
    runs = with_fallback(task)  # the key, in memory and on disk, is the baseline that ran
    key = ev.baselines.key(runs, SETTINGS, ev.flush_bytes, ev.backend)
    assert ev.baselines.measured(key) is record and ev.baselines.warm_start(key) is not None
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.PASSED, verdict.message
    assert verdict.timing is not None and verdict.timing.baseline_name == "torch_reference"
    assert verdict.details["baseline_fallback"] == record.fallback
    assert "x torch_reference" in verdict.message and "not installed" in verdict.message


def test_a_library_that_cannot_be_set_up_is_replaced_by_its_fallback(tmp_path):
    """Installed (``json`` stands in for the module) but failing at load: retried, then the fallback."""
    task = needing(small_gqa("GqaPagedDecode", tiny=True), "json")
    workers = Workers(tmp_path, candidate=gqa_reference_candidate(task))
    ev = cpu_evaluator(tmp_path, workers)
    record = ev.baseline(task)
    assert [w.kind for w in workers.made] == ["baseline"] * 3, record  # sandboxed, unsandboxed, fallback
    assert record.name == "torch_reference" and record.stats is not None and record.correct is True
    assert record.fallback.startswith("flashinfer (gqa_paged_decode_flashinfer) gave no latency")
    assert "could not be set up" in record.fallback and record.fallback.endswith(
        "timed torch_reference instead"
    )
    named = ev.baselines.key(task, SETTINGS, ev.flush_bytes, ev.backend)
    assert ev.baselines.measured(named) is record  # not tried again by this evaluator
    assert ev.baselines.warm_start(named) is None  # a torch figure never goes on disk as FlashInfer's


@pytest.mark.skipif(installed("flashinfer"), reason="flashinfer is installed here")
def test_gqa_tasks_without_flashinfer_time_the_torch_reference_and_say_why(tmp_path):
    for name in ("GqaRaggedPrefill", "GqaPagedPrefill", "GqaPagedDecode"):
        task = small_gqa(name, tiny=True)
        assert task.baseline.requires == "flashinfer"
        quick = SETTINGS.model_copy(update={"iterations": 4, "trials": 1, "correctness_sets": 1})
        ev = cpu_evaluator(tmp_path / name, Workers(tmp_path, candidate=gqa_reference_candidate(task)), quick)
        record = ev.measure_baseline(task)
        assert record.name == "torch_reference" and record.correct is True, record.message
        assert "needs the Python module 'flashinfer'" in record.fallback
        assert "pip install 'ptxgym[flashinfer]'" in record.fallback


def test_spares_follow_the_candidates_waiting_for_the_gpu_within_their_range(tmp_path):
    """``_refill``: as many spares as candidates wait now, within ``spares_range``.

    At least its first (the evaluator's ``spares``), at most its second (``max_spares``); each pool filled
    to that.
    """

    class Pool(_Pool):
        def __init__(self) -> None:
            self.spares, self.fills = 2, []

        def fill(self) -> None:
            self.fills.append(self.spares)

    class Queue:
        waiting = 0

    ev = cpu_evaluator(tmp_path, Workers(tmp_path))
    ev.pool, ev.queue, ev.spares_range = Pool(), Queue(), (2, 8)  # type: ignore[assignment]
    for waiting in (0, 1, 5, 20, 0):
        ev.queue.waiting = waiting
        ev._refill()
    assert ev.pool.fills == [2, 2, 5, 8, 2]
    ev.spares_range = (2, 2)  # max_spares 2
    ev.queue.waiting = 20
    ev._refill()
    assert ev.pool.fills[-1] == 2
    # candidates in native runners: only the runners' pool grows, the Python workers' keeps one spare
    runners = Pool()
    ev.native.wanted, ev.native.why, ev.native.pool = True, "", runners  # type: ignore[assignment]
    ev.spares_range = (2, 8)
    ev._refill()
    assert runners.fills[-1] == 8 and ev.pool.fills[-1] == 1


def test_batch_refill_starts_the_missing_spares_together_once_half_are_gone(tmp_path):
    """``spare_refill`` ``batch``: no refill while half or more are left; then every missing one."""

    class Pool(_Pool):
        def __init__(self) -> None:
            self.spares, self.stock, self.fills = 4, 4, []

        def fill(self) -> None:
            self.fills.append(self.spares - self.stock)
            self.stock = self.spares

    class Queue:
        waiting = 20

    ev = cpu_evaluator(tmp_path, Workers(tmp_path))
    ev.pool, ev.queue, ev.spares_range, ev.spare_refill = Pool(), Queue(), (4, 4), "batch"  # type: ignore[assignment]
    started = []
    for _ in range(6):  # each GPU turn takes a spare, then refills
        ev.pool.stock -= 1
        before = len(ev.pool.fills)
        ev._refill()
        started.append(ev.pool.fills[-1] if len(ev.pool.fills) > before else 0)
    assert started == [0, 0, 3, 0, 0, 3]
    ev.spare_refill = "each"
    ev.pool.stock -= 1
    ev._refill()
    assert ev.pool.fills[-1] == 1


def test_max_spares_comes_from_the_environment(monkeypatch):
    from ptxgym.evaluation.trusted.local import spares_range
    from ptxgym.records import settings

    monkeypatch.delenv("PTXGYM_MAX_SPARES", raising=False)
    assert settings.max_spares() is None
    assert spares_range(2) == (2, settings.DEFAULT_MAX_SPARES) == (2, 4)
    assert spares_range(6) == (6, 6) and spares_range(2, 3) == (2, 3)
    monkeypatch.setenv("PTXGYM_MAX_SPARES", "8")
    assert settings.max_spares() == 8 and spares_range(2) == (2, 8)
    for bad in ("lots", "-1", "\u00b2", str(settings.MAX_SPARES_LIMIT + 1)):
        monkeypatch.setenv("PTXGYM_MAX_SPARES", bad)
        with pytest.raises(ValueError, match="PTXGYM_MAX_SPARES"):
            settings.max_spares()
    monkeypatch.delenv("PTXGYM_SPARE_REFILL", raising=False)
    assert settings.spare_refill() == "batch"
    monkeypatch.setenv("PTXGYM_SPARE_REFILL", "Each")
    assert settings.spare_refill() == "each"
    monkeypatch.setenv("PTXGYM_SPARE_REFILL", "sometimes")
    with pytest.raises(ValueError, match="PTXGYM_SPARE_REFILL"):
        settings.spare_refill()


def test_an_infra_error_says_whether_the_candidate_had_been_loaded(tmp_path, monkeypatch):
    """``candidate_ran``: a fault after the candidate's code was loaded may be its doing.

    The rewards then forfeit it; one before (here the worker's calibration) is the evaluator's alone.
    """
    from ptxgym.evaluation.trusted.session import Session

    ev = cpu_evaluator(tmp_path, Workers(tmp_path, candidate=wrong))
    task = gemm_task()
    assert ev.evaluate(task, built(task, 0)).status is Status.INCORRECT_NUMERICAL  # the baseline, once

    def broken(*a, **kw):
        raise RuntimeError("an evaluator bug")

    monkeypatch.setattr(Session, "correctness", broken)  # after the load
    after = ev.evaluate(task, built(task, 1).model_copy(update={"artifact_sha256": "c" * 64}))
    assert after.status is Status.INFRA_ERROR and after.candidate_ran
    monkeypatch.setattr(Session, "calibrate", broken)  # before it
    ev.calibrations = CalibrationReuse()  # else the worker reuses the last one's (calibration_reuse)
    before = ev.evaluate(task, built(task, 2).model_copy(update={"artifact_sha256": "d" * 64}))
    assert before.status is Status.INFRA_ERROR and not before.candidate_ran


def watch_settles(ev, workers: Workers) -> list[list[str]]:
    """The runners' pool made one whose every settle records the last worker's transcript so far."""
    seen: list[list[str]] = []

    class Spares(_Pool):
        def settle(self, ready) -> int:
            seen.append(list(workers.made[-1].transcript) if workers.made else [])
            return 1

    ev.native.pool = Spares()  # type: ignore[assignment]
    return seen


def test_spares_are_awaited_after_the_sandbox_and_before_the_calibration(tmp_path):
    """``QUIET_SPARES``: a spare starts beside the worker's attach and sandbox, never beside its timing.

    The wait sits between the sandbox command and the calibration's first load, so a spare the last
    subject started has the set-up's time to finish in (it was awaited when the worker was taken).
    """
    workers = Workers(tmp_path)
    ev = cpu_evaluator(tmp_path, workers)
    seen = watch_settles(ev, workers)
    task = gemm_task()
    ev.baseline(task)
    verdict = ev.evaluate(task, built(task))
    assert verdict.status is Status.PASSED, verdict.message
    assert len(seen) == 2  # once per subject: the baseline's worker, the candidate's
    for before in seen:
        assert before and before[-1] == "sandbox", before  # after the sandbox, no calibration load yet
    assert "worker_settle" in verdict.stage_wall_s


@pytest.mark.parametrize("late", [False, True])
def test_a_late_settle_waits_for_the_spares_before_the_first_timed_call_where_the_calibration_is_kept(
    tmp_path, late
):
    """``late_spare_settle``: with a kept calibration the spares are awaited after the correctness calls.

    The first worker of each kind measures its calibration: the wait stays before it. A later candidate
    reuses it: its load and correctness calls overlap the spares' start-up, the wait comes just before
    its first timed call (the ``settle_late`` wall), and a wrong one never waits. Off: as before.
    """
    workers = Workers(tmp_path)
    settings = SETTINGS.model_copy(update={"late_spare_settle": late})
    ev = cpu_evaluator(tmp_path, workers, settings)
    seen = watch_settles(ev, workers)
    task = gemm_task()
    ev.baseline(task)
    first = ev.evaluate(task, built(task, 1).model_copy(update={"artifact_sha256": "1" * 64}))
    assert first.status is Status.PASSED, first.message
    assert [before[-1] for before in seen] == ["sandbox", "sandbox"]  # both calibrations measured
    second = ev.evaluate(task, built(task, 2).model_copy(update={"artifact_sha256": "2" * 64}))
    assert second.status is Status.PASSED, second.message
    assert second.details["calibration_source"].startswith("reused"), second.details["calibration_source"]
    assert len(seen) == 3
    if late:
        before = seen[2]
        assert "load:so" in before and not [c for c in before if c.endswith(":True:True")], before
        checks = [c for c in before if c.startswith("call:")]
        assert len(checks) == settings.correctness_sets, before  # every correctness call, no timed one
        assert "settle_late" in second.stage_wall_s and "spares" in second.stage_wall_s
    else:
        assert seen[2][-1] == "sandbox" and "settle_late" not in second.stage_wall_s
    workers.candidate = wrong
    third = ev.evaluate(task, built(task, 3).model_copy(update={"artifact_sha256": "3" * 64}))
    assert third.status is Status.INCORRECT_NUMERICAL, third.message
    assert len(seen) == (3 if late else 4)  # a wrong answer ends before any timed call: no wait


def test_the_late_settle_is_left_out_of_the_step_budget(tmp_path):
    """The spares' wait before the first timed call is the trusted side's: the subject's budget skips it.

    The second candidate's settle lasts longer than its whole run budget; it still passes (left in the
    budget, the wait made it a TIMEOUT: seen with ``StepClock.exclude`` disabled).
    """
    workers = Workers(tmp_path)
    settings = SETTINGS.model_copy(update={"late_spare_settle": True, "budget_base_s": 1.0})
    ev = cpu_evaluator(tmp_path, workers, settings)
    sleep = [0.0]

    class Slow(_Pool):
        def settle(self, ready) -> int:
            time.sleep(sleep[0])
            return 1

    ev.native.pool = Slow()  # type: ignore[assignment]
    task = gemm_task()
    ev.baseline(task)
    first = ev.evaluate(task, built(task, 1).model_copy(update={"artifact_sha256": "1" * 64}))
    assert first.status is Status.PASSED, first.message
    sleep[0] = first.details["step_budget"]["run_s"] + 0.5
    second = ev.evaluate(task, built(task, 2).model_copy(update={"artifact_sha256": "2" * 64}))
    assert second.status is Status.PASSED, second.message
    assert second.stage_wall_s["settle_late"] >= sleep[0]


def test_python_spares_stay_few_while_the_runners_serve_and_pools_follow_the_runners(tmp_path):
    """With runners wanted (the default) the Python workers serve only baselines and plain arenas.

    So ``_refill`` keeps at most one of them warming even before the first runner exists (the first
    subject of a task is its baseline) and grows them with the queue only once the runners are dropped;
    and no arena builds a verified pool after the drop (``_pool_usable``): only a runner's session may use
    one, and none will come.
    """
    from types import SimpleNamespace

    from ptxgym.confine import landlock

    ev = cpu_evaluator(tmp_path, Workers(tmp_path))

    class Counted(_Pool):
        spares = 0

    ev.pool = Counted()  # type: ignore[assignment]
    ev.spares_range = (2, 8)
    ev.queue = SimpleNamespace(waiting=6)  # type: ignore[assignment]
    ev.native = NativeRunners(True, 0, 2, tmp_path, False)  # wanted, no runner started yet
    ev._refill()
    assert ev.pool.spares == 1
    if landlock.abi()[0] >= 1:
        assert ev._pool_usable()
    shipped = ev.settings
    ev.settings = shipped.model_copy(update={"guard_pages": False})  # demoted: no arena a runner can map
    ev._refill()
    assert ev.pool.spares == 6 and not ev._pool_usable()
    ev.settings = shipped
    ev.native.drop("the native runner is unavailable: no C++ compiler")
    ev._refill()
    assert ev.pool.spares == 6  # the Python workers serve the candidates now: they follow the queue
    assert not ev._pool_usable()


def test_a_new_arena_short_of_memory_drops_the_others_and_is_made_again(tmp_path, monkeypatch):
    """``_new_arena``: a guard-page blob that fell back for lack of memory, with other arenas held.

    The other arenas are dropped and the new one is made again (once), so its candidates keep guard pages
    and the runner (a plain blob's go to the Python worker, which reads no hardware counters). Without
    other arenas, or for another reason (no VMM here), the fall-back stands.
    """

    class Fake:
        made: list[Fake] = []
        short = True

        def __init__(self, task, *args, **kw) -> None:
            self.task, self.closed, self.built_at = task, False, time.monotonic()
            short = "VmmError: cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY"
            self.guard_pages_error = short if Fake.short else ""
            Fake.made.append(self)

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(local, "Arena", Fake)
    settings = SETTINGS.model_copy(update={"guard_pages": True})
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), settings)
    first = ev._arena(gemm_task())
    assert len(Fake.made) == 1 and not first.closed  # alone: the fall-back stands
    second = ev._arena(tiny_task("MhaFwd-sm90a", batch=1, seq=16))
    assert len(Fake.made) == 3 and first.closed and Fake.made[1].closed and not second.closed
    assert list(ev._arenas.values()) == [second]
    Fake.short = False
    third = ev._arena(
        gemm_task().model_copy(update={"workload": gemm_task().workload.model_copy(update={"uuid": "third"})})
    )
    assert len(Fake.made) == 4 and not second.closed and len(ev._arenas) == 2 and not third.closed
    # a fall-back short of memory is built again once it is older than SHORT_RETRY_S, not before
    # ... and then evicts no other arena (under lasting pressure it would churn them all)
    Fake.short, again = True, cpu_evaluator(tmp_path, Workers(tmp_path), settings)
    alone = again._arena(gemm_task())
    assert again._arena(gemm_task()) is alone
    Fake.short = False
    other = again._arena(tiny_task("MhaFwd-sm90a", batch=1, seq=16))
    Fake.short = True
    alone.built_at -= local.SHORT_RETRY_S + 1
    rebuilt = again._arena(gemm_task())
    assert rebuilt is not alone and alone.closed and not other.closed
    assert set(map(id, again._arenas.values())) == {id(other), id(rebuilt)}


def test_the_primer_asks_a_spare_runner_for_the_counter_query_only_where_one_may_be_counted(
    tmp_path, monkeypatch
):
    """``Attach.hw_prepare``: a spare runner queries the counter availability while it warms.

    So the sandbox step of a GPU turn no longer pays it (~0.17 s on the H200); only where a subject may be
    hardware-counted (``_hw_possible``: the counters on, the executed target mode, sm_90a), never for a
    Python worker, which reads no counters, and not with ``native_worker.HW_PREPARE`` off (diagnostics).
    A proof tool's GPU phase settles the spares first (``_proof_gpu``), so no spare's query runs beside
    Nsight Compute's profiling session.
    """
    import json
    from types import SimpleNamespace

    from ptxgym.evaluation.protocol import Attach
    from ptxgym.evaluation.trusted import native_worker
    from ptxgym.evaluation.trusted.arena import Arena
    from ptxgym.evaluation.trusted.native_worker import NativeHandle
    from ptxgym.evaluation.trusted.pool import WorkerHandle
    from ptxgym.records.arch import BLACKWELL

    settings = SETTINGS.model_copy(update={"target_mode": TargetMode.EXECUTED, "hw_counters": True})
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), settings)
    arena, _, _ = ev._prepare(gemm_task())
    assert arena.attach_command(1, False, hw_prepare=True).hw_prepare  # carried in the command
    assert arena.attach_command(1, False, hw_prepare=True, hw_warm=True).hw_warm
    assert arena.attach_command(1, False, hw_prepare=True, hw_prepare_attempts=2).hw_prepare_attempts == 2
    # and in a guard-page arena's (the only kind a runner maps)
    run = SimpleNamespace(offset=0, size=2 << 20)
    layout = SimpleNamespace(mappings=[run], total=2 << 20, page=2 << 20)
    paged = SimpleNamespace(guard_pages=True, id="a", layout=layout, _layout=[])
    cmd = Arena.attach_command(paged, 1, False, hw_prepare=True, hw_warm=True)  # type: ignore[arg-type]
    assert cmd.vmm is not None and cmd.hw_prepare and cmd.hw_warm and cmd.hw_prepare_attempts == 4
    monkeypatch.setattr(Arena, "guard_pages", property(lambda self: True))  # a runner maps only these
    asked: list[bool] = []
    warmed: list[bool] = []

    tries: list[int] = []

    def attach_command(*a, hw_prepare=False, hw_warm=False, hw_prepare_attempts=4):
        asked.append(hw_prepare)
        warmed.append(hw_warm)
        tries.append(hw_prepare_attempts)

    monkeypatch.setattr(arena, "attach_command", attach_command)

    def spare(kind):
        handle = kind.__new__(kind)
        handle.primed, handle.send = {}, lambda cmd, pickle, fds: None
        return handle

    ev._primer(spare(NativeHandle))
    ev._primer(spare(WorkerHandle))
    for update in ({"hw_counters": False}, {"target_mode": TargetMode.STATIC}):
        ev.settings = settings.model_copy(update=update)
        ev._primer(spare(NativeHandle))
    hopper = ev.arch
    ev.settings, ev.arch = settings, BLACKWELL
    ev._primer(spare(NativeHandle))
    assert asked == [True, False, False, False, False]
    assert not any(warmed)  # the warm cycle is an experiment: off by default
    ev.arch = hopper
    ev.settings = settings.model_copy(update={"hw_warm_start": True})
    ev._primer(spare(NativeHandle))
    ev._primer(spare(WorkerHandle))
    assert asked[-2:] == [True, False] and warmed[-2:] == [True, False]
    assert set(tries) == {4}  # ``spare_hw_prepare_attempts``' default
    for attempts, query in ((1, True), (0, False)):  # 0: no query on the warm-up (the sandbox step's)
        ev.settings = settings.model_copy(update={"spare_hw_prepare_attempts": attempts})
        ev._primer(spare(NativeHandle))
        assert asked[-1] is query and tries[-1] == max(1, attempts)

    cmd = Attach(arena="a", blob=None, sets=[], flush_bytes=0, hw_prepare=True, hw_warm=True)
    sent = json.loads(spare(NativeHandle)._encode(cmd))
    assert sent["hw_prepare"] is True and sent["hw_warm"] is True
    monkeypatch.setattr(native_worker, "HW_PREPARE", False)
    sent = json.loads(spare(NativeHandle)._encode(cmd))
    assert sent["hw_prepare"] is False and sent["hw_warm"] is False  # no warm cycle without the query

    settled: list[int] = []

    class Spares(_Pool):
        def settle(self, ready) -> int:
            settled.append(1)
            return 0

    ev.native.pool = Spares()  # type: ignore[assignment]
    with ev._proof_gpu():
        assert settled == [1]


def test_an_evicted_arena_is_no_longer_the_current_one(tmp_path, monkeypatch):
    """Eviction by ``max_arenas`` forgets the arena, ``_current`` included, before the new one is made.

    A reviewer's find: were the new arena's construction to fail, the primer would go on attaching new
    spares to the closed (emptied) arena.
    """
    ev = cpu_evaluator(tmp_path, Workers(tmp_path))
    ev.max_arenas = 1
    first = ev._arena(gemm_task())
    assert ev._current is first

    def fails(*a, **kw):
        raise MemoryError("no room for the new arena")

    monkeypatch.setattr(ev, "_new_arena", fails)
    other = tiny_task("MhaFwd-sm90a", batch=1, seq=16)
    with pytest.raises(MemoryError):
        ev._arena(other)
    assert ev._current is None and not ev._arenas and first.sets == []


def test_a_fall_back_set_up_drops_the_abandoned_runners_attach_walls(tmp_path):
    """``_session`` again after a runner's set-up failed: the runner's ``spare_attach_*`` walls go."""
    ev = cpu_evaluator(tmp_path, Workers(tmp_path))
    arena = ev._arena(gemm_task())
    walls = {"spare_attach_cuda": 0.4, "spare_attach_hw_prepare": 0.17, "prepare": 1.0}
    session, handle, _ = ev._session(arena, 1, walls=walls)
    handle.discard()
    assert not [k for k in walls if k.startswith("spare_attach_")] and walls["prepare"] == 1.0, walls
    assert "worker_attach" in walls


@pytest.mark.parametrize("early", [False, True])
def test_early_refill_starts_the_spares_before_the_runner_is_discarded_only_after_a_clean_check(
    tmp_path, monkeypatch, early
):
    """``early_refill``: the spares start once the subject's last memory check is clean and its runner killed.

    A passed candidate and a wrong one (its turn ends at the check) refill after their runner's group is
    SIGKILLed (no code of it runs beside the spares' warm-up) but before it is reaped; a memory hog and a
    runner that hung refill only after the reaping (as all do with the setting off).
    """
    from ptxgym.evaluation.child_errors import WorkerTimeout
    from ptxgym.evaluation.trusted.session import Session

    events: list[str] = []

    class Pool(_Pool):
        def fill(self) -> None:
            events.append("fill")

    class Recording(Workers):
        def __call__(self) -> InProcessWorker:
            worker = super().__call__()
            worker.discard = lambda: events.append("discard")  # type: ignore[method-assign]
            worker.stop = lambda: events.append("stop")  # type: ignore[method-assign]
            return worker

    def order(candidate, task, turn: int) -> tuple[Status, list[str]]:
        ev.pool, ev._take_worker = Pool(), lambda arena, pool=None: Recording(tmp_path, candidate)()  # type: ignore[assignment, method-assign]
        events.clear()
        sha = f"{turn:064x}"
        status = ev.evaluate(task, built(task, turn).model_copy(update={"artifact_sha256": sha})).status
        return status, list(events)

    settings = SETTINGS.model_copy(update={"early_refill": early})
    ev = cpu_evaluator(tmp_path, Workers(tmp_path), settings)
    task = gemm_task()
    ev.baseline(task)
    first = ["stop", "fill", "discard"] if early else ["discard", "fill"]
    # a timed subject is stopped before its last checks (defer_final_checks), then discarded
    assert order(honest, task, 1) == (Status.PASSED, first if early else ["stop", *first])
    assert order(wrong, task, 2) == (Status.INCORRECT_NUMERICAL, first)  # its turn ends at the check
    free = iter([100 * 2**30] + [0] * 100)  # free before the load, then none: a hog
    monkeypatch.setattr(ev, "_free_bytes", lambda: next(free))
    status, seen = order(honest, task, 3)
    assert status is Status.RUNTIME_ERROR and seen == ["discard", "fill"]
    monkeypatch.setattr(ev, "_free_bytes", lambda: 0)

    def hangs(*a, **kw):
        raise WorkerTimeout("no reply in time", "")

    monkeypatch.setattr(Session, "timing", hangs)
    status, seen = order(honest, task, 4)
    assert status is Status.TIMEOUT and seen == ["discard", "fill"]
