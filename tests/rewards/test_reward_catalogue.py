"""Speedup, log-speedup, Fast_p, target bonus, Kevin, Dr. Kernel and milestone rewards: hand-computed."""

from __future__ import annotations

import math

import pytest

from ptxgym.records.feedback import Status, Verdict
from ptxgym.rewards import (
    CudaAgentReward,
    DrKernelReward,
    FastPReward,
    KernrlReward,
    KevinReward,
    LogSpeedupReward,
    SpeedupReward,
    TargetBonus,
    discounted_returns,
    episode_returns,
)

NON_PASSED = [s for s in Status if s is not Status.PASSED]


@pytest.mark.parametrize("status", NON_PASSED)
def test_no_quality_reward_pays_for_a_non_passed_status(fb, status):
    f = fb(status, speedup=4.0)
    for reward in (
        SpeedupReward(),
        LogSpeedupReward(),
        FastPReward(),
        TargetBonus(),
        KevinReward(),
        DrKernelReward(),
    ):
        assert reward(f, []).total == 0.0, (reward, status)


@pytest.mark.parametrize("executed", [Verdict.UNKNOWN, Verdict.NO, Verdict.NOT_CHECKED])
def test_unproven_target_pays_nothing_by_default(fb, executed):
    f = fb(Status.PASSED, speedup=1.5, executed=executed)
    for reward in (
        SpeedupReward(),
        LogSpeedupReward(),
        FastPReward(),
        TargetBonus(),
        KevinReward(),
        DrKernelReward(),
    ):
        assert reward(f, []).total == 0.0, reward


def test_speedup_and_log_speedup(fb):
    assert SpeedupReward()(fb(Status.PASSED, speedup=1.7), []).total == pytest.approx(1.7)
    assert SpeedupReward()(fb(Status.PASSED, speedup=9.0), []).total == pytest.approx(3.0)
    # the offset (clip, 2) keeps a correct kernel at or above a failed turn's 0
    assert LogSpeedupReward()(fb(Status.PASSED, speedup=2.0), []).total == pytest.approx(3.0)
    assert LogSpeedupReward()(fb(Status.PASSED, speedup=0.5), []).total == pytest.approx(1.0)
    assert LogSpeedupReward()(fb(Status.PASSED, speedup=0.01), []).total == pytest.approx(0.0)  # clipped
    assert LogSpeedupReward()(fb(Status.PASSED, speedup=100.0), []).total == pytest.approx(4.0)
    bare = LogSpeedupReward(correct_offset=0.0)
    assert bare(fb(Status.PASSED, speedup=0.7), []).total == pytest.approx(math.log2(0.7))
    loose = LogSpeedupReward(require_target=False)
    assert loose(fb(Status.PASSED, speedup=4.0, executed=Verdict.UNKNOWN), []).total == pytest.approx(4.0)


@pytest.mark.parametrize("status", NON_PASSED)
def test_no_turn_that_fails_pays_more_than_the_slowest_correct_one(fb, status):
    """Rewards of our own design order every correct kernel at or above every failed turn.

    (``kernrl`` reproduces a published reward as it is, which does not: its docstring says so.)
    """
    slowest = fb(Status.PASSED, speedup=1e-4)
    for reward in (SpeedupReward(), LogSpeedupReward(), FastPReward(), KevinReward(), DrKernelReward()):
        assert reward(fb(status, speedup=4.0), []).total <= reward(slowest, []).total, (reward, status)


def test_fast_p(fb):
    assert FastPReward()(fb(Status.PASSED, speedup=1.01), []).total == 1.0
    assert FastPReward()(fb(Status.PASSED, speedup=1.0), []).total == 0.0  # strictly faster
    assert FastPReward(p=0.5)(fb(Status.PASSED, speedup=0.6), []).total == 1.0
    assert FastPReward(p=1.2)(fb(Status.PASSED, speedup=1.1), []).total == 0.0


def test_target_bonus_needs_run_time_proof(fb):
    assert TargetBonus()(fb(Status.PASSED, speedup=0.2), []).total == 1.0
    static_only = fb(Status.PASSED, speedup=0.2, executed=Verdict.NOT_CHECKED, mode="static", static=True)
    assert TargetBonus()(static_only, []).total == 0.0
    assert TargetBonus(bonus=0.5)(fb(Status.PASSED, speedup=0.2), []).total == 0.5
    token_wgmma = fb(Status.PASSED, speedup=0.2, mma_share=1e-6)  # one wgmma per call
    assert TargetBonus()(token_wgmma, []).total == 0.0


def test_kevin_score(fb):
    assert KevinReward()(fb(Status.PASSED, speedup=0.8), []).total == pytest.approx(1.1)
    assert KevinReward(speedup_cap=2.0)(fb(Status.PASSED, speedup=5.0), []).total == pytest.approx(2.3)
    assert KevinReward()(fb(Status.INCORRECT_NUMERICAL), []).total == 0.0


def test_discounted_returns_by_hand():
    # R_2 = 1.1; R_1 = 0 + 0.4 * 1.1 = 0.44; R_0 = 0.5 + 0.4 * 0.44 = 0.676
    assert discounted_returns([0.5, 0.0, 1.1], 0.4) == pytest.approx([0.676, 0.44, 1.1])
    assert discounted_returns([1.0, 1.0, 1.0], 1.0) == pytest.approx([3.0, 2.0, 1.0])
    assert discounted_returns([], 0.4) == []
    with pytest.raises(ValueError):
        discounted_returns([1.0], 1.5)


def test_episode_returns_use_the_kevin_score(fb):
    episode = [
        fb(Status.COMPILE_ERROR, turn=0),
        fb(Status.PASSED, speedup=0.7, turn=1),
        fb(Status.PASSED, speedup=1.2, turn=2),
    ]
    # S = [0, 1.0, 1.5]; R_2 = 1.5; R_1 = 1.0 + 0.6 = 1.6; R_0 = 0 + 0.64
    assert episode_returns(episode) == pytest.approx([0.64, 1.6, 1.5])


def test_drkernel_improvement_over_best_earlier_turn(fb):
    r = DrKernelReward()
    first = fb(Status.PASSED, speedup=0.6, turn=0)
    assert r(first, []).total == pytest.approx(0.5)  # correct, not above the baseline (reference 1.0)
    faster = fb(Status.PASSED, speedup=1.3, turn=1)
    assert r(faster, [first]).total == pytest.approx(1.0)  # 1.3 >= 1.01 * max(1.0, 0.6)
    same = fb(Status.PASSED, speedup=1.3, turn=2)
    assert r(same, [first, faster]).total == pytest.approx(0.5)  # not 1% above the best so far
    slightly = fb(Status.PASSED, speedup=1.32, turn=3)
    assert r(slightly, [first, faster, same]).total == pytest.approx(1.0)  # 1.32 >= 1.313
    # an earlier turn that does not qualify is no reference
    unknown = fb(Status.PASSED, speedup=5.0, executed=Verdict.UNKNOWN)
    assert r(faster, [unknown]).components["improved"] == 0.5
    r0 = DrKernelReward(initial_reference=0.0)
    assert r0(first, []).total == pytest.approx(1.0)


def test_cuda_agent_milestones(fb):
    r = CudaAgentReward()
    assert r(fb(Status.COMPILE_ERROR), []).total == -1.0
    assert r(fb(Status.INCORRECT_NUMERICAL), []).total == -1.0
    assert r(fb(Status.TIMING_ANOMALY), []).total == -1.0
    assert r(fb(Status.PASSED, speedup=1.5, executed=Verdict.UNKNOWN), []).total == -1.0
    assert r(fb(Status.NOT_EVALUATED), []).total == 0.0
    assert r(fb(Status.INFRA_ERROR), []).total == 0.0
    assert r(fb(Status.INFRA_ERROR).replace(candidate_ran=True), []).total == -1.0  # as a broken proof
    assert r(fb(Status.PASSED, speedup=0.9), []).total == 1.0
    assert r(fb(Status.PASSED, speedup=1.1), []).total == 2.0
    assert r(fb(Status.FOREIGN_KERNEL, speedup=3.0), []).total == -1.0
    assert r(fb(Status.PROOF_FAILED, speedup=3.0), []).total == -1.0


def test_kernrl(fb):
    r = KernrlReward()
    assert r(fb(Status.EXTRACT_ERROR), []).total == -0.5
    assert r(fb(Status.COMPILE_ERROR), []).total == -0.5
    assert r(fb(Status.RUNTIME_ERROR), []).total == -0.25
    assert r(fb(Status.NOT_EVALUATED), []).total == 0.0
    assert r(fb(Status.PASSED, speedup=0.6), []).total == pytest.approx(-0.2)
    assert r(fb(Status.PASSED, speedup=1.5), []).total == pytest.approx(0.5)
    assert r(fb(Status.PASSED, speedup=7.0), []).total == pytest.approx(2.0)
    assert r(fb(Status.FOREIGN_KERNEL, speedup=3.0), []).total == -0.5
    assert r(fb(Status.PROOF_FAILED, speedup=3.0), []).total == -0.5
