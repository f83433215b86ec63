"""ReplayPolicy: plays back the responses of a recorded trajectory file, turn by turn.

Use it to re-evaluate a recorded run under another evaluator (record with a model on a CPU machine,
replay on the GPU), to check that a pipeline change keeps verdicts, or to feed training code.

Which recorded trajectory answers a conversation:

1. ``trajectory_id=`` given: that one, for every conversation;
2. else the record whose ``trajectory_id`` equals the conversation's (the runner's ``<task>/<variant>/<i>``);
3. else, when the file holds exactly one trajectory of the conversation's task, that one.

The turn is the conversation's length. A trajectory that has no record for the turn (it ended earlier,
or was cut) raises ``PolicyExhausted``, which the runner treats as a clean end of the trajectory.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptxgym.policies.base import Action, Observation, Policy, PolicyError, PolicyExhausted
from ptxgym.policies.history import Conversation
from ptxgym.records.turns import TurnRecord, read_turns


class ReplayPolicy(Policy):
    """Responses from trajectory JSONL files (``ptxgym.records.turns.TurnRecord`` lines)."""

    name = "replay"

    def __init__(self, paths: str | Path | Iterable[str | Path], trajectory_id: str | None = None) -> None:
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        self.paths = [Path(p) for p in paths]
        self.trajectory_id = trajectory_id
        self._turns: dict[str, dict[int, TurnRecord]] = defaultdict(dict)
        self._by_task: dict[str, set[str]] = defaultdict(set)
        for path in self.paths:
            if not path.is_file():
                raise PolicyError(f"replay file not found: {path}")
            records, problems = read_turns(path)
            for problem in problems:
                warnings.warn(f"replay: {problem}", stacklevel=2)
            for r in records:
                self._turns[r.trajectory_id][r.turn] = r
                self._by_task[r.task_id].add(r.trajectory_id)
        if not self._turns:
            raise PolicyError(f"no turn records in {', '.join(map(str, self.paths))}")
        if trajectory_id and trajectory_id not in self._turns:
            raise PolicyError(
                f"no trajectory {trajectory_id!r} in the replay file(s); "
                f"recorded: {', '.join(sorted(self._turns)[:20])}"
            )

    @property
    def trajectories(self) -> list[str]:
        """Recorded trajectory ids."""
        return sorted(self._turns)

    def _source(self, conv: Conversation) -> str:
        if self.trajectory_id:
            return self.trajectory_id
        if conv.trajectory_id and conv.trajectory_id in self._turns:
            return conv.trajectory_id
        candidates = self._by_task.get(conv.task_id or "", set())
        if len(candidates) == 1:
            return next(iter(candidates))
        raise PolicyError(
            f"no recorded trajectory matches {conv.trajectory_id or conv.task_id!r}: the file has "
            f"{len(candidates)} trajectories of task {conv.task_id!r}; pass trajectory_id= to choose one"
        )

    def act(self, observation: Observation, history: Conversation | None = None) -> Action:
        """The recorded response of the matching trajectory at this turn."""
        if history is None:
            raise PolicyError("ReplayPolicy needs the Conversation to know the task and turn")
        source = self._source(history)
        record = self._turns[source].get(history.turn)
        if record is None:
            last = max(self._turns[source])
            raise PolicyExhausted(
                f"recorded trajectory {source} has no turn {history.turn} (its last recorded turn is {last})"
            )
        return Action(
            text=record.action,
            reasoning=record.reasoning,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            finish_reason="replay",
            messages=list(record.messages),
        )

    def describe(self) -> dict[str, Any]:
        """Files and the chosen trajectory."""
        return {
            **super().describe(),
            "paths": [str(p) for p in self.paths],
            "trajectory_id": self.trajectory_id,
        }
