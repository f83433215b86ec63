"""Baseline latency records: measured once in each evaluator's life, kept on disk only as a warm start.

Every evaluator re-measures the baseline of a task on its first use (``LocalGpuEvaluator._baseline``,
through the candidate's own path) and keeps that measurement in memory (``measured``); every speedup it
reports divides by its own measurement. A record on disk from an earlier evaluator is a *warm start*
only (``warm_start``): it seeds the step budget of the re-measurement (a hung library call is cut at
about the budget a candidate of that latency gets, not the hard cap) and is recorded beside the new
figure (``BaselineRecord.warm_start_ms``) so drift between evaluators is visible. It never stands in
for the measurement: a machine whose clocks, driver or libraries changed in a way the key misses still
gets a baseline measured now.

The key names everything that changes a baseline latency: GPU, driver, CUDA runtime, SM clocks (maximum
and applications clock) and the library versions (torch, cuBLAS, cuDNN) (``GpuFacts.key``), the
definition and workload, the timing protocol (warm-up, iterations, trials, rotated sets, verified calls),
the L2 flush size, the timing backend and the baseline function that runs (``resolve_baseline``).

Which baseline runs. A baseline that needs a library beyond the gpu extra (``Baseline.requires``, e.g.
FlashInfer) runs where that Python module is installed; elsewhere its ``fallback`` (the torch reference)
is timed and the record says why (``BaselineRecord.fallback``). Where it is installed but gives no
latency (its import, set-up or calls fail), the evaluator times the fallback too (``local.py``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.evaluation.trusted.base import EvalSettings, GpuVerdict
from ptxgym.evaluation.trusted.session import Failure
from ptxgym.records.feedback import LatencyStats, Status
from ptxgym.records.task_record import BASELINES
from ptxgym.records.tasks import Task


def installed(module: str) -> bool:
    """Whether a Python module can be found here (not imported: the worker imports it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def with_fallback(task: Task) -> Task:
    """The task timed against its baseline's fallback (``Baseline.fallback``)."""
    fallback = task.baseline.fallback
    if fallback is None:
        raise ValueError(f"baseline {task.baseline.function} of {task.id} has no fallback")
    return task.model_copy(update={"baseline": BASELINES[fallback]})


def resolve_baseline(task: Task) -> tuple[Task, str]:
    """The task as its baseline runs on this machine, and why it is not the named one ('' if it is)."""
    needs = task.baseline.requires
    if needs is None or installed(needs):
        return task, ""
    fallback = with_fallback(task)
    why = (
        f"{task.baseline.name} ({task.baseline.function}) needs the Python module {needs!r}, which is not "
        f"installed (pip install 'ptxgym[{needs}]'); timed {fallback.baseline.name} instead"
    )
    return fallback, why


class BaselineRecord(BaseModel):
    """The baseline of one workload as measured (or why it could not be)."""

    model_config = ConfigDict(frozen=True)

    name: str
    function: str = Field("", description="The library_baselines function that was timed.")
    fallback: str = Field(
        "",
        description="Why the task's named baseline is not the one timed ('' when it is; resolve_baseline).",
    )
    backend: str | None = None
    stats: LatencyStats | None = None
    correct: bool | None = Field(None, description="Whether the baseline itself passed the task tolerance.")
    rel_norm_error: float | None = None
    message: str = ""
    source: str = Field("measured", description="measured (this evaluator) or disk (an earlier one).")
    sandboxed: bool | None = Field(
        None,
        description="Whether the worker that timed it had the candidate's host sandbox applied (the "
        "candidate path); False only where the sandboxed measurement failed and the unsandboxed retry "
        "is recorded.",
    )
    anomaly: str = Field(
        "", description="What the candidate path would have called a timing anomaly (cross-check, floor)."
    )
    warm_start_ms: float | None = Field(
        None, description="Median of the disk record this measurement replaced (an earlier evaluator's)."
    )
    measured_at: float = Field(default_factory=time.time)


def baseline_record(
    task: Task,
    backend: str | None,
    verdict: GpuVerdict,
    failure: Failure | None,
    sandboxed: bool,
    warm: BaselineRecord | None,
    retried: str = "",
) -> BaselineRecord:
    """The record of a baseline timed as a turn's subject: its verdict read as a baseline.

    ``failure``: the first failed check the (lenient) turn recorded; ``retried``: why the sandboxed
    attempt before this one gave no latency (empty if this is the first attempt).
    """
    timing = verdict.timing
    stats = timing.candidate if timing is not None else None
    correct = None if stats is None and failure is None else failure is None
    if failure is not None:
        message = failure.message
    elif verdict.status not in (Status.PASSED, Status.TIMING_ANOMALY):
        message = f"baseline {task.baseline.function} failed: {verdict.status.value}: {verdict.message}"
    else:
        message = ""
    if retried:
        message = f"{message}; timed unsandboxed because the sandboxed attempt failed: {retried}".lstrip("; ")
    return BaselineRecord(
        name=task.baseline.name,
        function=task.baseline.function,
        backend=backend,
        stats=stats,
        correct=correct,
        rel_norm_error=verdict.correctness.rel_norm_error if verdict.correctness else None,
        message=message[:2000],
        sandboxed=sandboxed,
        anomaly=verdict.message if verdict.status is Status.TIMING_ANOMALY else "",
        warm_start_ms=warm.stats.median_ms if warm is not None and warm.stats is not None else None,
    )


class BaselineStore:
    """In-memory and on-disk baseline records."""

    def __init__(self, root: Path, environment_key: str) -> None:
        self.root = root
        self.environment_key = environment_key
        self._memory: dict[str, BaselineRecord] = {}

    def key(self, task: Task, settings: EvalSettings, flush_bytes: int, backend: str | None) -> str:
        """Hash of everything that determines the baseline latency."""
        parts = (
            self.environment_key,
            task.definition.name,
            task.workload.uuid,
            task.baseline.function,
            str(settings.warmup),
            str(settings.iterations),
            str(settings.trials),
            str(settings.rotate_sets),
            str(settings.verified_per_trial),
            str(flush_bytes),
            str(backend),
        )
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]

    def measured(self, key: str) -> BaselineRecord | None:
        """The record this evaluator measured (or was given with ``put``), if any."""
        return self._memory.get(key)

    def warm_start(self, key: str) -> BaselineRecord | None:
        """The record an earlier evaluator left on disk (``source="disk"``), never kept as this one's."""
        path = self.root / f"{key}.json"
        if not path.exists():
            return None
        try:
            record = BaselineRecord.model_validate(json.loads(path.read_text()))
        except (ValueError, OSError):
            return None
        return record.model_copy(update={"source": "disk"})

    def get(self, key: str, from_disk: bool) -> BaselineRecord | None:
        """A record from memory, else (if allowed) from disk, then kept in memory (cache readers)."""
        if key in self._memory:
            return self._memory[key]
        record = self.warm_start(key) if from_disk else None
        if record is not None:
            self._memory[key] = record
        return record

    def put(self, key: str, record: BaselineRecord, to_disk: bool = True) -> None:
        """Remember a record; only complete, correct measurements go to disk (if ``to_disk``)."""
        self._memory[key] = record
        if to_disk and record.stats is not None and record.correct:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / f"{key}.json").write_text(record.model_dump_json())
