"""The proofs of a candidate that passed the check and the timing: memcheck, then the target proof.

``run_proofs`` runs compute-sanitizer memcheck when it is due (``base.memcheck_due``) and, unless memory
safety already failed, settles the executed-instruction verdict and work share (per ``TargetMode``):

* ``EXECUTED`` (default): the in-band counts the worker took on a verified call (``sass_join.in_band_info``)
  are the proof, with no second run of the candidate. On a cross-checked candidate (a secret draw,
  ``EvalSettings.ncu_crosscheck_fraction``) Nsight Compute profiles it too and must agree
  (``sass_join.counts_agree``; a disagreement is PROOF_FAILED). Without usable in-band counts Nsight
  Compute gives the proof and the target message says why.
* ``NCU``: Nsight Compute on every candidate, as the only proof.

The counted call (``session.py``) sits at a secret slot among the timed calls, drawn by the trusted side
(uniform over trials x (iterations + 1) slots), on that slot's fresh values, verified like a timed call.
A host-side call counter no longer finds it: the step makes as many calls as before, and the last call
is the counted one once in trials x (iterations + 1) (153 at the defaults), so a kernel that does the
target's work only on a guessed call earns the credit with that probability and no more
(``last_call_wgmma`` in ``ptxgym audit``). What still tells the counted call apart, for a policy paid
to find it:

* It is slow. CUPTI patches every instruction to count it, so the call takes several times as long. A
  kernel that reads ``%globaltimer`` or ``clock64`` on the device, or host code that times its own call
  or launches and times a probe kernel first, can tell a patched call from a plain one, and run the
  target's work only when patched (or, inversely, SIMT only when patched, which only loses it credit).
  Host code need not even time: libcupti is loaded in its process, so it can ask CUPTI whether SASS
  metrics are on (e.g. an enable call that fails while the evaluator's is active).
  Deciding inside the call is the strong form: no guess, every step, and it earns the target credit
  (``gate.target_credit``) today. What bounds it is weak and is said plainly: (a) the timed calls run
  the unpatched path, so the latency and the speed reward are the SIMT path's: the credit comes without
  the speed a real wgmma kernel has; (b) on a secret share of candidates
  (``EvalSettings.ncu_crosscheck_fraction``) Nsight Compute counts too and must agree (a disagreement is
  PROOF_FAILED), but its replay is also instrumented and slow, so a kernel switching on any slowdown
  shows wgmma to both and the two agree; (c) the wall-clock cross-check (``timing.cross_check``) bounds
  host work around the timed calls, not what a kernel chooses to compute; (d) in the native runner, a
  second verified call at another secret slot reads hardware counters (CUPTI's range profiler, one pass:
  nothing patched or replayed, the call runs at its own speed; ``session.py``, ``target_work.hw_share``),
  and the MMA share that decides is the smaller of the two calls', so a kernel switching on the slowdown
  shows no wgmma there and loses the credit (and one that breaks the profiler instead loses it too: no
  usable counters is no credit, ``sass_join.with_hw``; ``instrumented_wgmma`` in ``ptxgym audit`` plays the
  switcher with an SM-clock probe). Where the counters can size the module's work (one MMA tile shape,
  ``sass_join.counters_suffice``; the default ``EvalSettings.sass_count_with_hw`` None) the patched call
  is not made at all (``sass_join.hw_only_target``: FLOPs per MMA from the module's one tile, the census
  vouching, ``sass_join.hw_census``; Nsight Compute's cross-check then only refuses a figure above its own
  count); on the H200 it credits the expert GEMM (``test_native_runner_gpu.py``, 2026-12-05, with
  ``hw_counters`` on, its default since its cost was measured: ~0.4 s of GPU per candidate,
  gpu_cost_2026-12-05_hw_true.txt). What remains: the range profiler is also CUPTI in the candidate's
  process (host code could ask whether it is enabled), and the Python worker reads no hardware counters:
  where the runners were wanted but a subject ran in the worker anyway, its credit is withheld
  (``LocalGpuEvaluator._hw_missing``); with the worker chosen (``PTXGYM_CANDIDATE_PROCESS=python``) the
  hole stays as described.
* The counts are the worker's word: the candidate's host code shares the process and could forge the
  rows (or break CUPTI to force a count error: the evaluator then counts outside the activity trial, or
  falls back to Nsight Compute). Rows must name instructions of the built module (``sass_join``), and the
  secret cross-check bounds a forgery to the share of candidates it misses.
* The counted call also differs by the commands around it: the activity trial is closed around it (by
  default: CUPTI's SASS metrics read zero inside one on the H200); the candidate does not see commands,
  only, again, time (and, in its own process, CUPTI's state).

Memcheck and Nsight Compute each run the candidate in a one-shot driver sandboxed like the worker (the
evaluator's sandbox mode) and read the tool's report from a file the candidate cannot write
(``tools.ProofDirs``). The evaluator hands the result to ``verdicts.with_proofs``, which can only take
the PASSED away. The evaluator runs them after its GPU turn, with a ``gpu`` hold (``tools.Gate``): a
tool's start-up and Nsight Compute's read-back run beside other candidates' turns, and only each run's
GPU phase holds the GPU again (``GpuQueue.turn(resume=True)``). What the driver's sandbox loads is built
here first (``_ready_sandbox``), so that no build runs inside that phase.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ptxgym.evaluation.runner.build import build_broadcast
from ptxgym.evaluation.trusted import ncu
from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, TargetMode
from ptxgym.evaluation.trusted.memcheck import run_memcheck
from ptxgym.evaluation.trusted.sass_join import counts_agree, with_hw
from ptxgym.evaluation.trusted.tools import Gate, ProofDirs
from ptxgym.evaluation.trusted.verdicts import ProofResults
from ptxgym.records import settings as user_settings
from ptxgym.records.feedback import MemcheckInfo, Proof, TargetInfo, Verdict
from ptxgym.records.tasks import Task


@dataclass(frozen=True)
class InBand:
    """What the worker proved in band about the target family, and what the evaluator drew."""

    target: TargetInfo | None = None
    """The counted call's TargetInfo (None: no usable counts)."""
    note: str = ""
    """Why there is no usable count ("" when there is one, or none was taken)."""
    crosscheck: bool = False
    """Whether Nsight Compute profiles this candidate too (the evaluator's secret draw)."""
    flops_lower_bound: bool = False
    """The target's MMA FLOPs are a lower bound (hardware counters only: ``sass_join.hw_only_target``)."""
    hw: dict | None = None
    """The hardware-counted call's record (``sass_join.hw_record``), or ``{"error": why}`` for a subject
    meant for one that got none (``LocalGpuEvaluator._hw_missing``); None: none was meant. Nsight
    Compute's stand is held to it as the in-band count is (``_target``): a reviewer broke the SASS count
    and had Nsight Compute, whose replay is instrumented too, credit a kernel that works only when slowed.
    """


@dataclass(frozen=True)
class _Run:
    """What every proof of one candidate needs: the subject and where and how to run it."""

    task: Task
    cand: BuiltCandidate
    inputs: Path
    device: int
    settings: EvalSettings
    scratch: Path
    sandbox: str
    gate: Gate | None = None


def run_proofs(
    task: Task,
    cand: BuiltCandidate,
    inputs: Path,
    device: int,
    settings: EvalSettings,
    scratch: Path,
    sandbox: str,
    memcheck_due: bool,
    in_band: InBand | None = None,
    gpu: Callable[[], AbstractContextManager[object]] | None = None,
) -> tuple[ProofResults, dict[str, float]]:
    """The proofs of one candidate and their wall seconds (``memcheck``, ``execute``).

    ``gpu``: how to hold the GPU for each tool run's GPU phase (module docstring); the walls then also
    say how the runs' time split (``tools.Gate.record``). None: the caller holds it throughout.
    """
    _ready_sandbox(sandbox)
    gate = Gate(gpu) if gpu is not None else None
    run = _Run(task, cand, inputs, device, settings, scratch, sandbox, gate)
    walls: dict[str, float] = {}
    memcheck = None
    try:
        if memcheck_due:
            t = time.perf_counter()
            memcheck = _memcheck(run)
            walls["memcheck"] = round(time.perf_counter() - t, 4)
            if memcheck.ran and memcheck.clean is not True:  # an error or a failed tool: no profile needed
                return ProofResults(memcheck=memcheck), walls
        t = time.perf_counter()
        target = _target(run, in_band or InBand())
        walls["execute"] = round(time.perf_counter() - t, 4)
        return dataclasses.replace(target, memcheck=memcheck), walls
    finally:
        if gate is not None:
            walls.update(gate.record())
            gate.close()


def _ready_sandbox(sandbox: str) -> None:
    """Build (or find in the cache) the thread broadcast library the driver's sandbox loads, here and now.

    Below Landlock ABI 8 the driver's sandbox has each thread that existed before it restrict itself from
    a signal handler, a small library compiled once per cache directory (``sandbox._restrict_others``,
    ``runner.build.build_broadcast``). Left to the driver, its first build ran after the gate's go, on
    the GPU's time: on an H100 the jail step of a drawn cross-check took 1.0-1.6 s against 0.07 s with the
    library built (``bench/results/gpu_cost_2026-12-07_s59_sampled_checks_h100.txt``). A failure (no
    compiler) is left to the driver's sandbox, whose report says why its filesystem layer is partial.
    """
    if sandbox == "off":
        return
    try:
        build_broadcast()
    except Exception:  # noqa: BLE001 - the driver's sandbox reports it (module docstring)
        pass


def _memcheck(run: _Run) -> MemcheckInfo:
    dirs = ProofDirs.create(run.scratch)
    try:
        info, _, _ = run_memcheck(
            run.inputs,
            run.cand.so_path,
            run.cand.entry_symbol,
            run.device,
            run.settings.memcheck_timeout_s,
            dirs,
            run.sandbox,
            run.gate,
        )
    finally:
        dirs.remove()
    return info


def _target(run: _Run, in_band: InBand) -> ProofResults:
    """The executed-instruction proof (module docstring); without a target opcode in the SASS none runs."""
    cand, arch, mode = run.cand, run.task.arch_spec, run.settings.target_mode
    measured = mode in (TargetMode.EXECUTED, TargetMode.NCU)
    if not measured or not cand.static_target:
        executed = Verdict.NO if measured else Verdict.NOT_CHECKED
        message = "" if cand.static_target else "no target-family opcode in the SASS, so none can execute"
        info = TargetInfo(
            family=arch.target_family,
            mode="executed" if measured else mode.value,
            static=cand.static_target,
            executed=executed,
            work=executed,
            message=message,
        )
        return ProofResults(target=info, source=None)
    if mode is TargetMode.EXECUTED and in_band.target is not None and not in_band.crosscheck:
        return ProofResults(target=in_band.target, source=Proof.CUPTI_IN_BAND)
    profiled = _ncu(run)
    if mode is TargetMode.NCU or profiled.profile_failed or profiled.target is None:
        return profiled
    if in_band.target is None:  # EXECUTED without usable in-band counts: Nsight Compute's stand
        why = in_band.note or "no in-band counts"
        target = profiled.target.model_copy(update={"message": f"{profiled.target.message} ({why})"})
        if in_band.hw is not None:  # held to the hardware counters, which need the SASS count's FLOPs
            usable = not in_band.hw.get("error") and in_band.hw.get("mma_share") is not None
            hw = in_band.hw if usable else {"error": in_band.hw.get("error") or "no SASS count to size them"}
            target = with_hw(target, hw, arch)
        return dataclasses.replace(profiled, target=target)
    if profiled.target.executed not in (Verdict.YES, Verdict.NO):  # nothing to compare: in-band stands
        return dataclasses.replace(profiled, target=in_band.target, source=Proof.CUPTI_IN_BAND)
    differ = counts_agree(in_band.target, profiled.target, lower_bound=in_band.flops_lower_bound)
    return dataclasses.replace(
        profiled, target=in_band.target, mismatch=differ, cross_checked=profiled.target
    )


def _ncu(run: _Run) -> ProofResults:
    """Nsight Compute's executed counts, work share and kernel census over a sandboxed driver run."""
    task, cand = run.task, run.cand
    key = ncu.cache_key(
        cand.source_sha256, cand.artifact_sha256, task.arch, task.workload.uuid, cand.entry_symbol
    )
    dirs = ProofDirs.create(run.scratch)
    try:
        out = ncu.check_executed(
            task.arch_spec,
            run.inputs,
            cand.so_path,
            cand.entry_symbol,
            run.device,
            run.settings.profile_timeout_s,
            user_settings.cache_dir() / "ncu",
            key,
            task_flops=task.flops,
            module_kernels=cand.kernels,
            dirs=dirs,
            sandbox=run.sandbox,
            gate=run.gate,
            exit_now=run.settings.ncu_exit_now,
        )
    finally:
        dirs.remove()
    return ProofResults(
        target=out.target,
        profile_failed=out.failed,
        foreign_kernels=out.foreign,
        census_checked=out.census,
        source=Proof.NCU_OFFLINE if out.profiled else None,
    )
