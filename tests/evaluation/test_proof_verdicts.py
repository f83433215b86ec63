"""The proof stages can only take a PASSED away: memory errors, failed tools, foreign kernels (no GPU)."""

from __future__ import annotations

import pytest

from ptxgym.evaluation.trusted.base import GpuVerdict
from ptxgym.evaluation.trusted.verdicts import ProofResults, with_proofs
from ptxgym.records.feedback import (
    Evidence,
    LatencyStats,
    MemcheckInfo,
    Proof,
    Stage,
    Status,
    TargetInfo,
    TimingInfo,
    Verdict,
)


def _passed(**extra) -> GpuVerdict:
    timing = TimingInfo(backend="cupti", candidate=LatencyStats(median_ms=0.8), speedup=0.97)
    return GpuVerdict(status=Status.PASSED, stage=Stage.DONE, message="correct", timing=timing, **extra)


def _target(executed: Verdict = Verdict.YES, work: Verdict = Verdict.YES) -> TargetInfo:
    share = 1.0 if work is Verdict.YES else None
    return TargetInfo(family="wgmma", executed=executed, work=work, mma_share=share)


CLEAN = MemcheckInfo(ran=True, clean=True)
TIMED_OUT = MemcheckInfo(ran=True, clean=None, first_error="memcheck timed out after 180 s")
CRASHED = MemcheckInfo(ran=True, clean=None, first_error="compute-sanitizer could not complete (exit 139)")
ERROR = MemcheckInfo(ran=True, clean=False, first_error="Invalid __global__ read of size 2 bytes")
ABSENT = MemcheckInfo(ran=False, first_error="compute-sanitizer is not installed here")


@pytest.mark.parametrize("memcheck", [TIMED_OUT, CRASHED])
def test_a_memcheck_that_did_not_complete_is_never_passed(memcheck):
    got = with_proofs(_passed(), ProofResults(memcheck=memcheck))
    assert got.status is Status.PROOF_FAILED and got.stage is Stage.RUN
    assert memcheck.first_error in got.message and got.timing.speedup is None
    assert got.evidence.memory_safety == []


def test_a_memcheck_error_is_a_memory_error():
    got = with_proofs(_passed(), ProofResults(memcheck=ERROR))
    assert got.status is Status.MEMORY_ERROR and "Invalid __global__ read" in got.message
    assert got.timing.speedup is None


def test_clean_memcheck_and_profile_are_recorded_as_evidence():
    got = with_proofs(_passed(), ProofResults(memcheck=CLEAN, target=_target(), census_checked=True))
    assert got.status is Status.PASSED and got.timing.speedup == pytest.approx(0.97)
    assert got.evidence == Evidence(
        target_executed=[Proof.NCU_OFFLINE],
        target_work=[Proof.NCU_OFFLINE],
        kernel_census=[Proof.NCU_OFFLINE],
        memory_safety=[Proof.MEMCHECK],
    )


def test_in_band_evidence_is_kept():
    base = Evidence(memory_safety=[Proof.GUARD_REGIONS], kernel_census=[Proof.CUPTI_IN_BAND])
    got = with_proofs(_passed(evidence=base), ProofResults(memcheck=CLEAN))
    assert got.evidence.memory_safety == [Proof.GUARD_REGIONS, Proof.MEMCHECK]
    assert got.evidence.kernel_census == [Proof.CUPTI_IN_BAND] and got.evidence.target_executed == []


def test_a_missing_tool_proves_nothing_but_takes_nothing():
    unknown = _target(Verdict.UNKNOWN, Verdict.UNKNOWN)
    got = with_proofs(_passed(), ProofResults(memcheck=ABSENT, target=unknown))
    assert got.status is Status.PASSED and got.evidence == Evidence()


def test_a_failed_profiler_is_proof_failed():
    unknown = _target(Verdict.UNKNOWN, Verdict.UNKNOWN)
    got = with_proofs(_passed(), ProofResults(memcheck=CLEAN, target=unknown, profile_failed="ncu exited 1"))
    assert got.status is Status.PROOF_FAILED and got.stage is Stage.EXECUTE and "ncu exited 1" in got.message
    assert got.target == unknown and got.evidence.target_executed == []


def test_a_foreign_kernel_forfeits_the_turn():
    names = ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",)
    got = with_proofs(_passed(), ProofResults(target=_target(), foreign_kernels=names, census_checked=True))
    assert got.status is Status.FOREIGN_KERNEL and names[0] in got.message
    assert got.evidence.kernel_census == [Proof.NCU_OFFLINE]


def test_a_failed_turn_is_left_alone():
    failed = GpuVerdict(status=Status.INCORRECT_NUMERICAL, stage=Stage.CHECK, message="wrong")
    assert with_proofs(failed, ProofResults(memcheck=TIMED_OUT)) == failed
