"""Regenerate ``trajectories.jsonl``: recorded turns for the SFT dataset-builder tests.

Run from the repository root (needs nvcc): ``python tests/train/data/make_trajectories.py``.

Every Feedback is real: the CPU stages (extract, source screen, nvcc build, SASS census) run through
``ptxgym.pipeline.Pipeline``; the GPU-side outcome of each turn (status, correctness, timing, target
verdict) is what a GPU evaluator would have written, built with the ``ptxgym.records.feedback`` models,
since this machine has no GPU. Prompts are the env's task prompts and the policies' history rendering;
the feedback messages are the env's rendering of each Feedback.
"""

from __future__ import annotations

import json
from pathlib import Path

from ptxgym.evaluation.trusted.base import NullEvaluator
from ptxgym.knowledge_packs.prompting import build_task_prompt
from ptxgym.pipeline import Pipeline
from ptxgym.policies.history import Conversation, build_messages
from ptxgym.records.feedback import (
    CorrectnessInfo,
    Feedback,
    LatencyStats,
    Stage,
    Status,
    TargetInfo,
    TimingInfo,
    Verdict,
)
from ptxgym.records.feedback_text import render_feedback
from ptxgym.records.tasks import get_task
from ptxgym.records.turns import TurnRecord
from ptxgym.rewards import resolve_reward

HERE = Path(__file__).parent
KERNELS = HERE / "kernels"


def kernel(name: str, note: str = "") -> str:
    """A response: a line of prose and the kernel file in a cpp fence."""
    code = (KERNELS / f"{name}.cu").read_text()
    return f"{note or 'Here is the kernel.'}\n\n```cpp\n{code}```\n"


def gpu_outcome(
    fb: Feedback, status: Status, speedup: float | None = None, verdict: Verdict = Verdict.YES
) -> Feedback:
    """The Feedback a GPU evaluator would return for a built candidate."""
    if status is Status.PASSED:
        return fb.replace(
            status=status,
            stage=Stage.DONE,
            message="correct on 3 input sets; timed against cuBLAS",
            correctness=CorrectnessInfo(
                input_sets=3,
                seeds=[1, 2, 3],
                calls_checked=40,
                max_abs_error=3e-3,
                max_rel_error=4e-3,
                mismatch_ratio=0.0,
                atol=1e-2,
                rtol=1e-2,
            ),
            timing=TimingInfo(
                backend="cupti",
                candidate=LatencyStats(median_ms=0.778 / speedup, n=150),
                baseline=LatencyStats(median_ms=0.778, n=150),
                baseline_name="cublas",
                speedup=speedup,
            ),
            target=TargetInfo(
                family="wgmma/TMA",
                mode="executed",
                static=True,
                executed=verdict,
                counts={"HGMMA": 4096} if verdict is Verdict.YES else {},
                mma_share=1.0 if verdict is Verdict.YES else None,
                work=Verdict.YES if verdict is Verdict.YES else Verdict.NOT_CHECKED,
            ),
        )
    if status is Status.INCORRECT_NUMERICAL:
        return fb.replace(
            status=status,
            stage=Stage.CHECK,
            message="output C differs from the reference",
            correctness=CorrectnessInfo(
                input_sets=1,
                seeds=[1],
                max_abs_error=41.5,
                mismatch_ratio=0.97,
                first_bad_output="C",
                first_bad_index=[0, 1],
                atol=1e-2,
                rtol=1e-2,
            ),
        )
    return fb.replace(status=status, stage=Stage.RUN, message="CUDA error: an illegal memory access")


def trajectory(
    tid: str,
    task_id: str,
    turns: list[tuple[str, Status | None, float | None, Verdict]],
    reasoning: dict[int, str] | None = None,
) -> list[TurnRecord]:
    """Play the given responses as one recorded trajectory (full history mode)."""
    task = get_task(task_id)
    prompt = build_task_prompt(task, None)
    pipeline = Pipeline(task, NullEvaluator("fixture"))
    reward = resolve_reward("staged")
    conv = Conversation.from_prompt(prompt, task_id=task.id, trajectory_id=tid)
    history: list[Feedback] = []
    records = []
    for t, (action, status, speedup, verdict) in enumerate(turns):
        msgs = build_messages(conv).messages
        fb = pipeline.run(action, turn=t)
        if status is not None:
            assert fb.status is Status.NOT_EVALUATED, f"{tid} turn {t} did not build: {fb.message}"
            fb = gpu_outcome(fb, status, speedup, verdict)
        res = reward(fb, history)
        records.append(
            TurnRecord(
                run_id="fixture",
                trajectory_id=tid,
                task_id=task.id,
                variant="none",
                policy="fixture-model",
                turn=t,
                messages=msgs,
                action=action,
                reasoning=(reasoning or {}).get(t),
                status=fb.status.value,
                correct=fb.correct,
                target_executed=fb.target_executed.value,
                speedup=fb.speedup,
                reward=res.total,
                reward_components=res.components,
                feedback_json=fb.to_json(),
                timestamp="2026-12-03T00:00:00Z",
                truncated=t == len(turns) - 1,
            )
        )
        history.append(fb)
        conv = conv.add(action, render_feedback(fb))
    return records


def main() -> None:
    """Write trajectories.jsonl."""
    y, unk = Verdict.YES, Verdict.UNKNOWN
    good_again = kernel("naive_gemm", "Same kernel, tidier.").replace("// row of C", "// output row")
    recs = []
    # A: compile error, then fixed (a trajectory Fixit pair), then the same kernel re-submitted (a duplicate).
    recs += trajectory(
        "Gemm-sm90a/none/0",
        "Gemm-sm90a",
        [
            (kernel("gemm_typo", "First attempt."), None, None, y),
            (kernel("naive_gemm", "Fixed the missing semicolon."), Status.PASSED, 0.02, y),
            (good_again, Status.PASSED, 0.021, y),
        ],
        reasoning={1: "The compiler says a ';' is expected after the accumulator declaration; add it."},
    )
    # B: no code, a numerically wrong kernel, a runtime error; never fixed inside the trajectory.
    recs += trajectory(
        "Gemm-sm90a/none/1",
        "Gemm-sm90a",
        [
            ("I would tile the problem 128x256 and use wgmma.", None, None, y),
            (kernel("gemm_wrong_index"), Status.INCORRECT_NUMERICAL, None, y),
            (
                kernel("naive_gemm", "No bounds check.").replace("  if (i >= M || j >= N) return;\n", ""),
                Status.RUNTIME_ERROR,
                None,
                y,
            ),
        ],
    )
    # C: correct but the target instruction is unproven (ncu failed), then correct with proof.
    recs += trajectory(
        "Gemm-sm90a/none/2",
        "Gemm-sm90a",
        [
            (
                kernel("naive_gemm", "A correct kernel.").replace("acc = 0.0f;", "acc = 0.f;"),
                Status.PASSED,
                0.019,
                unk,
            ),
            (
                kernel("naive_gemm", "Unrolled.").replace("  for (int k", "#pragma unroll 4\n  for (int k"),
                Status.PASSED,
                0.025,
                y,
            ),
        ],
    )
    lines = [r.to_line() for r in recs]
    (HERE / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    print(json.dumps({"records": len(lines), "statuses": [r.status for r in recs]}))


if __name__ == "__main__":
    main()
