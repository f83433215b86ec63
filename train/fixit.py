r"""Fixit SFT data: task, a failed kernel and its feedback -> (rationale +) the repaired kernel.

Rows have five messages (PTXBench's Fixit format, ptxbench.md 7.1 and 7.3): system; the task (first
user message); the failed assistant turn as the model wrote it; the feedback that followed it (as the
model saw it); and the target ``<think>\\n{rationale}\\n</think>\\n\\n`` + the repaired kernel in a cpp
fence. Only that last message is trained on.

Failed turns: status in ``fail_statuses`` (compile, runtime, timeout and incorrect outcomes; not
EXTRACT_ERROR, which has no kernel to repair, nor NOT_EVALUATED/INFRA_ERROR, which say nothing about
the kernel), an extractable kernel, and turn < ``max_source_turn``. They are deduplicated by normalised
kernel hash and capped per task *before* any teacher runs, so teacher calls are only spent on rows
that will be kept.

Repairs, in order (``pairing``):

1. ``trajectory``: the first later turn of the same trajectory that passes the quality bar (the model's
   own fix, found in the recording);
2. ``teacher``: a ``RepairTeacher`` (any policy) asked for a minimal fix, kept only if the pipeline
   accepts it (``quality="correct"`` needs a qualifying turn: evaluator-verified).

The rationale comes from a ``ReasoningTeacher`` when given, else from the fix's own recorded reasoning
(``own_reasoning``), else there is none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ptxgym.records.feedback import WRONG_RESULT, Status
from ptxgym.records.tasks import get_task
from ptxgym.records.turns import TurnRecord
from ptxgym.train.episodes import feedback_text_after, group_trajectories, task_messages
from ptxgym.train.kernelgen import BuildResult
from ptxgym.train.selection import balance, dedup, extract_answer, kernel_hash
from ptxgym.train.sft_examples import Message, SftExample, with_reasoning
from ptxgym.train.teachers import Quality, ReasoningTeacher, RepairTeacher, shortfall

TARGET_FORMAT = "fixit_task_wrong_kernel_feedback_to_reasoned_fixed_kernel"

FIXIT_STATUSES: frozenset[Status] = WRONG_RESULT | {
    Status.COMPILE_ERROR,
    Status.COMPILE_TIMEOUT,
    Status.RUNTIME_ERROR,
    Status.TIMEOUT,
    Status.CRASH,
    Status.MEMORY_ERROR,
}


@dataclass(frozen=True)
class FixitConfig:
    """How Fixit rows are selected and repaired (module docstring)."""

    fail_statuses: frozenset[Status] = FIXIT_STATUSES
    max_source_turn: int | None = 5
    quality: Quality = "correct"
    require_target: bool = True
    legacy_records: bool = False
    """Accept records of an older Feedback schema for the target credit (``teachers.shortfall``)."""
    cap_per_task: int | None = None
    seed: int = 0
    pairing: tuple[Literal["trajectory", "teacher"], ...] = ("trajectory", "teacher")
    own_reasoning: bool = True


@dataclass(frozen=True)
class _Failed:
    turns: tuple[TurnRecord, ...]
    index: int
    answer: str
    """The failed turn's files as a clean answer (``selection.extract_answer``)."""

    @property
    def record(self) -> TurnRecord:
        return self.turns[self.index]


@dataclass(frozen=True)
class _Fix:
    answer: str
    reasoning: str | None
    source: str
    status: str
    speedup: float | None


def _failed_turns(records: Iterable[TurnRecord], cfg: FixitConfig, dropped: Counter) -> list[_Failed]:
    out = []
    for turns in group_trajectories(records).values():
        for i, r in enumerate(turns):
            status = Status(r.status) if r.status in Status.__members__ else None
            if status not in cfg.fail_statuses:
                continue
            if cfg.max_source_turn is not None and r.turn >= cfg.max_source_turn:
                dropped["failed turn too late"] += 1
                continue
            answer = extract_answer(r.action)
            if answer is None:
                dropped["no extractable kernel"] += 1
                continue
            out.append(_Failed(tuple(turns), i, answer))
    return out


def _accepts(record: TurnRecord, cfg: FixitConfig) -> bool:
    return shortfall(record.feedback, cfg.quality, cfg.require_target, cfg.legacy_records) is None


def _trajectory_fix(f: _Failed, cfg: FixitConfig) -> _Fix | None:
    for later in f.turns[f.index + 1 :]:
        answer = extract_answer(later.action)
        if answer is not None and _accepts(later, cfg):
            return _Fix(answer, later.reasoning, f"trajectory turn {later.turn}", later.status, later.speedup)
    return None


def _teacher_fix(f: _Failed, teacher: RepairTeacher, feedback: str) -> _Fix | None:
    task = task_messages(f.turns)
    got = teacher.repair(get_task(f.record.task_id), task.system, task.user, f.answer, feedback)
    if got is None or not got.answer:
        return None
    return _Fix(
        got.answer,
        got.reasoning,
        f"teacher attempt {got.attempts}",
        got.feedback.status.value,
        got.feedback.speedup,
    )


def build_fixit(
    records: Iterable[TurnRecord],
    config: FixitConfig | None = None,
    repair_teacher: RepairTeacher | None = None,
    reasoning_teacher: ReasoningTeacher | None = None,
) -> BuildResult:
    """Fixit examples from recorded turns (module docstring)."""
    cfg = config or FixitConfig()
    dropped: Counter = Counter()
    failed = _failed_turns(records, cfg, dropped)
    failed, n_dup = dedup(failed, key=lambda f: kernel_hash(f.answer))
    dropped["duplicate failed kernel"] += n_dup
    failed, n_cap = balance(failed, group=lambda f: f.record.task_id, cap=cfg.cap_per_task, seed=cfg.seed)
    dropped["over per-task cap"] += n_cap
    examples = []
    for f in failed:
        feedback = feedback_text_after(f.turns, f.index)
        fix = _find_fix(f, cfg, repair_teacher, feedback)
        if fix is None:
            dropped["no accepted repair"] += 1
            continue
        ex = _example(f, fix, feedback, cfg, reasoning_teacher)
        if ex is None:
            dropped["teacher reasoning rejected"] += 1
        else:
            examples.append(ex)
    return BuildResult(examples, +dropped)


def _find_fix(f: _Failed, cfg: FixitConfig, teacher: RepairTeacher | None, feedback: str) -> _Fix | None:
    for way in cfg.pairing:
        if way == "trajectory" and (fix := _trajectory_fix(f, cfg)) is not None:
            return fix
        if (
            way == "teacher"
            and teacher is not None
            and (fix := _teacher_fix(f, teacher, feedback)) is not None
        ):
            return fix
    return None


def _example(
    f: _Failed, fix: _Fix, feedback: str, cfg: FixitConfig, teacher: ReasoningTeacher | None
) -> SftExample | None:
    task = task_messages(f.turns)
    if teacher is not None:
        rationale, source = teacher.fixit(task.system, task.user, f.answer, feedback, fix.answer), "teacher"
        if rationale is None:
            return None
    elif cfg.own_reasoning and fix.reasoning:
        rationale, source = fix.reasoning, "own"
    else:
        rationale, source = None, "none"
    r = f.record
    head = (Message(role="system", content=task.system),) if task.system else ()
    msgs = (
        *head,
        Message(role="user", content=task.user),
        Message(role="assistant", content=r.action),
        Message(role="user", content=feedback),
        Message(role="assistant", content=with_reasoning(fix.answer, rationale)),
    )
    meta = {
        "target_format": TARGET_FORMAT,
        "run_id": r.run_id,
        "trajectory_id": r.trajectory_id,
        "wrong_turn": r.turn,
        "wrong_status": r.status,
        "policy": r.policy,
        "variant": r.variant,
        "wrong_kernel_hash": kernel_hash(f.answer),
        "fixed_kernel_hash": kernel_hash(fix.answer),
        "fix_source": fix.source,
        "fixed_status": fix.status,
        "fixed_speedup": fix.speedup,
        "reasoning_source": source,
        "reasoning_chars": len(rationale or ""),
    }
    return SftExample(kind="fixit", task_id=r.task_id, messages=msgs, metadata=meta)
