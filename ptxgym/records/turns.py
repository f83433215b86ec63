"""Trajectory records: what one turn of an episode leaves behind, as written to JSONL.

The runner (``ptxgym eval``) appends one ``TurnRecord`` per line as each turn finishes, so a killed run
loses no finished turn; trainers build SFT and RL data from these files. The Feedback travels as a JSON
string (``feedback_json``) so that ``datasets.load_dataset("json", ...)`` sees one flat, stable schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.records.feedback import Feedback

TRAJECTORY_SCHEMA = "ptxgym.turn.v1"


class ChatMessage(BaseModel):
    """One chat message as sent to or received from a model."""

    model_config = ConfigDict(frozen=True)

    role: str = Field(description="system, user or assistant.")
    content: str
    reasoning: str | None = Field(None, description="Reasoning text, when the server returns it apart.")


class TurnRecord(BaseModel):
    """One turn: the prompt it answered, the model's action, the env's verdict and the reward."""

    model_config = ConfigDict(frozen=True)

    schema_version: str = TRAJECTORY_SCHEMA
    run_id: str
    trajectory_id: str = Field(description="Unique per (run, task, variant, trajectory index).")
    task_id: str
    variant: str = Field(description="Knowledge-pack prompt variant.")
    policy: str = Field(description="Policy name (model id, reference, replay, ...).")
    turn: int = Field(description="0-based turn index.")
    messages: list[ChatMessage] = Field(default_factory=list, description="The prompt this turn answered.")
    action: str = Field(description="The model's full response text.")
    reasoning: str | None = None
    status: str = Field(description="Feedback status, repeated for easy filtering.")
    correct: bool = False
    target_executed: str = "not_checked"
    speedup: float | None = None
    reward: float = 0.0
    reward_components: dict[str, float] = Field(default_factory=dict)
    feedback_json: str = Field(description="The full Feedback record as JSON.")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    wall_s: float = 0.0
    timestamp: str = ""
    terminated: bool = False
    truncated: bool = False
    # Added by the runner (ptxgym eval); defaults keep older files readable.
    trajectory_index: int = Field(0, description="Index of the trajectory within its (task, variant).")
    observation: str = Field("", description="The env's observation text after this turn (the feedback).")
    finish_reason: str | None = Field(None, description="Why generation stopped: stop, length, replay, ...")
    dropped_turns: int = Field(0, description="Earlier turns left out of this turn's prompt.")
    policy_wall_s: float = Field(0.0, description="Seconds the policy took to answer.")
    env_wall_s: float = Field(0.0, description="Seconds env.step took (build + evaluation).")

    @property
    def feedback(self) -> Feedback:
        """The parsed Feedback."""
        return Feedback.from_json(self.feedback_json)

    def to_line(self) -> str:
        """One JSON line (no trailing newline); escaped to ASCII when the text holds a lone surrogate."""
        data = self.model_dump(mode="json")
        line = json.dumps(data, ensure_ascii=False)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a policy's raw response may hold one; UTF-8 files cannot
            line = json.dumps(data, ensure_ascii=True)
        return line


def read_turns(path: str | Path, *, strict: bool = False) -> tuple[list[TurnRecord], list[str]]:
    """Read a trajectory JSONL file; return the records and a list of problems (e.g. a truncated line).

    A last line cut off by a killed run is reported in the problems and skipped, never fatal, unless
    ``strict``.
    """
    records: list[TurnRecord] = []
    problems: list[str] = []
    p = Path(path)
    if not p.exists():
        return records, problems
    for lineno, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data: Any = json.loads(line)
            records.append(TurnRecord.model_validate(data))
        except (json.JSONDecodeError, ValueError) as exc:
            msg = f"{p}:{lineno}: unreadable turn record skipped ({type(exc).__name__}: {str(exc)[:200]})"
            if strict:
                raise ValueError(msg) from exc
            problems.append(msg)
    return records, problems
