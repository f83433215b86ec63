"""Turning what the trusted side observed into a GpuVerdict (pure functions, no GPU needed).

Worker failures map onto statuses: a hang is TIMEOUT, a dead process is CRASH (with its exit code or
signal and the tail of its output), a malformed or forged reply is RUNTIME_ERROR, a failed call is
RUNTIME_ERROR with the CUDA error text. A failed check keeps its own status (UNWRITTEN, NONFINITE,
INCORRECT_NUMERICAL, INPUT_MUTATED) and the comparison statistics.
"""

from __future__ import annotations

from ptxgym.evaluation.compare import SetCheck
from ptxgym.evaluation.trusted.base import GpuVerdict
from ptxgym.evaluation.trusted.pool import ProtocolViolation, WorkerDied, WorkerError, WorkerTimeout
from ptxgym.records.feedback import CorrectnessInfo, EnvironmentInfo, Stage, Status, truncate
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
