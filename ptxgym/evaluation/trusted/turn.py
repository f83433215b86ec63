"""The per-turn context of the local evaluator: what one evaluation of one candidate needs and gathers.

One ``Turn`` is made per ``evaluate`` call and handed from stage to stage (worker set-up, load, check,
time, memcheck, target); nothing of it outlives the call or is shared with another turn.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ptxgym.evaluation.trusted.arena import Arena
from ptxgym.evaluation.trusted.base import BuiltCandidate
from ptxgym.evaluation.trusted.baseline_store import BaselineRecord
from ptxgym.evaluation.trusted.pool import WorkerHandle
from ptxgym.evaluation.trusted.session import Session, SessionResult
from ptxgym.records.feedback import Stage
from ptxgym.records.tasks import Task


@dataclass
class Turn:
    """One candidate's evaluation in progress."""

    task: Task
    candidate: BuiltCandidate
    arena: Arena
    baseline: BaselineRecord
    seed: int = 0
    """Seed of this turn's input perturbations."""
    walls: dict[str, float] = field(default_factory=dict)
    """Wall seconds per stage, as recorded in ``Feedback.stage_wall_s``."""
    result: SessionResult = field(default_factory=SessionResult)
    """Checks, trials and the first failure, filled by the session."""
    stage: Stage = Stage.RUN
    """The stage in progress (a fault is charged to it)."""
    clocks: list[int | None] = field(default_factory=list)
    """SM clock (MHz) before and after timing."""
    details: dict[str, Any] = field(default_factory=dict)
    """Harness details recorded in the verdict (calibration, backend, cross-check...)."""
    session: Session | None = None
    handle: WorkerHandle | None = None
    free_before: int = 0
    """Free GPU bytes (this process's cache counted as free) after worker set-up, before the load."""

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Record the wall time of the enclosed block as ``walls[name]``."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.walls[name] = round(time.perf_counter() - t, 4)

    def extra(self) -> dict[str, Any]:
        """Keyword arguments every verdict of this turn carries."""
        return {"details": self.details}
