"""Turning what the trusted side observed into a GpuVerdict (pure functions, no GPU needed).

Worker failures map onto statuses: a hang is TIMEOUT, a dead process is CRASH (with its exit code or
signal and the tail of its output), a malformed or forged reply is RUNTIME_ERROR, a failed call is
RUNTIME_ERROR with the CUDA error text. A failed check keeps its own status (UNWRITTEN, NONFINITE,
INCORRECT_NUMERICAL, INPUT_MUTATED) and the comparison statistics.

The proofs that follow a PASSED check and timing (``with_proofs``) can only take the PASSED away:
a memory error is MEMORY_ERROR, a kernel from outside the candidate's module is FOREIGN_KERNEL, and a
proof tool that ran but failed, crashed or timed out, or whose counts disagree with the in-band ones on
a cross-checked candidate, is PROOF_FAILED. The verdict's ``evidence`` records
which proof backs each verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxgym.evaluation.child_errors import ProtocolViolation, WorkerDied, WorkerError, WorkerTimeout
from ptxgym.evaluation.compare import SetCheck
from ptxgym.evaluation.trusted.base import GpuVerdict
from ptxgym.records.feedback import (
    CorrectnessInfo,
    EnvironmentInfo,
    Evidence,
    MemcheckInfo,
    Proof,
    Stage,
    Status,
    TargetInfo,
    Verdict,
    truncate,
)
from ptxgym.records.tasks import Tolerance


def worker_error_verdict(
    exc: WorkerError, stage: Stage, timeout_s: float, env: EnvironmentInfo, **extra
) -> GpuVerdict:
    """Verdict for a worker that hung, died or broke the protocol while running the candidate."""
    where = {
        Stage.RUN: "while loading or first running it",
        Stage.CHECK: "during a correctness call",
        Stage.TIME: "during the timed calls",
    }.get(stage, f"in stage {stage.value}")
    if isinstance(exc, WorkerTimeout):
        status = Status.TIMEOUT
        message = (
            f"the candidate did not return {where} within {timeout_s:.0f} s (a hang or a far too slow "
            "kernel); its process was killed and replaced"
        )
    elif isinstance(exc, WorkerDied):
        status = Status.CRASH
        message = f"the candidate's process died {where}: {exc.message}"
        last = _last_line(exc.log_tail)
        if last:
            message += f"; last output: {last}"
    elif isinstance(exc, ProtocolViolation):
        status = Status.RUNTIME_ERROR
        message = f"the candidate's process broke the evaluator protocol {where}: {exc.message}"
    else:
        status = Status.RUNTIME_ERROR
        message = f"the candidate's process failed {where}: {exc.message}"
    return GpuVerdict(
        status=status,
        stage=stage,
        message=message,
        environment=env,
        log=truncate(exc.log_tail, 3000),
        **extra,
    )


def fault_verdict(
    error: str,
    cuda_error: str,
    stage: Stage,
    env: EnvironmentInfo,
    log: str = "",
    loading: bool = False,
    **extra,
) -> GpuVerdict:
    """Verdict for a candidate call (or load) that failed inside a live worker."""
    if loading:
        message = f"the candidate could not be loaded or its entry point found: {error}"
    elif cuda_error:
        message = f"CUDA error in the candidate's call: {cuda_error} ({error})"
    else:
        message = f"the candidate's call raised: {error}"
    return GpuVerdict(
        status=Status.RUNTIME_ERROR,
        stage=stage,
        message=truncate(message, 1500),
        environment=env,
        log=truncate(log, 3000),
        **extra,
    )


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def correctness_info(
    checks: list[SetCheck],
    seeds: list[int],
    calls_checked: int,
    tol: Tolerance,
    failed: SetCheck | None = None,
) -> CorrectnessInfo:
    """Aggregate statistics over every checked call; the failing one decides the first-bad fields."""
    all_checks = [*checks, *([failed] if failed is not None and failed not in checks else [])]
    outs = [o for c in all_checks for o in c.outputs]

    def worst(attr: str) -> float | None:
        values = [getattr(o, attr) for o in outs if getattr(o, attr) is not None]
        return max(values) if values else None

    bad = next((o for o in (failed.outputs if failed else []) if o.status is not Status.PASSED), None)
    return CorrectnessInfo(
        input_sets=len(seeds),
        seeds=seeds,
        calls_checked=calls_checked,
        max_abs_error=worst("max_abs_error"),
        max_rel_error=worst("max_rel_error"),
        rel_norm_error=worst("rel_norm_error"),
        mismatch_ratio=max((o.mismatch_ratio for o in outs), default=None),
        first_bad_output=bad.name
        if bad
        else (failed.mutated_inputs[0] if failed and failed.mutated_inputs else None),
        first_bad_index=bad.first_bad_index if bad else None,
        atol=tol.atol,
        rtol=tol.rtol,
        rel_norm_tol=tol.rel_norm,
    )


@dataclass(frozen=True)
class ProofResults:
    """What the proof stages found for a candidate that passed the check and the timing."""

    memcheck: MemcheckInfo | None = None
    """compute-sanitizer's outcome (None: not run this turn)."""
    target: TargetInfo | None = None
    """The executed-instruction verdict and work share (None: not checked)."""
    profile_failed: str = ""
    """Why the profiler that should have produced ``target`` failed ("" when it did not fail)."""
    foreign_kernels: tuple[str, ...] = ()
    """Kernels that ran during the candidate's calls and are not from its built module."""
    census_checked: bool = False
    """Whether the kernels that ran were compared with the module's (``foreign_kernels`` is meaningful)."""
    source: Proof | None = Proof.NCU_OFFLINE
    """Where ``target`` and the kernel census came from (None: from no proof, e.g. the SASS alone)."""
    cross_checked: TargetInfo | None = None
    """Nsight Compute's own TargetInfo where it cross-checked the in-band ``target`` (recorded in the
    verdict's ``details["ncu_target"]``)."""
    mismatch: str = ""
    """How in-band counts and Nsight Compute's disagree on a cross-checked candidate ("" if they agree)."""


def with_proofs(verdict: GpuVerdict, proofs: ProofResults) -> GpuVerdict:
    """The verdict after the proofs: PASSED only if every proof that ran succeeded (module docstring)."""
    if verdict.status is not Status.PASSED:
        return verdict
    evidence = _evidence(verdict.evidence, proofs)
    update: dict = {"evidence": evidence}
    if proofs.memcheck is not None:
        update["memcheck"] = proofs.memcheck
    if proofs.target is not None:
        update["target"] = proofs.target
    if proofs.cross_checked is not None:
        update["details"] = {**verdict.details, "ncu_target": proofs.cross_checked.model_dump(mode="json")}
    failure = _proof_failure(proofs)
    if failure is not None:
        status, stage, message = failure
        timing = verdict.timing.model_copy(update={"speedup": None}) if verdict.timing else None
        update.update(status=status, stage=stage, message=message, timing=timing)
    return verdict.model_copy(update=update)


def _proof_failure(proofs: ProofResults) -> tuple[Status, Stage, str] | None:
    mc = proofs.memcheck
    if mc is not None and mc.ran and mc.clean is False:
        return Status.MEMORY_ERROR, Stage.RUN, f"compute-sanitizer memcheck found an error: {mc.first_error}"
    if mc is not None and mc.ran and mc.clean is None:
        return (
            Status.PROOF_FAILED,
            Stage.RUN,
            f"compute-sanitizer memcheck did not complete on the candidate, so memory safety is unproven: "
            f"{mc.first_error or 'no report'}"[:1500],
        )
    if proofs.foreign_kernels:
        names = ", ".join(proofs.foreign_kernels[:5])[:600]
        more = f" and {len(proofs.foreign_kernels) - 5} more" if len(proofs.foreign_kernels) > 5 else ""
        return (
            Status.FOREIGN_KERNEL,
            Stage.EXECUTE,
            f"{len(proofs.foreign_kernels)} kernel(s) that are not in the candidate's built module ran "
            f"during its call: {names}{more}",
        )
    if proofs.mismatch:
        return (
            Status.PROOF_FAILED,
            Stage.EXECUTE,
            f"the in-band instruction counts of the candidate disagree with Nsight Compute's: "
            f"{proofs.mismatch}"[:1500],
        )
    if proofs.profile_failed:
        return (
            Status.PROOF_FAILED,
            Stage.EXECUTE,
            f"the executed-instruction proof failed on the candidate: {proofs.profile_failed}"[:1500],
        )
    return None


def _evidence(base: Evidence, proofs: ProofResults) -> Evidence:
    """``base`` (what the worker proved in band) plus the proofs of this stage that succeeded."""

    def plus(have: list[Proof], proof: Proof | None, ok: bool) -> list[Proof]:
        return [*have, proof] if ok and proof is not None and proof not in have else list(have)

    t, mc = proofs.target, proofs.memcheck
    measured = (Verdict.YES, Verdict.NO)
    executed = t is not None and t.executed in measured
    work = t is not None and t.work in measured
    in_band = Proof.CUPTI_IN_BAND if proofs.cross_checked is not None else None
    return Evidence(
        target_executed=plus(plus(base.target_executed, in_band, executed), proofs.source, executed),
        target_work=plus(plus(base.target_work, in_band, work), proofs.source, work),
        kernel_census=plus(
            base.kernel_census, proofs.source, proofs.census_checked and not proofs.profile_failed
        ),
        memory_safety=plus(base.memory_safety, Proof.MEMCHECK, mc is not None and mc.clean is True),
    )
