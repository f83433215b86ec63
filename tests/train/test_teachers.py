"""Repair and reasoning teachers driven by real ptxgym policies (replayed responses), real pipeline."""

from __future__ import annotations

import pytest

from ptxgym.evaluation.trusted.base import NullEvaluator
from ptxgym.policies.replay import ReplayPolicy
from ptxgym.train.fixit import FixitConfig, build_fixit
from ptxgym.train.kernelgen import build_kernelgen
from ptxgym.train.teachers import ReasoningTeacher, RepairTeacher

REASONING = (
    "The task is C = A B^T in bf16 with fp32 accumulation. I start from one thread per output element: "
    "each thread walks K, converts both operands to float and accumulates, then rounds once at the end."
)


def _replay(tmp_path, records, action: str, name: str) -> ReplayPolicy:
    """A one-turn recorded 'model' whose answer is ``action``."""
    base = next(r for r in records if r.turn == 1)
    rec = base.model_copy(
        update={"turn": 0, "trajectory_id": f"teacher/{name}", "action": action, "reasoning": None}
    )
    path = tmp_path / f"{name}.jsonl"
    path.write_text(rec.to_line() + "\n")
    return ReplayPolicy(path, trajectory_id=f"teacher/{name}")


@pytest.mark.slow
@pytest.mark.nvcc
def test_repair_teacher_fixes_what_the_trajectories_did_not(records, kernel_text, tmp_path):
    fixed = f"Minimal fix:\n```cpp\n{kernel_text('naive_gemm')}```"
    teacher = RepairTeacher(
        _replay(tmp_path, records, fixed, "good"), NullEvaluator("cpu test"), quality="compiled"
    )
    # trajectory first: A0 is fixed by A1; under "compiled", B1 counts as fixed by B2 (it built);
    # B2 has no later turn, so the teacher repairs it.
    res = build_fixit(records, FixitConfig(quality="compiled", pairing=("trajectory", "teacher")), teacher)
    by_turn = {(e.metadata["trajectory_id"][-1], e.metadata["wrong_turn"]): e for e in res.examples}
    assert {k: e.metadata["fix_source"] for k, e in by_turn.items()} == {
        ("0", 0): "trajectory turn 1",
        ("1", 1): "trajectory turn 2",
        ("1", 2): "teacher attempt 1",
    }
    assert by_turn[("1", 2)].metadata["fixed_status"] == "NOT_EVALUATED"
    assert by_turn[("1", 2)].messages[-1].content == f"```cpp\n{kernel_text('naive_gemm').rstrip()}\n```"
    assert teacher.stats == {"NOT_EVALUATED": 1}
    only_teacher = build_fixit(records, FixitConfig(quality="compiled", pairing=("teacher",)), teacher)
    assert [e.metadata["fix_source"] for e in only_teacher.examples] == ["teacher attempt 1"] * 3


@pytest.mark.nvcc
def test_a_repair_that_does_not_build_is_never_kept(records, kernel_text, tmp_path):
    broken = f"```cpp\n{kernel_text('gemm_typo')}```"
    teacher = RepairTeacher(
        _replay(tmp_path, records, broken, "bad"),
        NullEvaluator("cpu test"),
        quality="compiled",
        max_attempts=3,
    )
    res = build_fixit(records, FixitConfig(quality="compiled", pairing=("teacher",)), teacher)
    assert res.examples == [] and res.dropped["no accepted repair"] == 3
    # each failed kernel: one COMPILE_ERROR attempt, then the one-turn replay has nothing more to say
    assert teacher.stats == {"COMPILE_ERROR": 3, "teacher ended": 3}


def test_correct_quality_needs_the_evaluator_to_say_correct(records, kernel_text, tmp_path):
    teacher = RepairTeacher(_replay(tmp_path, records, "no code", "nocode"), NullEvaluator("cpu test"))
    fb = records[1].feedback  # PASSED, target executed
    assert teacher.accepts(fb)
    assert not teacher.accepts(fb.replace(status="NOT_EVALUATED"))


def test_reasoning_teacher_writes_the_think_block(records, tmp_path):
    policy = _replay(tmp_path, records, f"<my_reasoning>\n{REASONING}\n</my_reasoning>", "why")
    res = build_kernelgen(records, teacher=ReasoningTeacher(policy, min_chars=50))
    assert len(res.examples) == 2
    for ex in res.examples:
        assert ex.messages[-1].content.startswith(f"<think>\n{REASONING}\n</think>\n\n")
        assert ex.metadata["reasoning_source"] == "teacher"


def test_reasoning_teacher_rejections(records, kernel_text, tmp_path):
    t = ReasoningTeacher(_replay(tmp_path, records, "x", "short"), min_chars=50)
    kernel = kernel_text("naive_gemm")
    assert t.check(f"<my_reasoning>{REASONING}</my_reasoning>", kernel) == (REASONING, "")
    assert t.check(REASONING, kernel)[1] == "no <my_reasoning> tags"
    assert t.check("<my_reasoning>too short</my_reasoning>", kernel)[1].startswith("length outside")
    quoting = f"<my_reasoning>{REASONING}\n{kernel}</my_reasoning>"
    assert t.check(quoting, kernel)[1] == "quotes the final kernel"
    res = build_kernelgen(records, teacher=t)
    assert res.examples == [] and res.dropped["teacher reasoning rejected"] == 2
    assert t.rejected == {"no <my_reasoning> tags": 4}  # 2 rows x 2 attempts
