"""Test-split tasks never reach training data: every builder of SFT rows and training prompts refuses them."""

from __future__ import annotations

import pytest

from ptxgym.records.tasks import HeldOutTaskError
from ptxgym.records.turns import TurnRecord

TEST_TASK = "MhaFwdD96-sm90a"  # the d96 MHA tasks are the paper's held-out shapes (test split)
CODE = "__global__ void k() {}"


def _turn(task_id: str, with_prompt: bool) -> TurnRecord:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}] if with_prompt else []
    return TurnRecord(
        run_id="r",
        trajectory_id="t",
        task_id=task_id,
        variant="none",
        policy="p",
        turn=0,
        messages=messages,
        action="a",
        status="PASSED",
        feedback_json="{}",
    )


def test_kernelgen_rows() -> None:
    from ptxgym.train.kernelgen import build_kernelgen_from_sources

    assert build_kernelgen_from_sources({"Gemm-sm90a": CODE}).examples
    with pytest.raises(HeldOutTaskError, match=f"{TEST_TASK} is in the test split .* SFT data"):
        build_kernelgen_from_sources({"Gemm-sm90a": CODE, TEST_TASK: CODE})


@pytest.mark.parametrize("with_prompt", [True, False])
def test_trajectory_prompts(with_prompt: bool) -> None:
    from ptxgym.train.episodes import task_messages

    assert task_messages([_turn("Gemm-sm90a", with_prompt)]).user
    with pytest.raises(HeldOutTaskError, match=TEST_TASK):
        task_messages([_turn(TEST_TASK, with_prompt)])  # even when the record carries its own prompt


def test_grpo_prompts_and_tiny_corpus() -> None:
    pytest.importorskip("datasets")
    from ptxgym.train.env_reward import build_grpo_dataset
    from ptxgym.train.tiny import corpus_for_tasks

    assert len(build_grpo_dataset(["Gemm-sm90a", "GqaRaggedPrefill-sm90a"])[0]) == 2  # train, validation
    with pytest.raises(HeldOutTaskError, match="GqaPagedDecode-sm90a .* GRPO training prompts"):
        build_grpo_dataset(["Gemm-sm90a", "GqaPagedDecode-sm90a"])
    with pytest.raises(HeldOutTaskError, match="Gemm5120x2048-sm100a"):
        corpus_for_tasks(["Gemm5120x2048-sm100a"])


def test_ids_of_no_known_task_pass() -> None:
    from ptxgym.records.tasks import require_not_test

    require_not_test(["gemm_x@sm_90a", "NoSuchTask-sm90a"])  # no split is known for them
