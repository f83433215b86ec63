"""Baseline latency records, cached in memory per evaluator and on disk per timing environment.

The disk key names everything that changes a baseline latency: GPU, driver, CUDA runtime and torch
(``GpuFacts.key``), the definition and workload, the timing protocol (warm-up, iterations, trials),
the L2 flush size, the timing backend and the baseline function.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.evaluation.trusted.base import EvalSettings
from ptxgym.records.feedback import LatencyStats
from ptxgym.records.tasks import Task


class BaselineRecord(BaseModel):
    """The baseline of one workload as measured (or why it could not be)."""

    model_config = ConfigDict(frozen=True)

    name: str
    backend: str | None = None
    stats: LatencyStats | None = None
    correct: bool | None = Field(None, description="Whether the baseline itself passed the task tolerance.")
    rel_norm_error: float | None = None
    message: str = ""
    source: str = Field("measured", description="measured (this evaluator) or disk (an earlier one).")
    measured_at: float = Field(default_factory=time.time)


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
            str(flush_bytes),
            str(backend),
        )
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]

    def get(self, key: str, from_disk: bool) -> BaselineRecord | None:
        """A record from memory, else (if allowed) from disk."""
        if key in self._memory:
            return self._memory[key]
        path = self.root / f"{key}.json"
        if from_disk and path.exists():
            try:
                record = BaselineRecord.model_validate(json.loads(path.read_text()))
            except (ValueError, OSError):
                return None
            record = record.model_copy(update={"source": "disk"})
            self._memory[key] = record
            return record
        return None

    def put(self, key: str, record: BaselineRecord) -> None:
        """Remember a record; only complete, correct measurements go to disk."""
        self._memory[key] = record
        if record.stats is not None and record.correct:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / f"{key}.json").write_text(record.model_dump_json())
