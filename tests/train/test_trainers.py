"""SFT and GRPO (single- and multi-turn) smoke runs on a tiny model built locally; rewards from the env."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ptxgym.rewards import RewardResult, discounted_returns  # noqa: E402
from ptxgym.train.fixit import FixitConfig, build_fixit  # noqa: E402
from ptxgym.train.grpo import build_trainer, get_recipe, train_grpo  # noqa: E402
from ptxgym.train.rollout import MultiTurnRollout, RolloutConfig  # noqa: E402
from ptxgym.train.sft import get_recipe as sft_recipe  # noqa: E402
from ptxgym.train.sft import train_sft  # noqa: E402
from ptxgym.train.sft_examples import to_hf_dataset  # noqa: E402
from ptxgym.train.tiny import TinyConfig, corpus_for_tasks, tiny_model, train_tokenizer  # noqa: E402

TINY = TinyConfig(vocab_size=768, hidden_size=32, intermediate_size=64, layers=1, heads=2)


@pytest.fixture(scope="module")
def tokenizer(kernel_text):
    """A tokenizer trained on the Gemm prompt and the fixture kernels."""
    return train_tokenizer(corpus_for_tasks(["Gemm-sm90a"], [kernel_text("naive_gemm")]), TINY)


@pytest.fixture
def tiny(tokenizer):
    """A fresh random tiny model (PEFT wraps models in place, so no test reuses one) and the tokenizer."""
    return tiny_model(tokenizer, TINY), tokenizer


def test_sft_trains_on_the_last_assistant_message_only(tiny, records, tmp_path):
    model, tok = tiny
    examples = build_fixit(records, FixitConfig(pairing=("trajectory",))).examples
    recipe = sft_recipe("smoke", max_steps=2, batch_size=1, max_length=32_768)
    run = train_sft(model, to_hf_dataset(examples), tmp_path / "sft", recipe, tokenizer=tok)
    assert run.rows == 1 and run.dropped_long == 0 and len(run.losses) == 2
    assert (run.adapter_dir / "adapter_config.json").is_file()
    row = run.trainer.train_dataset[0]
    trained = [t for t, label in zip(row["input_ids"], row["labels"], strict=True) if label != -100]
    assert tok.decode(trained) == examples[0].messages[-1].content + "<|im_end|>"
    assert len(trained) < len(row["input_ids"]) // 3  # the 4 prompt messages carry no loss


def test_sft_drops_rows_longer_than_max_length(tiny, records, tmp_path):
    model, tok = tiny
    examples = build_fixit(records, FixitConfig(pairing=("trajectory",))).examples
    with pytest.raises(ValueError, match="longer than max_length=64"):
        train_sft(
            model,
            to_hf_dataset(examples),
            tmp_path / "sft",
            sft_recipe("smoke", max_length=64, drop_long=True),
            tokenizer=tok,
        )


def test_grpo_single_turn_step_with_cpu_stage_rewards(tiny, tmp_path):
    model, tok = tiny
    recipe = get_recipe(
        "smoke",
        **{"optim.batch_size": 2, "generation.num_generations": 2, "generation.max_completion_length": 16},
    )
    run = train_grpo(model, recipe, tmp_path / "grpo", tokenizer=tok)
    (step,) = [h for h in run.log_history if "reward" in h]
    assert step["ptxgym/status/EXTRACT_ERROR"] == 1.0  # a random model writes no code block
    assert step["rewards/ptxgym_staged/mean"] == 0.0 and "ptxgym/reward/compiled" in step
    assert (run.adapter_dir / "adapter_config.json").is_file()


@pytest.mark.nvcc
def test_env_reward_scores_a_batch_in_the_pipeline(kernel_text):
    from ptxgym.train.env_reward import EnvReward, PipelinePool

    pool = PipelinePool("none", max_workers=3)
    reward = EnvReward("staged", pool)
    completions = [
        [{"role": "assistant", "content": f"```cpp\n{kernel_text(k)}```"}]
        for k in ("naive_gemm", "gemm_typo")
    ] + [[{"role": "assistant", "content": "no code"}]]
    logged: dict[str, float] = {}
    extra: dict[str, list] = {}
    out = asyncio.run(
        reward(
            prompts=[[]] * 3,
            completions=completions,
            task_id=["Gemm-sm90a"] * 3,
            log_metric=logged.__setitem__,
            log_extra=extra.__setitem__,
        )
    )
    pool.close()
    assert out == pytest.approx([0.15, 0.05, 0.0])  # built / compile error / no code (staged, no GPU)
    assert extra["status"] == ["NOT_EVALUATED", "COMPILE_ERROR", "EXTRACT_ERROR"]
    assert logged["ptxgym/compiled"] == pytest.approx(1 / 3) and logged["ptxgym/correct"] == 0.0


def _turn_count(feedback, history) -> RewardResult:
    """Reward 1, 2, 3, ... by turn: makes the credit assignment visible."""
    return RewardResult(total=float(len(history) + 1), components={"turn": float(len(history))})


@pytest.mark.parametrize("credit", ["turn", "episode"])
def test_multi_turn_rollout_credits_turns_and_masks_env_tokens(tiny, tmp_path, credit):
    model, tok = tiny
    size = 4 if credit == "turn" else 2
    recipe = get_recipe(
        "smoke",
        **{
            "rollout.max_turns": 3,
            "rollout.credit": credit,
            "optim.batch_size": size,
            "generation.num_generations": size,
            "generation.max_completion_length": 12,
        },
    )
    setup = build_trainer(model, recipe, tmp_path / "mt", tokenizer=tok)
    trainer = setup.trainer
    rollout = MultiTurnRollout(
        setup.rollout.index, RolloutConfig(max_turns=3, credit=credit), setup.pool, reward=_turn_count
    )
    prompt = trainer.train_dataset[0]["prompt"]
    out = rollout([prompt] * size, trainer)
    r = discounted_returns([1.0, 2.0, 3.0], 0.4)  # [2.28, 3.2, 3.0]
    if credit == "turn":
        # ceil(4 / 3) = 2 episodes; the first 4 of their 6 turns are the samples
        assert out["ptxgym_turn"] == [0, 1, 2, 0]
        assert out["ptxgym_return"] == pytest.approx([r[0], r[1], r[2], r[0]])
        p, c = out["prompt_ids"], out["completion_ids"]
        env = p[1][len(p[0]) + len(c[0]) :]
        assert p[1][: len(p[0]) + len(c[0])] == p[0] + c[0]
        assert "Turn 1 result: EXTRACT_ERROR" in tok.decode(env) and "env_mask" not in out
    else:
        assert out["ptxgym_return"] == pytest.approx([r[0], r[0]]) and out["ptxgym_turn"] == [3, 3]
        episode = rollout.last_episodes[0]
        assert out["prompt_ids"][0] == episode.prompt_ids
        mask, ids = out["env_mask"][0], out["completion_ids"][0]
        model_tokens = [t for t, m in zip(ids, mask, strict=True) if m]
        assert model_tokens == [t for turn in episode.turns for t in turn.completion]
        env_text = tok.decode([t for t, m in zip(ids, mask, strict=True) if not m])
        assert env_text.count("result: EXTRACT_ERROR") == 2  # feedback after turns 1 and 2, not after 3
    assert out["ptxgym_turn_rewards"][0] == [1.0, 2.0, 3.0]
    trainer.train()  # TRL accepts what the rollout returns (its own rollout, staged reward)
    (step,) = [h for h in trainer.state.log_history if "reward" in h]
    assert "rewards/ptxgym_rollout/mean" in step and step["ptxgym/status/EXTRACT_ERROR"] == 1.0
    setup.close()


def test_rollout_ends_an_episode_when_the_context_is_full(tiny, tmp_path):
    model, tok = tiny
    recipe = get_recipe(
        "smoke",
        **{
            "rollout.max_turns": 4,
            "rollout.credit": "episode",
            "optim.batch_size": 2,
            "generation.num_generations": 2,
            "generation.max_completion_length": 8,
        },
    )
    setup = build_trainer(model, recipe, tmp_path / "ctx", tokenizer=tok)
    trainer = setup.trainer
    prompt = trainer.train_dataset[0]["prompt"]
    prompt_len = len(
        tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    )
    rollout = MultiTurnRollout(
        setup.rollout.index,
        RolloutConfig(max_turns=4, credit="episode", max_context_tokens=prompt_len + 20),
        setup.pool,
    )
    out = rollout([prompt] * 2, trainer)
    assert out["ptxgym_turn"] == [1, 1]  # the feedback would not leave room for another 8-token turn
    assert all(out["env_mask"][i] == [1] * len(out["completion_ids"][i]) for i in range(2))
    setup.close()


def test_cli_tiny_data_sft_grpo(tmp_path, trajectory_file, capsys):
    from ptxgym.cli.main import main

    kernels = str(Path(__file__).parent / "data" / "kernels" / "naive_gemm.cu")
    assert (
        main(
            [
                "train",
                "tiny",
                "--out",
                str(tmp_path / "m"),
                "--kernels",
                kernels,
                "--vocab",
                "600",
                "--hidden",
                "32",
                "--layers",
                "1",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                "data",
                "kernelgen",
                "--trajectories",
                str(trajectory_file),
                "--out",
                str(tmp_path / "d"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                "sft",
                "--model",
                str(tmp_path / "m"),
                "--data",
                str(tmp_path / "d"),
                "--out",
                str(tmp_path / "s"),
                "--preset",
                "smoke",
                "--set",
                "max_steps=2",
                "max_length=20000",
                "--json",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert '"rows": 2' in out and (tmp_path / "s" / "final" / "adapter_config.json").is_file()
    assert (
        main(
            [
                "train",
                "grpo",
                "--model",
                str(tmp_path / "m"),
                "--out",
                str(tmp_path / "g"),
                "--preset",
                "smoke",
                "--turns",
                "2",
                "--credit",
                "episode",
                "--set",
                "generation.max_completion_length=8",
            ]
        )
        == 0
    )
    assert "GRPO done: 1 steps" in capsys.readouterr().out
    assert (
        main(
            [
                "train",
                "grpo",
                "--model",
                str(tmp_path / "m"),
                "--out",
                str(tmp_path / "g2"),
                "--set",
                "lora.rank=zero",
            ]
        )
        == 2
    )


def test_a_batch_shares_feedback_only_between_responses_with_the_same_files():
    """Two responses with the same kernel.cu but another header are two candidates.

    (Reviewer's find: keyed on the entry block alone, the second was paid the first one's result.)
    """
    from ptxgym.train.env_reward import candidate_key

    kernel = '#include "helper.cuh"\n__global__ void k(float* x) { x[0] = N; }\n'

    def response(helper: str, prose: str = "") -> str:
        return f"{prose}```cuda kernel.cu\n{kernel}```\n```cuda helper.cuh\n{helper}\n```\n"

    assert candidate_key(response("#define N 1")) != candidate_key(response("#define N 2"))
    assert candidate_key(response("#define N 1")) == candidate_key(response("#define N 1", "Here it is.\n"))
    assert candidate_key("no code at all") != candidate_key("no code either")


def test_grpo_drops_only_infra_errors_from_before_the_candidate_ran():
    """An INFRA_ERROR once the candidate's code was loaded is scored, not dropped.

    Else breaking the evaluator would escape the group's lowest advantage.
    """
    from ptxgym.records.feedback import Feedback, Stage, Status
    from ptxgym.train.env_reward import EnvReward

    def turn(status: Status, ran: bool = False) -> Feedback:
        return Feedback(task_id="Gemm-sm90a", status=status, stage=Stage.RUN, candidate_ran=ran)

    feedbacks = [turn(Status.INFRA_ERROR), turn(Status.INFRA_ERROR, ran=True), turn(Status.PROOF_FAILED)]

    class Pool:  # stands in for the pipeline: these feedbacks, in order
        async def run_many(self, items):
            return feedbacks[: len(items)]

    reward = EnvReward("staged", pool=Pool())  # type: ignore[arg-type]
    got = asyncio.run(reward([""] * 3, ["x"] * 3, task_id=["Gemm-sm90a"] * 3))
    assert got == [None, 0.0, 0.0]


def test_the_multi_turn_rollout_drops_the_same_infra_errors():
    from ptxgym.records.feedback import Feedback, Stage, Status
    from ptxgym.train.rollout import _ours, _Turn

    def played(status: Status, ran: bool = False) -> _Turn:
        fb = Feedback(task_id="Gemm-sm90a", status=status, stage=Stage.RUN, candidate_ran=ran)
        return _Turn([], [], None, feedback=fb)

    assert _ours(played(Status.INFRA_ERROR)) and not _ours(played(Status.INFRA_ERROR, ran=True))
    assert not _ours(played(Status.PROOF_FAILED))
