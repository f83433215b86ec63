"""Looking rewards up by name, weighted sums, options and the component log."""

from __future__ import annotations

import pytest

from ptxgym.records.feedback import Status, Verdict
from ptxgym.rewards import (
    RewardResult,
    WeightedReward,
    parse_spec,
    register_reward,
    resolve_reward,
    reward_names,
)


def test_every_catalogue_name_is_registered():
    assert {
        "staged",
        "speedup",
        "log_speedup",
        "fast_p",
        "target",
        "kevin",
        "drkernel",
        "cuda_agent",
        "kernrl",
        "compiled",
        "correct",
    } <= set(reward_names())


def test_default_is_staged(fb):
    f = fb(Status.PASSED, speedup=2.0)
    assert resolve_reward(None)(f, []).total == resolve_reward("staged")(f, []).total == pytest.approx(1.0)


def test_parse_spec():
    assert parse_spec("staged + 0.5*log_speedup + 0*fast_p") == {
        "staged": 1.0,
        "log_speedup": 0.5,
        "fast_p": 0.0,
    }
    assert parse_spec("-1e-1*kernrl") == {"kernrl": -0.1}
    for bad in ("staged +", "0.5 staged", "staged+staged", "Staged"):
        with pytest.raises(ValueError):
            parse_spec(bad)


def test_weighted_sum_logs_every_term_even_at_weight_zero(fb):
    reward = resolve_reward("staged + 0.5*log_speedup + 0*fast_p")
    assert isinstance(reward, WeightedReward)
    res = reward(fb(Status.PASSED, speedup=2.0), [])
    assert res.total == pytest.approx(1.0 + 0.5 * 3.0 + 0.0)  # log_speedup: offset 2 + log2(2)
    assert res.components["fast_p"] == 1.0  # computed and logged, weight 0
    assert res.components["log_speedup"] == pytest.approx(3.0)
    assert res.components["staged.correct"] == pytest.approx(0.30)
    assert res.components["fast_p.fast_p"] == 1.0


def test_mapping_spec_and_options(fb):
    reward = resolve_reward({"fast_p": 1.0, "speedup": 0.25}, p=1.4, require_target=False)
    f = fb(Status.PASSED, speedup=1.5, executed=Verdict.UNKNOWN)
    assert reward(f, []).total == pytest.approx(1.0 + 0.25 * 1.5)


def test_unknown_name_and_unused_option_are_errors():
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        resolve_reward("nope")
    with pytest.raises(ValueError, match="not accepted"):
        resolve_reward("staged", requre_target=False)
    with pytest.raises(ValueError):
        resolve_reward(lambda f, h: RewardResult(0.0), p=1.0)


def test_callables_and_custom_registration(fb):
    def mine(feedback, history):
        return RewardResult(total=float(len(history)), components={"turns_before": float(len(history))})

    assert resolve_reward(mine) is mine

    @register_reward("history_length_for_test")
    def _factory():
        return mine

    combo = resolve_reward("2*history_length_for_test + compiled")
    f = fb(Status.NOT_EVALUATED)
    res = combo(f, [f, f])
    assert res.total == pytest.approx(2 * 2 + 1)
    assert res.components["history_length_for_test.turns_before"] == 2.0
