r"""KernelGen SFT data: task prompt -> (reasoning +) a known-good kernel.

Rows have three messages (PTXBench's KernelGen format, ptxbench.md 7.2-7.3): the trajectory's system
message, its first user message (the task), and the assistant answer ``<think>\\n{reasoning}\\n</think>``
followed by the selected response, even when that response came from a later turn.

Selection from trajectories: turns whose Feedback passes the quality bar (``quality="correct"``: the turn
qualifies under ``ptxgym.rewards.gate``, target instruction proven unless ``require_target=False``;
``"compiled"``: it built, for CPU-only data) with speedup >= ``min_speedup``; duplicate kernels dropped
(normalised kernel hash); at most ``cap_per_task`` rows per task. Reasoning comes from a
``ReasoningTeacher`` when given (a row whose rationale is rejected is dropped), else the response's own
recorded reasoning (``own_reasoning``), else none.

``build_kernelgen_from_solutions`` makes the same rows from kernel files, e.g. the expert solutions
shipped in the knowledge packs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ptxgym.records.turns import TurnRecord
from ptxgym.rewards import gate
from ptxgym.train.episodes import group_trajectories, task_messages
from ptxgym.train.selection import balance, dedup, extract_answer, kernel_hash
from ptxgym.train.sft_examples import Message, SftExample, fenced, with_reasoning
from ptxgym.train.teachers import Quality, ReasoningTeacher, shortfall

TARGET_FORMAT = "kernelgen_task_to_reasoned_kernel"


@dataclass(frozen=True)
class KernelGenConfig:
    """How KernelGen rows are selected (module docstring)."""

    quality: Quality = "correct"
    require_target: bool = True
    legacy_records: bool = False
    """Accept records of an older Feedback schema for the target credit (``teachers.shortfall``)."""
    min_speedup: float = 0.0
    cap_per_task: int | None = None
    order: Literal["random", "best"] = "random"
    seed: int = 0
    own_reasoning: bool = True
    answer: Literal["response", "kernel"] = "response"
    """``response``: the whole recorded response; ``kernel``: only its files, as a clean answer."""


@dataclass
class BuildResult:
    """Examples and the number of candidates dropped for each reason."""

    examples: list[SftExample]
    dropped: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class _Candidate:
    record: TurnRecord
    turns: tuple[TurnRecord, ...]
    answer: str
    """Its files as a clean answer (``selection.extract_answer``)."""


def _passes(record: TurnRecord, cfg: KernelGenConfig) -> str | None:
    """None when the turn is good enough, else why not."""
    fb = record.feedback
    why = shortfall(fb, cfg.quality, cfg.require_target, cfg.legacy_records)
    if why is not None or cfg.quality == "compiled":
        return why
    s = gate.speedup_of(fb, cfg.require_target) or 0.0
    return None if s >= cfg.min_speedup else "below min_speedup"


def _candidates(records: Iterable[TurnRecord], cfg: KernelGenConfig, dropped: Counter) -> list[_Candidate]:
    out = []
    for turns in group_trajectories(records).values():
        for r in turns:
            why = _passes(r, cfg)
            answer = extract_answer(r.action) if why is None else None
            if why is None and answer is None:
                why = "no extractable kernel"
            if why is not None or answer is None:
                dropped[(why or "no extractable kernel").split(" (")[0]] += 1
                continue
            out.append(_Candidate(r, tuple(turns), answer))
    return out


def build_kernelgen(
    records: Iterable[TurnRecord],
    config: KernelGenConfig | None = None,
    teacher: ReasoningTeacher | None = None,
) -> BuildResult:
    """KernelGen examples from recorded turns (module docstring)."""
    cfg = config or KernelGenConfig()
    dropped: Counter = Counter()
    cands = _candidates(records, cfg, dropped)
    cands, n_dup = dedup(cands, key=lambda c: kernel_hash(c.record.action))
    dropped["duplicate kernel"] += n_dup
    score = (lambda c: c.record.speedup or 0.0) if cfg.order == "best" else None
    cands, n_cap = balance(
        cands, group=lambda c: c.record.task_id, cap=cfg.cap_per_task, seed=cfg.seed, score=score
    )
    dropped["over per-task cap"] += n_cap
    examples = []
    for c in cands:
        ex = _example(c, cfg, teacher)
        if ex is None:
            dropped["teacher reasoning rejected"] += 1
        else:
            examples.append(ex)
    return BuildResult(examples, +dropped)


def _example(c: _Candidate, cfg: KernelGenConfig, teacher: ReasoningTeacher | None) -> SftExample | None:
    task = task_messages(c.turns)
    answer = c.record.action if cfg.answer == "response" else c.answer
    if teacher is not None:
        reasoning, source = teacher.kernelgen(task.system, task.user, c.answer), "teacher"
        if reasoning is None:
            return None
    elif cfg.own_reasoning and c.record.reasoning:
        reasoning, source = c.record.reasoning, "own"
    else:
        reasoning, source = None, "none"
    r = c.record
    meta = {
        "target_format": TARGET_FORMAT,
        "run_id": r.run_id,
        "trajectory_id": r.trajectory_id,
        "turn": r.turn,
        "policy": r.policy,
        "variant": r.variant,
        "status": r.status,
        "speedup": r.speedup,
        "target_executed": r.target_executed,
        "kernel_hash": kernel_hash(r.action),
        "reasoning_source": source,
        "reasoning_chars": len(reasoning or ""),
        "answer_chars": len(answer),
    }
    return SftExample(
        kind="kernelgen",
        task_id=r.task_id,
        messages=_messages(task.system, task.user, with_reasoning(answer, reasoning)),
        metadata=meta,
    )


def _messages(system: str, user: str, assistant: str) -> tuple[Message, ...]:
    head = (Message(role="system", content=system),) if system else ()
    return (*head, Message(role="user", content=user), Message(role="assistant", content=assistant))


def build_kernelgen_from_sources(
    sources: Mapping[str, str],
    variants: Sequence[str | None] = (None,),
    reasonings: Mapping[str, str] | None = None,
) -> BuildResult:
    """KernelGen rows from kernel sources keyed by task id, one row per (task, prompt variant)."""
    from ptxgym.knowledge_packs.prompting import build_task_prompt
    from ptxgym.records.tasks import get_task, require_not_test

    require_not_test(sources, "SFT data")
    examples = []
    for task_id, code in sorted(sources.items()):
        task = get_task(task_id)
        for variant in variants:
            prompt = build_task_prompt(task, variant)
            reasoning = (reasonings or {}).get(task_id)
            meta = {
                "target_format": TARGET_FORMAT,
                "variant": variant,
                "source": "kernel file",
                "kernel_hash": kernel_hash(fenced(code)),
                "reasoning_source": "given" if reasoning else "none",
            }
            msgs = _messages(prompt.system, prompt.user, with_reasoning(fenced(code), reasoning))
            examples.append(SftExample(kind="kernelgen", task_id=task.id, messages=msgs, metadata=meta))
    return BuildResult(examples)


def build_kernelgen_from_solutions(
    arch: str = "sm_90a", variants: Sequence[str | None] = (None,), root: str | Path | None = None
) -> BuildResult:
    """KernelGen rows from the expert solutions shipped in the knowledge packs for one architecture."""
    from ptxgym.policies.reference import available_solutions
    from ptxgym.records.tasks import get_task

    found = available_solutions(Path(root) if root else None)
    sources = {tid: p.read_text(encoding="utf-8") for tid, p in found.items() if get_task(tid).arch == arch}
    if not sources:
        raise FileNotFoundError(f"no shipped solutions for {arch} in the knowledge packs")
    return build_kernelgen_from_sources(sources, variants)
