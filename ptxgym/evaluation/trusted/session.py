"""One subject (a candidate or the baseline) run in one worker: calibrate, check, time.

The trusted side drives every call: it gives the input set new values and poisons its outputs (own CUDA
context, synchronised), sends the call, measures the wall time until the reply, checks the guard regions
around every buffer (``guards.py``: a write outside the buffers is MEMORY_ERROR), and verifies the
outputs itself. Correctness calls are all verified (sign flips of the seeded sets, references known);
timed calls rotate through the input sets, each with fresh values (a new draw in the same buffers), and
a random subset (unknown to the worker) is verified against the reference run for those values, after
the trial (every timed call's outputs are copied alike, ``Arena.hold``: a check between calls would
lengthen the gap before the next call and tell the worker which calls were verified); in a
session given the arena's verified pool (``use_pool``), each verified call takes a pool entry instead
(a secret draw whose reference was run with the arena, never two calls of the session on one entry,
``verified_pool.py``), both counted calls included, except ``pool_new_draws_per_trial`` of each trial's
(secret places among them: ``_new_draws``). A verified call on a new draw is checked on a secret sample of
the task's independent indices (``sampled.py``); one per timing, at a secret place among them
(``_whole_place``), is also checked against its whole reference once the timing's last trial has ended.
With ``defer_checks`` (``EvalSettings.defer_final_checks``) the last trial's held calls, that whole check
and the input check wait for ``finish``, which the evaluator calls once it has stopped the worker: none
of them needs it, and its process's teardown then overlaps their references.

The counted call (``Call.count``: executions per SASS instruction, the in-band target proof of
``proofs.py``) takes a secret position among the timed calls: ``Session.timing(count=True)`` draws one
slot, uniformly over every trial's timed region made one call longer (``trials x (iterations + 1)``
slots), from the session's RNG, the same secret draw that picks the verified timed calls. That call gets
its slot's set and fresh values like its neighbours, is always verified (a wrong result there is a wrong
result of a timed call, in the same words), and is not timed: its latency (slowed by the patching) is no
sample, so the timed samples stay ``trials x iterations`` and the step makes as many calls as before,
when the counted call was one more call after the last trial (one call added, not one sample replaced:
the samples and the call count a candidate could observe both stay what they were). The local
evaluator counts it outside the activity trial (``local.COUNT_OUTSIDE_TRIALS``: on the H200 CUPTI's SASS
metrics read zero for every instruction inside one): the trial ends before it and a new one begins after
it, and the functions its rows name join the census (``CountedCall.outside`` says why, in
``details["counted_call"]``). A session told to try inside (``count_outside`` empty) keeps the call in
the trial (its window in the census, no span taken from it) and, on a count error or all-zero counts
there, splits the trial around a second counted call on fresh values of the same slot, then counts
outside in later steps.

The hardware-counted call (``Call.hw_count``: CUPTI's range profiler in the native runner, one pass, no
patching; ``target_work.hw_share``) is a second extra call, asked with ``Session.timing(hw_count=True)``:
its slot is drawn like the counted call's, from the same secret RNG, among the same trial's timed region
(the two never share a place; a trial holding both is two calls longer). It gets fresh values, is always
verified, is not timed, and by default runs inside the activity trial (``hw_count_in_trial``: its
window, around the call alone, joins the census; on an H100 the two run together for the five experts,
2026-12-06). Off, it runs outside (the trial is closed before it and begun again after it), and its
kernels are in no census. Being unpatched, it runs at the candidate's own speed: a kernel that does the
target's work only when it notices the slow, patched counted call shows none in it. Beside a SASS-counted
call its counters can only lower the MMA share (``target_work.combined``); without one (a module the
counters can size: ``LocalGpuEvaluator._hw_alone``) they decide alone, and the census must vouch for them
(``sass_join.hw_census``). Neither extra call is secret from the candidate: the command that asks for it
says so (``Call.count``, ``Call.hw_count``) in the process the candidate shares, and so does CUPTI's state
there. Their place is drawn so that a worker cannot prepare for them in advance; what they report is the
candidate process's word, which the secret Nsight Compute draw checks from outside (MMA work; a TMA
share from the counters can lower the work verdict there, never raise it: ``sass_join.counts_agree``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ptxgym.evaluation.child_errors import WorkerError, WorkerTimeout
from ptxgym.evaluation.compare import SetCheck
from ptxgym.evaluation.protocol import (
    CALL_PHASES,
    ApplySandbox,
    AttachResult,
    Call,
    CallResult,
    Command,
    HwCounts,
    Load,
    LoadedModule,
    Reply,
    SandboxReport,
    SassRow,
    Spans,
    TrialBegin,
    TrialEnd,
    check_mode,
)
from ptxgym.evaluation.trusted.arena import Arena, Held, ipc_pickle
from ptxgym.evaluation.trusted.base import PROBE_WARMUP, EvalSettings
from ptxgym.evaluation.trusted.budget import StepBudget, StepBudgetExceeded, StepClock
from ptxgym.evaluation.trusted.guards import GuardBreach
from ptxgym.evaluation.trusted.pool import WorkerHandle
from ptxgym.evaluation.trusted.timing import (
    CUPTI,
    Calibration,
    CrossCheck,
    calibrate,
    call_latency,
    cross_check,
    cutoff_applies,
    iqr,
    median_se,
    slow_cutoff,
)
from ptxgym.evaluation.trusted.verified_pool import PoolDraws, PoolEntry
from ptxgym.records.feedback import Stage, Status

log = logging.getLogger(__name__)

MAX_CENSUS_NAMES = 256
"""Kernel names the census keeps per trial (an honest module has a handful)."""
MAX_CENSUS_MODULES = 4096
"""Loaded modules the census keeps per subject."""


class CandidateFault(Exception):
    """The worker answered, but the candidate's call failed (exception, sticky CUDA error, lost context)."""

    def __init__(self, error: str, cuda_error: str, stage: Stage) -> None:
        super().__init__(error)
        self.error, self.cuda_error, self.stage = error, cuda_error, stage


@dataclass
class Failure:
    """A verdict-deciding failure found by the trusted side."""

    status: Status
    stage: Stage
    message: str
    check: SetCheck | None = None


@dataclass
class TimedCall:
    """One timed call as both sides saw it."""

    seq: int
    wall_ms: float
    call: CallResult
    span_ms: float | None = None
    latency_ms: float | None = None
    request_ms: float | None = None
    """The part of ``wall_ms`` up to the reply (the rest: the trusted copy of the outputs and its sync)."""


@dataclass
class CountedCall:
    """Where the counted call of a step went and how it ran (``details["counted_call"]``)."""

    trial: int
    """The trial it went into (0-based)."""
    slot: int
    """Its position among that trial's timed-region calls (0-based; the region is one call longer)."""
    call: int = 0
    """The subject's call number in the step (1-based; correctness calls first)."""
    in_trial: bool = True
    """Whether it ran inside the activity trial, its window in the census; False: between two trials."""
    outside: str = ""
    """Why it ran outside the activity trial ("" when inside): the in-trial count error, or learnt."""

    def record(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


@dataclass
class SessionResult:
    """Everything one subject's run produced."""

    checks: list[SetCheck] = field(default_factory=list)
    calls_checked: int = 0
    failure: Failure | None = None
    trials: list[list[float]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    wall_parts: list[TimedCall] = field(default_factory=list)
    """The timed calls behind ``walls`` (``wall_parts``: where their walls went; diagnostic)."""
    unspanned_walls: list[float] = field(default_factory=list)
    """The walls of the timed calls that came back without a GPU time (``missing_spans``): the evaluator's
    own clock, which bounds what they took (``Session.retime`` compares timings with them)."""
    crosscheck: CrossCheck | None = None
    missing_spans: int = 0
    span_gaps: list[dict] = field(default_factory=list)
    """Each activity trial (or part of one, ``Session._split``) that left timed calls without a GPU time:
    what began it (``after``), its timed calls, those without a span, and the GPU activities CUPTI put in
    their windows (diagnostic: ``details["missing_spans"]``)."""
    trial_ends: dict[str, int] = field(default_factory=dict)
    """Over the activity trials' ends: ``trials``; ``waited``, those whose records took more than one
    default flush (``cupti_spans.settle_flush``); ``incomplete``, records handed back without timestamps;
    ``ran_in``, kernel records in a window only by running into it, ``launched_in``, only by their launch,
    and ``launch_known``, kernel records whose launch came back (``cupti_spans.Records``) (diagnostic:
    ``details["trial_ends"]``)."""
    kernels: dict[str, int] = field(default_factory=dict)
    """In-band census: kernel launches by name inside the timed windows (CUPTI backend only)."""
    modules: list[LoadedModule] = field(default_factory=list)
    """In-band census: modules the worker's driver loaded, as reported at each trial's end."""
    census_trials: int = 0
    """Trials whose end brought a census report (0: no in-band census was taken)."""
    census_calls: int = 0
    """Timed calls whose windows those reports cover and in which CUPTI saw GPU activity."""
    hw_window: tuple[int, int] | None = None
    """GPU activities in the hardware-counted call's window and the most in a timed call's window of its
    trial (the call inside the activity trial; ``sass_join.hw_census``)."""
    census_error: str = ""
    sass_rows: list[SassRow] | None = None
    """The counted call's rows (``Session.timing(count=True)``; None: not counted)."""
    counted: CountedCall | None = None
    """Where the counted call went (None: none was made)."""
    count_error: str = ""
    hw_counts: HwCounts | None = None
    """The hardware-counted call's counters (``Session.timing(hw_count=True)``; None: none usable)."""
    hw_count_error: str = ""
    """Why the hardware-counted call has no counters ("" when it has them or none was made)."""
    hw_counted: CountedCall | None = None
    """Where the hardware-counted call went (None: none was made)."""
    shortened: str = ""
    """Why the timing stopped after the first trial (``timing.slow_cutoff``); "" when timed in full."""
    retimed: str = ""
    """The wall cross-check an earlier timing failed by its allowance, when ``Session.retime`` timed the
    subject again ("" when timed once)."""
    pool: PoolDraws | None = None
    """This subject's draws from the arena's verified pool (None: its verified calls drew new values)."""
    trusted_s: dict[str, float] = field(default_factory=dict)
    """Wall seconds of the trusted side's own work inside the trials: ``inputs`` (fresh values and
    poisoned outputs, ``Arena.prepare``: launching them), ``inputs_wait`` (waiting for that GPU work before
    a call is sent), ``verify`` (reference runs and comparisons) and ``guards``; and the worker's part:
    ``calls`` (the round trips of the calls of the trials: the L2 flush, the call, the worker's syncs),
    ``count`` (the counted call's round trip: the worker's patched call) and ``hw_count``; ``hold``: the
    copies of the outputs of a checked trial's calls (``Arena.hold``)."""

    def spend(self, what: str, since: float) -> None:
        """Add the wall seconds since ``since`` (a ``perf_counter`` reading) to ``trusted_s[what]``."""
        self.trusted_s[what] = self.trusted_s.get(what, 0.0) + time.perf_counter() - since


class Session:
    """Runs one subject in one worker against one arena."""

    def __init__(
        self,
        worker: WorkerHandle,
        arena: Arena,
        settings: EvalSettings,
        backend: str,
        seed: int,
        timeout_s: float,
    ) -> None:
        import torch

        self.torch = torch
        self.worker, self.arena, self.settings, self.backend = worker, arena, settings, backend
        self.timeout_s = timeout_s
        self.generator = torch.Generator(device=arena.device).manual_seed(seed)
        self.rng = random.Random(seed)
        self.cal: Calibration | None = None
        self.cal_matched: Calibration | None = None
        """The calibration at a subject's duration (``calibrate(match_ms=...)``), if made."""
        self.calibration_source = "measured in this worker"
        """Or an earlier worker's, reused (``use_calibration``: its note)."""
        self.flush_bytes = 0
        """The worker's L2-flush buffer (from the attach reply): the busy no-op's memsets write it."""
        self.sandbox_report: SandboxReport | None = None
        self.clock: StepClock | None = None
        self.calls = 0
        """Calls of the loaded subject so far (reset by ``load``)."""
        self.count_outside: str = ""
        """Why the counted call runs outside the activity trial from the start ("": it runs inside)."""
        self._windowed: tuple[int, list[SassRow]] | None = None
        """The counted call inside the open activity trial: its command number and rows (``_close``)."""
        self._hw_seq: int | None = None
        """The hardware-counted call's sequence number while its trial is open (``_close``)."""
        self._segment_after = "the trial's start"
        """What began the open activity trial (``SessionResult.span_gaps``)."""
        self._pool_rng = random.Random(f"verified-pool:{seed}")
        """The secret order of this session's pool entries (apart from ``rng``: its draws are unchanged)."""
        self.pool_off = "not enabled for this session"
        """Why verified calls draw new values ("" once ``use_pool`` gave this session the arena's pool)."""
        self.slack_scale = 1.0
        """Of the wall allowance's slack, for the timing under way (``RETIME_SLACK`` in ``retime``)."""
        self.draws: PoolDraws | None = None
        """This session's draws from the pool (one per session: no entry serves two of its calls)."""
        self.new_draws = 0
        """Verified calls that drew new values although the pool served the session (``_new_draws``)."""
        self._whole_rng = random.Random(f"whole-check:{seed}")
        """Which new draw of a timing gets its whole reference (``_whole_place``; apart from ``rng``)."""
        self._whole_due: Held | None = None
        """That call's held outputs, checked whole after the timing's last trial (``_check_whole``)."""
        self.whole_checks = 0
        """Verified calls checked against their whole reference after sampled ones (``_check_whole``)."""
        self.defer_checks = False
        """Leave a timing's last checks to ``finish`` (``EvalSettings.defer_final_checks``)."""
        self._deferred: list[Held] = []
        """The last trial's held verified calls, left to ``finish``."""
        self._finish_due = False
        """A timing ended with its whole check and input check left to ``finish``."""
        self.wall_path = ""
        """How the calls' trusted walls were read: "native" (``exchange.py``) or "python: <why>"."""

    # ------------------------------------------------------------------------------------ plumbing

    def start_clock(self, budget: StepBudget) -> StepClock:
        """Start the step's wall budget (``budget.py``).

        From now on every command waits at most what is left of it; a step past it raises
        ``StepBudgetExceeded``.
        """
        self.clock = StepClock(budget)
        return self.clock

    def _request(self, cmd: Command, stage: Stage, pickler=None) -> Reply:
        return self._asked(lambda timeout: self.worker.request(cmd, timeout, pickler), stage)

    def _asked(self, ask: Callable[[float], Reply], stage: Stage) -> Reply:
        """``ask(timeout)``'s reply, the timeout cut to the step's budget; a failed reply is a fault."""
        timeout = self.timeout_s
        if self.clock is not None:
            left = self.clock.run_left()
            if left <= 0:
                raise StepBudgetExceeded(self.clock, self.worker.log_tail())
            timeout = min(timeout, left)
        try:
            reply = ask(timeout)
        except WorkerTimeout as exc:
            if self.clock is not None and timeout < self.timeout_s:
                raise StepBudgetExceeded(self.clock, exc.log_tail) from exc
            raise
        if not reply.ok:
            raise CandidateFault(reply.error, reply.cuda_error, stage)
        return reply

    def attach(self, flush_bytes: int, cupti: bool, module_census: bool = False) -> AttachResult:
        """Map the arena into the worker (skipped if the worker was primed with it)."""
        primed = self.worker.primed
        found = primed.get("reply")
        if primed.get("arena") == self.arena.id and isinstance(found, Reply):
            reply = found
        else:
            cmd = self.arena.attach_command(flush_bytes, cupti, module_census)
            reply = self.worker.request(cmd, self.timeout_s, ipc_pickle, self.arena.attach_fds())
        if not reply.ok:
            raise CandidateFault(reply.error, reply.cuda_error, Stage.RUN)
        if reply.attach is None:
            raise CandidateFault("the worker acknowledged the attach command without a result", "", Stage.RUN)
        self.worker.primed = {"arena": self.arena.id, "reply": reply}
        self.flush_bytes = reply.attach.flush_bytes
        return reply.attach

    def sandbox(self, mode: str, hw_prepare: bool = False) -> SandboxReport:
        """Apply the host sandbox in the worker (mode on, strict or off); before the candidate is loaded.

        The report arrives before any candidate code runs in the worker, so it is the worker's own word.
        ``hw_prepare``: ``ApplySandbox.hw_prepare``.
        """
        cmd = ApplySandbox(mode=check_mode(mode), scratch=str(self.worker.scratch), hw_prepare=hw_prepare)
        reply = self._request(cmd, Stage.RUN)
        if reply.sandbox is None:
            raise CandidateFault(
                "the worker acknowledged the sandbox command without a report", "", Stage.RUN
            )
        self.sandbox_report = reply.sandbox
        return reply.sandbox

    def load(self, cmd: Load) -> None:
        """Load the subject: the candidate's shared object, a library baseline or the no-op."""
        self._request(cmd, Stage.RUN)
        self.calls = 0

    def use_pool(self) -> None:
        """Serve this session's verified timed calls from the arena's pool (``verified_pool.py``).

        Only for a subject that cannot carry what it saw to a later session (that module's "Reuse"):
        the caller decides. Renews the entries that served their sessions first (before the load).
        """
        pool = self.arena.pool
        if not pool.active:
            self.pool_off = pool.describe()
            return
        self.arena.renew_pool()
        self.draws = PoolDraws(pool, self._pool_rng)
        self.pool_off = ""

    def pool_record(self) -> dict:
        """How this session's verified calls were served, for a verdict's ``details["verified_pool"]``."""
        record: dict = {
            "arena": self.arena.pool.describe(),
            "sampling": self.arena.sampling,
            "fused_inputs": self.arena.fused,
            "input_check_share": self.arena.input_check_share if self.arena.fused.startswith("on") else 1.0,
        }
        if self.draws is None:
            record["session"] = f"new draws: {self.pool_off}"
        else:
            record.update(self.draws.record(), session="pool", new_draws=self.new_draws)
        record["whole_checks"] = self.whole_checks
        return record

    def _entry(self, index: int, result: SessionResult) -> PoolEntry | None:
        """A pool entry for a verified timed call on set ``index`` (None: a new draw serves it)."""
        if self.draws is None or not self.arena.fresh:
            return None
        result.pool = self.draws
        return self.draws.take(index)

    def _new_draws(self, verify: set[int]) -> frozenset[int]:
        """The verified positions of a trial that take no pool entry (``pool_new_draws_per_trial``).

        Drawn from the pool's own secret RNG; before the call they are prepared like every other call.
        """
        if self.draws is None:
            return frozenset()
        k = min(self.settings.pool_new_draws_per_trial, len(verify))
        return frozenset(self._pool_rng.sample(sorted(verify), k))

    def _whole_place(self, verify: set[int], new_draws: frozenset[int]) -> int | None:
        """The position whose new draw is checked whole while others are sampled (``sampled.py``).

        One per timing, in a secret trial (``timing``), among its held verified positions that draw new
        values: the pool's ``new_draws`` (every verified one where there are none: one served by an entry
        is checked whole anyway), or without the pool every verified one. Drawn in this process from its
        own RNG, so a kernel that skips work on every timed call fails it. Its check at the trial's end
        is a sampled one like the others (the gap a whole reference makes there would tell the worker
        which trial had it); its whole check comes after the last trial (``_check_whole``). Never a
        counted call: its check runs right after it, so it has no such cover.
        """
        if self.arena.sample_share >= 1:
            return None  # every check is whole already
        places = sorted(new_draws if self.draws is not None and new_draws else verify)
        return self._whole_rng.choice(places) if places else None

    def _check_whole(self, result: SessionResult) -> bool:
        """The timing's whole check (``_whole_place``), after its last trial; False if it failed."""
        held, self._whole_due = self._whole_due, None
        if held is None:
            return True
        self.whole_checks += 1
        return self._verified(held.index, result, Stage.TIME, held, again=True)

    def _sync(self) -> None:
        """Wait for the trusted side's own GPU work (prepare, poison) before the worker runs."""
        if self.arena.device.type == "cuda":
            self.torch.cuda.synchronize(self.arena.device)

    def _call(
        self, index: int, timed: bool, result: SessionResult | None = None
    ) -> tuple[TimedCall, dict[str, Any]]:
        """One call on set ``index``, once the trusted side's own GPU work is done; and its output copies.

        The call's wall runs from the command to the end of the trusted side's copy of its outputs
        (``Arena.copy_outputs``), not to the reply: a reply sent early by another thread of the worker
        (a reviewer's find) would otherwise make the wall, and so the cross-check, bound nothing.
        ``result``: that wait and the call's round trip go to its ``trusted_s`` (``inputs_wait``, ``calls``).
        """
        cmd = Call(set=index, timed=timed, flush=True)
        slots = self._native_slots(index)
        if slots is None:
            t0 = self._inputs_ready(result)
            reply = self._request(cmd, Stage.RUN)
            request_ms = (time.perf_counter() - t0) * 1e3
            outputs = self.arena.copy_outputs(index)
            self._sync()
            wall = (time.perf_counter() - t0) * 1e3
        else:
            # everything but the exchange before the inputs' synchronisation: from their readiness on,
            # the command is the next thing (a reviewer's find: the slots and the frame made a gap)
            outputs, copies = slots
            frame = self.worker.timed_frame(cmd, self.timeout_s)
            cuda = self.arena.device.type == "cuda"
            # the copies use this thread's context, the arena device's
            with self.torch.cuda.device(self.arena.device) if cuda else contextlib.nullcontext():
                stream = self.torch.cuda.current_stream(self.arena.device).cuda_stream if cuda else 0
                walls: list[float] = []

                def ask(timeout: float) -> Reply:
                    reply, request_ms, wall_ms = self.worker.timed_exchange(frame, timeout, copies, stream)
                    walls.extend((request_ms, wall_ms))
                    return reply

                t0 = self._inputs_ready(result)
                reply = self._asked(ask, Stage.RUN)
            request_ms, wall = walls
        if result is not None:
            result.spend("calls", t0)
        self.calls += 1
        if reply.call is None:
            raise CandidateFault("the worker acknowledged a call without its timings", "", Stage.RUN)
        record = TimedCall(seq=self.worker.seq, wall_ms=wall, call=reply.call, request_ms=request_ms)
        return record, outputs

    def _inputs_ready(self, result: SessionResult | None) -> float:
        """``_sync`` before a call (its wait is ``result``'s ``inputs_wait``); then the call's start."""
        t = time.perf_counter()
        self._sync()
        if result is not None:
            result.spend("inputs_wait", t)
        return time.perf_counter()

    def _native_slots(self, index: int) -> tuple[dict[str, Any], list[tuple[int, int, int]]] | None:
        """Set ``index``'s output copies for the exchange off the interpreter's lock (``exchange.py``).

        None: the Python path measures (``EvalSettings.native_wall`` off, a worker without
        ``timed_exchange``, outputs not on a CUDA device, or the library unavailable: ``self.wall_path``
        says why).
        """
        if not self.settings.native_wall:
            self.wall_path = "python: EvalSettings.native_wall is off"
            return None
        if not hasattr(self.worker, "timed_exchange"):
            self.wall_path = "python: the worker has no timed exchange"
            return None
        slots = self.arena.output_slots(index)  # first: a CPU arena never builds or opens the library
        if slots is None:
            self.wall_path = "python: outputs not contiguous on a CUDA device"
            return None
        from ptxgym.evaluation.trusted.exchange import unavailable

        why = unavailable(copies=True)
        if why:
            self.wall_path = f"python: {why}"
            return None
        self.wall_path = "native"
        return slots

    def _trial(
        self,
        calls: list[tuple[int, bool]],
        verify: set[int],
        result: SessionResult,
        stage: Stage,
        strict: bool = True,
        fresh: bool = True,
        counted: int | None = None,
        hw_counted: int | None = None,
        new_draws: frozenset[int] = frozenset(),
        whole_check: bool = False,
        last: bool = False,
        warmup: int = 0,
    ) -> list[TimedCall] | None:
        """One trial; a failed check ends it (``strict``) or is only recorded (the trusted baseline).

        ``fresh``: every call of the trial (warm-up included) gets fresh values (``Arena.prepare``).
        ``counted``: the position of the counted call in ``calls`` (``_counted``; module docstring).
        ``hw_counted``: the position of the hardware-counted call (``_hw_counted``).
        ``new_draws``: verified positions that draw new values even with the pool (``_new_draws``).
        ``whole_check``: the timing's one new draw checked whole is in this trial (``_whole_place``).
        ``last``: the timing's last trial; with ``defer_checks`` its held calls are left to ``finish``.
        ``warmup``: the trial's leading warm-up calls; with ``EvalSettings.warmup_redraw`` off they keep
        their set's values (``Arena.rest``).
        """
        cupti = self.backend == CUPTI
        self._request(TrialBegin(cupti=cupti, spin_us=self.settings.runner_spin_us), stage)
        self._segment_after = "the trial's start"
        timed: list[TimedCall] = []
        segment: list[TimedCall] = []  # the timed calls since the activity trial (re)began
        defer = fresh and 0 < len(verify) < len(calls)  # checked at the trial's end (Arena.hold)
        whole_at = self._whole_place(verify, new_draws) if fresh and whole_check else None
        held: list[Held] = []
        try:
            for pos, (index, is_timed) in enumerate(calls):
                t = time.perf_counter()
                checked = fresh and (pos in verify or pos in (counted, hw_counted))
                entry = self._entry(index, result) if checked and pos not in new_draws else None
                self.new_draws += checked and pos in new_draws
                if fresh and pos < warmup and not checked and not self.settings.warmup_redraw:
                    self.arena.rest(index)
                else:
                    self.arena.prepare(index, self.generator, fresh=fresh, entry=entry)
                result.spend("inputs", t)
                if pos == counted:
                    if not self._counted(index, result, stage, segment) and strict:
                        return None
                    continue
                if pos == hw_counted:
                    if not self._hw_counted(index, result, stage, segment) and strict:
                        return None
                    continue
                record, outputs = self._call(index, is_timed, result)
                if is_timed:
                    timed.append(record)
                    segment.append(record)
                t = time.perf_counter()
                if self.settings.deferred_call_checks:  # read once, at the trial's end
                    self.arena.queue_guard_check()
                    breached = False
                else:
                    breached = self._breached(result, stage)
                result.spend("guards", t)
                if breached and strict:
                    return None
                if defer:
                    t = time.perf_counter()
                    kept = self.arena.hold(index, pos in verify, outputs, whole=pos == whole_at)
                    result.spend("hold", t)
                    if kept is not None:
                        held.append(kept)
                elif pos in verify:  # checked now, on the copy that ended the call's wall like any other
                    kept = self.arena.hold(index, True, outputs, whole=pos == whole_at)
                    if not self._verified(index, result, stage, kept) and strict:
                        return None
                del outputs
            if self.settings.deferred_call_checks and self._breached_before(result, stage) and strict:
                return None
            self._close(stage, segment, result)
        except (CandidateFault, WorkerError):
            # a write outside the buffers, or a wrong verified call, before a crash, hang or exhausted
            # budget: that came first
            if self.settings.deferred_call_checks and self._breached_before(result, stage) and strict:
                return None
            if held and not self._check_held(held, result, stage) and strict:
                return None
            raise
        if last and self.defer_checks:
            self._deferred.extend(held)
            return timed
        if not self._check_held(held, result, stage) and strict:
            return None
        return timed

    def _check_held(self, held: list[Held], result: SessionResult, stage: Stage) -> bool:
        """Check a trial's deferred verified calls in order (all of them); False if one failed."""
        passed = True
        for kept in held:
            passed = self._verified(kept.index, result, stage, kept) and passed
        held.clear()
        return passed

    def _split(self, stage: Stage, segment: list[TimedCall], result: SessionResult) -> None:
        """Close the activity trial before an extra call made outside it (the caller begins it again)."""
        self._close(stage, segment, result)
        segment.clear()

    def _close(self, stage: Stage, segment: list[TimedCall], result: SessionResult) -> None:
        """End the activity trial: the spans of its timed calls, its census into the subject's."""
        t = time.perf_counter()
        spans = self._request(TrialEnd(), stage).spans
        result.spend("trial_end", t)
        if spans is not None:
            waited = int(spans.flushes > 1)
            sums = (
                ("trials", 1),
                ("waited", waited),
                ("incomplete", spans.incomplete),
                ("ran_in", spans.ran_in),
                ("launched_in", spans.launched_in),
                ("launch_known", spans.launch_known),
            )
            for key, n in sums:
                result.trial_ends[key] = result.trial_ends.get(key, 0) + n
        for record in segment:
            record.span_ms = spans.spans.get(record.seq) if spans else None
        missing = sum(record.span_ms is None for record in segment)
        if missing and sum("timing" not in g for g in result.span_gaps) < MAX_SPAN_GAPS:
            activities = sum(spans.activities.get(r.seq, 0) for r in segment) if spans else None
            result.span_gaps.append(
                {
                    "after": self._segment_after,
                    "timed": len(segment),
                    "missing": missing,
                    "activities": activities,
                    "incomplete": spans.incomplete if spans else None,
                    "flushes": spans.flushes if spans else None,
                    "outside": spans.outside if spans else None,
                    "nearest_us": spans.empty_nearest_us if spans else None,
                }
            )
        if spans is not None and self.backend == CUPTI:
            _add_census(result, spans)
            result.census_calls += sum(1 for record in segment if record.span_ms is not None)
        hw_seq, self._hw_seq = self._hw_seq, None
        if hw_seq is not None and spans is not None:
            most = max((spans.activities.get(r.seq, 0) for r in segment), default=0)
            result.hw_window = (spans.activities.get(hw_seq, 0), most)
        windowed, self._windowed = self._windowed, None
        if (
            windowed is not None
            and self.backend == CUPTI
            and not (spans and spans.activities.get(windowed[0]))
        ):
            _add_counted_names(result, windowed[1])  # CUPTI recorded nothing in its window: its rows tell

    def _verified(
        self, index: int, result: SessionResult, stage: Stage, held: Held | None = None, again: bool = False
    ) -> bool:
        """Verify set ``index`` after a call, or ``held``; a failure is recorded (the first), False returned.

        ``held``: a call of the trial that just ended (``Arena.hold``). The timing's whole place
        (``held.whole``, ``_whole_place``) is checked on a sample here like the others and kept for
        ``_check_whole``; ``again``: that call's whole check (not counted in ``calls_checked`` twice).
        """
        t = time.perf_counter()
        if held is not None and held.whole and not again:
            self._whole_due = held
            held = replace(held, whole=False)
        check = self.arena.verify(index) if held is None else self.arena.check_held(held)
        result.spend("verify", t)
        result.calls_checked += not again
        if not check.passed and result.failure is None:
            result.failure = Failure(check.status, stage, self._where(stage, check), check)
        return check.passed

    def _counted(self, index: int, result: SessionResult, stage: Stage, segment: list[TimedCall]) -> bool:
        """The counted call at its secret position (module docstring); False when it failed a check.

        Inside the activity trial first; a count error there splits the trial around a second counted
        call (fresh values, same set) made outside it. ``segment``: the timed calls of the activity
        trial so far; a split closes them (their spans) and empties it.
        """
        where = result.counted or CountedCall(trial=-1, slot=-1)
        cupti = self.backend == CUPTI
        inside = cupti and not self.count_outside
        if cupti and not inside:
            self._split(stage, segment, result)
        why = self.count_outside
        reply, ok = self._count_once(index, result, stage, inside)
        zero = ok and inside and not reply.count_error and not any(row.inst for row in reply.counts or ())
        if ok and inside and (reply.count_error or zero):
            error = reply.count_error or "every executed count read zero"
            why = f"count error inside the activity trial: {error}"[:300]
            log.warning("%s; counting again outside the trial", why)
            self._split(stage, segment, result)
            self.arena.prepare(index, self.generator, fresh=True, entry=self._entry(index, result))
            reply, ok = self._count_once(index, result, stage, False)
            inside = False
            if ok and not reply.count_error:  # learnt: here CUPTI counts only outside activity trials
                self.count_outside = why
        where.call, where.in_trial = self.calls, inside
        where.outside = "" if inside else why or "no CUPTI activity trial"
        result.counted = where
        if cupti and not inside:
            self._request(TrialBegin(cupti=True, spin_us=self.settings.runner_spin_us), stage)
            self._segment_after = "the counted call"
        if not ok:
            return False
        result.sass_rows, result.count_error = reply.counts, reply.count_error
        if cupti and not inside and reply.counts:  # no census window: its rows name what it ran
            _add_counted_names(result, reply.counts)
        elif inside and reply.counts:
            self._windowed = (reply.seq, reply.counts)
        return True

    def _hw_counted(self, index: int, result: SessionResult, stage: Stage, segment: list[TimedCall]) -> bool:
        """The hardware-counted call at its secret position (module docstring); False when it failed a check.

        Outside the activity trial, unless ``EvalSettings.hw_count_in_trial`` (its kernels then join the
        census). ``segment``: the activity trial's timed calls so far (closed here).
        """
        where = result.hw_counted or CountedCall(trial=-1, slot=-1)
        cupti = self.backend == CUPTI
        inside = cupti and self.settings.hw_count_in_trial
        if cupti and not inside:
            self._split(stage, segment, result)
        reply, ok = self._count_once(index, result, stage, inside, hw=True)
        if inside and reply is not None:
            self._hw_seq = reply.seq  # its window's activities, beside the timed calls' (``_close``)
        where.call, where.in_trial = self.calls, inside
        where.outside = (
            "" if inside else "the range profiler runs outside activity trials (hw_count_in_trial)"
        )
        result.hw_counted = where
        if cupti and not inside:
            self._request(TrialBegin(cupti=True, spin_us=self.settings.runner_spin_us), stage)
            self._segment_after = "the hardware-counted call"
        if not ok:
            return False
        result.hw_counts, result.hw_count_error = reply.hw_counts, reply.hw_count_error
        if reply.hw_counts is None and not reply.hw_count_error:
            result.hw_count_error = "the worker's hardware-counted call came with no counters and no reason"
        return True

    def _count_once(
        self, index: int, result: SessionResult, stage: Stage, window: bool, hw: bool = False
    ) -> tuple[Reply, bool]:
        """One counted call on set ``index`` (values already fresh), guards and outputs checked.

        ``window``: the worker records its CUPTI window (the census sees its kernels; no latency taken).
        ``hw``: hardware counters (``Call.hw_count``) instead of SASS counts.
        """
        self._sync()
        t = time.perf_counter()
        reply = self._request(Call(set=index, timed=window, flush=True, count=not hw, hw_count=hw), stage)
        result.spend("hw_count" if hw else "count", t)
        self.calls += 1
        t = time.perf_counter()
        breached = self._breached(result, stage)
        result.spend("guards", t)
        return reply, not breached and self._verified(index, result, stage)

    def _breached_before(self, result: SessionResult, stage: Stage) -> bool:
        """The guard checks queued after this trial's calls (``deferred_call_checks``), read once.

        A breach is a MEMORY_ERROR, as ``_breached`` records it after each call otherwise.
        """
        t = time.perf_counter()
        breach = self.arena.pending_guard_breach()
        result.spend("guards", t)
        return _breach(result, stage, breach, "a timing call (warm-up or timed); found at the trial's end")

    def _breached(self, result: SessionResult, stage: Stage) -> bool:
        """Check the guard regions after a call (outside the timed window); a breach is a MEMORY_ERROR."""
        when = "a correctness call" if stage is Stage.CHECK else "a timing call (warm-up or timed)"
        return _breach(result, stage, self.arena.check_guards(), when)

    @staticmethod
    def _where(stage: Stage, check: SetCheck) -> str:
        when = "a correctness call" if stage is Stage.CHECK else "a timed call (fresh values, same buffers)"
        return f"{check.message} (in {when})"

    # -------------------------------------------------------------------------------------- stages

    def calibrate(self, n: int = 20, match_ms: float | None = None) -> Calibration:
        """Per-call harness overhead with trusted no-op subjects (the candidate is not loaded yet).

        First a trivial one (a 4-byte memset: ``cal``). With ``match_ms`` (the baseline's latency, for a
        candidate) and an L2-flush buffer, also a *matched* one (``cal_matched``): the no-op then keeps
        the GPU busy about ``match_ms`` per call with memsets of the flush buffer (their number set from
        a 3-call probe), so its wall - GPU time is measured at a subject's duration. The harness's
        host work overlaps a long GPU call, so a trivial calibration overstates the overhead of a real
        one (H200: honest candidates' excess -0.08 to -0.10 ms per call,
        ``bench/results/wall_allowance_2026-12-04_native_vs_python.txt``), and that gap was room to
        hide work; the cross-check compares against the matched calibration where there is one.
        """
        self.cal = self._calibration(n, 0)
        self.cal_matched = None
        if match_ms and match_ms > 0 and self.flush_bytes > 0:
            probe = self._calibration(3, PROBE_MEMSETS)
            per_memset = (probe.latency_ms - self.cal.latency_ms) / PROBE_MEMSETS
            if per_memset > 0:
                busy = min(MAX_BUSY_MEMSETS, max(1, round((match_ms - self.cal.latency_ms) / per_memset)))
                calls = min(n, max(MIN_MATCHED_CALLS, int(MATCHED_BUDGET_MS / match_ms)))
                self.cal_matched = self._calibration(calls, busy)
        return self.cal

    def use_calibration(self, cal: Calibration, matched: Calibration | None) -> None:
        """Take an earlier worker's calibration instead of measuring one (``calibration_reuse.py``)."""
        self.cal, self.cal_matched = cal, matched

    def reference_calibration(self) -> Calibration | None:
        """The calibration the wall cross-check uses: the matched one where it is plausible, else trivial.

        Plausible: a non-negative overhead (a call's wall time cannot be shorter than its GPU time) and
        not above the trivial no-op's by more than 3 of its IQRs (a longer call only overlaps more of
        the harness's host work). Anything else means the busy no-op was not measured as it ran, and the
        trivial calibration, the looser one, decides.
        """
        m, t = self.cal_matched, self.cal
        if m is None or t is None:
            return t
        if 0.0 <= m.overhead_ms <= t.overhead_ms + 3 * t.overhead_iqr_ms:
            return m
        return t

    def _calibration(self, n: int, busy_memsets: int) -> Calibration:
        self.load(Load(kind="noop", busy_memsets=busy_memsets))
        result = SessionResult()
        timed = self._trial([(0, True)] * n, set(), result, Stage.RUN, fresh=False) or []
        ev_s = [r.call.ev_stream_ms for r in timed]
        ev_d = [r.call.ev_device_ms for r in timed]
        gap = sorted(d - s for s, d in zip(ev_s, ev_d, strict=True))[len(timed) // 2]
        lat = [
            call_latency(self.backend, r.call.ev_stream_ms, r.call.ev_device_ms, r.span_ms, gap) or 0.0
            for r in timed
        ]
        cal = calibrate([r.wall_ms for r in timed], lat, ev_s, ev_d, busy_memsets)
        return replace(cal, parts_ms=wall_parts(timed))

    def correctness(self, result: SessionResult, strict: bool = True) -> None:
        """Check ``correctness_sets`` calls, each on freshly perturbed values of a rotating set.

        ``strict``: stop at the first failure (candidates); otherwise record it and go on (the baseline).
        """
        n_sets = len(self.arena.sets)
        for i in range(self.settings.correctness_sets):
            index = i % n_sets
            self.arena.prepare(index, self.generator)
            self._call(index, timed=False)  # its output copies go: the outputs are checked in place
            if self._breached(result, Stage.CHECK) and strict:
                return
            check = self.arena.verify(index)
            result.calls_checked += 1
            result.checks.append(check)
            if not check.passed and result.failure is None:
                result.failure = Failure(check.status, Stage.CHECK, self._where(Stage.CHECK, check), check)
            if not check.passed and strict:
                return

    def timing(
        self,
        result: SessionResult,
        crosscheck: bool = True,
        strict: bool = True,
        baseline_ms: float | None = None,
        count: bool = False,
        hw_count: bool = False,
    ) -> None:
        """``trials`` x (warm-up + timed calls), rotating sets, verifying a random subset of timed calls.

        Every call gets fresh values in its set's buffers; the verified subset is drawn from the session's
        seed (the evaluator's secret), so the candidate cannot tell a verified call from another.
        With ``baseline_ms``, a candidate whose first trial is far slower than the baseline
        (``timing.slow_cutoff``) is not timed further: each remaining trial is replaced by its verified
        calls alone, so the correctness evidence is the same as a full timing's, and those calls are
        timed (every latency of such a trial comes from a verified call; a probe's unverified calls only
        decide, their latencies are dropped: a candidate could be fast and wrong on exactly them).
        ``count``: one counted call at a secret slot among the timed calls (module docstring); in a trial
        that the cut-off replaced by its verified calls, at a secret place among those.
        ``hw_count``: one hardware-counted call likewise, at another place (module docstring).
        """
        s = self.settings
        rotate = max(1, min(s.rotate_sets, len(self.arena.sets)))
        if count:
            result.counted = counted_slot(self.rng, s.trials, s.iterations)
        if hw_count:
            result.hw_counted = counted_slot(self.rng, s.trials, s.iterations)
        probing = s.slow_probe_calls and cutoff_applies(baseline_ms, s.slow_cutoff_speedup, s.trials)
        if probing and not self._probe(result, baseline_ms, rotate, strict):
            return
        self.arena.reserve_holds(s.verified_per_trial + 1)  # + the whole place's, kept to the end
        self._whole_due = None
        whole_trial = self._whole_rng.randrange(s.trials)  # its one new draw checked whole (_whole_place)
        for trial in range(s.trials):
            extras = [x for x in (result.counted, result.hw_counted) if x is not None and x.trial == trial]
            if result.shortened:  # the trial's verified calls alone
                n = s.verified_per_trial + len(extras)
                draw = [self.rng.randrange(n)] if len(extras) == 1 else self.rng.sample(range(n), len(extras))
                at, hw_at = _extra_places(result, extras, draw)
                calls = [(j % rotate, j not in (at, hw_at)) for j in range(n)]
                verify = set(range(n)) - {at, hw_at}
            else:
                places = [s.warmup + p for p in region_places([x.slot for x in extras])]
                at, hw_at = _extra_places(result, extras, places)
                n = s.warmup + s.iterations + len(extras)
                calls = [(j % rotate, j >= s.warmup and j not in (at, hw_at)) for j in range(n)]
                timed_pos = [j for j in range(s.warmup, n) if j not in (at, hw_at)]
                verify = set(self.rng.sample(timed_pos, s.verified_per_trial))
            new = self._new_draws(verify)
            timed = self._trial(
                calls,
                verify,
                result,
                Stage.TIME,
                strict,
                counted=at,
                hw_counted=hw_at,
                new_draws=new,
                whole_check=trial == whole_trial,
                last=trial == s.trials - 1,
                warmup=0 if result.shortened else s.warmup,
            )
            if timed is None:
                return
            self._collect(timed, result)
            if trial == 0 and not result.shortened and result.trials and not probing:
                result.shortened = slow_cutoff(result.trials[0], baseline_ms, s.slow_cutoff_speedup, s.trials)
        if self.defer_checks:
            self._finish_due = True
        elif not self._final_checks(result, strict):
            return
        reference = self.reference_calibration()
        if crosscheck and reference is not None and result.trials:
            lat = [x for t in result.trials for x in t]
            slack = (s.wall_slack_ms, s.wall_slack_fraction, self.slack_scale)
            result.crosscheck = cross_check(result.walls, lat, reference, *slack)

    def _final_checks(self, result: SessionResult, strict: bool) -> bool:
        """A timing's whole check, then its inputs (written during the timing: INPUT_MUTATED)."""
        if not self._check_whole(result) and strict:
            return False
        mutated = self.arena.mutated_inputs()
        if mutated and result.failure is None:
            result.failure = Failure(
                Status.INPUT_MUTATED,
                Stage.TIME,
                f"the candidate modified its input(s) {', '.join(mutated)} during timing",
            )
            return False
        return True

    def finish(self, result: SessionResult, strict: bool = True) -> None:
        """The checks a timing left with ``defer_checks``, in the order a timing makes them.

        Its last trial's verified calls, then its whole check and its inputs. None of them needs the
        worker (held copies, private tensors, the trusted references), so the evaluator stops the worker
        first and its process's teardown overlaps them (``EvalSettings.defer_final_checks``). A failure
        is recorded like one in the timing. Their wall goes to ``trusted_s["finish_verify"]``, not to the
        timing's ``verify``.
        """
        held, self._deferred = self._deferred, []
        due, self._finish_due = self._finish_due, False
        timing_verify = result.trusted_s.get("verify", 0.0)
        try:
            if held and not self._check_held(held, result, Stage.TIME) and strict:
                return
            if due:
                self._final_checks(result, strict)
        finally:
            moved = result.trusted_s.get("verify", 0.0) - timing_verify
            if moved:
                result.trusted_s["verify"] = timing_verify
                result.trusted_s["finish_verify"] = result.trusted_s.get("finish_verify", 0.0) + moved

    def retime_due(self, result: SessionResult, took_s: float) -> bool:
        """Whether ``retime`` may run after a timing that took ``took_s``.

        Its wall cross-check failed by the allowance alone (not a forged figure), or timed calls came back
        without a GPU time (``missing_spans``); no other failure; and the step's budget holds twice what
        that timing took.

        Missing GPU times: on an H100 an honest MHA forward expert lost every span of the activity trial
        after a counted call in 1 of 6 evaluations (``bench/results/gpu_cost_2026-12-06_sampled_h100.txt``,
        turn 2), a TIMING_ANOMALY an honest policy could not avoid. A subject that removes its own spans
        gains nothing from the retime: the second timing has new secret slots and half the slack and must
        have every span, and the slower of the two timings is paid, a call without a span standing in with
        its wall less the calibrated overhead (``retime``).
        """
        cc = result.crosscheck
        if result.retimed or result.failure is not None:
            return False
        if cc is not None and (cc.forged or cc.moved):
            return False
        if not result.missing_spans and (cc is None or cc.ok):
            return False
        return self.clock is None or self.clock.run_left() > 2 * took_s

    def retime(self, result: SessionResult, strict: bool = True, baseline_ms: float | None = None) -> None:
        """Time the subject once more after its timing failed the wall cross-check by the allowance alone.

        The harness's per-call overhead rises with the host's load (builds, other processes), and an
        honest expert's median excess went past its allowance under load (H100, 16 envs streaming, 1 of
        16; an MHA forward's first turn beside its task's preparation: bench/results/
        throughput_2026-12-05_stream_h100.txt, gpu_cost_2026-12-05_default_h100.txt). Transient load
        rarely lasts through a second timing; work a subject hides outside the GPU timer goes with it, so
        the second timing's cross-check, its latencies and its walls replace the first's, which is kept
        in ``result.retimed``. What vouches for the paid calls is the second timing's (a reviewer's
        finds): its counted calls, at new secret slots (the first's are known to the subject now), and
        its launches in the census (a target kernel launched only in the discarded timing would
        otherwise make up for a paid timing without it; a name the first saw stays, so a foreign kernel
        there is still one). The verified calls of both timings count. The calibration is not redone:
        the subject is loaded in this process now, and its host code could slow a no-op to widen its own
        allowance.

        A failed first timing must not be a free try for a hider (a later review: hide past the
        allowance, and once timed again hide the usual safe amount, or move the work inside the timer
        and be paid the honest speed): the second timing's slack is ``RETIME_SLACK`` of the first's,
        and a median GPU time that rose by more than ``RETIME_RISE`` of what the first timing showed
        beyond its calibrated overhead (at least of the slack; and more than the medians' noise) is that
        hidden work moved inside the timer, still an anomaly (``moved_work``; the baseline is not
        judged). One retime per subject (``retime_due``). The latencies paid are the slower timing's (by
        median): a subject reports its own spans and sees its walls, so it could drop a span, or hide a
        little work, whenever its first timing looked unlucky and ask for a second draw (a review's find:
        the paid median fell by ~1% at 3% noise between timings); with the slower paid it gains nothing.
        """
        first = result.crosscheck
        why_first = []
        if result.missing_spans:
            where = "; ".join(_gap_text(g) for g in result.span_gaps[:3])
            why_first.append(
                f"had no GPU time for {result.missing_spans} timed call(s)" + (f": {where}" if where else "")
            )
        if first is not None and not first.ok:
            why_first.append(f"failed its wall cross-check by the allowance: {first.message}")
        result.retimed = "; and ".join(why_first) or "timed again"
        for gap in result.span_gaps:
            gap["timing"] = "first"
        cal = self.reference_calibration()
        first_trials = [list(t) for t in result.trials]
        first_ms = [x for t in first_trials for x in t]
        # a call without a GPU time stands in with its wall less the calibrated overhead (the evaluator's
        # clock: the subject cannot make it shorter than its work), so dropping spans cannot make the first
        # timing look faster than it ran (a review's find: dropped spans otherwise re-rolled it)
        overhead = cal.overhead_ms if cal is not None else 0.0
        stand_ins = [max(0.0, w - overhead) for w in result.unspanned_walls]
        first_paid = first_trials + ([stand_ins] if stand_ins else [])
        first_shortened = result.shortened
        hidden = first.median_overhead_ms - cal.overhead_ms if first is not None and cal is not None else 0.0
        # the counted calls again, at new secret slots of the timing that is paid (the old slots are known)
        count, hw_count = result.counted is not None, result.hw_counted is not None
        result.counted = result.hw_counted = None
        result.sass_rows, result.count_error, result.hw_counts, result.hw_count_error = None, "", None, ""
        # launches that vouch for the paid calls (sass_join.in_band_info) are the paid timing's; a name the
        # first timing saw stays in the census (a foreign kernel there is still one)
        seen = dict.fromkeys(result.kernels, 0)
        result.kernels, result.census_calls, result.hw_window = {}, 0, None
        result.trials, result.walls, result.missing_spans, result.shortened = [], [], 0, ""
        result.wall_parts, result.unspanned_walls = [], []
        result.crosscheck = None
        self.slack_scale = RETIME_SLACK
        try:
            self.timing(result, strict=strict, baseline_ms=baseline_ms, count=count, hw_count=hw_count)
        finally:
            self.slack_scale = 1.0
        for name in seen:
            result.kernels.setdefault(name, 0)
        cc = result.crosscheck
        second_ms = [x for t in result.trials for x in t]
        if strict and result.failure is None and cc is not None and cc.ok:
            why = moved_work(first_ms, second_ms, hidden, self.settings)
            if why:
                result.crosscheck = replace(cc, ok=False, moved=True, message=why)
        first_all = [x for t in first_paid for x in t]
        slower = bool(first_all and second_ms) and statistics.median(first_all) > statistics.median(second_ms)
        if strict and slower:
            # the slower of the two is paid: a retime is no second draw (the subject reports its spans
            # and sees its walls, so it could ask for one whenever its first timing looked unlucky); not
            # for the trusted baseline (strict off), which would only be made slower
            result.trials, result.shortened = first_paid, first_shortened
            result.retimed += "; the first timing's latencies are paid (the slower median)"
            if stand_ins:
                result.retimed += f", {len(stand_ins)} of them walls less the calibrated overhead"

    def _probe(self, result: SessionResult, baseline_ms: float | None, rotate: int, strict: bool) -> bool:
        """A short trial before the others; a candidate it finds below the slow cut-off is timed by it.

        ``PROBE_WARMUP`` + ``slow_probe_calls`` calls on fresh values, none verified (the trials that
        follow keep every verified call). Its latencies only decide: below the cut-off
        ``result.shortened`` says so and the trials' verified calls alone time the candidate; otherwise
        the trials time it in full. Either way the probe's latencies are dropped. False: the probe failed
        (``strict``).
        """
        s = self.settings
        n = PROBE_WARMUP + s.slow_probe_calls
        calls = [(j % rotate, j >= PROBE_WARMUP) for j in range(n)]
        timed = self._trial(calls, set(), result, Stage.TIME, strict)
        if timed is None:
            return False
        probe = SessionResult()
        self._collect(timed, probe)
        if probe.trials:
            what = f"a probe of {len(probe.trials[0])} calls"
            result.shortened = slow_cutoff(
                probe.trials[0], baseline_ms, s.slow_cutoff_speedup, s.trials, what
            )
        result.missing_spans += probe.missing_spans
        return True

    def _collect(self, timed: list[TimedCall], result: SessionResult) -> None:
        gap = self.cal.sync_gap_ms if self.cal else 0.0
        trial = []
        for r in timed:
            lat = call_latency(self.backend, r.call.ev_stream_ms, r.call.ev_device_ms, r.span_ms, gap)
            if lat is None:
                result.missing_spans += 1
                result.unspanned_walls.append(r.wall_ms)
                continue
            trial.append(lat)
            result.walls.append(r.wall_ms)
            result.wall_parts.append(r)
        if trial:
            result.trials.append(trial)


def _gap_text(gap: dict) -> str:
    """One ``SessionResult.span_gaps`` entry in words (``Session.retime``'s reason)."""
    seen = [f"{gap['activities']} GPU activities seen"]
    if gap.get("incomplete"):
        seen.append(f"{gap['incomplete']} incomplete")
    if gap.get("outside"):
        seen.append(f"{gap['outside']} in no window")
    if gap.get("nearest_us") is not None:
        seen.append(f"nearest kernel {gap['nearest_us']:+.1f} us")
    return f"{gap['missing']} of {gap['timed']} after {gap['after']} ({', '.join(seen)})"


def wall_parts(calls: list[TimedCall]) -> dict[str, float]:
    """Where the calls' walls went, medians in ms (diagnostic: ``bench/wall_allowance.py``).

    The trusted side's own split: ``request`` (command to reply) and ``copy`` (the copy of the outputs
    and its sync, which ends the wall); and the native runner's steps (``protocol.CALL_PHASES``, as
    ``runner_<step>``: the candidate's process's word, only ever shown), from the calls that report them.
    """
    out: dict[str, float] = {}
    mine = [(c.request_ms, c.wall_ms - c.request_ms) for c in calls if c.request_ms is not None]
    if mine:
        out["request"] = statistics.median(r for r, _ in mine)
        out["copy"] = statistics.median(c for _, c in mine)
    for step in CALL_PHASES:
        got = [c.call.phases_ms[step] for c in calls if step in c.call.phases_ms]
        got = [x for x in got if math.isfinite(x) and x >= 0]
        if got:  # one of the values (an average of two huge ones could overflow to inf)
            out[f"runner_{step}"] = statistics.median_low(got)
    return {k: round(v, 4) for k, v in out.items()}


def moved_work(
    first_ms: list[float], second_ms: list[float], hidden_ms: float, settings: EvalSettings
) -> str:
    """Why a second timing's latencies hold the first's hidden work, moved inside the timer ("" if not).

    Its median rose over the first's by more than ``RETIME_RISE`` of ``hidden_ms`` (what the first timing
    showed beyond its calibrated overhead; at least of the slack) and more than ``RISE_Z`` standard errors
    of the two medians' difference (a timing the slow cut-off shortened to its verified calls has few
    latencies). An honest subject's GPU time does not follow the host's load. A rise that is no number
    (medians forged to infinity) counts as moved.
    """
    if not first_ms or not second_ms:
        return ""
    before, after = statistics.median(first_ms), statistics.median(second_ms)
    noise = RISE_Z * math.hypot(*(median_se(iqr(x), len(x)) for x in (first_ms, second_ms)))
    slack = max(settings.wall_slack_ms, settings.wall_slack_fraction * before)
    limit = max(RETIME_RISE * max(slack, hidden_ms), noise)
    if after - before <= limit:
        return ""
    return (
        f"timed again after its wall cross-check failed, its median GPU time rose from {before:.4f} ms to "
        f"{after:.4f} ms (more than {limit:.4f} ms): the work its first timing did outside the GPU timer "
        "moved inside it"
    )


MAX_SPAN_GAPS = 8
"""Activity trials with missing GPU times described in ``SessionResult.span_gaps`` (the first ones)."""
RETIME_SLACK = 0.5
"""Of the wall allowance's slack, what a second timing gets (``Session.retime``): a hider whose first
timing failed may not hide the usual safe amount in the second."""
RISE_Z = 4.0
"""Standard errors of the difference of two medians that a retimed subject's GPU time may rise by."""
RETIME_RISE = 0.5
"""How much of what its first timing showed beyond the calibrated overhead (at least of the slack) a
retimed subject's median GPU time may rise by (an honest subject's GPU time does not follow the host's
load; a hider's moved work does). With ``RETIME_SLACK`` a hider can neither move much of its first
timing's hidden work inside the timer nor keep much of it hidden: together at most about the slack,
which would have passed the first timing."""
PROBE_MEMSETS = 4
"""Memsets of the flush buffer per call of the matched calibration's probe (3 calls)."""
MATCHED_BUDGET_MS = 100.0
"""GPU time the matched calibration's busy calls may take (fewer calls for a long baseline call: 20 for
the GEMM's 0.77 ms and the MHA forward's 2.5 ms, 13 for the backward's 7.4 ms)."""
MIN_MATCHED_CALLS = 8
"""The fewest calls a matched calibration makes (its median and IQR need a few)."""
MAX_BUSY_MEMSETS = 4096
"""Bound on the matched no-op's memsets per call (``Load.busy_memsets``): ~0.14 s at 2 x 50 MiB each."""


def counted_slot(rng: random.Random, trials: int, iterations: int) -> CountedCall:
    """The counted call's secret slot: uniform over ``trials x (iterations + 1)`` timed-region slots."""
    trial, slot = divmod(rng.randrange(trials * (iterations + 1)), iterations + 1)
    return CountedCall(trial=trial, slot=slot)


def region_places(slots: list[int]) -> list[int]:
    """Places of extra calls in a timed region, in the order of ``slots`` (each drawn from 0..iterations).

    Each extra call goes to its slot of the region as it stands after the earlier ones were inserted, so a
    single extra call sits exactly at its slot, and the places of two never coincide.
    """
    places: list[int] = []
    for slot in slots:
        places = [p + 1 if p >= slot else p for p in places]
        places.append(slot)
    return places


def _extra_places(
    result: SessionResult, extras: list[CountedCall], places: list[int]
) -> tuple[int | None, int | None]:
    """(counted call's place, hardware-counted call's place) in this trial; None where it is elsewhere."""
    at = hw_at = None
    for extra, place in zip(extras, places, strict=True):
        if extra is result.counted:
            at = place
        else:
            hw_at = place
    return at, hw_at


CENSUS_OVERFLOW = "the worker reported more kernel names or modules than the census keeps"


def _breach(result: SessionResult, stage: Stage, breach: GuardBreach | None, when: str) -> bool:
    """Record a guard breach as the first failure (a MEMORY_ERROR in ``when``); whether there was one."""
    if breach is None:
        return False
    if result.failure is None:
        result.failure = Failure(Status.MEMORY_ERROR, stage, f"{breach.message} (in {when})")
    return True


def _add_census(result: SessionResult, spans: Spans) -> None:
    """Fold one trial's in-band census into the subject's (bounded: the report is the worker's word)."""
    result.census_trials += 1
    room = MAX_CENSUS_MODULES - len(result.modules)
    if len(spans.kernels) > MAX_CENSUS_NAMES or len(spans.modules) > room:
        result.census_error = CENSUS_OVERFLOW
        return
    for name, n in spans.kernels.items():
        result.kernels[name] = result.kernels.get(name, 0) + int(n)
    result.modules.extend(spans.modules)
    result.census_error = result.census_error or spans.census_error


def _add_counted_names(result: SessionResult, rows: list[SassRow]) -> None:
    """Fold what a counted call outside any activity trial executed into the census (one launch each)."""
    names = {row.function for row in rows}
    if len(names) > MAX_CENSUS_NAMES:
        result.census_error = CENSUS_OVERFLOW
        return
    for name in names:
        result.kernels[name] = result.kernels.get(name, 0) + 1
