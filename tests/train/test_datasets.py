"""KernelGen and Fixit builders on recorded trajectories; saving and loading the datasets."""

from __future__ import annotations

import json

import pytest

from ptxgym.knowledge_packs.prompting import build_task_prompt
from ptxgym.records.feedback_text import render_feedback
from ptxgym.records.tasks import get_task
from ptxgym.train.fixit import FixitConfig, build_fixit
from ptxgym.train.kernelgen import KernelGenConfig, build_kernelgen, build_kernelgen_from_sources
from ptxgym.train.selection import balance, kernel_hash, normalise_kernel
from ptxgym.train.sft_examples import SftExample, load_sft_dataset, read_examples, save_examples


def test_normalised_hash_ignores_prose_comments_and_layout(kernel_text):
    code = kernel_text("naive_gemm")
    a = f"Sure.\n```cpp\n{code}```"
    b = "Other words.\n```cuda\n" + code.replace("// row of C", "// i").replace("  ", "    ") + "\n```\nDone."
    assert kernel_hash(a) == kernel_hash(b)
    assert kernel_hash(a) != kernel_hash(a.replace("0.0f", "1.0f"))
    assert normalise_kernel("a /* x\ny */ b // z\n  c") == "a b c"


def test_balance_caps_each_group_reproducibly():
    items = [("g1", i) for i in range(5)] + [("g2", i) for i in range(2)]
    kept, dropped = balance(items, group=lambda x: x[0], cap=2, seed=3)
    assert dropped == 3 and [g for g, _ in kept].count("g1") == 2 and [g for g, _ in kept].count("g2") == 2
    assert balance(items, group=lambda x: x[0], cap=2, seed=3)[0] == kept
    best, _ = balance(items, group=lambda x: x[0], cap=1, score=lambda x: x[1])
    assert best == [("g1", 4), ("g2", 1)]


def test_kernelgen_keeps_correct_target_verified_unique_kernels(records):
    res = build_kernelgen(records)
    # correct with proof: A1, A2 (the same kernel as A1: duplicate) and C1; C0's target is unknown.
    assert [(e.metadata["trajectory_id"], e.metadata["turn"]) for e in res.examples] == [
        ("Gemm-sm90a/none/0", 1),
        ("Gemm-sm90a/none/2", 1),
    ]
    assert res.dropped == {"not correct": 5, "duplicate kernel": 1}
    prompt = build_task_prompt(get_task("Gemm-sm90a"), None)
    ex = res.examples[0]
    assert [m.role for m in ex.messages] == ["system", "user", "assistant"]
    assert ex.messages[0].content == prompt.system and ex.messages[1].content == prompt.user
    a1 = next(r for r in records if r.trajectory_id == "Gemm-sm90a/none/0" and r.turn == 1)
    assert ex.messages[2].content == f"<think>\n{a1.reasoning}\n</think>\n\n{a1.action}"
    assert ex.metadata["reasoning_source"] == "own" and ex.metadata["speedup"] == pytest.approx(0.02)
    assert res.examples[1].messages[2].content.startswith("Unrolled.")  # no reasoning recorded


def test_kernelgen_options(records):
    loose = build_kernelgen(records, KernelGenConfig(require_target=False))
    assert len(loose.examples) == 3  # C0 (target unknown) joins
    capped = build_kernelgen(records, KernelGenConfig(cap_per_task=1, order="best"))
    assert len(capped.examples) == 1 and capped.examples[0].metadata["speedup"] == pytest.approx(0.025)
    assert capped.dropped["over per-task cap"] == 1
    compiled = build_kernelgen(records, KernelGenConfig(quality="compiled", answer="kernel"))
    assert len(compiled.examples) == 5  # every built turn but the duplicate A2
    assert all(
        e.messages[-1].content.startswith("```cpp\n")
        for e in compiled.examples
        if e.metadata["reasoning_source"] == "none"
    )
    fast = build_kernelgen(records, KernelGenConfig(min_speedup=0.022))
    assert [e.metadata["trajectory_id"][-1] for e in fast.examples] == ["2"]


def test_fixit_pairs_a_failure_with_the_later_fix_of_its_trajectory(records, kernel_text):
    res = build_fixit(records, FixitConfig(pairing=("trajectory",)))
    assert len(res.examples) == 1
    assert res.dropped == {"no accepted repair": 2}  # B1 (numerical) and B2 (runtime) were never fixed
    ex = res.examples[0]
    turns = sorted((r for r in records if r.trajectory_id == "Gemm-sm90a/none/0"), key=lambda r: r.turn)
    assert [m.role for m in ex.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert ex.messages[2].content == turns[0].action
    assert ex.messages[3].content == turns[1].messages[-1].content == render_feedback(turns[0].feedback)
    assert 'expected a ";"' in ex.messages[3].content
    expected = f"<think>\n{turns[1].reasoning}\n</think>\n\n```cpp\n{kernel_text('naive_gemm').rstrip()}\n```"
    assert ex.messages[4].content == expected
    assert ex.metadata["wrong_status"] == "COMPILE_ERROR" and ex.metadata["fix_source"] == "trajectory turn 1"


def test_fixit_source_turn_limit_and_cap(records):
    late = build_fixit(records, FixitConfig(pairing=("trajectory",), max_source_turn=1))
    assert late.dropped["failed turn too late"] == 2 and len(late.examples) == 1
    capped = build_fixit(records, FixitConfig(pairing=("trajectory",), cap_per_task=1, seed=0))
    assert capped.dropped["over per-task cap"] == 2


def test_saved_dataset_trains_on_the_last_assistant_message_only(records, tmp_path):
    fix = build_fixit(records, FixitConfig(pairing=("trajectory",))).examples
    gen = build_kernelgen(records).examples
    out = save_examples(gen + fix, tmp_path / "ds", dropped={"x": 1})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rows"] == 3 and manifest["by_kind"] == {"fixit": 1, "kernelgen": 2}
    assert read_examples(out) == gen + fix
    ds = load_sft_dataset(out)
    assert set(ds.column_names) == {"id", "kind", "task_id", "prompt", "completion", "metadata"}
    row = ds[2]
    assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "user"]
    assert row["completion"] == [fix[0].messages[-1].model_dump()]
    assert json.loads(row["metadata"])["fix_source"] == "trajectory turn 1"


def test_examples_need_a_final_assistant_message():
    with pytest.raises(ValueError):
        SftExample(kind="kernelgen", task_id="Gemm-sm90a", messages=[{"role": "user", "content": "x"}])
    a = SftExample(
        kind="kernelgen",
        task_id="Gemm-sm90a",
        messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
    )
    assert len(a.id) == 16 and a.id == SftExample.model_validate_json(a.model_dump_json()).id


def test_kernelgen_from_kernel_files(kernel_text):
    res = build_kernelgen_from_sources({"Gemm-sm90a": kernel_text("naive_gemm")}, variants=[None])
    (ex,) = res.examples
    assert ex.messages[-1].content == f"```cpp\n{kernel_text('naive_gemm').rstrip()}\n```"
    assert ex.messages[1].content == build_task_prompt(get_task("Gemm-sm90a"), None).user


def test_cli_builds_a_kernelgen_dataset(trajectory_file, tmp_path, capsys):
    from ptxgym.cli.main import main

    rc = main(
        [
            "train",
            "data",
            "kernelgen",
            "--trajectories",
            str(trajectory_file),
            "--out",
            str(tmp_path / "kg"),
            "--no-require-target",
        ]
    )
    assert rc == 0 and "wrote 3 rows" in capsys.readouterr().out
    assert len(read_examples(tmp_path / "kg")) == 3
    rc = main(
        [
            "train",
            "data",
            "fixit",
            "--trajectories",
            str(trajectory_file),
            "--out",
            str(tmp_path / "fx"),
            "--pairing",
            "trajectory",
        ]
    )
    assert rc == 0 and len(read_examples(tmp_path / "fx")) == 1
    rc = main(
        [
            "train",
            "data",
            "kernelgen",
            "--trajectories",
            str(tmp_path / "missing.jsonl"),
            "--out",
            str(tmp_path / "none"),
        ]
    )
    assert rc == 2 and "not found" in capsys.readouterr().err


def test_several_file_answers_keep_every_file(records, kernel_text):
    """Both builders keep every file of a several-file answer, named.

    A PASSED answer in two files once became a one-file target (the header alone, no `run`), labelled
    PASSED: training data of code never built.
    """
    code = kernel_text("naive_gemm")
    split = f'Two files.\n```cuda kernel.cu\n#include "impl.cuh"\n```\n```cuda impl.cuh\n{code}```\n'
    fixed = [
        r.model_copy(update={"action": split}) if (r.trajectory_id, r.turn) == ("Gemm-sm90a/none/0", 1) else r
        for r in records
    ]
    gen = build_kernelgen(fixed, KernelGenConfig(answer="kernel"))
    answer = next(e for e in gen.examples if e.metadata["trajectory_id"] == "Gemm-sm90a/none/0").messages[-1]
    assert '```cuda kernel.cu\n#include "impl.cuh"\n```' in answer.content
    assert f"```cuda impl.cuh\n{code.rstrip()}\n```" in answer.content
    fix = build_fixit(fixed, FixitConfig(pairing=("trajectory",))).examples[0].messages[-1].content
    assert "```cuda kernel.cu\n" in fix and "```cuda impl.cuh\n" in fix
    one_file = kernel_hash(f"```cpp\n{code}```")
    assert kernel_hash(split) != one_file  # the files, named, make the kernel
    assert kernel_hash(split.replace("Two files.", "Both files:")) == kernel_hash(split)


def test_an_old_record_cannot_teach_a_target_it_was_credited_by_the_old_rule(kernel_text):
    """The data builders refuse a v1 record's target credit unless asked (a reviewer's find).

    A v1 Feedback credited the target for one executed instruction (no work share): a SIMT kernel with a
    token wgmma.
    """
    from ptxgym.records.feedback import Feedback, Stage, Status, TargetInfo, TimingInfo, Verdict
    from ptxgym.records.turns import TurnRecord

    old = Feedback(
        schema_version="ptxgym.feedback.v1",
        task_id="Gemm-sm90a",
        status=Status.PASSED,
        stage=Stage.DONE,
        target=TargetInfo(family="wgmma", executed=Verdict.YES),
        timing=TimingInfo(backend="cupti", speedup=1.3),
    )
    record = TurnRecord(
        run_id="old", trajectory_id="t0", task_id="Gemm-sm90a", variant="full", policy="m", turn=0,
        action=f"```cuda\n{kernel_text('naive_gemm')}\n```", status="PASSED", correct=True,
        target_executed="yes", speedup=1.3, feedback_json=old.to_json(),
    )  # fmt: skip
    assert old.target_credited  # the old rule, kept for recomputing old rewards
    refused = build_kernelgen([record])
    assert not refused.examples and any("old record" in why for why in refused.dropped), refused.dropped
    assert len(build_kernelgen([record], KernelGenConfig(legacy_records=True)).examples) == 1
    assert len(build_kernelgen([record], KernelGenConfig(require_target=False)).examples) == 1
