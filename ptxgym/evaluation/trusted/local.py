"""The local GPU evaluator: a trusted process per GPU, a disposable worker per candidate.

The trusted side is the process that constructs ``LocalGpuEvaluator`` (the env's process). It owns the
input sets, the output buffers, the fp32 reference outputs and every verdict; candidate code never runs
in it. Each candidate gets a fresh pre-warmed worker process (``pool.py``), mapped onto the arena's
buffers through CUDA IPC, and the worker is killed when the candidate is done, whatever it did. With
``candidate_process`` 'native' (``settings.candidate_process``, the default) a candidate on a guard-page
arena runs in a native runner (``native_worker.py``: no interpreter, no torch; same protocol, same
verdicts) rather than the Python worker (``sandboxed/worker.py``); the baseline stays in the Python
worker.

Stages of one evaluation: arena (once per task) -> baseline (once per evaluator and workload, through
the candidate's own path: ``measure_baseline``; a disk record is only a warm start) -> worker + host
sandbox (``sandbox.py``, per ``PTXGYM_SANDBOX``) + calibration -> load -> correctness -> timing (fresh
input values on every call, a secret random subset verified; guard regions around every buffer checked
after every call; wall-clock cross-check, floor; in-band kernel census; the counted call at a secret slot
among the timed calls, verified, no sample: counted per SASS instruction, the in-band target proof of
``TargetMode.EXECUTED``, ``session.py``) -> memcheck (when
``base.memcheck_due``: by default only without guard pages) -> the target verdict and work share
(``proofs.py``: the in-band counts, Nsight Compute on a secret share of candidates or where the counts are
missing, or on every one with ``TargetMode.NCU``); ``verdicts.with_proofs`` turns their outcomes into the
final status and evidence. From the load on, the step runs against one wall
budget (``budget.py``): the proofs get what the load, check and time left of it. The sandbox report of the
worker is recorded in the verdict's ``environment.sandbox``. Callers are served first come, first served
(``gpu_queue.py``). The memcheck and ncu runs start their own
driver processes (``driver.py``), sandboxed like the worker, their reports read from files the candidate
cannot write.

Guard pages (``EvalSettings.guard_pages``): the arena's blob is built with the CUDA virtual-memory API so
that an unmapped page follows every buffer (``evaluation/vmm.py``). If the trusted side cannot build it,
that arena is a plain blob; if a worker cannot be set up with it (before any candidate code is loaded),
the evaluator drops guard pages for the rest of its life and evaluates again. Either way the verdict's
``details["guard_pages"]`` says what ran and why.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import math
import os
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from ptxgym.confine import cores
from ptxgym.evaluation.child_errors import WorkerError
from ptxgym.evaluation.protocol import ATTACH_PHASES, Load, check_mode
from ptxgym.evaluation.trusted.arena import Arena
from ptxgym.evaluation.trusted.base import (
    BuiltCandidate,
    EvalSettings,
    Evaluator,
    GpuVerdict,
    TargetMode,
    memcheck_due,
)
from ptxgym.evaluation.trusted.baseline_store import (
    BaselineRecord,
    BaselineStore,
    baseline_record,
    resolve_baseline,
    with_fallback,
)
from ptxgym.evaluation.trusted.budget import StepBudget, StepBudgetExceeded, exceeded_verdict
from ptxgym.evaluation.trusted.calibration_reuse import CalibrationReuse, Kept
from ptxgym.evaluation.trusted.census import in_band_census
from ptxgym.evaluation.trusted.gpu_queue import GpuQueue
from ptxgym.evaluation.trusted.gpuinfo import device_facts, pci_bus_id, sm_clock_mhz
from ptxgym.evaluation.trusted.native_worker import NativeHandle, NativeRunners
from ptxgym.evaluation.trusted.pool import WorkerHandle, WorkerPool
from ptxgym.evaluation.trusted.proofs import InBand, run_proofs
from ptxgym.evaluation.trusted.sass_join import (
    Census,
    counted_target,
    counters_suffice,
    hw_only_target,
    hw_record,
    in_band_info,
    with_hw,
)
from ptxgym.evaluation.trusted.session import CandidateFault, Session, SessionResult, wall_parts
from ptxgym.evaluation.trusted.timing import CUPTI, EVENTS, latency_stats
from ptxgym.evaluation.trusted.tools import GateError
from ptxgym.evaluation.trusted.turn import Turn
from ptxgym.evaluation.trusted.verdict_cache import VerdictCache, profiled
from ptxgym.evaluation.trusted.verdict_cache import cache_key as verdict_key
from ptxgym.evaluation.trusted.verdicts import (
    correctness_info,
    fault_verdict,
    with_proofs,
    worker_error_verdict,
)
from ptxgym.evaluation.trusted.verified_pool import barrier as pool_barrier
from ptxgym.records import settings as user_settings
from ptxgym.records.arch import arch_for_capability
from ptxgym.records.errors import EvaluatorUnavailableError, InfraError
from ptxgym.records.feedback import EnvironmentInfo, Evidence, Proof, Stage, Status, TimingInfo, truncate
from ptxgym.records.tasks import Task

HW_PHASES = ("setup", "enable", "config", "start", "run", "read")
"""The phases of the runner's hardware-counted call (``HwCounts.host_ms``, ``runner/cupti_range.h``)."""


def _phase_walls(ms: dict[str, float], names: Sequence[str], prefix: str) -> dict[str, float]:
    """Stage walls (s) ``<prefix><name>`` from a runner's report in ms: only ``names``, finite and >= 0.

    The report is the runner's word: no other key (text it chose) reaches the Feedback.
    """
    ok = [k for k in names if k in ms and math.isfinite(ms[k]) and ms[k] >= 0]
    return {f"{prefix}{k}": round(ms[k] / 1e3, 4) for k in ok}


def runner_phases(host_ms: dict[str, float]) -> dict[str, float]:
    """Stage walls (s) of the hardware-counted call's phases (``HW_PHASES``), as ``runner_hw_<phase>``."""
    return _phase_walls(host_ms, HW_PHASES, "runner_hw_")


def attach_phases(phases_ms: dict[str, float]) -> dict[str, float]:
    """Stage walls (s) of a runner's attach (``protocol.ATTACH_PHASES``), as ``spare_attach_<step>``.

    A spare's warm-up, mostly before the subject's turn (diagnostic: where the ``worker_settle`` wait of
    a later subject goes).
    """
    return _phase_walls(phases_ms, ATTACH_PHASES, "spare_attach_")


COUNT_OUTSIDE_TRIALS = (
    "CUPTI's SASS metrics read zero for every instruction when the counted call ran inside an activity "
    "trial (H200, driver 580.159.04, CUDA 13.0: bench/results/gpu_tests_2026-12-04_counted_position.txt), "
    "so the trial is closed around the counted call"
)
"""Why counted calls run outside the activity trials by default. An empty ``count_outside`` tries inside
first and falls back on a count error or on all-zero counts (``Session._counted``)."""

QUIET_SPARES = True
"""Spare workers are replaced after a subject's timed calls, never beside its own calibration and timing
(``pool.py``), and the native runners' spares are awaited before the next subject's calibration
(``_session``). Before, ``take`` replaced a spare at once, so a fresh worker imported torch and created
its CUDA context while the subject was calibrated and timed; the calibration's spread, which sets the
wall-clock allowance, is the suspected victim (``bench/wall_allowance.py --noisy-spares`` plays the old
way for comparison). A Python worker's spare is not awaited: it needs ~4 s to start (torch), which
back-to-back candidates would each wait for, so one started after a candidate may still warm during the
next one's timing if they follow closely; a runner starts in a fraction of that (no interpreter), and its
pool is the candidates' when it is used."""


SHORT_RETRY_S = 60.0
"""How long an arena whose guard-page blob fell back short of device memory is kept before it is built
again (``LocalGpuEvaluator._short_too_long``)."""


PROOF_RUNS_AT_ONCE = 4
"""Candidates whose proofs (memcheck, Nsight Compute) may be under way at once, after their GPU turns.
Each holds a tool and a driver process with the task's inputs in host memory while it starts up or
waits for the GPU (up to a few GB for the MHA backward), so many candidates passing at once (a batch of
``evaluate_many``) queue here rather than start their tools together."""


class WorkerSetupError(InfraError):
    """A worker could not be started, attached or calibrated: before any candidate code was loaded."""


def spares_range(spares: int, most: int | None = None) -> tuple[int, int]:
    """The spares kept warming: ``spares`` with no candidate waiting, up to ``most`` while they queue.

    ``most`` None: ``PTXGYM_MAX_SPARES``, else ``settings.DEFAULT_MAX_SPARES``; never below ``spares``.
    """
    most = user_settings.max_spares() if most is None else most
    return spares, max(spares, user_settings.DEFAULT_MAX_SPARES if most is None else most)


class LocalGpuEvaluator(Evaluator):
    """Runs, checks, times and profiles candidates on one local GPU."""

    _loaded = threading.local()
    """``now``: whether this thread's evaluation loaded the candidate (``_infra``'s candidate_ran)."""

    name = "local"
    thread_safe = True
    """Many threads may call ``evaluate`` at once: the GPU queue orders them (first come, first served)."""

    def __init__(
        self,
        settings: EvalSettings | None = None,
        device: int | None = None,
        spares: int = 2,
        max_arenas: int = 5,
        worker_start_timeout_s: float = 180.0,
        sandbox_mode: str | None = None,
        queue_capacity: int = 64,
        candidate_process: str | None = None,
        max_spares: int | None = None,
    ) -> None:
        import torch

        if not torch.cuda.is_available():
            raise EvaluatorUnavailableError("LocalGpuEvaluator needs a CUDA device; torch sees none")
        self.settings = settings or EvalSettings()
        self.device = user_settings.device_index() if device is None else device
        torch.cuda.set_device(self.device)
        self.facts = device_facts(self.device)
        self.arch = arch_for_capability(*self.facts.capability)
        self.flush_bytes = 2 * self.facts.l2_bytes
        self.start_timeout_s = worker_start_timeout_s
        self.max_arenas = max_arenas
        self.scratch = Path(tempfile.mkdtemp(prefix="ptxgym-eval-"))
        self.sandbox_mode = check_mode(user_settings.sandbox_mode() if sandbox_mode is None else sandbox_mode)
        self.pool = WorkerPool(
            self.device, spares, log_dir=self.scratch, sandboxed=self.sandbox_mode != "off"
        )
        self.spare_refill = user_settings.spare_refill()
        """``each``: replace the spares taken after every GPU turn; ``batch``: once half are gone."""
        self.spares_range = spares_range(spares, max_spares)
        """Spares kept warming: the first when no candidate waits for the GPU, up to the second while
        candidates queue (``_refill``; ``max_spares``, ``PTXGYM_MAX_SPARES``)."""
        process = user_settings.candidate_process() if candidate_process is None else candidate_process
        self.native = NativeRunners(
            process == "native", self.device, spares, self.scratch, self.sandbox_mode != "off"
        )
        """The native runners (``candidate_process`` 'native'), and why candidates do not use them."""
        self.backend: str | None = None
        self.cupti_error = ""
        self._arenas: collections.OrderedDict[tuple[str, str, bool, bool], Arena] = collections.OrderedDict()
        self._current: Arena | None = None
        self._held: WorkerHandle | None = None
        self.guard_pages_error = ""
        """Why this evaluator stopped using guard pages (a worker could not map them), if it did."""
        self.count_outside = COUNT_OUTSIDE_TRIALS
        """Why counted calls run outside the activity trials, if so (default ``COUNT_OUTSIDE_TRIALS``)."""
        self.baselines = BaselineStore(user_settings.cache_dir() / "baselines", self.facts.key)
        self.cores = cores.for_gpu(pci_bus_id(self.device), user_settings.timing_cores())
        """Cores kept for the runners and the GPU turns' thread, and the builds' (``confine/cores.py``)."""
        self.queue = GpuQueue(queue_capacity, self.cores.timing)
        """First-come, first-served access to the GPU; at most ``queue_capacity`` callers wait."""
        self.verdicts = VerdictCache(self.settings.verdict_cache_entries)
        self.proof_slots = threading.BoundedSemaphore(PROOF_RUNS_AT_ONCE)
        """At most ``PROOF_RUNS_AT_ONCE`` candidates' proofs under way at once (``_finish``)."""
        self._inflight: dict[str, threading.Event] = {}
        """Per artifact whose first evaluation is under way: set when it is done (``evaluate``)."""
        self._inflight_lock = threading.Lock()
        self.quiet_spares = QUIET_SPARES
        """Spares replaced only after a subject's timed calls and awaited before the next calibration
        (``QUIET_SPARES``); False: replaced at once, warming beside the timing (for measurements)."""
        self.spares_wait_s = 0.0
        self.spares_pending = False
        """The spares are awaited before this turn's first timed call, not before its calibration
        (``EvalSettings.late_spare_settle``, ``_settle_late``)."""
        self.calibrations = CalibrationReuse()
        """Recent workers' calibrations, each serving the next workers of its kind (``calibration_reuse``)."""
        if self.settings.native_wall:  # its library compiled now, never inside a GPU turn's first call
            from ptxgym.evaluation.trusted.exchange import unavailable

            unavailable()
        if self._runners_serve():  # the Python workers serve baselines and plain arenas only (``_refill``)
            self.pool.spares = min(spares, 1)
        self.pool.fill()

    # -------------------------------------------------------------------------------------- public

    @property
    def environment(self) -> EnvironmentInfo:
        """GPU and library facts for the record."""
        f = self.facts
        return EnvironmentInfo(
            gpu=f.name, driver=f.driver, cuda_runtime=f.cuda_runtime, torch=f.torch, evaluator=self.name
        )

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        """Evaluate one candidate; never raises (infrastructure faults become INFRA_ERROR).

        A candidate whose verdict is in the verdict cache (``verdict_cache.py``) is answered from it at
        once, without waiting for the GPU. Otherwise it waits for its turn on the GPU (``gpu_queue.py``),
        which lasts from the worker's set-up to its last counted call; the proofs that run in a tool's
        process of their own (memcheck, Nsight Compute) follow after the turn, each taking the GPU again
        only for its GPU phase (``tools.Gate``), so their start-up overlaps other candidates' turns.
        ``stage_wall_s["gpu_total"]`` is the time this candidate held the GPU, both parts together.

        A copy of an artifact that is being evaluated (a GRPO group often repeats a completion, and the
        batch paths call this from many threads) waits for that first verdict, then asks the cache again;
        copies the cache cannot answer (a pass is reused only within its episode) then go on together,
        their wait recorded (``copy_wait``).
        """
        key, first, waited = self._copy_key(task, candidate), None, 0.0
        if key is not None:
            with self._inflight_lock:
                running = self._inflight.get(key)
                if running is None:
                    self._inflight[key] = first = threading.Event()
            if running is not None:  # a copy: wait for the first one's verdict, then ask the cache
                t = time.perf_counter()
                running.wait()
                waited = time.perf_counter() - t
        try:
            cached = self.verdicts.lookup(task, candidate, self.settings)
            redrawn = cached is not None and self._redraw(cached)
            if cached is not None and not redrawn:
                return cached
            verdict = self._evaluate_now(task, candidate, crosscheck=True if redrawn else None)
            if redrawn and verdict.status is not Status.PASSED:  # caught: the stored pass must not return
                self.verdicts.forget(task, candidate)
            if waited:
                walls = {**verdict.stage_wall_s, "copy_wait": round(waited, 4)}
                verdict = verdict.model_copy(update={"stage_wall_s": walls})
            return verdict
        finally:
            if first is not None and key is not None:
                with self._inflight_lock:
                    del self._inflight[key]
                first.set()

    def _copy_key(self, task: Task, candidate: BuiltCandidate) -> str | None:
        """What makes two candidates copies (``evaluate``); None with the cache off or no key."""
        if self.verdicts.max_entries <= 0:
            return None
        try:
            return verdict_key(task, candidate)
        except Exception:  # noqa: BLE001 - a malformed candidate goes alone; its fault is reported there
            return None

    def _evaluate_now(
        self, task: Task, candidate: BuiltCandidate, crosscheck: bool | None = None
    ) -> GpuVerdict:
        """``evaluate`` past the cache: the GPU turn, then the proofs (``crosscheck``: ``_evaluate``)."""
        pending: Turn | None = None
        self._loaded.now = False  # set when this thread loads the candidate (``_measure``)
        with self.queue.turn():
            t0 = time.perf_counter()
            try:
                verdict, pending = self._evaluate_or_demote(task, candidate, crosscheck)
            except InfraError as exc:
                verdict = self._infra(str(exc), traceback.format_exc(), self._loaded.now)
            except Exception as exc:  # noqa: BLE001 - never raise into the episode
                verdict = self._infra(
                    f"{type(exc).__name__}: {exc}", traceback.format_exc(), self._loaded.now
                )
            held, waited = time.perf_counter() - t0, self.queue.last_wait_s
        if pending is not None:
            verdict = self._finish(pending, verdict)
        walls = {
            **verdict.stage_wall_s,
            "gpu_turn": round(held, 4),
            "gpu_total": round(held + verdict.stage_wall_s.get("proof_gpu", 0.0), 4),
            "queue": round(waited, 4),
        }
        verdict = verdict.model_copy(update={"stage_wall_s": walls})
        self.verdicts.store(task, candidate, verdict)
        return verdict

    def evaluate_many(self, task_candidates: Sequence[tuple[Task, BuiltCandidate]]) -> list[GpuVerdict]:
        """Verdicts in input order, each candidate on a thread of its own.

        So one candidate's proofs run while the next one holds the GPU (the queue serves them in order);
        copies of one artifact wait for the first one's verdict (``evaluate``).
        """
        pairs = list(task_candidates)
        if len(pairs) <= 1:
            return [self._evaluate_guarded(t, c) for t, c in pairs]
        workers = min(len(pairs), self.queue.capacity)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ptxgym-gpu") as pool:
            return list(pool.map(lambda pair: self._evaluate_guarded(*pair), pairs))

    def baseline(self, task: Task) -> BaselineRecord:
        """The baseline record of a task's workload (measured on first use in this evaluator)."""
        with self.queue.turn():
            return self._baseline(task, self._arena(task))

    def close(self) -> None:
        """Kill the spare workers and free the arenas."""
        if self._held is not None:
            self._held.discard()
            self._held = None
        self.pool.close()
        self.native.close()
        for arena in self._arenas.values():
            arena.close()
        self._arenas.clear()
        self._current = None
        shutil.rmtree(self.scratch, ignore_errors=True)

    # ------------------------------------------------------------------------------------ stages

    def _evaluate_or_demote(
        self, task: Task, candidate: BuiltCandidate, crosscheck: bool | None = None
    ) -> tuple[GpuVerdict, Turn | None]:
        """Evaluate; if a guard-page arena fails to set up a worker, drop guard pages and evaluate again.

        Worker set-up (attach, sandbox, calibration) ends before any candidate code is loaded, so the
        candidate cannot provoke this; every later arena of this evaluator is then a plain blob, and the
        verdicts' details carry the reason (``guard_pages``).
        """
        try:
            return self._evaluate(task, candidate, crosscheck)
        except WorkerSetupError as exc:
            arena = self._current
            if arena is None or not arena.guard_pages:
                raise
            self.guard_pages_error = f"worker set-up failed with the guard-page blob: {exc}"[:800]
            self.settings = self.settings.model_copy(update={"guard_pages": False})
            self._forget(arena)
            return self._evaluate(task, candidate, crosscheck)

    def _forget(self, arena: Arena) -> None:
        """Drop an arena (and a held worker attached to it) from this evaluator."""
        for key, found in list(self._arenas.items()):
            if found is arena:
                del self._arenas[key]
        if self._held is not None:
            self._held.discard()
            self._held = None
        self._current = None
        arena.close()

    def _evaluate(
        self, task: Task, candidate: BuiltCandidate, crosscheck: bool | None = None
    ) -> tuple[GpuVerdict, Turn | None]:
        """The GPU turn's part of an evaluation: the verdict so far, and the turn if its proofs are due.

        ``crosscheck``: whether Nsight Compute also profiles it (None: the secret draw, ``_draw_crosscheck``).

        A PASSED verdict still needs its proofs (``_finish``, after the turn); the turn then carries what
        they need, fixed now: the inputs they run on and their time limits (``_stage_proofs``).
        """
        if self.arch is None or self.arch.name != task.arch:
            gpu = f"{self.facts.name} (sm_{self.facts.capability[0]}{self.facts.capability[1]})"
            verdict = GpuVerdict(
                status=Status.NOT_EVALUATED,
                stage=Stage.RUN,
                environment=self.environment,
                message=f"task {task.id} targets {task.arch}, which this evaluator's GPU {gpu} "
                "cannot run; use a GPU of that architecture",
            )
            return verdict, None
        arena, baseline, walls = self._prepare(task)
        turn = Turn(task, candidate, arena, baseline, seed=self._turn_seed(candidate))
        turn.in_band = InBand(crosscheck=self._draw_crosscheck() if crosscheck is None else crosscheck)
        turn.walls.update(walls)
        verdict = self._run_candidate(turn)
        if verdict.status is Status.PASSED:
            self._stage_proofs(turn)
            if self.settings.gated_proofs:
                return verdict, turn
            return self._finish(turn, verdict, gated=False), None
        return self._with_turn(turn, verdict), None

    def _with_turn(self, turn: Turn, verdict: GpuVerdict) -> GpuVerdict:
        """The verdict with the turn's stage walls and seed."""
        walls = {**turn.walls, **verdict.stage_wall_s}
        return verdict.model_copy(update={"stage_wall_s": walls, "seed": turn.seed})

    def _stage_proofs(self, turn: Turn) -> None:
        """Fix what the proofs after the turn need (``_finish``), while the GPU is still held.

        Their inputs: the arena's saved set, linked to a name of this turn's own (another turn may evict
        the arena and delete its file meanwhile). Whether memcheck is due, and the settings: as they are
        now (another thread may change ``self.settings`` later). Their time limits: their settings, or
        what is left of the step's budget now, if less; time spent waiting for the GPU later is not the
        candidate's.
        """
        source = turn.arena.inputs_file()
        link = self.scratch / f"proof-{secrets.token_hex(8)}-{source.name}"
        try:
            os.link(source, link)
        except OSError:
            shutil.copyfile(source, link)
        turn.proof_inputs = link
        turn.proof_memcheck = self._memcheck_due(turn)
        turn.proof_settings = self.settings.model_copy(
            update={
                "memcheck_timeout_s": self._proof_timeout(turn, self.settings.memcheck_timeout_s),
                "profile_timeout_s": self._proof_timeout(turn, self.settings.profile_timeout_s),
            }
        )

    def _finish(self, turn: Turn, verdict: GpuVerdict, gated: bool = True) -> GpuVerdict:
        """Run a PASSED turn's proofs; never raises (a fault is INFRA_ERROR).

        ``gated``: after the GPU turn, in a proof slot, each tool's GPU phase taking the GPU again. Not
        gated (``EvalSettings.gated_proofs`` off): inside the turn, which holds the GPU throughout (and
        takes no slot: a slot's holder may be waiting for this very turn to end).
        """
        try:
            t = time.perf_counter()
            with self.proof_slots if gated else contextlib.nullcontext():
                turn.walls["proof_slot"] = round(time.perf_counter() - t, 4)
                verdict = self._post_checks(turn, verdict, gated)
        except Exception as exc:  # noqa: BLE001 - never raise into the episode
            # a proof tool's driver that never reached its gate ran no candidate code (tools.GateError)
            ran = not isinstance(exc, GateError)
            verdict = self._infra(f"{type(exc).__name__}: {exc}", traceback.format_exc(), candidate_ran=ran)
        finally:
            if turn.proof_inputs is not None:
                turn.proof_inputs.unlink(missing_ok=True)
        return self._with_turn(turn, verdict)

    def _prepare(self, task: Task) -> tuple[Arena, BaselineRecord, dict[str, float]]:
        """The task's arena and baseline: per-arena work, done on the first turn of a task only.

        ``prepare`` is their sum; ``prepare_arena`` (inputs and fp32 references of the seeded sets) and
        ``prepare_baseline`` (the baseline measured through the candidate path) split it. Later turns of
        the same task in this evaluator find both resident and pay ~0 s here.
        """
        t = time.perf_counter()
        arena = self._arena(task)
        t_arena = time.perf_counter() - t
        baseline = self._baseline(task, arena)
        total = time.perf_counter() - t
        walls = {"prepare_arena": t_arena, "prepare_baseline": total - t_arena, "prepare": total}
        return arena, baseline, {k: round(v, 4) for k, v in walls.items()}

    def _redraw(self, cached: GpuVerdict) -> bool:
        """Whether a cached pass is evaluated again: its turn's secret Nsight Compute draw fell on it.

        A pass is reused within its episode; without this, a resubmitted artifact would face the
        cross-check once (``ncu_crosscheck_fraction``) however often it is paid, and in-band counts forged
        past the first draw would be paid on every resubmission. A pass the profiler already checked is
        reused as it is.
        """
        if cached.status is not Status.PASSED or profiled(cached):
            return False
        return self._draw_crosscheck()

    def _draw_crosscheck(self) -> bool:
        """A secret draw: does Nsight Compute also profile this candidate (``ncu_crosscheck_fraction``)?"""
        fraction = self.settings.ncu_crosscheck_fraction
        return fraction >= 1.0 or secrets.randbelow(1_000_000) < fraction * 1_000_000

    def _turn_seed(self, candidate: BuiltCandidate) -> int:
        if self.settings.seed is None:
            return secrets.randbits(31)
        episode = hash(candidate.episode_id) % 997 if candidate.input_seed is None else candidate.input_seed
        return (self.settings.seed * 1_000_003 + candidate.turn * 7919 + episode) % 2**31

    def _arena(self, task: Task) -> Arena:
        pooled = self._pool_usable()  # settings may change between calls: an arena is built for one
        key = (task.definition.name, task.workload.uuid, self.settings.guard_pages, pooled)
        retry = key in self._arenas and self._short_too_long(self._arenas[key])
        if retry:  # built short of memory a while ago: try guard pages again, evicting no other arena
            self._forget(self._arenas[key])
        if key in self._arenas:
            self._arenas.move_to_end(key)
        else:
            while len(self._arenas) >= self.max_arenas:
                self._forget(next(iter(self._arenas.values())))  # the oldest; ``_current`` too if it is
            self._arenas[key] = self._new_arena(task, pooled, evict=not retry)
        arena = self._arenas[key]
        if arena is not self._current:
            self._current = arena
            for pool in (self.pool, self.native.pool):
                if pool is not None:
                    pool.primer = self._primer
                    pool.prime_all()
        return arena

    def _short_too_long(self, arena: Arena) -> bool:
        """Whether ``arena``'s blob fell back short of memory more than ``SHORT_RETRY_S`` ago.

        Its task's candidates run in the Python worker with their credit withheld while it lasts (a
        reviewer: it was kept for the arena's life), so it is built again now and then, evicting no
        other arena (``_new_arena(evict=False)``): another process's memory may have gone meanwhile.
        """
        return self._short_of_memory(arena) and time.monotonic() - arena.built_at > SHORT_RETRY_S

    def _short_of_memory(self, arena: Arena) -> bool:
        """Whether guard pages were asked for and ``arena``'s blob fell back for lack of device memory."""
        return self.settings.guard_pages and "OUT_OF_MEMORY" in arena.guard_pages_error.upper()

    def _new_arena(self, task: Task, pooled: bool, evict: bool = True) -> Arena:
        """A new arena for ``task``, made again once with every other arena dropped if memory was short.

        Arenas are evicted by count (``max_arenas``), and each may hold a verified pool (2.7-24 GB), so a
        new task's guard-page blob can find the device full: it then falls back to one plain allocation,
        whose candidates run in the Python worker, with no hardware counters and so no target credit
        (``_hw_missing``; a reviewer's find). Short of memory (the blob's fall-back names
        CUDA_ERROR_OUT_OF_MEMORY, or the arena's own allocation failed) with other arenas held, those
        are dropped (their tasks build theirs again when they come back) and this one is made again.
        ``evict`` False (the retry of ``_short_too_long``): no other arena is dropped, the memory is only
        collected first (a reviewer: under lasting pressure each retry evicted every other task's arena).
        """
        import torch

        def release() -> None:
            gc.collect()  # what still refers to dropped arenas' tensors, before the cache is emptied
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        if not evict:
            release()

        def make() -> Arena:
            n = max(self.settings.correctness_sets, self.settings.rotate_sets)
            base = self.settings.seed
            seeds = [base + i if base is not None else secrets.randbits(31) for i in range(n)]
            return Arena(
                task,
                seeds,
                self.device,
                self.scratch,
                guard_pages=self.settings.guard_pages,
                pool_size=self.settings.pool_entries if pooled else 0,
                pool_reserve=self.settings.pool_reserve_bytes,
                pool_max_uses=self.settings.verified_pool_uses,
                sample_share=self.settings.verify_sample_share,
                fused=self.settings.fused_inputs,
                input_check_share=self.settings.input_check_share,
                deferred_checks=self.settings.deferred_call_checks,
            )

        try:
            arena: Arena | None = make()
        except torch.OutOfMemoryError:
            if not (self._arenas and evict):
                raise
            arena = None
        if arena is not None:
            if not (self._short_of_memory(arena) and self._arenas and evict):
                return arena
            arena.close()
        for old in list(self._arenas.values()):
            self._forget(old)
        release()
        return make()

    def _primer(self, handle: WorkerHandle) -> None:
        """Queue the attach of the current arena on a warming worker (the reply is read at take time)."""
        from ptxgym.evaluation.trusted.arena import ipc_pickle

        arena = self._current
        if arena is None or handle.primed.get("arena") == arena.id:
            return
        if isinstance(handle, NativeHandle) and not arena.guard_pages:
            return  # a runner maps only guard-page blobs: it waits for such an arena
        attempts = self.settings.spare_hw_prepare_attempts  # 0: the subject's sandbox step queries
        early = isinstance(handle, NativeHandle) and self._hw_possible() and attempts > 0  # off the GPU turn
        cmd = arena.attach_command(
            self.flush_bytes,
            self.backend != EVENTS,
            self.settings.module_census,
            hw_prepare=early,
            hw_warm=early and self.settings.hw_warm_start,
            hw_prepare_attempts=max(1, attempts),
        )
        handle.send(cmd, ipc_pickle, arena.attach_fds())
        handle.primed = {"arena": arena.id}

    def _ensure_backend(self, arena: Arena) -> None:
        """Decide the timing backend once (CUPTI if it works in a worker, else events), keeping the worker."""
        if self.backend is not None:
            return
        handle = self._take_worker(arena)
        session = Session(handle, arena, self.settings, CUPTI, 0, self.start_timeout_s)
        try:
            attached = session.attach(self.flush_bytes, True)
        except (WorkerError, CandidateFault) as exc:
            handle.discard()
            raise WorkerSetupError(f"worker set-up failed: {exc}") from exc
        self.backend = CUPTI if attached.cupti else EVENTS
        self.cupti_error = attached.cupti_error
        self._held = handle

    def _take_worker(self, arena: Arena, pool: WorkerPool | None = None) -> WorkerHandle:
        """A warm worker (of ``pool``; None: the Python workers') with the arena attached.

        Failures here are infrastructure, retried once.
        """
        if pool is None:
            held, self._held = self._held, None
            if held is not None:
                if held.primed.get("arena") == arena.id:
                    return held
                held.discard()
        last: WorkerError | None = None
        for _ in range(2):
            handle = (pool or self.pool).take(refill=not self.quiet_spares)
            try:
                self._ready(handle, arena)
            except WorkerError as exc:
                handle.discard()
                last = exc
                continue
            return handle
        raise WorkerSetupError(
            "no worker process could be started: "
            + (f"{last.message}\n{truncate(last.log_tail, 1500)}" if last else "no attempt was made")
        )

    def _ready(self, handle: WorkerHandle, arena: Arena | None) -> None:
        """Wait for a worker's hello and queued attach; keep the attach reply only if it is this arena's."""
        replies = handle.drain(self.start_timeout_s)
        attached = [r for r in replies if r.attach is not None or (r.seq > 0 and not r.ok)]
        if attached:
            handle.primed["reply"] = attached[-1]
        if arena is not None and handle.primed.get("arena") != arena.id:
            handle.primed = {}

    def settle(self) -> None:
        """Start the missing spares and wait until every spare is warm (a quiet machine from now on)."""
        for pool in self._pools():
            pool.fill()
            pool.settle(lambda handle: self._ready(handle, self._current))

    def _pools(self) -> list[WorkerPool]:
        return [p for p in (self.pool, self.native.pool) if p is not None]

    def _settle_spares(self) -> None:
        """Wait for every spare of the native runners' pool to finish starting (``QUIET_SPARES``).

        No runner then warms while a subject is calibrated, checked or timed (``pool.py``); the wait is
        the ``spares`` wall of the next verdict (part of its ``worker`` stage).
        """
        t = time.perf_counter()
        if self.native.pool is not None:  # the Python workers' spares are not awaited (QUIET_SPARES)
            self.native.pool.settle(lambda handle: self._ready(handle, self._current))
        self.spares_wait_s = time.perf_counter() - t

    def _refill(self) -> None:
        """Replace the spares handed out (after a subject's timed calls: see ``_settle_spares``).

        As many as candidates wait for the GPU now, within ``spares_range``, in the pool they take from:
        back-to-back candidates otherwise each wait for a worker to start (a Python worker needs ~4 s;
        with 2 spares that bounded the H200 at ~20 GPU candidates/min,
        ``bench/results/throughput_2026-12-05_python.txt``). While runners serve the candidates (wanted,
        not dropped, started or not) the Python workers serve only baselines and plain arenas: at most
        one of them warms (a reviewer found up to ``max_spares`` of them started after a task's baseline,
        warming beside the first runners' timing and idle after).

        ``spare_refill`` ``batch`` (``PTXGYM_SPARE_REFILL``): the busy pool is refilled only once fewer
        than half its spares are left, all missing ones at once. Back to back, each replaced spare is
        still starting when the next subject's calibration must wait for it (``worker_settle``, 0.30 s
        of a 1.08 s GPU turn at 16 envs on the H100, ``throughput_2026-12-05_stream_h100.txt``); started
        together, several warm in one such wait: the default since an H100 run of 16 envs streaming with
        4 spares at most (settle 8.3 s against 14.4 s over 64 candidates, 80.3 candidates/min against
        72.5: ``bench/results/throughput_2026-12-06_refill_h100.txt``).
        """
        low, high = self.spares_range
        runners = self._runners_serve()
        busy = self.native.pool if runners else self.pool
        for pool in self._pools():  # only the pool the waiting candidates will take from grows
            if pool is busy:
                pool.spares = min(high, max(low, self.queue.waiting))
                if self.spare_refill == "batch" and 0 < pool.spares <= 2 * pool.stock:
                    continue  # half or more left: the missing ones start together later (``batch``)
            else:  # the Python workers, while runners serve: only baselines and plain arenas take them
                pool.spares = min(low, 1) if runners else low
            pool.fill()

    def _session(
        self,
        arena: Arena,
        seed: int,
        sandboxed: bool = False,
        pool: WorkerPool | None = None,
        match_ms: float | None = None,
        hw_prepare: bool = False,
        walls: dict[str, float] | None = None,
        candidate: bool = True,
    ) -> tuple[Session, WorkerHandle, int]:
        """Take a worker, attach, sandbox (for a candidate), calibrate: all before candidate code is loaded.

        The sandbox comes before the calibration so that the harness overhead is measured under the same
        syscall filter as the candidate's calls. A sandbox that cannot be applied (strict mode) is an
        infrastructure error, not the candidate's. ``pool``: the native runners' (None: the Python workers').
        ``hw_prepare``: a runner queries its hardware-counter availability before its jail (the subject
        will get the hardware-counted call; ``ApplySandbox.hw_prepare``). The spares are awaited just
        before the calibration (``QUIET_SPARES``; with ``late_spare_settle`` and a kept calibration,
        before the first timed call instead: ``_settle_late``), not when the worker is taken: a spare the
        last subject started then starts beside this worker's attach and sandbox (on the H200 the
        ``worker`` stage grew from 0.08 s a candidate at 1 env to 0.30 s at 16 and 64: that wait, it seems;
        throughput_2026-12-05_native_h200.txt). ``walls``: the parts' wall seconds (``worker_restore``,
        ``worker_take``, ``worker_attach``, ``worker_sandbox``, ``worker_settle``, ``worker_calibrate``).
        ``candidate``: a candidate's worker, not the baseline's (they never share a calibration,
        ``_calibrate``).
        """
        walls = {} if walls is None else walls
        t = time.perf_counter()

        def part(name: str) -> None:
            nonlocal t
            now = time.perf_counter()
            walls[f"worker_{name}"] = round(now - t, 4)
            t = now

        arena.restore()  # an earlier candidate may have written to the shared inputs
        part("restore")
        handle = self._take_worker(arena, pool)
        if pool is not None:  # a runner: on the cores kept for timing from now on (confine/cores.py)
            cores.pin_process(handle.proc.pid, self.cores.timing)
        part("take")
        backend = self.backend or EVENTS
        session = Session(handle, arena, self.settings, backend, seed, self.settings.call_timeout_s)
        try:
            attached = session.attach(
                self.flush_bytes, self.backend == CUPTI, self.settings.module_census and self.backend == CUPTI
            )
            part("attach")
            for key in [k for k in walls if k.startswith("spare_attach_")]:
                del walls[key]  # an abandoned runner's, before a fall-back to the Python worker
            walls.update(attach_phases(attached.phases_ms))
            if self.backend == CUPTI and not attached.cupti:
                handle.discard()
                error = WorkerSetupError if pool is not None else InfraError
                raise error(f"CUPTI failed in a new worker: {attached.cupti_error}")
            if sandboxed:
                session.sandbox(self.sandbox_mode, hw_prepare)
            part("sandbox")
            self.spares_wait_s = 0.0
            cal_key, kept = self._kept_calibration(arena, (candidate, pool is not None, sandboxed), match_ms)
            self.spares_pending = self.quiet_spares and kept is not None and self.settings.late_spare_settle
            if self.quiet_spares and not self.spares_pending:  # a spare started after the last timed
                self._settle_spares()  # calls may still be starting: it had this attach and sandbox
            part("settle")
            self._calibrate(session, cal_key, kept, match_ms)
            part("calibrate")
        except (WorkerError, CandidateFault) as exc:
            handle.discard()
            raise WorkerSetupError(f"worker set-up failed before the candidate was loaded: {exc}") from exc
        except BaseException:  # the trusted side's own failure (a timed exchange's copies): no worker left
            handle.discard()
            raise
        return session, handle, self._free_bytes()

    def _kept_calibration(
        self, arena: Arena, kind: tuple[bool, bool, bool], match_ms: float | None
    ) -> tuple[Hashable, tuple[Kept, str] | None]:
        """The calibration key of a worker of this kind, and a recent calibration it may reuse (or None).

        ``kind``: a candidate's worker (else the baseline's: the first of each measures its own, so the
        baseline's commands stay a candidate's), a native runner, sandboxed (``calibration_reuse``).
        """
        key = (arena.id, *kind, self.sandbox_mode, self.backend, match_ms)
        s = self.settings
        return key, self.calibrations.take(key, s.calibration_reuse, s.calibration_max_age_s)

    def _calibrate(
        self, session: Session, key: Hashable, kept: tuple[Kept, str] | None, match_ms: float | None
    ) -> None:
        """Use the kept calibration (``_kept_calibration``), else measure one and keep it for the next.

        ``session.calibration_source`` says which (the verdict's ``details["calibration_source"]``).
        """
        if kept is not None:
            found, session.calibration_source = kept
            session.use_calibration(found.cal, found.matched)
            return
        session.calibrate(match_ms=match_ms)
        assert session.cal is not None
        self.calibrations.put(key, session.cal, session.cal_matched)

    def _baseline(self, task: Task, arena: Arena) -> BaselineRecord:
        """This evaluator's own baseline of the task: measured on first use, kept for its life.

        A disk record of an earlier evaluator is only a warm start (``baseline_store.py``): it seeds the
        re-measurement's step budget and is recorded beside it; the speedup divides by the new figure.
        """
        self._ensure_backend(arena)
        runs, _ = resolve_baseline(task)
        key = self.baselines.key(runs, self.settings, self.flush_bytes, self.backend)
        found = self.baselines.measured(key)
        if found is not None:
            return found
        warm = self.baselines.warm_start(key) if self.settings.baseline_from_disk else None
        record = self.measure_baseline(task, arena, warm)
        # a fallback timed after the named baseline failed is kept for this evaluator, never on disk
        self.baselines.put(key, record, to_disk=record.function == runs.baseline.function)
        return record

    def measure_baseline(
        self, task: Task, arena: Arena | None = None, warm: BaselineRecord | None = None
    ) -> BaselineRecord:
        """Check and time the task's baseline now, through exactly the candidate's path.

        The library call is loaded as the subject of a turn (``Load(kind="baseline")``, a candidate-shaped
        callable) and run by ``_run_candidate``: the same sandboxed worker set-up and calibration, step
        budget, correctness and timing calls (fresh values, verified subset, L2 flush, CUPTI spans),
        wall-clock cross-check and verdict code. What stays different, and why: the baseline is not
        strict (a check it fails is recorded, and it is still timed, so the Feedback can say the library
        itself misses the tolerance); the proofs (memcheck, ncu) do not run (trusted library code);
        outputs a library returns instead of writing are copied into the harness buffers after the timed
        window (``library_baselines.py``: the copy is the wrapper's work, not the library's). If the
        sandboxed measurement yields no latency, it is retried once without the sandbox and the record
        says so (``sandboxed=False``).

        Which baseline: the task's, where the library it requires is installed (``resolve_baseline``);
        else, or where it gives no latency even unsandboxed, its fallback (the torch reference), with the
        reason in ``BaselineRecord.fallback`` (the Feedback names the baseline that ran).
        """
        if arena is None:  # from outside a GPU turn: choosing the arena may close another one in use
            with self.queue.turn():
                return self.measure_baseline(task, self._arena(task), warm)
        self._ensure_backend(arena)
        task, why = resolve_baseline(task)
        record = self._measure_baseline(task, arena, warm)
        if record.stats is None and task.baseline.fallback is not None:
            failed = (
                f"{task.baseline.name} ({task.baseline.function}) gave no latency: "
                + (record.message or record.anomaly or "no reason recorded")[:600]
            )
            task = with_fallback(task)
            record = self._measure_baseline(task, arena, None)
            why = f"{failed}; timed {record.name} instead"
        return record.model_copy(update={"fallback": why}) if why else record

    def _measure_baseline(self, task: Task, arena: Arena, warm: BaselineRecord | None) -> BaselineRecord:
        """The baseline of ``task`` as named, sandboxed, then unsandboxed if that gave no latency."""
        options = {**arena.options, **task.baseline_options}
        load = Load(kind="baseline", function=task.baseline.function, options=options)
        empty = BaselineRecord(name=task.baseline.name, backend=self.backend)
        record = None
        for sandboxed in (True, False) if self.sandbox_mode != "off" else (False,):
            turn = Turn(task, None, arena, warm or empty, seed=secrets.randbits(31), baseline_load=load)
            verdict = self._run_candidate(turn, sandboxed=sandboxed)
            retry = (record.message or record.anomaly or "no latency") if record is not None else ""
            record = baseline_record(task, self.backend, verdict, turn.result.failure, sandboxed, warm, retry)
            if record.stats is not None:
                break
        assert record is not None
        return record

    def _run_candidate(self, turn: Turn, sandboxed: bool = True) -> GpuVerdict:
        """A sandboxed worker, then load, check and time; the verdict records the worker's sandbox.

        The one path of every timed subject: candidates, and the baseline (``measure_baseline``). A
        candidate runs in a native runner where ``self.native`` chooses one; where a runner cannot be set
        up (before any candidate code is loaded) the Python worker serves this subject, and after
        ``DROP_AFTER_FAILURES`` in a row every later one (``NativeRunners.failed``). With
        ``candidate_process`` 'native' the verdict's ``environment.sandbox["process"]`` (and
        ``details["candidate_process"]``) say which process ran the subject and why.
        """
        guard = turn.arena.guard_pages
        candidate = turn.baseline_load is None
        pool = self.native.choose(candidate, guard, self.backend == CUPTI)
        if pool is not None and pool.primer is None:
            pool.primer = self._primer
        stats = turn.baseline.stats if candidate and turn.baseline is not None else None
        match_ms = stats.median_ms if stats is not None and self.settings.matched_calibration else None
        hw_prepare = self._hw_meant(turn)
        fallback = ""
        with turn.timed("worker"):
            try:
                turn.session, turn.handle, turn.free_before = self._session(
                    turn.arena, turn.seed, sandboxed, pool, match_ms, hw_prepare, turn.walls, candidate
                )
                if pool is not None:
                    self.native.worked(hw_prepare)
            except WorkerSetupError as exc:
                if pool is None:
                    raise
                fallback = self.native.failed(f"a native runner could not be set up: {exc}", hw_prepare)
                pool = None
                turn.session, turn.handle, turn.free_before = self._session(
                    turn.arena, turn.seed, sandboxed, match_ms=match_ms, walls=turn.walls, candidate=candidate
                )
        process = fallback or self.native.note(pool is not None, guard, candidate)
        turn.details["candidate_process"] = process
        self._pool_for(turn, turn.session, native=pool is not None)
        turn.walls["spares"] = round(self.spares_wait_s, 4)
        try:
            verdict = self._measure(turn, turn.session, turn.handle)
        finally:
            if self.quiet_spares and not turn.refilled:
                self._refill()
        report = turn.session.sandbox_report
        sandbox = report.summary() if report is not None else {}
        if self.native.wanted:
            sandbox["process"] = process
        env = verdict.environment.model_copy(update={"sandbox": sandbox})
        return verdict.model_copy(update={"environment": env})

    def _runners_serve(self) -> bool:
        """Whether the runners serve this evaluator's candidates: wanted, not dropped, guard pages on.

        Else the Python workers do (``_refill`` grows their pool; no arena builds a verified pool).
        """
        return self.native.wanted and not self.native.why and self.settings.guard_pages

    def _pool_usable(self) -> bool:
        """Whether a candidate could use an arena's verified pool here (else it is not built at all).

        Only a jailed native runner may (``verified_pool.barrier``): candidates must be meant for the
        runners, and Landlock there. Each session's runner must then report its jail in force on every
        thread (Landlock ABI 8, or below it each earlier thread restricted by ``confine.h``'s broadcast),
        or its partial form be accepted (``verified_pool_partial_jail``); a session whose runner does not
        uses no pool. The baseline alone, measured once per arena, is not worth the pool's device memory
        (2.7-24 GB per arena) and one-time references.
        """
        from ptxgym.confine import landlock

        if not self._runners_serve():
            return False
        return self.settings.verified_pool_partial_jail or landlock.abi()[0] >= 1

    def _pool_for(self, turn: Turn, session: Session, native: bool) -> None:
        """Give the session the arena's verified pool, or record why its subject may not use it.

        Only a subject that cannot carry what it saw to a later session may (``verified_pool.barrier``).
        """
        partial = self.settings.verified_pool_partial_jail
        why = pool_barrier(turn.baseline_load is not None, native, session.sandbox_report, partial)
        if why:
            session.pool_off = why
        else:
            session.use_pool()

    def _measure(self, turn: Turn, session: Session, handle: WorkerHandle) -> GpuVerdict:
        """Load the subject into the prepared worker, check and time it; the worker is discarded after.

        A failed check ends a candidate's turn (``turn.strict``); the baseline's is recorded and it goes on.
        """
        import torch

        result, strict = turn.result, turn.strict
        turn.clocks.append(sm_clock_mhz(self.device))
        budget = self._budget(turn)
        turn.details.update(
            {
                "calibration": session.cal.__dict__,
                "calibration_matched": session.cal_matched.__dict__ if session.cal_matched else None,
                "calibration_source": session.calibration_source,
                "calibration_used": "matched"
                if session.cal_matched is not None and session.reference_calibration() is session.cal_matched
                else "trivial",
                "backend": self.backend,
                "step_budget": budget.record(),
                "guard_pages": turn.arena.protection(self.guard_pages_error),
            }
        )
        session.start_clock(budget)
        try:
            if turn.candidate is not None:
                self._loaded.now = True
            session.load(turn.load)
            turn.stage = Stage.CHECK
            with turn.timed("check"):
                session.correctness(result, strict=strict)
            hog = self._memory_hog(turn.free_before)
            if hog or (strict and result.failure is not None):
                self._early_refill(turn, handle, hog)
                return self._failed(turn, hog)
            self._settle_late(turn)
            turn.stage = Stage.TIME
            with turn.timed("time"):
                base = turn.baseline.stats if turn.baseline is not None else None
                hw = self._hw_counts(turn, handle)
                turn.hw_alone = hw and self._hw_alone(turn)
                session.count_outside = self.count_outside
                session.defer_checks = self.settings.defer_final_checks
                started = time.perf_counter()
                session.timing(
                    result,
                    strict=strict,
                    baseline_ms=base.median_ms if base else None,
                    count=self._counts(turn) and not turn.hw_alone,
                    hw_count=hw,
                )
                took = time.perf_counter() - started
                if self.settings.wall_retries and session.retime_due(result, took):
                    session.finish(result, strict)  # the first timing's checks first: a failure ends it
                    if session.retime_due(result, took):
                        session.retime(result, strict, base.median_ms if base else None)  # one at most
            hog = self._memory_hog(turn.free_before)
            self._early_refill(turn, handle, hog)
            if session.defer_checks and not hog:
                with turn.timed("finish"):
                    if not turn.refilled:  # else stopped already (_early_refill)
                        handle.stop()  # no code of its process runs from here; its teardown overlaps them
                    session.finish(result, strict)
            self._note_counted(turn, session)
            turn.details["verified_pool"] = session.pool_record()
            turn.details["wall_path"] = session.wall_path
            turn.clocks.append(sm_clock_mhz(self.device))
            # the checks after the worker's stop (``finish_verify``) are not the timing's
            prefix = {k: "" if k.startswith("finish") else "time_" for k in result.trusted_s}
            turn.walls.update({f"{prefix[k]}{k}": round(v, 4) for k, v in result.trusted_s.items()})
            if result.hw_counts is not None:  # the runner's own word on its phases: diagnostic only
                turn.walls.update(runner_phases(result.hw_counts.host_ms))
            if hog or (strict and result.failure is not None):
                return self._failed(turn, hog)
        except StepBudgetExceeded as exc:
            return exceeded_verdict(exc, turn.stage, self.environment, **turn.extra())
        except WorkerError as exc:
            return worker_error_verdict(
                exc, turn.stage, self.settings.call_timeout_s, self.environment, **turn.extra()
            )
        except CandidateFault as exc:
            return fault_verdict(
                exc.error,
                exc.cuda_error,
                exc.stage if turn.stage is Stage.RUN else turn.stage,
                self.environment,
                handle.log_tail(),
                loading=turn.stage is Stage.RUN,
                **turn.extra(),
            )
        except torch.OutOfMemoryError as exc:
            return GpuVerdict(
                status=Status.RUNTIME_ERROR,
                stage=turn.stage,
                environment=self.environment,
                message=f"GPU memory ran out while the candidate's process held memory: {exc}"[:800],
                **turn.extra(),
            )
        finally:
            with turn.timed("discard"):
                handle.discard()
        return self._timed_verdict(turn)

    def _settle_late(self, turn: Turn) -> None:
        """Wait for the starting spares before the first timed call, where ``_session`` did not.

        Only with ``late_spare_settle`` and a reused calibration (``spares_pending``): the wait is the
        turn's ``settle_late`` wall, and it joins the ``spares`` wall. It is the trusted side's, not the
        subject's: the step's budget clock leaves it out (``StepClock.exclude``).
        """
        if not self.spares_pending:
            return
        self.spares_pending = False
        with turn.timed("settle_late"):
            self._settle_spares()
        if turn.session is not None and turn.session.clock is not None:
            turn.session.clock.exclude(self.spares_wait_s)
        turn.walls["spares"] = round(turn.walls.get("spares", 0.0) + self.spares_wait_s, 4)

    def _early_refill(self, turn: Turn, handle: WorkerHandle, hog: str) -> None:
        """Replace the spares now, the subject's last memory check made and clean (``early_refill``).

        Its process group is SIGKILLed first, so none of its code runs beside the spares' warm-up (a
        runner left alive could disturb a spare's counter query and cost the next subject its counted
        call); the spares start while the group is reaped (``discard``). A hog's memory (or a crashed or
        hung runner's) could starve them: those turns refill only once the runner is gone
        (``_run_candidate``).
        """
        if self.quiet_spares and self.settings.early_refill and not hog:
            handle.stop()
            self._refill()
            turn.refilled = True

    def _note_counted(self, turn: Turn, session: Session) -> None:
        """Record where the counted call went; learn that counting must happen outside activity trials."""
        counted = turn.result.counted
        if counted is None:
            return
        turn.details["counted_call"] = counted.record()
        if session.count_outside and not self.count_outside:
            self.count_outside = session.count_outside

    def _counts(self, turn: Turn) -> bool:
        """Whether the subject gets the in-band counted call (``TargetMode.EXECUTED``, a target opcode)."""
        cand = turn.candidate
        return cand is not None and cand.static_target and self.settings.target_mode is TargetMode.EXECUTED

    def _hw_possible(self) -> bool:
        """Whether any subject here may get the hardware-counted call (``_hw_meant`` but the subject).

        ``hw_counters`` on, the executed target mode, and a target family whose work those counters
        measure (wgmma and TMA: sm_90a; on sm_100a they would deny every tcgen05 kernel its credit, a
        reviewer's find). A spare runner then queries the counter availability at its attach
        (``Attach.hw_prepare``: ~0.17 s that the sandbox step of a GPU turn paid before).
        """
        hopper = self.arch is not None and self.arch.is_target_opcode("HGMMA")
        executed = self.settings.target_mode is TargetMode.EXECUTED
        return self.settings.hw_counters and executed and hopper

    def _hw_meant(self, turn: Turn) -> bool:
        """Whether the subject is meant for the hardware-counted call (``_hw_possible``, a counted one)."""
        return self._hw_possible() and self._counts(turn)

    def _hw_counts(self, turn: Turn, handle: WorkerHandle) -> bool:
        """Whether the subject also gets the hardware-counted call (a native runner, ``_hw_meant``)."""
        return self._hw_meant(turn) and isinstance(handle, NativeHandle)

    def _hw_missing(self, turn: Turn) -> str:
        """Why a subject meant for the hardware-counted call got none ('' if it got one or needs none).

        With the runners wanted (the default) and ``hw_counters`` on, a candidate that ran in the Python
        worker anyway (no runner could be built or set up, an arena without guard pages) reads no
        hardware counters, so its target credit is withheld as if the counters had failed (``with_hw``):
        otherwise every way back to the worker would pay a kernel that does its target work only when
        its instructions are patched (``instrumented_wgmma``). ``PTXGYM_CANDIDATE_PROCESS=python``
        chooses the worker, and with it the SASS-counted call alone (``trusted/proofs.py``).
        """
        if not (self._hw_meant(turn) and self.native.wanted) or turn.result.hw_counted is not None:
            return ""
        process = turn.details.get("candidate_process") or "the Python worker"
        return (
            f"no hardware-counted call: the subject ran in {process}, and only the native runner reads "
            "hardware counters"
        )

    def _memcheck_due(self, turn: Turn) -> bool:
        cand = turn.candidate
        first = cand is not None and cand.first_correct_in_episode
        return cand is not None and memcheck_due(self.settings.memcheck, first, turn.arena.guard_pages)

    def _budget(self, turn: Turn) -> StepBudget:
        """The step's wall budget (``budget.py``): from the baseline latency and the calls to make."""
        cand = turn.candidate
        memcheck = self._memcheck_due(turn)
        measured = self.settings.target_mode in (TargetMode.EXECUTED, TargetMode.NCU)
        target = cand is not None and measured and cand.static_target
        stats = turn.baseline.stats
        return StepBudget.for_step(
            self.settings,
            stats.median_ms if stats else None,
            turn.task.floor_ms(self.facts.name),
            turn.arena.reference_s,
            proofs=memcheck or target,
        )

    def _proof_timeout(self, turn: Turn, limit_s: float) -> float:
        """A proof's time limit: its own setting, or what is left of the step's budget if less."""
        clock = turn.session.clock if turn.session is not None else None
        return limit_s if clock is None else max(1.0, min(limit_s, clock.total_left()))

    def _free_bytes(self) -> int:
        """Device memory free or held in this (trusted) process's cache: what other processes leave.

        The trusted side allocates during a session (fresh input values, references), so its own cache
        is counted as free: a drop is then the candidate's process alone.
        """
        import torch

        return torch.cuda.mem_get_info(self.device)[0] + torch.cuda.memory_reserved(self.device)

    def _memory_hog(self, free_before: int) -> str:
        used = (free_before - self._free_bytes()) / 2**30
        if used > self.settings.max_candidate_gpu_gb:
            return (
                f"the candidate's process holds {used:.1f} GiB of GPU memory, over the "
                f"{self.settings.max_candidate_gpu_gb:g} GiB limit"
            )
        return ""

    def _failed(self, turn: Turn, hog: str) -> GpuVerdict:
        result, extra = turn.result, turn.extra()
        failed = result.failure.check if result.failure else None
        info = correctness_info(
            result.checks, turn.arena.seeds, result.calls_checked, turn.task.tolerance, failed
        )
        if hog or result.failure is None:
            return GpuVerdict(
                status=Status.RUNTIME_ERROR,
                stage=Stage.RUN,
                message=hog or "the candidate failed without a recorded reason",
                correctness=info,
                environment=self.environment,
                **extra,
            )
        f = result.failure
        return GpuVerdict(
            status=f.status,
            stage=f.stage,
            message=f.message,
            correctness=info,
            environment=self.environment,
            **extra,
        )

    def _timed_verdict(self, turn: Turn) -> GpuVerdict:
        task, baseline, result, clocks = turn.task, turn.baseline, turn.result, turn.clocks
        extra = turn.extra()
        info = correctness_info(result.checks, turn.arena.seeds, result.calls_checked, task.tolerance)
        floor = task.floor_ms(self.facts.name)
        stats = latency_stats(result.trials) if result.trials else None
        speedup = None
        if stats and baseline.stats and stats.median_ms > 0:
            speedup = baseline.stats.median_ms / stats.median_ms
        timing = TimingInfo(
            backend=self.backend or EVENTS,
            candidate=stats,
            baseline=baseline.stats,
            baseline_name=baseline.name,
            speedup=speedup,
            floor_ms=floor,
            sol_fraction=(floor / stats.median_ms) if stats else None,
            l2_flush_bytes=self.flush_bytes,
            sm_clock_mhz_before=clocks[0],
            sm_clock_mhz_after=clocks[-1] if len(clocks) > 1 else None,
            shortened=result.shortened or None,
        )
        cc = result.crosscheck
        extra["details"].update(
            {
                "crosscheck": cc.__dict__ if cc else None,
                "wall_parts": wall_parts(result.wall_parts) or None,
                "retimed": result.retimed or None,
                "missing_spans": result.span_gaps or None,
                "trial_ends": result.trial_ends or None,
                "cores": self.cores.record(),
                "baseline_source": baseline.source,
                "baseline_correct": baseline.correct,
                "baseline_fallback": baseline.fallback or None,
                "cupti_error": self.cupti_error,
            }
        )

        def unpaid(status: Status, message: str) -> GpuVerdict:
            """A verdict at the time stage whose speed is not paid (no speedup)."""
            return GpuVerdict(
                status=status,
                stage=Stage.TIME,
                message=message,
                correctness=info,
                timing=timing.model_copy(update={"speedup": None}),
                environment=self.environment,
                **extra,
            )

        anomaly = self._anomaly(stats, floor, result)
        if anomaly or stats is None:
            return unpaid(Status.TIMING_ANOMALY, anomaly)
        alone = turn.hw_alone and result.sass_rows is None and not result.count_error
        if alone and result.hw_counted is not None:
            self._hw_only(turn, result)
        elif result.sass_rows is not None or result.count_error or result.counted is not None:
            # a counted call made that brought neither rows nor an error is a count error (the reply is
            # the candidate's process's: a reviewer forged one to reach the counters-only path)
            arch = turn.task.arch_spec  # the task's families, as the SASS census and Nsight Compute judge
            record = counted_target(turn.candidate, result, arch, turn.task.flops)
            turn.details["in_band_target"] = record
            if self.arch is not None:
                counted, why = in_band_info(record, arch, _timed_census(turn))
                missing, hw = self._hw_missing(turn), None
                if result.hw_counted is not None:
                    hw = hw_record(result, record, turn.task.flops, turn.task.min_bytes)
                    turn.details["hw_counters"] = {**hw, "call": result.hw_counted.record()}
                elif missing:
                    hw = turn.details["hw_counters"] = {"error": missing}
                counted = with_hw(counted, hw, arch) if counted is not None and hw is not None else counted
                turn.in_band = replace(turn.in_band, target=counted, note=why, hw=hw)
        census, proved = in_band_census(result, turn.candidate, self.backend == CUPTI, turn.details)
        if census:
            return unpaid(Status.FOREIGN_KERNEL, census)
        note = "" if baseline.stats else f"; no baseline latency ({baseline.message})"
        if baseline.stats and baseline.correct is False:
            note += f"; the baseline itself misses the task tolerance ({baseline.message[:200]})"
        if baseline.fallback:
            note += f"; baseline {baseline.name}: {baseline.fallback[:240]}"
        if result.shortened:
            note += f"; {result.shortened}"
        if result.retimed:
            note += f"; timed again after its first timing {result.retimed[:200]}"
        message = (
            f"correct on {info.calls_checked} checked calls; median {stats.median_ms:.4f} ms"
            + (f", {speedup:.3f}x {baseline.name}" if speedup else "")
            + note
        )
        return GpuVerdict(
            status=Status.PASSED,
            stage=Stage.DONE,
            message=message,
            correctness=info,
            timing=timing,
            evidence=Evidence(kernel_census=[Proof.CUPTI_IN_BAND] if proved else []),
            environment=self.environment,
            **extra,
        )

    def _hw_alone(self, turn: Turn) -> bool:
        """Whether the hardware-counted call decides alone, no SASS-patched call (``sass_count_with_hw``).

        By default where the counters can size the module's work (``sass_join.counters_suffice``: one MMA
        tile shape, no guarded MMA, no bulk copy) and a census ties every kernel to its module (CUPTI
        spans, the module census, the counted call inside the activity trial: outside it a module loaded
        from memory could run only there and count); the census must also vouch for the credit
        (``sass_join.hw_census``).
        """
        choice = self.settings.sass_count_with_hw
        if choice is not None:
            return not choice
        cand, s = turn.candidate, self.settings
        census = self.backend == CUPTI and s.module_census and s.hw_count_in_trial
        if cand is None or self.arch is None or not census:
            return False
        return counters_suffice(cand, turn.task.arch_spec)

    def _hw_only(self, turn: Turn, result: SessionResult) -> None:
        """The in-band target from the hardware-counted call alone (``sass_count_with_hw`` off)."""
        if turn.candidate is None or self.arch is None or result.hw_counted is None:
            return
        task = turn.task
        info, record = hw_only_target(
            turn.candidate, result, task.arch_spec, task.flops, task.min_bytes, _timed_census(turn)
        )
        turn.details["hw_counters"] = {**record, "call": result.hw_counted.record(), "alone": True}
        note = "" if info is not None else f"hardware counters: {record['error']}"
        hw = None if info is not None else {"error": record["error"]}  # Nsight Compute is held to it
        turn.in_band = replace(
            turn.in_band, target=info, note=note, flops_lower_bound=info is not None, hw=hw
        )

    def _anomaly(self, stats, floor: float, result: SessionResult) -> str:
        if result.missing_spans:
            return (
                f"no GPU time for {result.missing_spans} timed call(s) (no activity recorded, or a figure "
                "that is no latency): the GPU timer was disabled, bypassed or forged"
            )
        if stats is None:
            return "no timed call produced a latency"
        if stats.median_ms < floor * self.settings.floor_slack:
            return (
                f"median latency {stats.median_ms:.4f} ms is below the physical floor {floor:.4f} ms of this "
                "workload on this GPU: not a record, a measurement the evaluator cannot trust"
            )
        if result.crosscheck is not None and not result.crosscheck.ok:
            return result.crosscheck.message
        return ""

    def _post_checks(self, turn: Turn, verdict: GpuVerdict, gated: bool = True) -> GpuVerdict:
        """Memory check, then the executed-instruction proof (``proofs.py``): they can only undo PASSED.

        Runs after the GPU turn (``_stage_proofs`` fixed their inputs and time limits); each tool run
        takes the GPU again for its GPU phase only, ahead of new callers (``GpuQueue.turn(resume=True)``).
        Not ``gated``: inside the turn, nothing taken again.
        """
        assert turn.candidate is not None, "proofs run for candidates only"
        assert turn.proof_inputs is not None and turn.proof_settings is not None, "staged in the turn"
        args = (turn.proof_inputs, self.device, turn.proof_settings, self.scratch, self.sandbox_mode)
        proofs, walls = run_proofs(
            turn.task,
            turn.candidate,
            *args,
            memcheck_due=turn.proof_memcheck,
            in_band=turn.in_band,
            gpu=self._proof_gpu if gated else None,
        )
        turn.walls.update(walls)
        return with_proofs(verdict, proofs)

    @contextlib.contextmanager
    def _proof_gpu(self) -> Iterator[None]:
        """A proof tool's GPU phase: the GPU taken again, ahead of new callers, with the spares settled.

        A spare started after the last turn may still be making its counter-availability query
        (``Attach.hw_prepare``); beside Nsight Compute's profiling session it could fail or come back
        short, and a short image would cost the next subject its hardware-counted call (a reviewer's
        find).
        """
        with self.queue.turn(resume=True):
            if self.quiet_spares:
                self._settle_spares()
            yield

    def _infra(self, message: str, tb: str, candidate_ran: bool = False) -> GpuVerdict:
        """An evaluator fault; ``candidate_ran``: after the candidate's code was loaded (may be its doing)."""
        return GpuVerdict(
            status=Status.INFRA_ERROR,
            stage=Stage.RUN,
            environment=self.environment,
            message=(
                f"evaluator fault after the candidate's code was loaded (it may be its doing): {message}"
                if candidate_ran
                else f"evaluator fault (not the candidate's): {message}"
            )[:1500],
            log=truncate(tb, 3000),
            candidate_ran=candidate_ran,
        )


def _timed_census(turn: Turn) -> Census | None:
    """The in-band census of the turn's timed calls, as ``sass_join`` reads it (None: none was taken)."""
    result = turn.result
    if not result.census_trials:
        return None
    functions = frozenset(turn.candidate.kernels or ()) if turn.candidate is not None else frozenset()
    return Census(
        result.kernels,
        result.census_calls,
        result.census_error,
        module_functions=functions,
        counted_activities=result.hw_window,
    )
