"""The quality gate and the staged reward, against hand-computed values for every status."""

from __future__ import annotations

import json

import pytest

from ptxgym.records.feedback import Feedback, Status, Verdict
from ptxgym.rewards import StagedReward, qualifies, resolve_reward, speedup_of

# Default weights: extracted 0.05, compiled 0.10, ran 0.10, correct 0.30, target 0.15, speed 0.30 (cap 2).
EXPECTED_FAILURES = {
    Status.EXTRACT_ERROR: 0.0,
    Status.TASK_MISMATCH: 0.05,  # a Solution for another definition: code was given, nothing built
    Status.STATIC_REJECT: 0.05,
    Status.COMPILE_ERROR: 0.05,
    Status.COMPILE_TIMEOUT: 0.05,
    Status.NOT_EVALUATED: 0.15,
    Status.RUNTIME_ERROR: 0.15,
    Status.TIMEOUT: 0.15,
    Status.CRASH: 0.15,
    Status.MEMORY_ERROR: 0.15,
    Status.INCORRECT_SHAPE: 0.25,
    Status.INCORRECT_DTYPE: 0.25,
    Status.INCORRECT_NUMERICAL: 0.25,
    Status.NONFINITE: 0.25,
    Status.UNWRITTEN: 0.25,
    Status.INPUT_MUTATED: 0.25,
    Status.TIMING_ANOMALY: 0.25,
    Status.INFRA_ERROR: 0.15,
    Status.FOREIGN_KERNEL: 0.0,  # forfeits: not even stage credit
    Status.PROOF_FAILED: 0.0,
}


def test_every_status_is_covered():
    assert set(EXPECTED_FAILURES) | {Status.PASSED} == set(Status)


@pytest.mark.parametrize("status", list(EXPECTED_FAILURES))
def test_staged_failures_pay_stage_credit_only(fb, status):
    f = fb(status, speedup=5.0)
    res = StagedReward()(f, [])
    assert res.total == pytest.approx(EXPECTED_FAILURES[status])
    assert res.components["correct"] == res.components["speed"] == res.components["target"] == 0.0
    assert not qualifies(f) and speedup_of(f) is None


def test_infra_error_without_a_build_pays_nothing(fb):
    f = fb(Status.INFRA_ERROR, compile_ok=False).replace(source_sha256=None)
    assert StagedReward()(f, []).total == 0.0


def test_an_infra_error_after_the_candidate_ran_forfeits_like_a_broken_proof(fb):
    """Breaking the evaluator's own code once loaded must not pay more than a proof that caught it."""
    before = fb(Status.INFRA_ERROR)
    assert not before.candidate_ran and StagedReward()(before, []).total == pytest.approx(0.15)
    after = before.replace(candidate_ran=True)
    assert StagedReward()(after, []).total == StagedReward()(fb(Status.PROOF_FAILED), []).total == 0.0


@pytest.mark.parametrize(
    ("speedup", "executed", "expected"),
    [
        (1.5, Verdict.YES, 0.25 + 0.30 + 0.15 + 0.30 * 1.5 / 2),
        (3.0, Verdict.YES, 1.0),  # speed capped at 2x
        (0.1, Verdict.YES, 0.25 + 0.30 + 0.15 + 0.015),
        (1.5, Verdict.UNKNOWN, 0.25),  # profiling failed: never a yes
        (1.5, Verdict.NO, 0.25),
        (1.5, Verdict.NOT_CHECKED, 0.25),
    ],
)
def test_staged_passed(fb, speedup, executed, expected):
    res = StagedReward()(fb(Status.PASSED, speedup=speedup, executed=executed), [])
    assert res.total == pytest.approx(expected)


def test_staged_without_target_requirement(fb):
    f = fb(Status.PASSED, speedup=0.5, executed=Verdict.UNKNOWN)
    res = StagedReward(require_target=False)(f, [])
    assert res.total == pytest.approx(0.25 + 0.30 + 0.0 + 0.30 * 0.25)
    assert res.components["target"] == 0.0


def test_gate_modes(fb):
    off = fb(Status.PASSED, speedup=1.0, executed=Verdict.NOT_CHECKED, mode="off")
    static_yes = fb(Status.PASSED, speedup=1.0, executed=Verdict.NOT_CHECKED, mode="static", static=True)
    static_no = fb(Status.PASSED, speedup=1.0, executed=Verdict.NOT_CHECKED, mode="static", static=False)
    no_record = fb(Status.PASSED, speedup=1.0, with_target=False)
    assert qualifies(off) and qualifies(static_yes)
    assert not qualifies(static_no) and not qualifies(no_record)
    assert qualifies(no_record, require_target=False)
    # mode off: correct + speed, but the target stage (needs an executed yes) is unpaid
    assert StagedReward()(off, []).total == pytest.approx(0.25 + 0.30 + 0.15)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
def test_gate_rejects_nonsense_speedups(fb, bad):
    f = fb(Status.PASSED, speedup=bad)
    assert qualifies(f) and speedup_of(f) is None
    assert StagedReward()(f, []).components["speed"] == 0.0


def test_static_target_is_logged_at_weight_zero_and_paid_when_weighted(fb):
    f = fb(Status.NOT_EVALUATED, static=True)
    assert "static_target" in StagedReward()(f, []).components
    assert StagedReward()(f, []).components["static_target"] == 0.0
    assert resolve_reward("staged", static_target=0.2)(f, []).total == pytest.approx(0.35)


def test_rewards_are_pure_functions_of_the_json(fb):
    f = fb(Status.PASSED, speedup=1.25)
    again = Feedback.from_json(json.loads(f.to_json()))
    assert StagedReward()(again, []) == StagedReward()(f, [])


@pytest.mark.parametrize(
    ("share", "target_paid"),
    [(1.0, True), (1.03, True), (0.5, True), (0.49, False), (0.125, False), (2.7e-8, False), (None, False)],
)
def test_target_credit_needs_the_work_share(fb, share, target_paid):
    """A wgmma that executes but does a token part of the FLOPs (one per call) earns no target credit."""
    f = fb(Status.PASSED, speedup=1.5, mma_share=share)
    res = StagedReward()(f, [])
    assert qualifies(f) is target_paid
    assert res.components["target"] == pytest.approx(0.15 if target_paid else 0.0)
    assert res.total == pytest.approx(0.25 + (0.30 + 0.15 + 0.30 * 1.5 / 2 if target_paid else 0.0))


def test_a_v1_record_keeps_its_rule(fb):
    """Old trajectories (no work share) are judged as they were written: an executed yes was enough."""
    data = json.loads(fb(Status.PASSED, speedup=1.5, mma_share=None).to_json())
    assert not qualifies(Feedback.from_json(data))
    data["schema_version"] = "ptxgym.feedback.v1"
    old = Feedback.from_json(data)
    assert qualifies(old) and StagedReward()(old, []).components["target"] == pytest.approx(0.15)


@pytest.mark.parametrize("status", [Status.FOREIGN_KERNEL, Status.PROOF_FAILED])
def test_forfeits_pay_less_than_any_honest_failure(fb, status):
    f = fb(status, speedup=3.0)
    honest = [fb(s, speedup=3.0) for s in EXPECTED_FAILURES if s not in (status, Status.EXTRACT_ERROR)]
    staged = StagedReward()
    assert all(v == 0.0 for v in staged(f, []).components.values())
    assert all(staged(f, []).total <= staged(h, []).total for h in honest)
