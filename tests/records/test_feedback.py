"""The Feedback record: versioned, JSON round-trip, rendered as text for the model."""

from __future__ import annotations

import json

import pytest

from ptxgym.records.feedback import (
    CompileInfo,
    CorrectnessInfo,
    Evidence,
    Feedback,
    KernelResources,
    LatencyStats,
    MemcheckInfo,
    Proof,
    SassInfo,
    Stage,
    Status,
    TargetInfo,
    TimingInfo,
    Verdict,
    truncate,
)
from ptxgym.records.feedback_text import render_feedback


def _passed() -> Feedback:
    return Feedback(
        task_id="Gemm-sm90a",
        turn=2,
        status=Status.PASSED,
        stage=Stage.DONE,
        compile=CompileInfo(
            ok=True,
            resources=[KernelResources(kernel="_Z4gemmv", registers=168, shared_bytes=0, spill_stores=0)],
        ),
        sass=SassInfo(arch="sm_90a", static_target=True, histogram={"HGMMA": 8}),
        correctness=CorrectnessInfo(
            input_sets=3,
            calls_checked=40,
            max_abs_error=0.0078,
            max_rel_error=0.0039,
            rel_norm_error=0.002,
            mismatch_ratio=0.0,
        ),
        timing=TimingInfo(
            backend="events+device-sync",
            candidate=LatencyStats(median_ms=0.8, n=150),
            baseline=LatencyStats(median_ms=0.778, n=150),
            baseline_name="cublas",
            speedup=0.9725,
            sol_fraction=0.76,
        ),
        target=TargetInfo(family="wgmma", static=True, executed=Verdict.YES, counts={"HGMMA": 1024}),
    )


def test_json_round_trip_keeps_everything() -> None:
    fb = _passed()
    again = Feedback.from_json(fb.to_json())
    assert again == fb
    assert json.loads(fb.to_json())["schema_version"] == "ptxgym.feedback.v2"
    assert again.speedup == pytest.approx(0.9725) and again.correct


def test_speedup_only_for_passed() -> None:
    fb = _passed().replace(status=Status.TIMING_ANOMALY)
    assert fb.speedup is None and not fb.correct


def test_record_is_frozen_and_closed() -> None:
    fb = _passed()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError type
        fb.status = Status.CRASH  # type: ignore[misc]
    with pytest.raises(Exception):  # noqa: B017
        Feedback.from_json({**json.loads(fb.to_json()), "made_up": 1})


def test_render_passed_mentions_evidence() -> None:
    text = render_feedback(_passed())
    assert text.startswith("Turn 3 result: PASSED")
    for needle in ("168 registers", "speedup 0.973x", "Target instructions", "executed", "HGMMA=1024"):
        assert needle in text


def test_render_compile_error_shows_log() -> None:
    fb = Feedback(
        task_id="Gemm-sm90a",
        status=Status.COMPILE_ERROR,
        stage=Stage.BUILD,
        message="nvcc failed",
        compile=CompileInfo(ok=False, log="kernel.cu(3): error: x"),
    )
    text = render_feedback(fb)
    assert "kernel.cu(3): error: x" in text and "Fix the compile errors" in text


def test_render_keeps_our_own_traceback_out_of_the_model_s_view() -> None:
    """An INFRA_ERROR's log is the evaluator's traceback (host paths): for the record, not the model."""
    tb = 'Traceback (most recent call last):\n  File "/work/main/ptxgym/pipeline.py", line 1'
    infra = Feedback(task_id="Gemm-sm90a", status=Status.INFRA_ERROR, stage=Stage.RUN, message="x", log=tb)
    assert "/work/main" not in render_feedback(infra) and infra.log == tb
    crash = Feedback(
        task_id="Gemm-sm90a", status=Status.RUNTIME_ERROR, stage=Stage.RUN, message="x", log="boom"
    )
    assert "boom" in render_feedback(crash)  # the candidate's own run log still shows


def test_status_helpers() -> None:
    assert not Status.COMPILE_ERROR.compiled and Status.RUNTIME_ERROR.compiled
    assert Status.INCORRECT_NUMERICAL.ran and not Status.CRASH.ran


def test_truncate_keeps_head_and_tail() -> None:
    text = "a" * 5000 + "TAIL"
    out = truncate(text, 1000)
    assert len(out) < 1100 and out.endswith("TAIL") and "cut" in out


V1_RECORD = {  # a PASSED turn as ptxgym wrote it before the v2 fields (trimmed to what v1 required)
    "schema_version": "ptxgym.feedback.v1",
    "task_id": "Gemm-sm90a",
    "turn": 0,
    "status": "PASSED",
    "stage": "done",
    "message": "correct on 42 checked calls",
    "target": {
        "family": "wgmma",
        "mode": "executed",
        "static": True,
        "executed": "yes",
        "counts": {"HGMMA": 1},
    },
    "memcheck": {"ran": True, "clean": True, "first_error": None},
}


def test_v1_records_still_load_and_keep_their_version() -> None:
    old = Feedback.from_json(V1_RECORD)
    assert old.schema_version == "ptxgym.feedback.v1" and old.target_credited
    assert old.evidence == Evidence() and old.target is not None and old.target.work is Verdict.NOT_CHECKED
    assert Feedback.from_json(old.to_json()) == old


def test_unknown_version_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown Feedback schema_version 'ptxgym.feedback.v9'.*upgrade"):
        Feedback.from_json({**V1_RECORD, "schema_version": "ptxgym.feedback.v9"})


def test_v2_target_credit_needs_the_work_share() -> None:
    fb = _passed()
    assert fb.target_executed is Verdict.YES and not fb.target_credited  # executed, work not measured
    work = fb.target.model_copy(update={"mma_share": 0.98, "work": Verdict.YES})
    assert fb.replace(target=work).target_credited
    token = fb.target.model_copy(update={"mma_share": 3e-8, "work": Verdict.NO})
    assert not fb.replace(target=token).target_credited


@pytest.mark.parametrize(
    ("status", "needle"),
    [
        (Status.FOREIGN_KERNEL, "not from your own source"),
        (Status.PROOF_FAILED, "proof tool could not finish"),
    ],
)
def test_render_new_statuses(status: Status, needle: str) -> None:
    fb = _passed().replace(status=status, stage=Stage.EXECUTE, message="x")
    text = render_feedback(fb)
    assert text.startswith(f"Turn 3 result: {status.value}") and needle in text and "earns nothing" in text
    assert status.compiled and status.ran  # facts; the rewards decide that these pay nothing


def test_render_work_share_and_evidence() -> None:
    target = _passed().target.model_copy(update={"mma_share": 0.004, "tma_share": None, "work": Verdict.NO})
    evidence = Evidence(target_executed=[Proof.NCU_OFFLINE], memory_safety=[Proof.MEMCHECK])
    text = render_feedback(_passed().replace(target=target, evidence=evidence))
    assert "MMA FLOPs 0.4% of the task's FLOPs, TMA bytes unknown" in text and "NOT met" in text
    assert "Evidence: target executed: ncu-offline; target work: none; kernel census: none; " in text
    assert "memory safety: memcheck." in text


def test_render_a_tma_share_below_its_threshold() -> None:
    update = {"mma_share": 1.0, "tma_share": 0.1, "work": Verdict.NO}
    text = render_feedback(_passed().replace(target=_passed().target.model_copy(update=update)))
    assert "MMA FLOPs 100.0% of the task's FLOPs, TMA bytes 10.0% of its minimal traffic" in text
    assert "50% of the minimal traffic through TMA loads needed: NOT met" in text
    met = _passed().target.model_copy(update={"mma_share": 1.0, "tma_share": 3.0, "work": Verdict.YES})
    assert "TMA bytes 300.0% of its minimal traffic (at least 50% needed: met)" in render_feedback(
        _passed().replace(target=met)
    )


def test_render_failed_memcheck_says_so() -> None:
    info = MemcheckInfo(ran=True, clean=None, first_error="memcheck timed out after 180 s")
    fb = _passed().replace(status=Status.PROOF_FAILED, stage=Stage.RUN, memcheck=info)
    assert "memcheck timed out after 180 s" in render_feedback(fb)
