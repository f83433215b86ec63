"""The run directory: where every finished turn lands the moment it finishes, and how a run resumes.

Layout of ``RUN_DIR``:

- ``run.json``: run id, config, policy description, ptxgym version, evaluator, start and resume times;
- ``trajectories.jsonl``: one ``TurnRecord`` per line, appended (write, flush, fsync) as each turn ends,
  so a killed run loses at most the turn in flight; loads with ``datasets.load_dataset("json", ...)``;
- ``events.jsonl``: how trajectories ended (terminated, truncated, policy exhausted, context overflow)
  or why they stopped (policy errors, to retry on ``--resume``);
- ``summary.json``: the last summary printed.

On open, a last line cut off by a kill (no trailing newline, or not valid JSON) is detected, reported,
moved aside to ``trajectories.jsonl.cut-<n>`` and removed, so the next append starts on a clean line and
the interrupted turn is run again.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.records.errors import PtxgymError
from ptxgym.records.turns import TurnRecord, read_turns
from ptxgym.runner.config import EvalConfig

RUN_SCHEMA = "ptxgym.run.v1"
TRAJECTORY_FILE = "trajectories.jsonl"
EVENTS_FILE = "events.jsonl"
#: End reasons after which a trajectory is complete (not retried on resume).
FINAL_REASONS = {"terminated", "truncated", "policy_exhausted", "context_overflow"}


def now() -> str:
    """UTC timestamp, ISO 8601."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class RunDirError(PtxgymError, RuntimeError):
    """The run directory cannot be used as asked (exists without --resume, unreadable, ...)."""


class Event(BaseModel):
    """One line of events.jsonl."""

    model_config = ConfigDict(frozen=True)

    event: str = Field(description="end (trajectory finished) or error (stopped; resumable).")
    trajectory_id: str
    reason: str
    message: str = ""
    turns: int = 0
    timestamp: str = Field(default_factory=now)


class ResumeState(BaseModel):
    """What a run directory already holds."""

    model_config = ConfigDict(frozen=True)

    records: dict[str, list[TurnRecord]] = Field(
        default_factory=dict, description="By trajectory id, by turn."
    )
    ended: dict[str, str] = Field(default_factory=dict, description="Trajectory id -> final end reason.")
    problems: list[str] = Field(default_factory=list)

    @property
    def turns(self) -> int:
        """Finished turns on disk."""
        return sum(len(v) for v in self.records.values())


def _repair_tail(path: Path) -> str | None:
    """Cut a partial last line off ``path``; return a message saying what was cut, or None."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    data = path.read_bytes()
    if data.endswith(b"\n"):
        last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            json.loads(data[last_start:])
            return None
        except json.JSONDecodeError:
            cut_at = last_start
    else:
        cut_at = data.rfind(b"\n") + 1
    fragment = data[cut_at:]
    n = 0
    while (aside := path.with_name(f"{path.name}.cut-{n}")).exists():
        n += 1
    aside.write_bytes(fragment)
    with path.open("r+b") as f:
        f.truncate(cut_at)
    return (
        f"{path.name}: the last line ({len(fragment)} bytes) was cut off by an interrupted run; "
        f"it was moved to {aside.name} and its turn will be run again"
    )


#: Settings that may change when a run is resumed: how fast it runs or how the server is reached, not
#: what is measured.
RESUMABLE = frozenset({"concurrency", "policy.base_url", "policy.timeout_s", "policy.retries",
                       "policy.retry_delay_s", "policy.transport"})  # fmt: skip


def config_changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """``field: old -> new`` for every setting that differs, but those in ``RESUMABLE``."""
    out = []
    for key in sorted(set(old) | set(new)):
        name = prefix + key
        a, b = old.get(key), new.get(key)
        if name in RESUMABLE or a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, name + ".")
        else:
            out.append(f"{name}: {a!r} -> {b!r}")
    return out


class RunStore:
    """Appends turns and events to a run directory, thread-safely and durably."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)
        self.trajectory_path = self.dir / TRAJECTORY_FILE
        self.events_path = self.dir / EVENTS_FILE
        self.meta_path = self.dir / "run.json"
        self._lock = threading.Lock()
        self._files: dict[Path, Any] = {}
        self.run_id = ""

    # ---------------------------------------------------------------------------------------- opening

    def check_resume(self, config: EvalConfig) -> None:
        """Refuse (``RunDirError``) to resume a run that was started with other settings."""
        meta = self._read_meta()
        if meta.get("config"):
            changed = config_changes(meta["config"], config.model_dump(mode="json"))
            if changed:
                raise RunDirError(
                    f"{self.dir} was started with other settings ({'; '.join(changed)}); resume it with "
                    "the same settings, or start a new run with another --out"
                )

    def check_open(self, config: EvalConfig, resume: bool) -> dict[str, Any]:
        """Raise ``RunDirError`` if ``open`` would refuse; return the run's metadata ({} for a new run).

        Reads only: a refused run leaves the directory as it was (and makes none).
        """
        if self.dir.exists() and not self.dir.is_dir():
            raise RunDirError(f"{self.dir} is a file, not a run directory; choose another --out")
        has_turns = self.trajectory_path.is_file() and self.trajectory_path.stat().st_size > 0
        if has_turns and not resume:
            raise RunDirError(
                f"{self.dir} already holds a run; pass --resume to continue it, or choose "
                "a new --out directory"
            )
        if not resume:
            return {}
        self.check_resume(config)
        return self._read_meta()

    def open(self, config: EvalConfig, policy: dict[str, Any], evaluator: str, resume: bool) -> ResumeState:
        """Create the directory or, with ``resume``, pick up what it holds."""
        meta = self.check_open(config, resume)
        self.dir.mkdir(parents=True, exist_ok=True)
        notes = []
        old_name = (meta.get("policy") or {}).get("name")
        if old_name and old_name != policy.get("name"):
            notes.append(
                f"the run was started with policy {old_name!r}; it continues with {policy.get('name')!r}"
            )
        self.run_id = meta.get("run_id") or uuid.uuid4().hex[:12]
        meta.update(
            {
                "schema": RUN_SCHEMA,
                "run_id": self.run_id,
                "config": config.model_dump(mode="json"),
                "policy": policy,
                "evaluator": evaluator,
            }
        )
        meta.setdefault("created", now())
        if resume:
            meta.setdefault("resumed", []).append(now())
        from ptxgym.records.version import __version__

        meta["ptxgym_version"] = __version__
        self.meta_path.write_text(json.dumps(meta, indent=2), encoding="utf-8")
        state = self._load_state()
        return state.model_copy(update={"problems": notes + state.problems})

    def _read_meta(self) -> dict[str, Any]:
        if not self.meta_path.is_file():
            return {}
        try:
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{self.meta_path} is not valid JSON ({exc}); fix or remove it") from exc

    def _load_state(self) -> ResumeState:
        problems = [m for m in (_repair_tail(self.trajectory_path), _repair_tail(self.events_path)) if m]
        records, read_problems = read_turns(self.trajectory_path)
        problems += read_problems
        by_traj: dict[str, dict[int, TurnRecord]] = defaultdict(dict)
        for r in records:
            if r.run_id != self.run_id:
                problems.append(
                    f"turn {r.trajectory_id}#{r.turn} belongs to run {r.run_id}, not {self.run_id}"
                )
            if r.turn in by_traj[r.trajectory_id]:
                problems.append(f"duplicate turn {r.trajectory_id}#{r.turn} ignored")
                continue
            by_traj[r.trajectory_id][r.turn] = r
        contiguous = {}
        for tid, turns in by_traj.items():
            seq: list[TurnRecord] = []
            while len(seq) in turns:
                seq.append(turns[len(seq)])
            if len(seq) != len(turns):
                problems.append(f"{tid}: turns after {len(seq) - 1} are not contiguous and will be re-run")
            contiguous[tid] = seq
        return ResumeState(records=contiguous, ended=self._ended(contiguous), problems=problems)

    def _ended(self, records: dict[str, list[TurnRecord]]) -> dict[str, str]:
        ended = {
            tid: ("terminated" if seq[-1].terminated else "truncated")
            for tid, seq in records.items()
            if seq and (seq[-1].terminated or seq[-1].truncated)
        }
        if self.events_path.is_file():
            for line in self.events_path.read_text(encoding="utf-8").splitlines():
                try:
                    ev = Event.model_validate_json(line)
                except ValueError:
                    continue
                # An end event counts only if the turns it closed are all on disk.
                on_disk = len(records.get(ev.trajectory_id, []))
                if ev.event == "end" and ev.reason in FINAL_REASONS and ev.turns == on_disk:
                    ended.setdefault(ev.trajectory_id, ev.reason)
        return ended

    # --------------------------------------------------------------------------------------- writing

    def _append(self, path: Path, line: str) -> None:
        with self._lock:
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = path.open("a", encoding="utf-8")
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def append_turn(self, record: TurnRecord) -> None:
        """Write one finished turn durably."""
        self._append(self.trajectory_path, record.to_line())

    def append_event(self, event: Event) -> None:
        """Write one trajectory event durably."""
        self._append(self.events_path, event.model_dump_json())

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """summary.json of the run."""
        path = self.dir / "summary.json"
        path.write_text(json.dumps(summary, indent=2), encoding="utf-8")
        return path

    def close(self) -> None:
        """Close the open files."""
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()
