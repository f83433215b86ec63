"""Feedback records for reward tests, built through the real pydantic models."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ptxgym.records.feedback import (
    CompileInfo,
    Feedback,
    LatencyStats,
    SassInfo,
    Stage,
    Status,
    TargetInfo,
    TimingInfo,
    Verdict,
    work_verdict,
)

_STAGE = {
    Status.EXTRACT_ERROR: Stage.EXTRACT,
    Status.STATIC_REJECT: Stage.SCREEN,
    Status.COMPILE_ERROR: Stage.BUILD,
    Status.COMPILE_TIMEOUT: Stage.BUILD,
    Status.NOT_EVALUATED: Stage.RUN,
    Status.RUNTIME_ERROR: Stage.RUN,
    Status.TIMEOUT: Stage.RUN,
    Status.CRASH: Stage.RUN,
    Status.MEMORY_ERROR: Stage.RUN,
    Status.TIMING_ANOMALY: Stage.TIME,
    Status.PASSED: Stage.DONE,
    Status.INFRA_ERROR: Stage.RUN,
    Status.FOREIGN_KERNEL: Stage.EXECUTE,
    Status.PROOF_FAILED: Stage.EXECUTE,
}


def make_feedback(
    status: Status,
    speedup: float | None = None,
    executed: Verdict = Verdict.YES,
    mode: str = "executed",
    static: bool = True,
    turn: int = 0,
    with_target: bool = True,
    compile_ok: bool | None = None,
    mma_share: float | None = 1.0,
) -> Feedback:
    """A Feedback as the pipeline would write it for ``status`` (stage parts filled as far as it got).

    An executed target comes with its work share (``mma_share``, 1.0 by default: an expert kernel's).
    """
    got_built = status.compiled if compile_ok is None else compile_ok
    parts: dict = {}
    if status is not Status.EXTRACT_ERROR:
        parts["source_sha256"] = "ab" * 32
        parts["source_chars"] = 1200
    if got_built:
        parts["compile"] = CompileInfo(ok=True, log="ptxas info", nvcc_version="13.0")
        parts["sass"] = SassInfo(
            arch="sm_90a", static_target=static, histogram={"HGMMA": 4} if static else {}
        )
    elif status in (Status.COMPILE_ERROR, Status.COMPILE_TIMEOUT):
        parts["compile"] = CompileInfo(ok=False, log="error: expected ';'")
    if status.ran:
        parts["timing"] = TimingInfo(
            backend="cupti",
            candidate=LatencyStats(median_ms=1.0 / (speedup or 1.0)),
            baseline=LatencyStats(median_ms=1.0),
            speedup=speedup,
        )
        if with_target:
            measured = executed is Verdict.YES
            parts["target"] = TargetInfo(
                family="wgmma/TMA",
                mode=mode,
                static=static,
                executed=executed,
                mma_share=mma_share if measured else None,
                work=work_verdict(mma_share) if measured else Verdict.NOT_CHECKED,
            )
    return Feedback(
        task_id="Gemm-sm90a",
        turn=turn,
        status=status,
        stage=_STAGE.get(status, Stage.CHECK),
        message=f"{status.value} for the test",
        **parts,
    )


@pytest.fixture
def fb() -> Callable[..., Feedback]:
    """The ``make_feedback`` factory."""
    return make_feedback
