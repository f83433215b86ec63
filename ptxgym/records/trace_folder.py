"""Reading a FlashInfer-Trace dataset folder: its definitions, workloads and (ptxgym) task records.

Layout (the FlashInfer-Trace one, plus an optional ``tasks/`` folder of ptxgym task records)::

    <root>/definitions/<op_type>/<definition>.json
    <root>/workloads/<op_type>/<definition>.jsonl      # one workload Trace per line
    <root>/tasks/*.json                                 # optional: {"tasks": [TaskRecord, ...]}

Sub-folder names are not trusted: a definition is known by its ``name`` field and a workload by the
``definition`` field of its line. Solutions and traces in the folder are ignored here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ptxgym.records.errors import SchemaError
from ptxgym.records.schema import Definition, Trace, Workload, read_jsonl
from ptxgym.records.task_record import TaskRecord, TaskRecordFile


@dataclass(frozen=True)
class TraceFolder:
    """The parsed content of one dataset folder."""

    root: Path
    definitions: dict[str, Definition]
    """By name, in file order."""
    workloads: dict[str, tuple[Workload, ...]]
    """Definition name -> its workloads, in file order."""
    records: tuple[TaskRecord, ...]
    """Task records from ``tasks/*.json`` (empty when the folder has none)."""


def read_folder(root: str | Path) -> TraceFolder:
    """Parse a dataset folder; every problem is a SchemaError that names the file."""
    base = Path(root).expanduser()
    if not base.is_dir():
        raise FileNotFoundError(
            f"no dataset folder {base}: expected a FlashInfer-Trace folder with definitions/"
        )
    if not (base / "definitions").is_dir():
        raise SchemaError(
            f"{base} is not a FlashInfer-Trace dataset: it has no definitions/ folder "
            "(expected definitions/<op_type>/<name>.json and workloads/<op_type>/<name>.jsonl)"
        )
    return TraceFolder(
        root=base.resolve(),
        definitions=_definitions(base),
        workloads=_workloads(base),
        records=_records(base),
    )


def _definitions(base: Path) -> dict[str, Definition]:
    out: dict[str, Definition] = {}
    where: dict[str, Path] = {}
    for path in sorted((base / "definitions").rglob("*.json")):
        try:
            d = Definition.from_json(path.read_text(encoding="utf-8"))
        except SchemaError as exc:
            raise SchemaError(f"{path}: {exc}") from exc
        if d.name in out:
            raise SchemaError(f"definition {d.name!r} is defined twice: {where[d.name]} and {path}")
        out[d.name], where[d.name] = d, path
    return out


def _workloads(base: Path) -> dict[str, tuple[Workload, ...]]:
    found: dict[str, list[Workload]] = {}
    folder = base / "workloads"
    for path in sorted(folder.rglob("*.jsonl")) if folder.is_dir() else []:
        for trace in read_jsonl(path, Trace):
            found.setdefault(trace.definition, []).append(trace.workload)
    for name, items in found.items():
        uuids = [w.uuid for w in items]
        dup = sorted({u for u in uuids if uuids.count(u) > 1})
        if dup:
            raise SchemaError(f"workloads of {name} repeat uuids {dup}")
    return {k: tuple(v) for k, v in found.items()}


def read_records(root: str | Path) -> tuple[TaskRecord, ...]:
    """Only the task records of a folder (``tasks/*.json``)."""
    return _records(Path(root))


def _records(base: Path) -> tuple[TaskRecord, ...]:
    folder = base / "tasks"
    out: list[TaskRecord] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.extend(TaskRecordFile.model_validate(json.loads(path.read_text(encoding="utf-8"))).tasks)
        except (ValidationError, json.JSONDecodeError) as exc:
            raise SchemaError(f"{path}: not a valid task records file: {exc}") from exc
    return tuple(out)
