"""KernelEnv: Gymnasium conformance and bad input as observations (CPU; NullEvaluator)."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ptxgym  # noqa: F401 - registers the ids
from ptxgym.envs.registration import register_envs
from ptxgym.records.feedback import Feedback, Status

ALL_IDS = register_envs()

PLAIN_KERNEL = (Path(__file__).parents[1] / "data" / "plain_gemm.cu").read_text()


TRACE_FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace_dataset"


def make(env_id: str = "ptxgym/Gemm-sm90a-v0", **kw):
    if env_id == "ptxgym/Trace-v0":  # plays a dataset folder: our fixture
        kw = {"dataset": TRACE_FIXTURE, "task": "gemm_n256_k512@sm_90a", **kw}
    return gymnasium.make(env_id, evaluator="none", **kw)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_env_every_registered_id(env_id: str) -> None:
    env = make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_reset_returns_task_prompt() -> None:
    env = make()
    obs, info = env.reset(seed=0)
    assert "run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C)" in obs["text"]
    assert "gemm_n7168_k5120" in obs["text"] and info["task_id"] == "Gemm-sm90a"
    assert env.observation_space.contains(obs)


@pytest.mark.nvcc
def test_plain_kernel_builds_and_is_not_evaluated_without_gpu() -> None:
    env = make()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(f"Here you go:\n```cuda\n{PLAIN_KERNEL}\n```\n")
    fb: Feedback = info["feedback"]
    assert fb.status is Status.NOT_EVALUATED, fb.message
    assert "GPU evaluator" in fb.message
    assert fb.compile.ok and fb.sass is not None and fb.sass.static_target is False
    assert obs["correct"] == 0 and float(obs["speedup"][0]) == 0.0  # never a fake verdict
    assert fb.correctness is None and fb.timing is None
    assert set(info["reward_components"]) >= {"compiled", "correct"}
    assert info["reward_components"]["correct"] == 0.0
    assert not terminated and not truncated
    assert env.observation_space.contains(obs)


BAD_ACTIONS = {
    "empty": ("", Status.EXTRACT_ERROR),
    "random_text": ("the quick brown fox " * 50, Status.EXTRACT_ERROR),
    "megabytes": ("x" * 3_000_000, Status.EXTRACT_ERROR),
    "binary_junk": (os.urandom(4096).decode("latin-1"), Status.EXTRACT_ERROR),
    "python_block": ("```python\nprint('hi')\n```", Status.EXTRACT_ERROR),
    "etc_passwd": ('```cuda\n#include "/etc/passwd"\n__global__ void k(){}\n```', Status.STATIC_REJECT),
    "outside_include": (
        '```cuda\n#include "../../secret.h"\n__global__ void k(){}\n```',
        Status.STATIC_REJECT,
    ),
    "cublas": ("```cuda\n#include <cublas_v2.h>\n__global__ void k(){}\n```", Status.STATIC_REJECT),
    # a file named like the folder of another once failed in our own code (INFRA_ERROR: the evaluator's
    # fault, unpaid penalty, dropped by GRPO) and showed a traceback with host paths
    "file_and_folder": (
        "```cuda kernel.cu\n__global__ void k(){}\n```\n```cuda kernel.cu/x.h\nint a;\n```",
        Status.EXTRACT_ERROR,
    ),
    "lone_surrogate": ("```cuda\n__global__ void k(){} // \ud800\n```", Status.EXTRACT_ERROR),
}


@pytest.mark.parametrize("name", sorted(BAD_ACTIONS))
def test_bad_actions_are_observations(name: str) -> None:
    action, expected = BAD_ACTIONS[name]
    env = make()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    fb: Feedback = info["feedback"]
    assert fb.status is expected, (fb.status, fb.message)
    assert fb.message, "every failure carries a message"
    assert obs["status"] == expected.value and obs["text"]
    assert env.observation_space.contains(obs)


@pytest.mark.nvcc
def test_wrong_arch_code_is_a_compile_error() -> None:
    tcgen05 = PLAIN_KERNEL.replace(
        "if (row >= M || col >= N) return;",
        'if (row >= M || col >= N) return;\n  asm volatile("tcgen05.fence::before_thread_sync;");',
    )
    env = make()
    env.reset(seed=0)
    _, _, _, _, info = env.step(f"```cpp\n{tcgen05}\n```")
    fb: Feedback = info["feedback"]
    assert fb.status is Status.COMPILE_ERROR, fb.message
    assert "tcgen05" in (fb.compile.log + fb.message)


def test_episode_truncates_after_max_turns() -> None:
    env = make(max_turns=2)
    env.reset(seed=0)
    assert env.step("no code")[3] is False
    _, _, terminated, truncated, info = env.step("still no code")
    assert truncated and not terminated and info["turn"] == 2
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("after the end")


def test_reward_callable_and_unknown_name() -> None:
    seen = []

    def my_reward(fb, history):
        from ptxgym.rewards import RewardResult

        seen.append((fb.status, len(history)))
        return RewardResult(total=-1.0, components={"mine": -1.0})

    env = make(reward=my_reward)
    env.reset(seed=0)
    _, r, *_ = env.step("")
    _, r2, *_ = env.step("")
    assert r == -1.0 and seen == [(Status.EXTRACT_ERROR, 0), (Status.EXTRACT_ERROR, 1)]
    with pytest.raises(KeyError, match="staged"):
        make(reward="no-such-reward")


def test_speedup_observation_dtype() -> None:
    env = make()
    obs, _ = env.reset(seed=0)
    assert obs["speedup"].dtype == np.float32 and obs["speedup"].shape == (1,)


def test_reset_with_history_resumes_the_episode() -> None:
    env = make(max_turns=4)
    env.reset(seed=0)
    _, _, _, _, info = env.step("no code at all")
    recorded = [info["feedback"]]
    fresh = make(max_turns=4)
    obs, info = fresh.reset(seed=0, options={"history": recorded})
    assert obs["turn"] == 1 and info["turn"] == 1 and obs["status"] == "EXTRACT_ERROR"
    assert fresh.unwrapped.history == tuple(recorded)
    _, _, _, _, info = fresh.step("still none")
    assert info["turn"] == 2 and info["feedback"].turn == 1


def test_shared_evaluator_survives_env_close() -> None:
    from ptxgym.evaluation.trusted.base import NullEvaluator

    class Counting(NullEvaluator):
        closed = 0

        def close(self) -> None:
            Counting.closed += 1

    shared = Counting()
    make_shared = gymnasium.make("ptxgym/Gemm-sm90a-v0", evaluator=shared)
    make_shared.close()
    assert Counting.closed == 0


def _passed(speedup: float) -> Feedback:
    from ptxgym.records.feedback import Stage, TimingInfo

    timing = TimingInfo(backend="cupti", speedup=speedup)
    return Feedback(task_id="Gemm-sm90a", status=Status.PASSED, stage=Stage.DONE, timing=timing)


class PerTurn:
    """1 per PASSED turn; notes how often it saw the same feedback in its history."""

    def __init__(self, require_target: bool) -> None:
        self.require_target, self.seen = require_target, []

    def __call__(self, fb, history):
        from ptxgym.rewards import RewardResult

        self.seen.append(sum(1 for h in history if h is fb))
        return RewardResult(total=1.0 if fb.status is Status.PASSED else 0.0, components={})


@pytest.mark.parametrize(("pay", "gamma"), [(True, 1.0), (True, 0.5), (False, 1.0)])
def test_a_turn_that_ends_the_episode_is_paid_for_the_turns_it_cuts_off(pay: bool, gamma: float) -> None:
    """Reaching the target must never pay less than staying just below it and resubmitting.

    (Reviewer's find: with a per-turn reward a 1.19x kernel resubmitted for 8 turns out-earned a 2.0x
    kernel that ended the episode.) Each cut-off turn pays the reward's own answer for a repeat,
    discounted as a trainer would (``cut_off_gamma``).
    """
    reward = PerTurn(require_target=False)
    env = make(reward=reward, max_turns=8, pay_cut_off_turns=pay, cut_off_gamma=gamma).unwrapped
    env.reset(seed=0)
    _, below, terminated, _, _ = env.end_step(_passed(1.19))  # turn 1: below the target, goes on
    assert below == 1.0 and not terminated
    _, got, terminated, _, info = env.end_step(_passed(2.0))  # turn 2 of 8 ends the episode
    assert terminated
    if pay:
        assert got == pytest.approx(1.0 + sum(gamma ** (k + 1) for k in range(6)))
        assert info["reward_components"]["cut_off_turns"] == 6.0
        assert reward.seen[2:] == [1, 2, 3, 4, 5, 6]  # each repeat saw the turn once more in its history
    else:
        assert got == 1.0 and "cut_off_turns" not in info["reward_components"]


def test_a_fast_turn_without_the_proven_target_neither_ends_the_episode_nor_is_paid_for_more() -> None:
    """A fast PASSED turn whose target is not proven earns its own reward only, and the episode goes on.

    (Reviewers' finds: multiplying its reward made a kernel without the target instruction out-earn an
    honest qualifying one; ending the episode on it capped a policy's losses at one milestone penalty.)
    """
    env = make(reward=PerTurn(require_target=True), max_turns=8).unwrapped
    env.reset(seed=0)
    _, got, terminated, truncated, info = env.end_step(_passed(2.0))  # no target record: not proven
    assert (
        not terminated and not truncated and got == 1.0 and "cut_off_turns" not in info["reward_components"]
    )
    env.begin_step("next turn")  # still playable
    _, _, terminated, _, _ = make(reward=PerTurn(require_target=False)).unwrapped.end_step(_passed(2.0))
    assert terminated  # a reward that does not require the target: the same turn qualifies


def test_a_speedup_no_reward_credits_does_not_end_the_episode() -> None:
    """An infinite speedup is credited by no reward (``gate.speedup_of``): it must not end the episode."""
    env = make(reward=PerTurn(require_target=False), max_turns=4).unwrapped
    env.reset(seed=0)
    _, _, terminated, _, _ = env.end_step(_passed(float("inf")))
    assert not terminated


def test_a_step_after_the_episode_terminated_needs_a_reset() -> None:
    """Once a turn ended the episode (and was paid for the turns it cut off), no further step is paid."""
    env = make(reward=PerTurn(require_target=False), max_turns=4).unwrapped
    env.reset(seed=0)
    _, _, terminated, _, _ = env.end_step(_passed(2.0))
    assert terminated
    with pytest.raises(gymnasium.error.ResetNeeded, match="terminated"):
        env.step("```cuda\n__global__ void k() {}\n```")
    env.reset(seed=1)
    env.begin_step("a new episode plays")
    with pytest.raises(ValueError, match="cannot resume"):  # nor can the ended episode be resumed
        env.reset(options={"history": [_passed(2.0)]})


def test_a_proven_turn_is_paid_for_its_cut_off_turns_under_a_composite_reward() -> None:
    """The target required and proven; a weighted reward answers ``require_target`` for its terms."""
    from ptxgym.records.feedback import TargetInfo, Verdict
    from ptxgym.rewards import resolve_reward

    reward = resolve_reward("staged + 0.5*log_speedup")
    assert reward.require_target is True
    assert resolve_reward("staged + 0.5*log_speedup", require_target=False).require_target is False
    proven = TargetInfo(family="wgmma", executed=Verdict.YES, work=Verdict.YES, mma_share=1.0)
    fb = _passed(2.0).replace(target=proven)
    env = make(reward=reward, max_turns=4).unwrapped
    env.reset(seed=0)
    _, got, terminated, _, info = env.end_step(fb)
    once = reward(fb, ()).total
    assert terminated and info["reward_components"]["cut_off_turns"] == 3.0
    assert got == pytest.approx(once + info["reward_components"]["cut_off_reward"]) and got > once
