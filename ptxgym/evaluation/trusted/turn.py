"""The per-turn context of the local evaluator: what one evaluation of one subject needs and gathers.

One ``Turn`` is made per ``evaluate`` call (the subject is a candidate) and per baseline measurement (the
subject is the task's library baseline, ``load`` set and ``candidate`` None), and handed from stage to
stage (worker set-up, load, check, time, memcheck, target); nothing of it outlives the call or is
shared with another turn. Both subjects go through the same stages (``LocalGpuEvaluator._run_candidate``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxgym.evaluation.protocol import Load
from ptxgym.evaluation.trusted.arena import Arena
from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings
from ptxgym.evaluation.trusted.baseline_store import BaselineRecord
from ptxgym.evaluation.trusted.pool import WorkerHandle
from ptxgym.evaluation.trusted.proofs import InBand
from ptxgym.evaluation.trusted.session import Session, SessionResult
from ptxgym.records.feedback import Stage
from ptxgym.records.tasks import Task


@dataclass
class Turn:
    """One candidate's evaluation in progress."""

    task: Task
    candidate: BuiltCandidate | None
    """The candidate; None when the subject is the baseline (``load``)."""
    arena: Arena
    baseline: BaselineRecord
    """The baseline the speedup divides by (for a baseline subject: the disk warm start, if any)."""
    seed: int = 0
    """Seed of this turn's input perturbations."""
    baseline_load: Load | None = None
    """The library baseline's load command when it is the subject (trusted code, timed like a candidate)."""
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
    in_band: InBand = field(default_factory=InBand)
    """The in-band target proof of the counted call and the secret cross-check draw (``proofs.py``)."""
    hw_alone: bool = False
    """The hardware-counted call decides alone, no SASS-patched call (``LocalGpuEvaluator._hw_alone``)."""
    proof_inputs: Path | None = None
    """The inputs the proofs after the GPU turn run on (this turn's own link to the arena's file)."""
    proof_settings: EvalSettings | None = None
    """The settings of those proofs: their time limits fixed at the end of the turn."""
    proof_memcheck: bool = False
    """Whether memcheck is due among those proofs (decided at the end of the turn)."""
    refilled: bool = False
    """The spares were replaced before the subject's runner was discarded (``EvalSettings.early_refill``)."""

    @property
    def load(self) -> Load:
        """The load command of this turn's subject."""
        if self.baseline_load is not None:
            return self.baseline_load
        if self.candidate is None:
            raise ValueError("a turn needs a candidate or a baseline load command")
        return Load(kind="so", path=str(self.candidate.so_path), entry=self.candidate.entry_symbol)

    @property
    def strict(self) -> bool:
        """Whether a failed check ends the turn (a candidate); the baseline is timed even if it misses."""
        return self.baseline_load is None

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
