"""The evaluator interface: what crosses the GPU boundary of the pipeline.

The CPU stages (extract, policy, build, sass) produce a ``BuiltCandidate``. An ``Evaluator`` takes it
and returns a ``GpuVerdict``: run, check, time, execute. Backends (``NullEvaluator`` here, the local
GPU evaluator in ``ptxgym.evaluation.trusted.local``, a Ray or remote one later) all honour this interface, so
the env never knows which one it talks to.

Every parameter that decides a verdict (tolerances, seeds, timeouts, repetitions) is owned by the
evaluator through ``EvalSettings``; nothing in an action can change it.
"""

from __future__ import annotations

import math
import traceback
from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.records.feedback import (
    CorrectnessInfo,
    EnvironmentInfo,
    Evidence,
    MemcheckInfo,
    Stage,
    Status,
    TargetInfo,
    TimingInfo,
)
from ptxgym.records.tasks import Task


class TargetMode(str, Enum):
    """How the target-instruction requirement is checked."""

    OFF = "off"
    STATIC = "static"
    """SASS presence only (cuobjdump)."""
    EXECUTED = "executed"
    """The default: executed counts per SASS instruction taken inside the sandboxed worker on one extra
    verified call (CUPTI SASS metrics, ``Proof.CUPTI_IN_BAND``), joined with the built module's listing;
    a secret random ``ncu_crosscheck_fraction`` of the candidates is also profiled by Nsight Compute and
    the two must agree. Where the in-band counts are missing, Nsight Compute gives the proof."""
    NCU = "ncu"
    """Nsight Compute over a separate sandboxed run of every candidate (``Proof.NCU_OFFLINE``; ~7 s each)."""


class MemcheckMode(str, Enum):
    """When compute-sanitizer memcheck runs."""

    AUTO = "auto"
    """The default: never where the arena has guard pages (an unmapped page after every buffer faults in
    the worker itself), else as FIRST_CORRECT."""
    NEVER = "never"
    FIRST_CORRECT = "first_correct"
    """On the first correct candidate of each episode."""
    ALWAYS = "always"
    """On every correct candidate."""


def memcheck_due(mode: MemcheckMode, first_correct: bool, guard_pages: bool) -> bool:
    """Whether compute-sanitizer runs on a candidate that passed.

    ``first_correct``: the first correct one of its episode; ``guard_pages``: its arena ends every buffer
    at an unmapped page.
    """
    if mode is MemcheckMode.AUTO:
        mode = MemcheckMode.NEVER if guard_pages else MemcheckMode.FIRST_CORRECT
    return mode is MemcheckMode.ALWAYS or (mode is MemcheckMode.FIRST_CORRECT and first_correct)


class EvalSettings(BaseModel):
    """Evaluator-owned parameters of one evaluation (the defaults follow PTXBench's protocol)."""

    model_config = ConfigDict(frozen=True)

    correctness_sets: int = Field(3, ge=1, description="Fresh random input sets checked per turn.")
    warmup: int = Field(10, ge=0, description="Warm-up calls per trial.")
    iterations: int = Field(50, ge=1, description="Timed calls per trial.")
    trials: int = Field(3, ge=1, description="Trials; latency is the median over all timed calls.")
    rotate_sets: int = Field(3, ge=1, description="Input sets the timed calls rotate through.")
    verify_timed_fraction: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Fraction of timed calls whose outputs are verified too (at least 3 per trial, so 9 of "
        "the default 150, at secret positions); each runs the fp32 reference once for that call's fresh "
        "values (H200: ~15 ms GEMM, ~105 ms MHA forward, bench/results/gpu_cost_2026-12-04_in_band*.txt). "
        "A candidate wrong on a share f of timed calls is caught with probability 1 - (1 - f)^9 (f = 0.25: "
        "92%; 0.5: 99.8%) and then paid nothing. 0.25 (39 calls) was the default until the cost measure: "
        "it spent 0.6 s (GEMM) and 4.1 s (MHA forward) of GPU per candidate on references.",
    )
    verify_sample_share: float = Field(
        0.25,
        gt=0.0,
        le=1.0,
        description="Of a task's independent indices (``TaskRecord.independent_axes``: heads, GEMM rows), "
        "the secret share on which a verified call on a new draw is checked, its reference run on that "
        "share alone; every output is still scanned whole for unwritten and non-finite elements, and "
        "correctness calls and pool entries are checked whole (``sampled.py``). 1: the whole reference "
        "(H100, MHA forward 4x48x4096x128: its 6 such calls per evaluation took 0.63 s).",
    )
    fused_inputs: bool = Field(
        True,
        description="Prepare each timed call's fresh values (draw, signs, shared and private copies) and "
        "compare the inputs after it with one Triton kernel per input where the arena can "
        "(``fused_inputs.py``; a CUDA arena with float inputs); off, or where it cannot, the torch ops. "
        "Measured side by side on an H100 (MHA forward expert, later turns): the wait for the inputs "
        "0.08-0.09 s a turn against 0.22 s, the timing stage 1.24-1.28 s against 1.39 s "
        "(bench/results/gpu_cost_2026-12-07_s51_*_h100.txt). Its first version was no cheaper "
        "(prepare_cost_2026-12-06_s45_fused_h100.txt).",
    )
    input_check_share: float = Field(
        0.125,
        gt=0.0,
        le=1.0,
        description="With the fused kernels, the share of each input's blocks (4096 words) that the check "
        "after every timed call compares with what the input must hold, a secret draw per call and input "
        "(``Arena._changed``); correctness calls, the timing's last check of every set and the arena's "
        "restore compare every bit. A write confined to k blocks of one call goes unseen with probability "
        "about exp(-share x k), and the same write on every call of a trial is seen almost surely; a write "
        "whose result survives to the timing's end is always seen. 1: every block after every call "
        "(the MHA forward: two passes over 604 MB a call, ~0.10 s of GPU an evaluation on an H100).",
    )
    deferred_call_checks: bool = Field(
        False,
        description="The guard check and the input check after each call of a timed trial are queued on "
        "the GPU, in order with the calls, and read once at the trial's end (and by the timing's last "
        "check), not after every call with a host read each (``Guards.queue_check``, "
        "``Arena._take_pending``): the same checks of the same bytes, without a wait for the GPU "
        "between calls. A breach then ends the trial at its end, not at the call. Off: read after every "
        "call (the default: on an H100 side by side the MHA forward expert's later turns held the GPU "
        "1.35-1.37 s with it and 1.36-1.37 s without, the GEMM's 0.79-0.83 and 0.78-0.81 s, "
        "bench/results/gpu_cost_2026-12-07_s63_*_h100.txt: no gain beyond their spread). "
        "Correctness calls and the counted calls read theirs at once either way.",
    )
    warmup_redraw: bool = Field(
        False,
        description="Give every warm-up call of a timed trial fresh values like a timed call (on), or leave "
        "the set's inputs as the previous call left them and only poison its outputs (off, "
        "``Session._trial``). A warm-up call is never timed or verified, and the protocol's counts already "
        "tell a candidate which calls warm up, so a cheaper preparation before them tells it nothing; its "
        "inputs are still compared after the call. Saves a draw per warm-up call (30 per evaluation); "
        "with the fused preparation, the MHA forward expert's timing stage 1.19-1.22 s a turn against "
        "1.24-1.28 s (H100, bench/results/gpu_cost_2026-12-07_s51_fused_warm_rest_h100.txt).",
    )
    verified_pool: int | None = Field(
        None,
        ge=0,
        description="Entries of the arena's verified pool (``verified_pool.py``): secret draws whose fp32 "
        "references are computed once per arena, so that a verified timed call costs a copy, not a "
        "reference run. None: the verified calls of one evaluation (``pool_entries``, 10 by default: 2.7 GB "
        "GEMM 8192x7168x5120, 8.1 GB MHA forward 4x48x4096x128, 24 GB MHA backward: per set); 0: no pool, "
        "every verified call runs its reference. Used only by subjects that cannot carry what they saw to "
        "a later session (the baseline, the jailed native runner).",
    )
    verified_pool_uses: int = Field(
        32,
        ge=0,
        description="Sessions a pool entry serves before it is redrawn with a new reference (0: never); "
        "bounds how long a fingerprint of an entry leaked through the feedback can name a verified call.",
    )
    pool_new_draws_per_trial: int = Field(
        2,
        ge=0,
        description="Verified timed calls per trial that draw new values and run their reference even in a "
        "session served by the verified pool, at a secret place among the verified calls. A policy can "
        "learn the pool's entries (a candidate's printed text reaches its observation) and compute only "
        "on calls that bring one; with k such calls per trial, garbage on unrecognised calls fails the "
        "step (on a share f of them, with probability 1 - (1 - f)^(k x trials): with 2, a cheat skipping "
        "half passes 1.6% of its steps, against 12.5% with 1, as a reviewer measured, and 0.2% without "
        "the entries known). Costs that many reference runs (``verified_pool.py``, Reuse).",
    )
    verified_pool_partial_jail: bool = Field(
        False,
        description="Let a native runner whose filesystem jail is partial (below Landlock ABI 8, a CUDA "
        "driver thread from before the jail that the runner's broadcast could not reach) use the pool. Off: "
        "only a jail in force on every thread does, since code run on an uncovered thread could keep what it "
        'saw on disk for a later candidate (``verified_pool.py``, "Reuse").',
    )
    call_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Wall limit for any one command to a worker (set-up, load, one call); the step as a "
        "whole has the step budget (budget_* fields, ``budget.StepBudget``).",
    )
    budget_slowdown: float = Field(
        50.0, gt=0, description="Step budget: per-call latency allowed, as a multiple of the baseline's."
    )
    budget_base_s: float = Field(
        10.0, ge=0, description="Step budget: fixed allowance for the load and the first call, s."
    )
    budget_call_s: float = Field(
        0.02,
        ge=0,
        description="Step budget: harness allowance per call (pipe, synchronisations, L2 flush, fresh "
        "values), s.",
    )
    budget_proofs_s: float = Field(
        60.0, ge=0, description="Step budget: allowance for memcheck and the executed-instruction proof, s."
    )
    budget_cap_s: float = Field(120.0, gt=0, description="Step budget: hard cap of the whole step, s.")
    target_mode: TargetMode = TargetMode.EXECUTED
    memcheck: MemcheckMode = MemcheckMode.AUTO
    profile_timeout_s: float = Field(120.0, gt=0, description="Wall limit for the Nsight Compute check.")
    memcheck_timeout_s: float = Field(180.0, gt=0, description="Wall limit for compute-sanitizer.")
    seed: int | None = Field(
        None,
        description="Base seed; None (the default) draws a secret one per turn. A fixed seed makes every "
        "evaluation of a turn the same (perturbations, which timed calls are verified, the arena's inputs): "
        "for reproducing a verdict, never for training, where a policy could learn which calls go unchecked.",
    )
    max_candidate_gpu_gb: float = Field(
        16.0, gt=0, description="GPU memory a candidate process may hold beyond its CUDA context, GiB."
    )
    wall_slack_ms: float = Field(
        0.3, ge=0, description="Per-call trusted wall time allowed beyond GPU time + calibrated overhead, ms."
    )
    wall_slack_fraction: float = Field(
        0.10, ge=0, description="Same allowance as a fraction of the median latency (the larger wins)."
    )
    native_wall: bool = Field(
        True,
        description="Read each call's trusted wall in a C call that holds no interpreter lock: the command, "
        "its reply and the trusted copies of its outputs (``trusted/exchange.py``), so other Python threads "
        "of the evaluator's process cannot lengthen it. False: the Python path (the comparison in "
        "``bench/throughput.py --set native_wall=false``).",
    )
    runner_spin_us: int = Field(
        0,
        ge=0,
        le=50_000,  # protocol.MAX_SPIN_US
        description="In each trial a native runner polls its command pipe for the next command for up to "
        "this many microseconds before it blocks (``TrialBegin.spin_us``), so no call waits for a blocked "
        "thread's wake-up (a suspect for the calibrated overhead's spread between runs; an experiment: "
        "``bench/gpu_session.sh s21`` compares it, 0 until it is measured). Costs a core while a trial runs.",
    )
    wall_retries: int = Field(
        1,
        ge=0,
        le=1,
        description="Whether a timing that fails the wall cross-check by its allowance alone (a transient "
        "load on the host, not a forged figure), or whose timed calls came back without a GPU time, is timed "
        "once more, with half the slack: the second timing's checks decide and the slower timing's "
        "latencies are paid, the Feedback says so (``Session.retime``). It costs about one timing of GPU "
        "and runs only when the step's budget holds twice the time the timing took. 0: the first failure is "
        "the verdict. "
        "At most 1: each further try would be another draw for a hider near the allowance.",
    )
    matched_calibration: bool = Field(
        True,
        description="Calibrate a candidate's harness overhead also with a no-op as long as the baseline's "
        "call, and cross-check its wall time against that (``Session.calibrate``).",
    )
    ncu_exit_now: bool = Field(
        True,
        description="Nsight Compute's driver ends with ``os._exit`` once its calls returned, skipping the "
        "interpreter's teardown (``sandboxed/driver.py``, ``EXIT_NOW_MODES``). On an H100 the tool then "
        "ended 0.22-0.24 s after the profiled call instead of 0.83-0.88 s, its report the same size but for "
        "the flag in its stored command line (``ncu_exit_now_2026-12-07_s58_h100.txt``), and the drawn "
        "cross-check's GPU phase was 3.98 and 3.38 s for the MHA forward expert against 4.54 and 4.38 s, "
        "3.18 and 3.48 s for the GEMM expert against 3.08 and 4.08 s, every one PASSED with its counts "
        "agreeing (``gpu_cost_2026-12-07_s58*_h100.txt``). False: the interpreter's orderly exit.",
    )
    calibration_reuse: int = Field(
        8,
        ge=1,
        le=64,
        description="Workers one calibration serves, the one that measured it included, all of the same "
        "arena, process kind, sandbox, backend and matched target (``calibration_reuse.py``); then the next "
        "worker measures again. 1: every worker calibrates itself (before 2026-12-07). A calibration is "
        "always measured before any candidate code is loaded in its worker.",
    )
    calibration_max_age_s: float = Field(
        300.0,
        gt=0,
        description="A kept calibration older than this many seconds is measured again "
        "(``calibration_reuse``).",
    )
    floor_slack: float = Field(
        1.0, gt=0, description="A median latency below floor_ms * floor_slack is a TIMING_ANOMALY."
    )
    ncu_crosscheck_fraction: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="TargetMode.EXECUTED: share of the candidates whose in-band counts are also taken by "
        "Nsight Compute (drawn in secret per candidate); a disagreement is PROOF_FAILED. It bounds how long "
        "a forged in-band count can go unnoticed at ~7 s of GPU per cross-checked candidate.",
    )
    gated_proofs: bool = Field(
        True,
        description="Run memcheck and Nsight Compute after the candidate's GPU turn, each tool's start-up "
        "and read-back beside other candidates' turns and only its GPU phase holding the GPU "
        "(``tools.Gate``). Off: inside the turn, the GPU held throughout (the way before; a fall-back "
        "should a tool not tolerate a driver that waits before initialising CUDA).",
    )
    hw_counters: bool = Field(
        True,
        description="TargetMode.EXECUTED in the native runner: a second verified call at another secret slot "
        "reads hardware counters (CUPTI's range profiler, unpatched: ``session.py``), whose MMA share can "
        "only lower the SASS-counted call's and whose TMA bytes join the work verdict "
        "(``target_work.hw_share``). It counts in the jailed runner on the H200 since the runner queries the "
        "counter availability before its jail (inside it Landlock's read rules make that query fail: "
        "``ApplySandbox.hw_prepare``, runner_hw_probe_2026-12-05.txt). Its cost, the call (~0.2 s) and that "
        "query (~0.17 s of the runner's set-up), was measured on the H200 (gpu_cost_2026-12-05_hw_true.txt); "
        "the query is now made on a spare runner's warm-up, off the GPU turn (``Attach.hw_prepare``; not "
        "yet measured); "
        "without it a kernel that does its wgmma work only when it sees its instructions patched (the "
        "SASS-counted call) earned the target credit (``instrumented_wgmma``, "
        "gpu_tests_2026-12-05_audit_native_h200.txt). Off: one counted call. The Python worker reads no "
        "hardware counters: a subject meant for the runners that ran there anyway has its credit withheld "
        "(``LocalGpuEvaluator._hw_missing``); with the worker chosen the SASS count decides alone. On sm_90a "
        "the credit then also needs the TMA share (``MIN_TMA_SHARE`` of the task's minimal traffic), which "
        "SASS counts cannot measure.",
    )
    hw_warm_start: bool = Field(
        False,
        description="A spare runner that queries its counter availability on its warm-up "
        "(``Attach.hw_prepare``) also makes one hardware-counted cycle there with no call in it "
        "(``Attach.hw_warm``: the range profiler enabled, configured, started, a range pushed and popped, "
        "decoded, disabled). Measured, and off: the range profiler's start in the subject's "
        "hardware-counted call stayed 0.16-0.18 s after it (0.16 s without), while the cycle cost each "
        "spare's warm-up 0.18 s more, and of two spares warming together one could not start the "
        "profiler (attach phase ``hw_warm_failed``) (H100, ``bench/results/gpu_cost_2026-12-06_s37_"
        "warm_{false,true}_h100.txt``). The start is not a first-use cost the process can pay ahead.",
    )
    spare_hw_prepare_attempts: int = Field(
        4,
        ge=0,
        le=8,
        description="How many times a spare runner tries its counter-availability query on its warm-up "
        "(``Attach.hw_prepare_attempts``, 100 ms apart); 0: spares make none, and a subject that will be "
        "hardware-counted queries in its sandbox step (~0.15 s of its GPU turn). Four since 2026-12-07 "
        "(one before: every third MHA forward turn then queried again in its sandbox step, ~0.12 s; "
        "``gpu_cost_2026-12-07_s57*_h100.txt``). With quiet spares the next subject waits for the warm-up "
        "(``worker_settle``), retries included: over 128 candidates at 16 envs the spares' queries took "
        "18-19 s with one try and 38-40 s with four, and that wait grew from 18 to 30 s "
        "(``throughput_2026-12-07_s55_new_defaults_h100.txt``, ``..._s59_reuse_h100.txt``; other "
        "changes and hosts between them). ``bench/gpu_session.sh s71`` plays 4, 1 and 0 side by side; "
        "the attach's ``hw_prepare_retried`` step is what the retries cost.",
    )
    defer_final_checks: bool = Field(
        True,
        description="Stop the subject's worker (SIGKILL of its process group) once its last call and memory "
        "check are made, then run the checks that need no worker: the last trial's verified calls, the "
        "timing's whole check and its input check (``Session.finish``), so that the process's teardown "
        "(``discard``: 0.07-0.12 s of a GPU turn on an H100) overlaps their references instead of following "
        "them. Off: those checks end the timing, the worker alive, as before 2026-12-06.",
    )
    early_refill: bool = Field(
        False,
        description="With quiet spares (``local.QUIET_SPARES``), replace the spares handed out as soon as "
        "the subject's last memory check is made (its timed calls and its counted call are over) and its "
        "process group is SIGKILLed, so that they start while the group is reaped and the verdict is "
        "made, instead of after. The next subject's calibration waits for every starting spare "
        "(``_settle_spares``); that wait was 17-18 s of ~86 s of GPU per 128 candidates at 16 envs "
        "(H100, ``throughput_2026-12-06_s37_strays_{1,2}_h100.txt``). Never where that check found a "
        "hog or the turn ended in an exception (a hung or crashed runner may still hold the GPU's "
        "memory): those refill after the runner is gone, as with this off. Measured, and off: in four "
        "passes of 128 candidates in one call (on, off, off, on) the wait was 16.2 and 15.7 s on against "
        "17.2 and 17.4 s off (the runner's discard 7.5-7.9 s in each), and the passes' rates, 40.1 and "
        "38.9 verified correct/min on against 42.5 and 38.3 off, show no gain beyond their noise (H100, "
        "``throughput_2026-12-06_s38_early_refill_*_h100.txt``): the spares' CUDA start-ups, not the "
        "discard, make the wait.",
    )
    late_spare_settle: bool = Field(
        False,
        description="With quiet spares (``local.QUIET_SPARES``) and a reused calibration (nothing to "
        "measure before the candidate loads), wait for the starting spares just before the first timed "
        "call instead of before the calibration, so that their CUDA start-ups overlap the subject's load "
        "and correctness calls (untimed), and a subject that fails those never waits for them (the next "
        "one does, for what is left). The timed calls, the counted calls and a measured calibration stay "
        "quiet as before. The memory check after the correctness calls then also counts what the warming "
        "spares took since the worker was set up (their contexts), so its limit "
        "(``max_candidate_gpu_gb``) is stricter by that much for such a subject, never looser; the wait "
        "is left out of the subject's step budget (``StepClock.exclude``). The wait before the calibration "
        "was 30.7 s of 95.2 s of GPU over 128 candidates at 16 envs (H100, "
        "``throughput_2026-12-07_s60_local_h100.txt``). Measured against it on one H100, four passes "
        "of 128 in two orders: 128.8 and 125.4 s on against 109.8 and 124.7 s off; the wait moved to the "
        "next subject's take (12.8-14.0 s) instead of going away, and one honest GEMM variant failed its "
        "wall cross-check (``throughput_2026-12-08_s70_late_*_h100.txt``, ``..._s69b_late_*_h100.txt``). "
        "So it stays off: the wait before the calibration, as before 2026-12-07.",
    )
    hw_count_in_trial: bool = Field(
        True,
        description="Make the hardware-counted call inside the CUPTI activity trial: its kernels join the "
        "census, and the call differs from a timed one only by the range profiler. Its window holds the "
        "call alone, not the profiler's set-up around it: a window over the whole command held the range "
        "profiler's own kernel (WaitNs), which the census took for a foreign kernel (H200, 2026-12-05); "
        "with the narrow window the honest expert GEMM passes in the trial (H100, 2026-12-06, "
        "test_native_runner_gpu.py). Off: the call runs between trials, seen by no census.",
    )
    sass_count_with_hw: bool | None = Field(
        None,
        description="Where the hardware-counted call is made, whether the SASS-patched counted call is "
        "also made. None (the default): not where the counters alone can size the module's work "
        "(``sass_join.counters_suffice``: the task has an MMA family, the module's MMA instructions spell"
        " one tile shape, it holds no non-tensor bulk copy) and a census ties every kernel to its module "
        "(CUPTI spans, ``module_census``, ``hw_count_in_trial``): GMMA instructions x that tile's FLOPs "
        "is then the work exactly, with no patched call to notice and none of its cost (0.40 s of the MHA"
        " forward expert's 2.3 s of GPU on an H100, 2026-12-06), and the census must vouch for the "
        "credit: a kernel holding the target that the timed calls did not all launch denies it "
        "(``sass_join.hw_census``). True: always both calls; False: never the patched one.",
    )
    module_census: bool = Field(
        True,
        description="Record every module the driver loads in the worker (CUPTI's module-loaded callback) so "
        "the in-band census also catches a cubin loaded from memory under the built module's kernel names "
        "(``census.py``).",
    )
    guard_pages: bool = Field(
        True,
        description="Build the arena's blob with the CUDA virtual-memory API so that an unmapped page "
        "follows every buffer: a kernel reading or writing past a buffer faults in the worker itself "
        "(``evaluation/vmm.py``). If it cannot be built the blob is one plain allocation, as without it "
        "(the verdict's details say why); guard regions are checked after every call either way.",
    )
    baseline_from_disk: bool = Field(
        True,
        description="Use a baseline an earlier evaluator left on disk (same GPU, driver, clocks, libraries, "
        "workload, protocol) as a warm start: it seeds the step budget of the re-measurement and is recorded "
        "beside it. The baseline is always re-measured once per evaluator; the speedup uses that figure.",
    )
    verdict_cache_entries: int = Field(
        512,
        ge=0,
        description="Built artifacts whose verdicts the evaluator keeps, least recently used first out "
        "(``verdict_cache.py`` says which verdicts are reused where); 0 turns the cache off.",
    )
    slow_cutoff_speedup: float = Field(
        0.1,
        ge=0,
        description="A candidate whose first trial's median is slower than the baseline by more than this "
        "speedup (baseline / candidate < it) is timed with that one trial and the other trials' verified "
        "calls (made and timed); ``TimingInfo.shortened`` says so. 0 turns the cut-off off.",
    )
    slow_probe_calls: int = Field(
        8,
        ge=0,
        le=1000,
        description="Timed calls of a short probe trial (after 2 warm-up calls) made before the trials "
        "when the slow cut-off applies: a candidate the probe finds below the cut-off is timed with its "
        "trials' verified calls alone (the probe's calls are not verified: they only decide), so a kernel "
        "25x slower than the baseline does not run a full first trial (~1 s for the naive GEMM). 0: decide "
        "after the first full trial.",
    )

    @property
    def verified_per_trial(self) -> int:
        """Timed calls verified per trial: ``verify_timed_fraction`` of them, at least 3 (all if fewer)."""
        return min(self.iterations, max(math.ceil(self.verify_timed_fraction * self.iterations), 3))

    @property
    def pool_entries(self) -> int:
        """Entries of the verified pool per key: ``verified_pool``, or its default.

        The default: every verified timed call of one evaluation plus the counted call (verified, and
        served from the pool like the others).
        """
        if self.verified_pool is not None:
            return self.verified_pool
        return self.trials * self.verified_per_trial + 1

    @property
    def pool_reserve_bytes(self) -> int:
        """Device bytes the pool must leave free: room for two candidates (a worker and a spare)."""
        return int(2 * self.max_candidate_gpu_gb * (1 << 30))

    @property
    def calls_per_step(self) -> int:
        """Calls in one step: the correctness calls and every trial's warm-up and timed calls.

        A candidate timed against a baseline latency also makes ``probe_calls`` first.
        """
        return self.correctness_sets + self.trials * (self.warmup + self.iterations)

    @property
    def probe_calls(self) -> int:
        """Calls of the slow cut-off's probe, made before the trials when a baseline latency is known."""
        if not self.slow_probe_calls or self.slow_cutoff_speedup <= 0 or self.trials <= 1:
            return 0
        return PROBE_WARMUP + self.slow_probe_calls


PROBE_WARMUP = 2
"""Warm-up calls of the slow-cut-off probe (``EvalSettings.slow_probe_calls``)."""


class BuiltCandidate(BaseModel):
    """What the CPU stages hand to an evaluator."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    so_path: Path = Field(description="The built shared object (TVM-FFI module).")
    entry_symbol: str = Field("run", description="Exported function to call.")
    source_sha256: str
    artifact_sha256: str
    static_target: bool = Field(description="Whether the SASS holds a target-family opcode.")
    kernels: list[str] | None = Field(
        None,
        description="Kernels of the built module as the SASS census names them (mangled); the kernel census "
        "compares what ran during the candidate's calls with these. Empty: a module without device code, "
        "so any kernel that runs is foreign; None: no census (a trusted bridge, e.g. a library's).",
    )
    episode_id: str = ""
    turn: int = 0
    first_correct_in_episode: bool = Field(
        True, description="No earlier turn of this episode was correct (for MemcheckMode.FIRST_CORRECT)."
    )
    input_seed: int | None = Field(
        None,
        description="Secret per-episode seed drawn by the env (never shown to the policy); the evaluator "
        "mixes it into every turn's input seed, so episodes never replay the same inputs.",
    )


class GpuVerdict(BaseModel):
    """What an evaluator returns: the GPU-side parts of a Feedback."""

    model_config = ConfigDict(frozen=True)

    status: Status
    stage: Stage
    message: str = ""
    correctness: CorrectnessInfo | None = None
    timing: TimingInfo | None = None
    target: TargetInfo | None = None
    memcheck: MemcheckInfo | None = None
    evidence: Evidence = Field(default_factory=Evidence, description="Which proof backs each verdict.")
    environment: EnvironmentInfo = Field(default_factory=EnvironmentInfo)
    stage_wall_s: dict[str, float] = Field(default_factory=dict)
    log: str = ""
    seed: int | None = Field(None, description="Per-turn seed that drew the input perturbations.")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="Evaluator-specific measurements (timing cross-check, calibration, baseline source).",
    )
    cache_hit: bool = Field(
        False,
        description="Answered from the evaluator's verdict cache (the same artifact, evaluated before).",
    )
    candidate_ran: bool = Field(
        False,
        description="The candidate's code was loaded into a worker before the verdict (an INFRA_ERROR "
        "after that may be its doing: the rewards forfeit it, ``rewards.gate.forfeited``).",
    )


class Evaluator(ABC):
    """A backend that runs, checks, times and profiles built candidates."""

    name: str = "evaluator"

    @abstractmethod
    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        """Evaluate one candidate. Must not raise for anything the candidate does."""

    def evaluate_many(self, task_candidates: Sequence[tuple[Task, BuiltCandidate]]) -> list[GpuVerdict]:
        """Evaluate a batch: one verdict per ``(task, candidate)`` pair, in input order.

        The default evaluates one after the other. A backend that can overlap work (several GPUs, a
        scheduler, remote actors) overrides it, keeping the contract: same length and order as the
        input, and an exception while evaluating one candidate becomes that candidate's ``INFRA_ERROR``
        verdict, never an exception for the batch.
        """
        return [self._evaluate_guarded(task, candidate) for task, candidate in task_candidates]

    def _evaluate_guarded(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        """``evaluate``, with an exception turned into this candidate's ``INFRA_ERROR`` verdict."""
        try:
            return self.evaluate(task, candidate)
        except Exception as exc:  # noqa: BLE001 - one candidate's failure never ends the batch
            return GpuVerdict(
                status=Status.INFRA_ERROR,
                stage=Stage.RUN,
                message=f"evaluator {self.name} failed on this candidate ({type(exc).__name__}: {exc})",
                environment=EnvironmentInfo(evaluator=self.name),
                log=traceback.format_exc()[-3000:],
            )

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release processes and GPU memory."""

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullEvaluator(Evaluator):
    """Used when no GPU evaluator is available: says so, and never invents a verdict."""

    name = "none"

    def __init__(self, reason: str = "no GPU evaluator is attached") -> None:
        self.reason = reason

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        """Return NOT_EVALUATED with instructions for attaching a GPU evaluator."""
        return GpuVerdict(
            status=Status.NOT_EVALUATED,
            stage=Stage.RUN,
            message=(
                f"Built and inspected on the CPU, but not run: {self.reason}. Correctness and speed need a "
                "GPU evaluator: run on a machine with an NVIDIA GPU of the task's architecture and "
                "`pip install ptxgym[gpu]` (the env then attaches the local evaluator by default), or pass "
                "evaluator=... to gymnasium.make."
            ),
            environment=EnvironmentInfo(evaluator=self.name),
        )
