"""The Feedback record: one per turn, the structured outcome of every pipeline stage.

Every stage writes its part; the first failing stage sets ``status``, ``stage`` and ``message`` and
ends the turn. The env exposes the whole record in ``info["feedback"]`` and renders it as text for
the model (``render_feedback``); rewards are pure functions of it. The record crosses process
boundaries (evaluator workers, trajectory files), so it is frozen, versioned and JSON round-trips.

Versions: ``ptxgym.feedback.v2`` added the statuses FOREIGN_KERNEL and PROOF_FAILED, the ``evidence``
part (which proof backs each verdict) and the target-work fields of ``TargetInfo`` (executed MMA FLOPs
and their share of the task's work). v1 records still load (``from_json``); they keep their version
string, and ``Feedback.target_credited`` judges them by the v1 rule (an executed target instruction
was enough), so rewards recomputed from old trajectories do not change.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = "ptxgym.feedback.v2"
LEGACY_VERSIONS = ("ptxgym.feedback.v1",)
"""Older versions ``from_json`` still reads (judged by the rules they were written under)."""

MIN_MMA_SHARE = 0.5
"""The target credit needs the target family's executed MMA FLOPs to be at least this share of the task's
FLOPs per call (``TargetInfo.mma_share``, ``work_verdict``). An expert kernel does all of its matrix work
with wgmma (share about 1.0; a causal kernel a little more, for its diagonal tiles), a SIMT kernel with a
decoy or a single wgmma per call does next to none. Half leaves room for a kernel that does a minor part
of its products otherwise, and none for one that merely shows the instruction."""

MIN_TMA_SHARE = 0.5
"""Where TMA bytes are measured (hardware counters, ``TargetInfo.tma_share``), the target credit also needs
the bytes TMA loads brought from L2 to be at least this share of the task's minimal traffic (``min_bytes``:
every input read and every output written once). A tiled kernel reloads its inputs per tile (the GEMM
expert reads A once per column of tiles and B once per row), so one that loads through TMA moves several
times its minimal traffic (share well above 1); even a kernel that loads each input exactly once reaches
the inputs' part of min_bytes (0.57 for the GEMM, 0.75 for attention forward). Half keeps every such
kernel, and fails one whose TMA copies are a token beside plain loads. Unmeasured (the Python worker, a
CUPTI error), the share is None and only the MMA share decides."""


class Status(str, Enum):
    """Closed set of turn outcomes. Only PASSED is a correct, timed kernel."""

    PASSED = "PASSED"
    NOT_EVALUATED = "NOT_EVALUATED"
    """Every CPU stage passed, but no GPU evaluator is attached: correctness and speed are unknown."""
    EXTRACT_ERROR = "EXTRACT_ERROR"
    TASK_MISMATCH = "TASK_MISMATCH"
    """A FlashInfer-Trace solution written for another definition (or for one whose inputs, outputs,
    dtypes or shapes differ from the task's): nothing was built."""
    STATIC_REJECT = "STATIC_REJECT"
    COMPILE_ERROR = "COMPILE_ERROR"
    COMPILE_TIMEOUT = "COMPILE_TIMEOUT"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    CRASH = "CRASH"
    MEMORY_ERROR = "MEMORY_ERROR"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    NONFINITE = "NONFINITE"
    UNWRITTEN = "UNWRITTEN"
    INPUT_MUTATED = "INPUT_MUTATED"
    TIMING_ANOMALY = "TIMING_ANOMALY"
    FOREIGN_KERNEL = "FOREIGN_KERNEL"
    """A kernel that is not from the candidate's own built module ran during its calls (a vendor library,
    a module loaded from memory): the work was not the candidate's. No reward at all."""
    PROOF_FAILED = "PROOF_FAILED"
    """A proof tool (compute-sanitizer, Nsight Compute) ran on the candidate and failed, crashed or timed
    out, so a required proof is missing. A candidate can provoke this, so it is never PASSED and pays
    no reward at all."""
    INFRA_ERROR = "INFRA_ERROR"
    """The evaluator itself failed; the turn says nothing about the candidate."""

    @property
    def compiled(self) -> bool:
        """Whether a turn with this status got past the build."""
        return self not in _PRE_BUILD

    @property
    def ran(self) -> bool:
        """Whether the candidate ran to completion at least once without a runtime fault."""
        return self in _RAN


_PRE_BUILD = {
    Status.EXTRACT_ERROR,
    Status.TASK_MISMATCH,
    Status.STATIC_REJECT,
    Status.COMPILE_ERROR,
    Status.COMPILE_TIMEOUT,
}
WRONG_RESULT: frozenset[Status] = frozenset(
    {
        Status.INCORRECT_SHAPE,
        Status.INCORRECT_DTYPE,
        Status.INCORRECT_NUMERICAL,
        Status.NONFINITE,
        Status.UNWRITTEN,
        Status.INPUT_MUTATED,
    }
)
"""The candidate ran and the trusted side found its outputs (or its inputs) wrong."""
_RAN = {
    Status.PASSED,
    *WRONG_RESULT,
    Status.TIMING_ANOMALY,
    Status.FOREIGN_KERNEL,
    Status.PROOF_FAILED,
}


class Stage(str, Enum):
    """Pipeline stages, in order (DESIGN.md section 1)."""

    EXTRACT = "extract"
    SCREEN = "screen"
    """The source screen (``ptxgym.cpu.screen``); records written before 0.2 call it ``policy``."""
    BUILD = "build"
    SASS = "sass"
    RUN = "run"
    CHECK = "check"
    TIME = "time"
    EXECUTE = "execute"
    DONE = "done"

    @classmethod
    def _missing_(cls, value: object) -> Stage | None:
        return cls.SCREEN if value == "policy" else None


class Verdict(str, Enum):
    """Whether the target instruction family executed."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"
    """Profiling failed or was not possible; never counted as a yes."""
    NOT_CHECKED = "not_checked"


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KernelResources(_Part):
    """ptxas resource usage of one kernel (from ``-Xptxas -v``)."""

    kernel: str = Field(description="Mangled kernel name as ptxas reports it.")
    registers: int | None = Field(None, description="Registers per thread.")
    shared_bytes: int | None = Field(None, description="Static shared memory per block, bytes.")
    constant_bytes: int | None = Field(None, description="Constant bank 0 bytes.")
    stack_bytes: int | None = Field(None, description="Stack frame per thread, bytes.")
    spill_stores: int | None = Field(None, description="Spill store bytes.")
    spill_loads: int | None = Field(None, description="Spill load bytes.")
    barriers: int | None = Field(None, description="Named barriers used.")


class CompileInfo(_Part):
    """Outcome of the nvcc build."""

    ok: bool = Field(description="Whether a shared object was produced.")
    command: list[str] = Field(default_factory=list, description="The nvcc argv (paths shortened).")
    log: str = Field("", description="nvcc/ptxas output, truncated to a few KiB.")
    cache_hit: bool = Field(False, description="Whether the build came from the content-addressed cache.")
    wall_s: float = Field(0.0, description="Wall time of the build (0 on a cache hit).")
    nvcc_version: str | None = Field(None, description="Release reported by nvcc, e.g. 13.0.")
    resources: list[KernelResources] = Field(default_factory=list, description="ptxas report per kernel.")
    artifact_sha256: str | None = Field(None, description="SHA-256 of the built shared object.")
    imports: list[str] = Field(default_factory=list, description="Dynamic symbols the .so imports.")
    needed: list[str] = Field(default_factory=list, description="DT_NEEDED libraries of the .so.")
    confinement: str | None = Field(
        None,
        description="How nvcc and the tools it ran were confined (what they could read and write, no "
        "sockets), or why they were not. None in records written before builds were confined.",
    )


class KernelSass(_Part):
    """SASS census of one kernel."""

    kernel: str
    instructions: int = Field(description="Number of SASS instructions.")
    families: dict[str, int] = Field(default_factory=dict, description="Opcode (no modifiers) -> count.")
    target_opcodes: dict[str, int] = Field(default_factory=dict, description="Target-family opcode -> count.")


class SassInfo(_Part):
    """cuobjdump census of the built object."""

    arch: str = Field(description="SASS architecture found, e.g. sm_90a.")
    kernels: list[KernelSass] = Field(default_factory=list)
    histogram: dict[str, int] = Field(default_factory=dict, description="Opcode counts over all kernels.")
    static_target: bool = Field(False, description="Whether any kernel contains a target-family opcode.")


class CorrectnessInfo(_Part):
    """Comparison of the candidate's outputs with the reference, over all input sets checked."""

    input_sets: int = Field(0, description="Fresh random input sets checked.")
    seeds: list[int] = Field(default_factory=list, description="Seeds of those input sets.")
    calls_checked: int = Field(0, description="Candidate calls whose outputs were verified (timed ones too).")
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rel_norm_error: float | None = Field(None, description="max over outputs of ||out-ref|| / ||ref||.")
    mismatch_ratio: float | None = Field(None, description="Fraction of elements outside tolerance.")
    first_bad_output: str | None = None
    first_bad_index: list[int] | None = None
    atol: float | None = None
    rtol: float | None = None
    rel_norm_tol: float | None = None


class LatencyStats(_Part):
    """Latency of one kernel over the timed calls, milliseconds."""

    median_ms: float
    iqr_ms: float = 0.0
    mean_ms: float = 0.0
    min_ms: float = 0.0
    n: int = Field(0, description="Timed calls in all trials.")
    trials_median_ms: list[float] = Field(default_factory=list)
    cv: float = Field(0.0, description="Max over trials of std/mean of the timed calls.")


class TimingInfo(_Part):
    """Candidate against baseline, timed in the same evaluator process lifetime."""

    backend: str = Field(description="How GPU time was measured, e.g. cupti or events+device-sync.")
    candidate: LatencyStats | None = None
    baseline: LatencyStats | None = None
    baseline_name: str | None = None
    speedup: float | None = Field(None, description="baseline median / candidate median.")
    floor_ms: float | None = Field(None, description="Speed-of-light latency from FLOP and byte counts.")
    sol_fraction: float | None = Field(None, description="floor_ms / candidate median (1.0 = at the floor).")
    l2_flush_bytes: int | None = None
    sm_clock_mhz_before: int | None = None
    sm_clock_mhz_after: int | None = None
    shortened: str | None = Field(
        None,
        description="Why fewer timed calls were made than the settings ask (a candidate far slower than the "
        "baseline after its first trial: ``EvalSettings.slow_cutoff_speedup``); None: timed in full.",
    )


def work_verdict(mma_share: float | None, tma_share: float | None = None, mma: bool = True) -> Verdict:
    """Whether the target family did the task's work: yes when ``mma_share >= MIN_MMA_SHARE``.

    ``tma_share`` (None: not measured, the rule is the MMA share's alone) must also reach ``MIN_TMA_SHARE``.
    ``mma`` False: the family has no MMA (TMA alone): the TMA share decides alone, unknown when unmeasured.
    """
    if not mma:
        if tma_share is None:
            return Verdict.UNKNOWN
        return Verdict.YES if tma_share >= MIN_TMA_SHARE else Verdict.NO
    if mma_share is None:
        return Verdict.UNKNOWN
    if tma_share is not None and tma_share < MIN_TMA_SHARE:
        return Verdict.NO
    return Verdict.YES if mma_share >= MIN_MMA_SHARE else Verdict.NO


class TargetInfo(_Part):
    """Did the kernel use (statically) and execute (at run time) the target family, and did it do the work?"""

    family: str = Field(description="Human name of the required family.")
    mode: str = Field("executed", description="off, static or executed.")
    static: bool | None = Field(None, description="Target opcode present in the SASS.")
    executed: Verdict = Verdict.NOT_CHECKED
    counts: dict[str, int] = Field(default_factory=dict, description="Opcode -> predicate-true thread count.")
    message: str = ""
    mma_flops: float | None = Field(
        None,
        description="Target-family MMA FLOPs executed in the profiled call: warpgroup MMAs executed x the "
        "FLOPs of each one's tile (ptxgym.evaluation.trusted.target_work). None: not measured.",
    )
    mma_share: float | None = Field(
        None, description="mma_flops / the task's FLOPs per call (1.0: every product on the target MMA)."
    )
    tma_share: float | None = Field(
        None,
        description="Bytes TMA loads read from L2 (a hardware counter over the unpatched hardware-counted "
        "call, ``target_work.hw_share``) / the task's minimal traffic (``Task.min_bytes``). None: not "
        "measured (SASS counts cannot give it: a copy's size is in its tensor map, not in its opcode).",
    )
    work: Verdict = Field(
        Verdict.NOT_CHECKED,
        description="Whether the target family did the task's work (work_verdict: mma_share >= "
        "MIN_MMA_SHARE, and tma_share >= MIN_TMA_SHARE where it is measured; a family without MMA, TMA "
        "alone, by tma_share alone); unknown when the deciding share could not be measured, never counted "
        "as a yes.",
    )

    @property
    def credited(self) -> bool:
        """The target credit of a v2 record: the family executed and did the task's work."""
        return self.executed is Verdict.YES and self.work is Verdict.YES


class MemcheckInfo(_Part):
    """compute-sanitizer memcheck stage."""

    ran: bool = False
    clean: bool | None = None
    first_error: str | None = None


class Proof(str, Enum):
    """Where a piece of evidence came from."""

    NCU_OFFLINE = "ncu-offline"
    """Nsight Compute over a separate, sandboxed run of the candidate; its report is read from a file the
    candidate cannot write, never from the candidate's output."""
    CUPTI_IN_BAND = "cupti-in-band"
    """CUPTI records taken inside the sandboxed worker, on the calls whose outputs were verified. The
    worker also runs the candidate's host code, so these are the worker's report: a secret share of the
    candidates is cross-checked by Nsight Compute (``EvalSettings.ncu_crosscheck_fraction``), and a
    disagreement pays nothing (PROOF_FAILED)."""
    MEMCHECK = "memcheck"
    """compute-sanitizer memcheck over a separate, sandboxed run, report read from its own file."""
    GUARD_REGIONS = "guard-regions"
    """Guard regions around every harness buffer, checked after every call."""


class Evidence(_Part):
    """Which proofs back each verdict of the turn; an empty list means none (the verdict is unproven)."""

    target_executed: list[Proof] = Field(
        default_factory=list, description="Proofs that the target family executed (TargetInfo.executed)."
    )
    target_work: list[Proof] = Field(
        default_factory=list, description="Proofs of the target family's share of the work (TargetInfo.work)."
    )
    kernel_census: list[Proof] = Field(
        default_factory=list,
        description="Proofs that only the candidate's own kernels ran during its calls (no FOREIGN_KERNEL).",
    )
    memory_safety: list[Proof] = Field(
        default_factory=list, description="Proofs that the candidate stayed inside its buffers."
    )


class EnvironmentInfo(_Part):
    """Toolchain and GPU facts of the turn."""

    nvcc: str | None = None
    cuobjdump: str | None = None
    gpu: str | None = None
    driver: str | None = None
    cuda_runtime: str | None = None
    torch: str | None = None
    evaluator: str | None = None
    sandbox: dict[str, str] | None = Field(
        None,
        description="Host sandbox of the candidate's worker: layer (no_new_privs, network, filesystem, "
        "rlimits, environment) -> 'active', 'partial: ...', 'unavailable: ...' or 'off'; with the "
        "evaluator's candidate_process 'native', also 'process' -> 'native: ptxgym-runner' or "
        "'python: <why not the runner>'. None where no candidate ran in a worker.",
    )


class WorkloadRef(_Part):
    """Which workload of the task's family a turn played."""

    uuid: str = Field(description="The workload's uuid in its definition's workloads.")
    axes: dict[str, int] = Field(default_factory=dict, description="Its axis values, e.g. {'M': 512}.")


class Feedback(BaseModel):
    """One turn's structured outcome. ``status`` is the verdict; the parts say why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: str = SCHEMA_VERSION
    task_id: str = Field(description="Catalog task id, e.g. gemm_bf16_m8192_n7168_k5120-sm_90a.")
    turn: int = Field(0, description="0-based turn index within the episode.")
    status: Status
    stage: Stage = Field(description="Stage that decided the status (DONE when everything ran).")
    message: str = Field("", description="One precise sentence or two about the status.")
    workload: WorkloadRef | None = Field(
        None,
        description="The workload played (latency and speedup belong to it); None in records written "
        "before it was recorded.",
    )
    source_sha256: str | None = Field(None, description="SHA-256 of the extracted source.")
    source_chars: int = 0
    compile: CompileInfo | None = None
    sass: SassInfo | None = None
    correctness: CorrectnessInfo | None = None
    timing: TimingInfo | None = None
    target: TargetInfo | None = None
    memcheck: MemcheckInfo | None = None
    evidence: Evidence = Field(default_factory=Evidence, description="Which proof backs each verdict.")
    stage_wall_s: dict[str, float] = Field(default_factory=dict, description="Wall seconds per stage.")
    environment: EnvironmentInfo = Field(default_factory=EnvironmentInfo)
    log: str = Field("", description="Runtime log tail of the candidate process (truncated).")
    cache_hit: bool = Field(
        False,
        description="The GPU verdict was reused from the evaluator's verdict cache: the same built artifact "
        "on the same task was evaluated before (a pass only within the same episode).",
    )
    candidate_ran: bool = Field(
        False,
        description="The candidate's code was loaded into a worker before the verdict (an INFRA_ERROR "
        "after that may be its doing: the rewards forfeit it, ``rewards.gate.forfeited``).",
    )

    @property
    def speedup(self) -> float | None:
        """Speedup over the baseline, only for a PASSED turn."""
        if self.status is not Status.PASSED or self.timing is None:
            return None
        return self.timing.speedup

    @property
    def correct(self) -> bool:
        """Whether the turn is functionally correct (PASSED)."""
        return self.status is Status.PASSED

    @property
    def target_executed(self) -> Verdict:
        """The run-time target-instruction verdict."""
        return self.target.executed if self.target else Verdict.NOT_CHECKED

    @property
    def target_credited(self) -> bool:
        """Whether the target credit is earned: the family executed and did the task's work.

        A v1 record (``LEGACY_VERSIONS``) predates the work share and is judged by its own rule: an
        executed target instruction was enough.
        """
        if self.target is None:
            return False
        if self.schema_version in LEGACY_VERSIONS:
            return self.target.executed is Verdict.YES
        return self.target.credited

    def to_json(self, indent: int | None = None) -> str:
        """JSON text; NaN and infinities become null."""
        return json.dumps(self.model_dump(mode="json"), indent=indent)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        if value != SCHEMA_VERSION and value not in LEGACY_VERSIONS:
            known = ", ".join((SCHEMA_VERSION, *LEGACY_VERSIONS))
            raise ValueError(
                f"unknown Feedback schema_version {value!r}; this ptxgym reads {known} (a newer ptxgym wrote "
                "this record: upgrade ptxgym to read it)"
            )
        return value

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Feedback:
        """Parse JSON text or a dict (current or legacy version)."""
        data = json.loads(text) if isinstance(text, str) else text
        return cls.model_validate(data)

    def replace(self, **changes: Any) -> Feedback:
        """A copy with some fields changed (validated)."""
        return type(self).model_validate({**self.model_dump(), **changes})


def truncate(text: str, limit: int = 4000) -> str:
    """Keep the head and the tail of a long text, marking the cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"
