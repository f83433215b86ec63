"""FlashInfer-Trace records: Definition, Workload, Solution, Trace.

These models load and dump the JSON that FlashInfer-Bench and PTXBench use, so their definitions,
workload files and CUDA solutions work here unchanged. Field names and value sets follow the
FlashInfer-Trace format; where ptxgym adds something (the ``derived`` input type, for inputs that are
a function of other inputs, such as the forward output O and LSE that an attention backward consumes)
it is marked as an extension.

Dataset layout on disk (``TraceSet``)::

    <root>/definitions/<op_type>/<definition>.json
    <root>/workloads/<op_type>/<definition>.jsonl        # one workload Trace per line
    <root>/solutions/<author>/<op_type>/<definition>/<solution>.json
    <root>/traces/<author>/<op_type>/<definition>.jsonl
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ptxgym.records.errors import SchemaError, validation_summary

DType = Literal[
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float4_e2m1",
    "int64",
    "int32",
    "int16",
    "int8",
    "bool",
]

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float4_e2m1": 0.5,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "bool": 1,
}


class _Record(BaseModel):
    """Frozen record; unknown fields are kept so that newer FlashInfer-Trace files round-trip."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, without unset optional fields."""
        return self.model_dump(mode="json", exclude_none=True, by_alias=True)

    def to_json(self, indent: int | None = 2) -> str:
        """JSON text of the record."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes | dict[str, Any]):
        """Parse JSON text (or an already-parsed dict); raise SchemaError with the field that failed."""
        try:
            data = json.loads(text) if isinstance(text, str | bytes) else text
            return cls.model_validate(data)
        except (ValidationError, json.JSONDecodeError) as exc:
            raise SchemaError(f"not a valid {cls.__name__} record: {validation_summary(exc)}") from exc


# ----------------------------------------------------------------------------------------- Definition


class AxisConst(_Record):
    """An axis whose size is fixed by the definition."""

    type: Literal["const"] = "const"
    value: int = Field(ge=0, description="The size of the axis.")
    description: str | None = None


class AxisVar(_Record):
    """An axis whose size is bound by each workload."""

    type: Literal["var"] = "var"
    description: str | None = None


Axis = Annotated[AxisConst | AxisVar, Field(discriminator="type")]


class TensorSpec(_Record):
    """Shape (axis names; ``None`` for a scalar) and dtype of one input or output."""

    shape: list[str] | None = Field(description="Axis names, outermost first; null for a scalar.")
    dtype: DType = Field(description="Element type.")
    description: str | None = None


class Definition(_Record):
    """What an operator computes: axes, typed inputs and outputs, and a Python reference ``run``."""

    name: str = Field(min_length=1, description="Unique name, e.g. gemm_n7168_k5120.")
    op_type: str = Field(min_length=1, description="Operator family, e.g. gemm or attention.")
    axes: dict[str, Axis] = Field(description="Symbolic dimensions by name.")
    inputs: dict[str, TensorSpec] = Field(description="Inputs in call order.")
    outputs: dict[str, TensorSpec] = Field(description="Outputs in call order (after the inputs).")
    reference: str = Field(min_length=1, description="Python source with a top-level def run(...).")
    tags: list[str] = Field(default_factory=list)
    description: str | None = None
    constraints: list[str] | None = None

    @model_validator(mode="after")
    def _check(self) -> Definition:
        overlap = set(self.inputs) & set(self.outputs)
        if overlap:
            raise ValueError(f"names used as both input and output: {sorted(overlap)}")
        for role, specs in (("input", self.inputs), ("output", self.outputs)):
            for name, spec in specs.items():
                for axis in spec.shape or []:
                    if axis not in self.axes:
                        raise ValueError(f"{role} {name!r} uses axis {axis!r}, which axes do not define")
        try:
            tree = ast.parse(self.reference)
        except SyntaxError as exc:
            raise ValueError(f"reference is not valid Python: {exc}") from exc
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            raise ValueError("reference must define a top-level function run(...)")
        return self

    def axis_values(self, workload: Workload) -> dict[str, int]:
        """Concrete size of every axis under a workload."""
        values: dict[str, int] = {}
        for name, axis in self.axes.items():
            if isinstance(axis, AxisConst):
                values[name] = axis.value
            elif name in workload.axes:
                values[name] = workload.axes[name]
            else:
                raise SchemaError(f"workload {workload.uuid} binds no value for var axis {name!r}")
        return values

    def shape_of(self, name: str, workload: Workload) -> tuple[int, ...]:
        """Concrete shape of an input or output under a workload (``()`` for a scalar)."""
        spec = self.inputs.get(name) or self.outputs.get(name)
        if spec is None:
            raise SchemaError(f"{self.name} has no input or output named {name!r}")
        values = self.axis_values(workload)
        return tuple(values[a] for a in spec.shape or [])


# ------------------------------------------------------------------------------------------- Workload


class RandomInput(_Record):
    """Generated at evaluation time from a recorded seed (floats: standard normal)."""

    type: Literal["random"] = "random"


class ScalarInput(_Record):
    """A Python scalar passed as is."""

    type: Literal["scalar"] = "scalar"
    value: int | float | bool


class SafetensorsInput(_Record):
    """A tensor stored in a safetensors file, path relative to the dataset root."""

    type: Literal["safetensors"] = "safetensors"
    path: str
    tensor_key: str


class DerivedInput(_Record):
    """ptxgym extension: computed from the other inputs by a function of the definition's reference.

    ``function`` names a top-level function in the definition's ``reference`` source that takes the
    random inputs it needs by name and returns a dict of derived tensors (e.g. O and LSE from Q, K, V).
    """

    type: Literal["derived"] = "derived"
    function: str


InputSpec = Annotated[
    RandomInput | ScalarInput | SafetensorsInput | DerivedInput, Field(discriminator="type")
]


class Workload(_Record):
    """One concrete instance of a definition: values for the var axes and how to make each input."""

    uuid: str = Field(min_length=1)
    axes: dict[str, int] = Field(default_factory=dict)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    params: dict[str, int | float | list[int] | list[float]] | None = Field(
        None,
        description="ptxgym extension: named constants of this workload (e.g. the sequence lengths of a "
        "ragged batch). Derived-input functions receive them (and axis values) by parameter name; FLOP "
        "and byte formulas may use them. Absent in plain FlashInfer-Trace workloads.",
    )

    @field_validator("axes")
    @classmethod
    def _positive(cls, axes: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in axes.items() if v <= 0}
        if bad:
            raise ValueError(f"axis values must be positive: {bad}")
        return axes


# ------------------------------------------------------------------------------------------- Solution


class SupportedLanguage(str, Enum):
    """Source languages of the FlashInfer-Trace format."""

    PYTHON = "python"
    TRITON = "triton"
    CPP = "cpp"
    CUDA = "cuda"
    TILELANG = "tilelang"


class BuildSpec(_Record):
    """How to build and call a solution."""

    language: SupportedLanguage
    target_hardware: list[str] = Field(min_length=1)
    entry_point: str = Field(description="'file::symbol', e.g. kernel.cu::run")
    dependencies: list[str] = Field(default_factory=list)
    destination_passing_style: bool = True
    binding: Literal["tvm-ffi", "torch"] | None = None

    @field_validator("entry_point")
    @classmethod
    def _entry(cls, value: str) -> str:
        if value.count("::") != 1 or not all(value.split("::")):
            raise ValueError(f"entry_point must look like 'file::symbol', got {value!r}")
        return value

    @property
    def entry_file(self) -> str:
        """The source file that holds the entry point."""
        return self.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        """The exported function name."""
        return self.entry_point.split("::")[1]


_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


class SourceFile(_Record):
    """One file of a solution; the path is relative and stays inside the solution folder."""

    path: str
    content: str

    @field_validator("path")
    @classmethod
    def _safe(cls, value: str) -> str:
        p = PurePosixPath(value)
        if not value or p.is_absolute() or ".." in p.parts or "\\" in value or "\x00" in value:
            raise ValueError(f"source path must be relative with no '..': {value!r}")
        if not all(_PATH_PART.fullmatch(part) for part in p.parts):
            # nvcc runs its steps through a shell: a name holding $(...) ran commands (a reviewer's find)
            raise ValueError(f"source path parts may hold only letters, digits and _ . + -: {value!r}")
        return value


class Solution(_Record):
    """A candidate implementation of a definition."""

    name: str
    definition: str
    author: str
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)
    description: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Solution:
        paths = [s.path for s in self.sources]
        parts = [PurePosixPath(p).parts for p in paths]
        if len(set(parts)) != len(parts):
            raise ValueError(f"duplicate source paths: {paths}")
        if () in parts:
            raise ValueError(f"a source path names no file: {paths}")
        folders = {p[:i] for p in parts for i in range(1, len(p))}
        clash = [path for path, p in zip(paths, parts, strict=True) if p in folders]
        if clash:
            raise ValueError(f"source path {clash[0]!r} is both a file and the folder of another source")
        if self.spec.entry_file not in paths:
            raise ValueError(f"entry file {self.spec.entry_file!r} is not among the sources {paths}")
        return self

    def content_hash(self) -> str:
        """SHA-256 over everything that affects the build (the name is excluded)."""
        h = hashlib.sha256()
        for part in (
            self.definition,
            self.spec.language.value,
            self.spec.entry_point,
            str(self.spec.binding),
            *self.spec.dependencies,
        ):
            h.update(part.encode() + b"\x00")
        for src in sorted(self.sources, key=lambda s: s.path):
            h.update(src.path.encode() + b"\x00" + src.content.encode() + b"\x00")
        return h.hexdigest()

    @classmethod
    def from_cuda_source(
        cls,
        source: str,
        definition: str,
        *,
        arch: str = "sm_90a",
        name: str = "candidate",
        author: str = "ptxgym",
    ) -> Solution:
        """A one-file TVM-FFI CUDA solution whose entry point is ``kernel.cu::run``."""
        return cls.from_sources({"kernel.cu": source}, definition, arch=arch, name=name, author=author)

    @classmethod
    def from_sources(
        cls,
        files: dict[str, str],
        definition: str,
        *,
        arch: str = "sm_90a",
        entry_point: str = "kernel.cu::run",
        name: str = "candidate",
        author: str = "ptxgym",
    ) -> Solution:
        """A TVM-FFI CUDA solution of several files (path -> content), entry point ``kernel.cu::run``."""
        return cls(
            name=name,
            definition=definition,
            author=author,
            spec=BuildSpec(
                language=SupportedLanguage.CUDA,
                target_hardware=[arch],
                entry_point=entry_point,
                binding="tvm-ffi",
            ),
            sources=[SourceFile(path=path, content=content) for path, content in files.items()],
        )


# ---------------------------------------------------------------------------------------------- Trace


class Correctness(_Record):
    """Error statistics of an evaluation."""

    max_relative_error: float
    max_absolute_error: float
    extra: dict[str, Any] | None = None


class Performance(_Record):
    """Latencies of an evaluation, in milliseconds."""

    latency_ms: float = Field(ge=0)
    reference_latency_ms: float = Field(ge=0)
    speedup_factor: float = Field(ge=0)


class Environment(_Record):
    """Where an evaluation ran."""

    hardware: str
    libs: dict[str, str] = Field(default_factory=dict)


class Evaluation(_Record):
    """The outcome of evaluating one solution on one workload."""

    status: str
    environment: Environment
    timestamp: str
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None


class Trace(_Record):
    """A workload, optionally with the solution evaluated on it and the evaluation."""

    definition: str
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None

    def to_dict(self) -> dict[str, Any]:
        """FlashInfer-Trace keeps ``solution`` and ``evaluation`` as explicit nulls."""
        data = super().to_dict()
        data.setdefault("solution", None)
        data.setdefault("evaluation", None)
        return data


def read_jsonl(path: str | Path, model: type[_Record] = Trace) -> list:
    """Read a JSON-lines file of records; a truncated last line is reported, not silently dropped."""
    records = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(model.from_json(line))
        except SchemaError as exc:
            raise SchemaError(f"{path}:{lineno}: {exc}") from exc
    return records


def write_jsonl(path: str | Path, records: list) -> None:
    """Write records one JSON object per line."""
    Path(path).write_text("".join(r.to_json(indent=None) + "\n" for r in records))


def contract_differences(have: Definition, want: Definition) -> list[str]:
    """How the call contract of ``have`` differs from ``want`` (empty: a kernel for one fits the other).

    ``have`` is e.g. the definition a solution was written for, ``want`` the task's. Compared: input and
    output names and order, dtypes, and shapes (constant axes by value, variable axes by name).
    """
    out: list[str] = []
    for role, a, b in (("inputs", have.inputs, want.inputs), ("outputs", have.outputs, want.outputs)):
        if list(a) != list(b):
            out.append(f"{role} {list(a)} where the task has {list(b)}")
        for name in [n for n in a if n in b]:
            if a[name].dtype != b[name].dtype:
                out.append(f"{name} is {a[name].dtype} where the task has {b[name].dtype}")
            sa, sb = _shape_text(have, a[name]), _shape_text(want, b[name])
            if sa != sb:
                out.append(f"{name} has shape {sa} where the task has {sb}")
    return out


def _shape_text(defn: Definition, spec: TensorSpec) -> str:
    if spec.shape is None:
        return "scalar"
    dims = []
    for axis in spec.shape:
        ax = defn.axes[axis]
        dims.append(str(ax.value) if isinstance(ax, AxisConst) else axis)
    return "[" + ", ".join(dims) + "]"
