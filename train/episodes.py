"""Reading recorded trajectories for the dataset builders (``ptxgym.records.turns.TurnRecord`` files).

Helpers that every builder needs: load many JSONL files, group turns by trajectory in turn order, the
task prompt a trajectory started from, and the feedback text the model saw after a turn.
"""

from __future__ import annotations

import re
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ptxgym.records.turns import TurnRecord, read_turns

_CONTEXT_NOTE = re.compile(r"\n\n\[Context note: .*?\]\s*$", re.DOTALL)


def load_records(paths: Iterable[str | Path]) -> list[TurnRecord]:
    """Every turn record of the given JSONL files (unreadable lines are skipped with a warning)."""
    records: list[TurnRecord] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"trajectory file not found: {p}")
        got, problems = read_turns(p)
        for problem in problems:
            warnings.warn(problem, stacklevel=2)
        records.extend(got)
    return records


def group_trajectories(records: Iterable[TurnRecord]) -> dict[str, list[TurnRecord]]:
    """``trajectory_id -> its turns sorted by turn`` (a repeated turn keeps the last record)."""
    by_id: dict[str, dict[int, TurnRecord]] = defaultdict(dict)
    for r in records:
        by_id[r.trajectory_id][r.turn] = r
    return {tid: [turns[t] for t in sorted(turns)] for tid, turns in sorted(by_id.items())}


@dataclass(frozen=True)
class TaskMessages:
    """The system message and the first user message (the task) of a trajectory."""

    system: str
    user: str


def task_messages(turns: Sequence[TurnRecord]) -> TaskMessages:
    """The task prompt a trajectory started from.

    Taken from the earliest recorded turn's prompt messages (minus any history-trimming note the policy
    appended); when no record carries messages, rebuilt from the task catalog and the record's variant.
    A test-split task is refused: its prompt never goes into training data.
    """
    from ptxgym.records.tasks import require_not_test

    require_not_test([turns[0].task_id], "SFT data")
    for r in turns:
        system = next((m.content for m in r.messages if m.role == "system"), "")
        user = next((m.content for m in r.messages if m.role == "user"), None)
        if user is not None:
            return TaskMessages(system=system, user=_CONTEXT_NOTE.sub("", user))
    from ptxgym.knowledge_packs.prompting import build_task_prompt
    from ptxgym.records.tasks import get_task

    first = turns[0]
    variant = first.variant if first.variant not in ("", "none", "None") else None
    prompt = build_task_prompt(get_task(first.task_id), variant)
    return TaskMessages(system=prompt.system, user=prompt.user)


def feedback_text_after(turns: Sequence[TurnRecord], index: int) -> str:
    """The feedback the model saw after ``turns[index]``.

    The next turn's prompt ends with it when that turn was recorded; otherwise it is rendered from the
    recorded Feedback with the env's renderer.
    """
    record = turns[index]
    if index + 1 < len(turns):
        nxt = turns[index + 1]
        if nxt.turn == record.turn + 1 and nxt.messages and nxt.messages[-1].role == "user":
            return nxt.messages[-1].content
    from ptxgym.records.feedback_text import render_feedback

    return render_feedback(record.feedback)
