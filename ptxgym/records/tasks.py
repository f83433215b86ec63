"""The task catalog: definition + workload + architecture + baseline + tolerance.

Definitions and workloads are FlashInfer-Trace JSON shipped in ``ptxgym.envs`` package data
(``envs/data``). A task binds one definition and one workload to one target architecture. Task ids are
``<Name>-<arch>`` (``Gemm-sm90a``); the Gymnasium id is ``ptxgym/<task id>-v0``.
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.records.arch import ARCHS, ArchSpec, get_arch, gpu_spec
from ptxgym.records.errors import UnknownTaskError
from ptxgym.records.schema import DTYPE_BYTES, Definition, Trace, Workload, read_jsonl


class Tolerance(BaseModel):
    """When an output counts as correct. Owned by the evaluator; nothing in an action changes it.

    An element passes if ``|out - ref| <= atol`` or ``|out - ref| / |ref| <= rtol`` (the paper's rule,
    every element must pass), and each output's ``||out - ref|| / ||ref||`` must be ``<= rel_norm``.
    """

    model_config = ConfigDict(frozen=True)

    atol: float = 1e-2
    rtol: float = 1e-2
    rel_norm: float = Field(2e-2, description="Bound on the relative Frobenius-norm error per output.")
    required_match: float = Field(1.0, description="Fraction of elements that must pass.")


class Baseline(BaseModel):
    """The frontier-library implementation a candidate is timed against."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short name, e.g. cublas or cudnn_sdpa.")
    library: str = Field(description="What actually runs, e.g. 'cuBLAS via torch.matmul'.")
    function: str = Field(description="'module:function' in ptxgym.evaluation.sandboxed.library_baselines.")


class Task(BaseModel):
    """One environment instance: what to compute, on what, against what."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short workload name, e.g. Gemm or MhaBwdCausal.")
    arch: str = Field(description="Target architecture, e.g. sm_90a.")
    definition: Definition
    workload: Workload
    baseline: Baseline
    tolerance: Tolerance = Tolerance()
    flops: float = Field(description="Floating-point operations of one call.")
    min_bytes: float = Field(description="Bytes one call must move at least (inputs read, outputs written).")
    summary: str = ""

    @property
    def id(self) -> str:
        """Catalog id, e.g. Gemm-sm90a."""
        return f"{self.name}-{self.arch_spec.short}"

    @property
    def env_id(self) -> str:
        """Gymnasium id, e.g. ptxgym/Gemm-sm90a-v0."""
        return f"ptxgym/{self.id}-v0"

    @property
    def arch_spec(self) -> ArchSpec:
        """The target architecture."""
        return get_arch(self.arch)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Concrete shape of every input and output."""
        names = [*self.definition.inputs, *self.definition.outputs]
        return {n: self.definition.shape_of(n, self.workload) for n in names}

    def floor_ms(self, device_name: str) -> float:
        """Speed-of-light latency on a device: the larger of compute and memory time at datasheet peaks."""
        gpu = gpu_spec(device_name, self.arch)
        return 1e3 * max(self.flops / gpu.bf16_dense_flops, self.min_bytes / gpu.hbm_bytes_per_s)


_DATA = "data"


def _data_root() -> Path:
    return Path(str(resources.files("ptxgym.envs").joinpath(_DATA)))


@cache
def load_definitions() -> dict[str, Definition]:
    """Every shipped definition by name."""
    out = {}
    for path in sorted(_data_root().glob("definitions/*/*.json")):
        d = Definition.from_json(path.read_text())
        out[d.name] = d
    return out


@cache
def load_workloads(definition: str) -> list[Workload]:
    """Shipped workloads of one definition."""
    d = load_definitions()[definition]
    path = _data_root() / "workloads" / d.op_type / f"{definition}.jsonl"
    return [t.workload for t in read_jsonl(path, Trace)]


def _bytes(defn: Definition, wl: Workload) -> float:
    total = 0.0
    for name, spec in [*defn.inputs.items(), *defn.outputs.items()]:
        n = 1
        for dim in defn.shape_of(name, wl):
            n *= dim
        total += n * DTYPE_BYTES[spec.dtype]
    return total


# The backward outputs hold 3 x 100M elements; on the H200 cuDNN's own causal backward misses the
# elementwise rule on 1 of them (3 bf16 ulps of dV). Allow one element in a million, never more, and keep
# the relative-norm bound: the baseline must pass its own task.
_BACKWARD_TOLERANCE = Tolerance(required_match=1.0 - 1e-6)

# name -> (definition, baseline, FLOP formula, summary)
_PRIMARY = {
    "Gemm": (
        "gemm_n7168_k5120",
        Baseline(name="cublas", library="cuBLAS via torch.matmul", function="gemm_cublas"),
        lambda a: 2.0 * a["M"] * a["N"] * a["K"],
        "BF16 GEMM C = A B^T, 8192x7168x5120",
    ),
    "MhaFwd": (
        "mha_with_lse_d128",
        Baseline(name="cudnn_sdpa", library="cuDNN SDPA via torch", function="mha_fwd_cudnn"),
        lambda a: 4.0 * a["B"] * a["H"] * a["S"] ** 2 * a["D"],
        "MHA forward with LSE, 4x48x4096x128",
    ),
    "MhaFwdCausal": (
        "mha_with_lse_d128_causal",
        Baseline(name="cudnn_sdpa", library="cuDNN SDPA via torch", function="mha_fwd_cudnn"),
        lambda a: 2.0 * a["B"] * a["H"] * a["S"] ** 2 * a["D"],
        "causal MHA forward with LSE, 4x48x4096x128",
    ),
    "MhaBwd": (
        "mha_bwd_d128",
        Baseline(name="cudnn_sdpa", library="cuDNN SDPA backward via torch", function="mha_bwd_cudnn"),
        lambda a: 10.0 * a["B"] * a["H"] * a["S"] ** 2 * a["D"],
        "MHA backward, 4x48x4096x128",
    ),
    "MhaBwdCausal": (
        "mha_bwd_d128_causal",
        Baseline(name="cudnn_sdpa", library="cuDNN SDPA backward via torch", function="mha_bwd_cudnn"),
        lambda a: 5.0 * a["B"] * a["H"] * a["S"] ** 2 * a["D"],
        "causal MHA backward, 4x48x4096x128",
    ),
}


@cache
def catalog() -> dict[str, Task]:
    """Every task by id: the five primary workloads for each architecture."""
    defs = load_definitions()
    tasks: dict[str, Task] = {}
    for arch in ARCHS.values():
        for name, (dname, baseline, flop_fn, summary) in _PRIMARY.items():
            defn = defs[dname]
            wl = load_workloads(dname)[0]
            task = Task(
                name=name,
                arch=arch.name,
                definition=defn,
                workload=wl,
                baseline=baseline,
                tolerance=_BACKWARD_TOLERANCE if name.startswith("MhaBwd") else Tolerance(),
                flops=flop_fn(defn.axis_values(wl)),
                min_bytes=_bytes(defn, wl),
                summary=summary,
            )
            tasks[task.id] = task
    return tasks


def get_task(key: str) -> Task:
    """Find a task by id (Gemm-sm90a), Gymnasium id (ptxgym/Gemm-sm90a-v0) or 'definition@arch'."""
    tasks = catalog()
    k = key.strip().removeprefix("ptxgym/")
    if k.endswith("-v0"):
        k = k[: -len("-v0")]
    if k in tasks:
        return tasks[k]
    if "@" in k:
        dname, arch = k.split("@", 1)
        for t in tasks.values():
            if t.definition.name == dname and t.arch == get_arch(arch).name:
                return t
    near = [tid for tid in tasks if tid.lower() == k.lower()]
    near = near or difflib.get_close_matches(k, list(tasks), n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise UnknownTaskError(f"no task {key!r}; {hint}known ids: {', '.join(sorted(tasks))}")
