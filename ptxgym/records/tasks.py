"""Tasks: a definition, a family of its workloads, a target architecture and a task record, as data.

The shipped catalog is the FlashInfer-Trace folder ``envs/data`` (package data of ``ptxgym.envs``) with
its task records in ``envs/data/tasks/*.json`` (``task_record.py``); its ids are ``<Name>-<arch short>``
(``Gemm-sm90a``) and its Gymnasium ids ``ptxgym/<id>-v0``. Any other FlashInfer-Trace folder is a task
source too (``load_dataset``): each definition with workloads becomes one task per architecture, id
``<definition>@<arch>`` (``gemm_n4096_k4096@sm_90a``), played through ``ptxgym/Trace-v0``; a folder may
carry its own ``tasks/*.json`` records, and otherwise gets default ones (``default_record``).

A task holds its whole workload family; ``task.workload`` is the one being played (the record's default
until ``with_workload`` picks another, as an env reset does), and ``flops`` / ``min_bytes`` are the
record's formulas evaluated on it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.records.arch import ARCHS, DEFAULT_FAMILIES, ArchSpec, get_arch, gpu_spec
from ptxgym.records.errors import PtxgymError, SchemaError, UnknownTaskError
from ptxgym.records.formula import evaluate_formula
from ptxgym.records.schema import DTYPE_BYTES, AxisVar, Definition, Workload
from ptxgym.records.task_record import (
    BASELINES,
    SPLITS,
    TORCH_REFERENCE,
    Baseline,
    Split,
    TaskRecord,
    Tolerance,
)
from ptxgym.records.trace_folder import TraceFolder, read_folder

__all__ = [
    "TRACE_ENV_ID",
    "Baseline",
    "HeldOutTaskError",
    "Task",
    "TaskRecord",
    "Tolerance",
    "catalog",
    "catalog_ids",
    "get_task",
    "load_dataset",
    "require_not_test",
    "tasks_in_split",
]

TRACE_ENV_ID = "ptxgym/Trace-v0"
"""The Gymnasium id that plays a task of any dataset folder: ``make(TRACE_ENV_ID, dataset=DIR, task=ID)``."""


class HeldOutTaskError(PtxgymError, ValueError):
    """A test-split task was about to go into training data or a training prompt."""


class Task(BaseModel):
    """One environment instance: what to compute, on what, against what."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short workload name, e.g. Gemm or MhaBwdCausal.")
    arch: str = Field(description="Target architecture, e.g. sm_90a.")
    definition: Definition
    workload: Workload = Field(description="The workload being played (one of ``workloads``).")
    baseline: Baseline
    tolerance: Tolerance = Tolerance()
    flops: float = Field(description="Floating-point operations of one call (0 when unknown).")
    min_bytes: float = Field(description="Bytes one call must move at least (inputs read, outputs written).")
    summary: str = ""
    family: str = Field("", description="Operator family, e.g. gemm or gqa_paged_decode.")
    workloads: tuple[Workload, ...] = Field(
        (), description="The task's workload family (reset draws from it)."
    )
    targets: tuple[str, ...] = Field(
        (), description="Target instruction families on ``arch``; () = the arch's."
    )
    flop_formula: str | None = Field(None, description="The record's FLOP formula (``formula.py``).")
    byte_formula: str | None = Field(None, description="The record's byte formula; None: tensor sizes.")
    split: Split = "train"
    held_out: bool = False
    independent_axes: tuple[str, ...] = Field(
        (), description="Leading axes the reference's outputs are independent along (``TaskRecord``)."
    )
    primary: bool = Field(False, description="One of the paper's five primary problems.")
    multi_file_prompt: bool = Field(False, description="The prompt documents the several-file answer format.")
    source: str | None = Field(None, description="The dataset folder of a dataset task; None: the catalog.")

    @property
    def id(self) -> str:
        """Catalog id ``Gemm-sm90a``; dataset id ``gemm_n4096_k4096@sm_90a``."""
        return f"{self.name}@{self.arch}" if self.source else f"{self.name}-{self.arch_spec.short}"

    @property
    def env_id(self) -> str:
        """Gymnasium id: ``ptxgym/Gemm-sm90a-v0``; a dataset task: ``ptxgym/Trace-v0`` + ``env_kwargs``."""
        return TRACE_ENV_ID if self.source else f"ptxgym/{self.id}-v0"

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments ``gymnasium.make(self.env_id, ...)`` needs to play this task."""
        return {"dataset": self.source, "task": self.id} if self.source else {}

    @property
    def arch_spec(self) -> ArchSpec:
        """The target architecture, with the task's instruction families as its target."""
        arch = get_arch(self.arch)
        return arch.with_families(self.targets) if self.targets else arch

    @property
    def family_workloads(self) -> tuple[Workload, ...]:
        """Every workload an episode of this task may play."""
        return self.workloads or (self.workload,)

    @property
    def baseline_options(self) -> dict[str, Any]:
        """Extra keyword options of the baseline function (the reference source for ``torch_reference``)."""
        if self.baseline.function != TORCH_REFERENCE:
            return {}
        return {"reference_source": self.definition.reference, "input_names": list(self.definition.inputs)}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Concrete shape of every input and output."""
        names = [*self.definition.inputs, *self.definition.outputs]
        return {n: self.definition.shape_of(n, self.workload) for n in names}

    def floor_ms(self, device_name: str) -> float:
        """Speed-of-light latency on a device: the larger of compute and memory time at datasheet peaks."""
        gpu = gpu_spec(device_name, self.arch)
        return 1e3 * max(self.flops / gpu.bf16_dense_flops, self.min_bytes / gpu.hbm_bytes_per_s)

    def find_workload(self, key: str | int | dict[str, int] | Workload) -> Workload:
        """A workload of the family by uuid, index, axis values (``{"M": 512}``) or itself."""
        family = self.family_workloads
        if isinstance(key, Workload):
            key = key.uuid
        if isinstance(key, bool):
            raise ValueError(f"workload must be a uuid, an index or axis values, got {key!r}")
        if isinstance(key, int):
            if not -len(family) <= key < len(family):
                raise ValueError(
                    f"workload index {key} is out of range: {self.id} has {len(family)} workloads"
                )
            return family[key]
        if isinstance(key, dict):
            hits = [w for w in family if all(w.axes.get(k) == v for k, v in key.items())]
            if len(hits) == 1:
                return hits[0]
            what = "no workload" if not hits else f"{len(hits)} workloads"
            raise ValueError(f"{what} of {self.id} with axes {key}; its workloads: {_axes_list(family)}")
        for w in family:
            if w.uuid == key:
                return w
        raise ValueError(f"{self.id} has no workload {key!r}; its workloads: {_axes_list(family)}")

    def with_workload(self, key: str | int | dict[str, int] | Workload) -> Task:
        """This task playing another workload of its family (FLOPs and bytes recounted)."""
        wl = self.find_workload(key)
        if wl.uuid == self.workload.uuid:
            return self
        return self.model_copy(
            update={
                "workload": wl,
                "flops": count_flops(self.definition, wl, self.flop_formula),
                "min_bytes": count_bytes(self.definition, wl, self.byte_formula),
            }
        )


def _axes_list(family: Iterable[Workload]) -> str:
    return "; ".join(f"{w.uuid} {w.axes}" for w in family)


# ------------------------------------------------------------------------------------------ counting


def formula_values(defn: Definition, wl: Workload) -> dict[str, Any]:
    """The names a formula may use: every axis value, then the workload's params."""
    return {**defn.axis_values(wl), **(wl.params or {})}


def count_flops(defn: Definition, wl: Workload, formula: str | None) -> float:
    """FLOPs of one call (0.0 without a formula)."""
    return evaluate_formula(formula, formula_values(defn, wl)) if formula else 0.0


def count_bytes(defn: Definition, wl: Workload, formula: str | None) -> float:
    """Minimum bytes of one call: the formula, else every input read and every output written once."""
    if formula:
        return evaluate_formula(formula, formula_values(defn, wl))
    total = 0.0
    for name, spec in [*defn.inputs.items(), *defn.outputs.items()]:
        n = 1
        for dim in defn.shape_of(name, wl):
            n *= dim
        total += n * DTYPE_BYTES[spec.dtype]
    return total


# ------------------------------------------------------------------------------------------ building


def default_record(defn: Definition) -> TaskRecord:
    """The record of a dataset definition that has none: cuBLAS for a plain GEMM, else the torch reference.

    A plain GEMM's rows are independent (``independent_axes``); nothing else is assumed of other operators.
    """
    gemm = _plain_gemm(defn)
    return TaskRecord(
        name=defn.name,
        definition=defn.name,
        family=defn.op_type,
        summary=" ".join((defn.description or defn.name).split())[:160],
        baseline="cublas" if gemm else TORCH_REFERENCE,
        flops="2 * M * N * K" if gemm else None,
        independent_axes=["M"] if gemm else [],
    )


def _plain_gemm(defn: Definition) -> bool:
    """C[M, N] = A[M, K] @ B[N, K]^T in fp16 or bf16: what ``gemm_cublas`` computes."""
    shapes = {n: s.shape for n, s in (*defn.inputs.items(), *defn.outputs.items())}
    dtypes = {s.dtype for s in (*defn.inputs.values(), *defn.outputs.values())}
    return (
        list(defn.inputs) == ["A", "B"]
        and list(defn.outputs) == ["C"]
        and shapes == {"A": ["M", "K"], "B": ["N", "K"], "C": ["M", "N"]}
        and len(dtypes) == 1
        and dtypes <= {"float16", "bfloat16"}
    )


def build_tasks(folder: TraceFolder, records: Iterable[TaskRecord], source: str | None) -> dict[str, Task]:
    """Every task of some records over a folder (one per record and architecture), checked."""
    tasks: dict[str, Task] = {}
    recs = list(records)
    for arch in ARCHS:  # architecture-major, as the catalog always listed
        for rec in recs:
            if arch not in rec.targets:
                continue
            task = _build(folder, rec, arch, tuple(rec.targets[arch]), source)
            if task.id in tasks:
                raise SchemaError(f"{folder.root}: two task records make the id {task.id}")
            tasks[task.id] = task
    _check_held_out(tasks.values())
    return tasks


def _build(
    folder: TraceFolder, rec: TaskRecord, arch: str, families: tuple[str, ...], source: str | None
) -> Task:
    where = f"{folder.root}: task {rec.name}"
    defn = folder.definitions.get(rec.definition)
    if defn is None:
        raise SchemaError(f"{where}: no definition {rec.definition!r} under definitions/")
    known = folder.workloads.get(rec.definition, ())
    if not known:
        raise SchemaError(f"{where}: definition {rec.definition} has no workloads under workloads/")
    by_uuid = {w.uuid: w for w in known}
    if rec.workloads == "all":
        family = known
    else:
        missing = [u for u in rec.workloads if u not in by_uuid]
        if missing:
            raise SchemaError(f"{where}: workloads {missing} are not workloads of {rec.definition}")
        family = tuple(by_uuid[u] for u in rec.workloads)
    if rec.default_workload and rec.default_workload not in {w.uuid for w in family}:
        raise SchemaError(f"{where}: default_workload {rec.default_workload} is not in its family")
    wl = by_uuid[rec.default_workload] if rec.default_workload else family[0]
    counts = [_counts(defn, w, rec, where) for w in family]  # every workload must count cleanly
    _check_independent(defn, rec.independent_axes, where)
    flops, min_bytes = counts[[w.uuid for w in family].index(wl.uuid)]
    return Task(
        name=rec.name,
        arch=get_arch(arch).name,
        definition=defn,
        workload=wl,
        baseline=BASELINES[rec.baseline],
        tolerance=rec.tolerance,
        flops=flops,
        min_bytes=min_bytes,
        summary=rec.summary,
        family=rec.family,
        workloads=family,
        targets=() if families == DEFAULT_FAMILIES.get(arch) else families,
        flop_formula=rec.flops,
        byte_formula=rec.bytes,
        split=rec.split,
        held_out=rec.held_out,
        primary=rec.primary,
        independent_axes=tuple(rec.independent_axes),
        multi_file_prompt=rec.multi_file_prompt,
        source=source,
    )


def _check_independent(defn: Definition, axes: list[str], where: str) -> None:
    """``independent_axes`` names axes of the definition that lead every tensor having any of them."""
    if not axes:
        return
    unknown = [a for a in axes if a not in defn.axes]
    if unknown or len(set(axes)) != len(axes):
        raise SchemaError(f"{where}: independent_axes {axes} must name distinct axes of {defn.name}")
    lead = list(axes)
    having = []
    for name, spec in [*defn.inputs.items(), *defn.outputs.items()]:
        shape = spec.shape or []
        if not set(shape) & set(lead):
            continue
        if shape[: len(lead)] != lead or set(shape[len(lead) :]) & set(lead):
            raise SchemaError(
                f"{where}: independent_axes {lead} must lead {name} {shape} in that order, or be absent"
            )
        having.append(name)
    alone = [n for n in defn.outputs if n not in having]
    if alone:
        raise SchemaError(f"{where}: independent_axes {lead} must lead every output, not only some ({alone})")


def _counts(defn: Definition, wl: Workload, rec: TaskRecord, where: str) -> tuple[float, float]:
    var = [a for a, ax in defn.axes.items() if isinstance(ax, AxisVar)]
    missing = [a for a in var if a not in wl.axes]
    if missing:
        raise SchemaError(f"{where}: workload {wl.uuid} binds no value for var axes {missing}")
    try:
        return count_flops(defn, wl, rec.flops), count_bytes(defn, wl, rec.bytes)
    except SchemaError as exc:
        raise SchemaError(f"{where}, workload {wl.uuid}: {exc}") from exc


def _check_held_out(tasks: Iterable[Task]) -> None:
    items = list(tasks)
    trained = {t.definition.name for t in items if t.split == "train"}
    for t in items:
        if t.held_out and t.definition.name in trained:
            raise SchemaError(
                f"task {t.id} is held out but a train-split task uses its definition {t.definition.name}"
            )


# ------------------------------------------------------------------------------------------ catalog


def _data_root() -> Path:
    return Path(str(resources.files("ptxgym.envs").joinpath("data")))


@cache
def _folder(root: str) -> TraceFolder:
    return read_folder(root)


@cache
def catalog() -> dict[str, Task]:
    """Every shipped task by id: the five primary problems first, then the records in file order."""
    folder = _folder(str(_data_root()))
    tasks = build_tasks(folder, folder.records, source=None)
    return dict(sorted(tasks.items(), key=lambda item: not item[1].primary))


@cache
def catalog_ids() -> list[str]:
    """Ids of every shipped task, from the records alone (cheap: what env registration needs)."""
    from ptxgym.records.trace_folder import read_records

    records = read_records(_data_root())
    ids = [f"{r.name}-{ARCHS[arch].short}" for arch in ARCHS for r in records if arch in r.targets]
    primary = {f"{r.name}-{ARCHS[a].short}" for r in records if r.primary for a in r.targets}
    return sorted(ids, key=lambda i: i not in primary)


def load_definitions() -> dict[str, Definition]:
    """Every shipped definition by name."""
    return dict(_folder(str(_data_root())).definitions)


def load_workloads(definition: str) -> list[Workload]:
    """Shipped workloads of one definition."""
    return list(_folder(str(_data_root())).workloads.get(definition, ()))


@cache
def _dataset_tasks(root: str) -> dict[str, Task]:
    folder = _folder(root)
    if folder.records:
        return build_tasks(folder, folder.records, source=root)
    records = [default_record(d) for name, d in folder.definitions.items() if folder.workloads.get(name)]
    return build_tasks(folder, records, source=root)


_REGISTERED: dict[str, None] = {}


def load_dataset(root: str | Path) -> dict[str, Task]:
    """Every task of a FlashInfer-Trace dataset folder by id, ``<definition>@<arch>``.

    The folder is remembered, so that ``get_task`` finds its ids later in this process.
    """
    key = str(Path(root).expanduser().resolve())
    tasks = _dataset_tasks(key)
    _REGISTERED.pop(key, None)
    _REGISTERED[key] = None  # most recent last
    return tasks


def get_task(key: str, dataset: str | Path | None = None) -> Task:
    """Find a task by id (Gemm-sm90a), Gymnasium id (ptxgym/Gemm-sm90a-v0) or ``definition@arch``.

    With ``dataset``, only that folder's tasks; without, the catalog, and for ``definition@arch`` keys
    also the dataset folders loaded earlier in this process (the most recent first).
    """
    k = key.strip().removeprefix("ptxgym/")
    if k.endswith("-v0"):
        k = k[: -len("-v0")]
    if dataset is not None:
        tasks = load_dataset(dataset)
        found = _lookup(tasks, k)
        if found is None:
            raise UnknownTaskError(f"no task {key!r} in dataset {dataset}; {_hint(tasks, k)}")
        return found
    tasks = catalog()
    if k in tasks:
        return tasks[k]
    if "@" in k:
        for root in reversed(list(_REGISTERED)):
            found = _lookup(_dataset_tasks(root), k)
            if found is not None:
                return found
    found = _lookup(tasks, k)
    if found is None:
        raise UnknownTaskError(f"no task {key!r}; {_hint(tasks, k)}")
    return found


def _lookup(tasks: dict[str, Task], k: str) -> Task | None:
    if k in tasks:
        return tasks[k]
    if "@" not in k:
        return None
    dname, arch = k.split("@", 1)
    arch = get_arch(arch).name
    for t in tasks.values():
        if t.arch == arch and dname in (t.definition.name, t.name):
            return t
    return None


def _hint(tasks: dict[str, Task], k: str) -> str:
    near = [tid for tid in tasks if tid.lower() == k.lower()]
    near = near or difflib.get_close_matches(k, list(tasks), n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"{hint}known ids: {', '.join(sorted(tasks))}"


# ------------------------------------------------------------------------------------------ splits


def tasks_in_split(split: str, tasks: Iterable[Task] | None = None) -> list[Task]:
    """The tasks of one split (``train``, ``validation`` or ``test``), in catalog order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    return [t for t in (catalog().values() if tasks is None else tasks) if t.split == split]


def require_not_test(tasks: Iterable[str | Task], purpose: str = "training data") -> None:
    """Refuse test-split tasks where training data or training prompts are made.

    Call it with the task ids of every SFT row and every GRPO prompt before they are built; it raises
    ``HeldOutTaskError`` naming the first test task (the test split measures generalisation only). An id
    that names no known task (a dataset folder not loaded in this process) has no split and passes.
    """
    for item in tasks:
        try:
            task = item if isinstance(item, Task) else get_task(item)
        except UnknownTaskError:
            continue
        if task.split == "test":
            raise HeldOutTaskError(
                f"task {task.id} is in the test split and must never appear in {purpose}; "
                f"use train-split tasks (ptxgym tasks --split train)"
            )


def solution_definition(
    name: str, *, path: str | Path | None = None, dataset: str | Path | None = None
) -> Definition | None:
    """The definition a FlashInfer-Trace solution names; None if unknown.

    Looked up in ``dataset``, else in the dataset folder that holds the solution file
    (``<root>/solutions/...``), else in the catalog.
    """
    roots = [Path(dataset)] if dataset is not None else []
    if path is not None:
        roots += [p for p in Path(path).resolve().parents if (p / "definitions").is_dir()][:1]
    for root in roots:
        defs = _folder(str(root.expanduser().resolve())).definitions
        if name in defs:
            return defs[name]
    return load_definitions().get(name)
