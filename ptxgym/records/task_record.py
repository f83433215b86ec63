"""The task record: everything about a task that is not the definition or its workloads, as data.

A task is a FlashInfer-Trace definition, a family of its workloads, and one ``TaskRecord`` (read from
``tasks/*.json`` beside ``definitions/`` and ``workloads/``): which baseline it is timed against (by
name), how many FLOPs and bytes a call costs (formulas over the axis values, ``formula.py``), when an
output counts as correct, which instruction families it must execute on each architecture, and where
it sits in the train / validation / test protocol. Adding a task is adding a record (and, for a new
operator, a definition and workloads): no Python.

A records file holds ``{"tasks": [record, ...]}``; see ``envs/data/README.md`` for a worked example.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ptxgym.records.arch import DEFAULT_FAMILIES, TARGET_FAMILIES
from ptxgym.records.formula import parse_formula

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")


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
    requires: str | None = Field(
        None,
        description="Python module the baseline needs beyond the gpu extra (e.g. flashinfer); null: none. "
        "Where it is not installed, or the baseline gives no latency, ``fallback`` is timed instead and "
        "the Feedback says which ran and why.",
    )
    fallback: str | None = Field(None, description="BASELINES key timed where ``requires`` is missing.")

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``requires`` and ``fallback`` only where set: other baselines dump as before they existed."""
        data = handler(self)
        for key in ("requires", "fallback"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _fallback_for_requires(self) -> Baseline:
        if self.requires is not None and self.fallback is None:
            raise ValueError(f"baseline {self.function} requires {self.requires!r} but names no fallback")
        return self


TORCH_REFERENCE = "torch_reference"
"""The baseline of last resort: the definition's own PyTorch reference, timed where no library applies."""

BASELINES: dict[str, Baseline] = {
    "cublas": Baseline(name="cublas", library="cuBLAS via torch.matmul", function="gemm_cublas"),
    "cudnn_sdpa_fwd": Baseline(name="cudnn_sdpa", library="cuDNN SDPA via torch", function="mha_fwd_cudnn"),
    "cudnn_sdpa_bwd": Baseline(
        name="cudnn_sdpa", library="cuDNN SDPA backward via torch", function="mha_bwd_cudnn"
    ),
    **{
        f"flashinfer_gqa_{kind}": Baseline(
            name="flashinfer",
            library=f"FlashInfer {wrapper} (backend auto; {kernels} on sm_90a); the torch reference "
            "where FlashInfer is not installed",
            function=f"gqa_{kind}_flashinfer",
            requires="flashinfer",
            fallback=TORCH_REFERENCE,
        )
        for kind, wrapper, kernels in (
            ("ragged_prefill", "BatchPrefillWithRaggedKVCacheWrapper", "FA3"),
            ("paged_prefill", "BatchPrefillWithPagedKVCacheWrapper", "FA3"),
            ("paged_decode", "BatchDecodeWithPagedKVCacheWrapper", "CUDA-core decode"),
        )
    },
    TORCH_REFERENCE: Baseline(
        name=TORCH_REFERENCE,
        library="the definition's PyTorch reference on the GPU (no library baseline applies)",
        function=TORCH_REFERENCE,
    ),
}
"""Baselines a record may name. Each ``function`` is a function of
``ptxgym.evaluation.sandboxed.library_baselines`` (a library call is code, so this table is too)."""


class TaskRecord(BaseModel):
    """One task of a dataset, in data.

    Ids: ``<name>-<arch short>`` in the shipped catalog (``Gemm-sm90a``), ``<name>@<arch>`` for a dataset
    folder (``gemm_n4096_k4096@sm_90a``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_.]*$",
        description="Short name; with the architecture it makes the task id.",
    )
    definition: str = Field(min_length=1, description="Name of the FlashInfer-Trace definition.")
    family: str = Field(min_length=1, description="Operator family, e.g. gemm, mha_fwd, gqa_paged_decode.")
    summary: str = Field("", description="One line for listings and the prompt's 'Task:' line.")
    baseline: str = Field(description=f"Name of the baseline, one of {sorted(BASELINES)}.")
    flops: str | None = Field(
        None,
        description="FLOPs of one call as a formula over axis values and workload params; "
        "null when unknown (the speed-of-light floor then counts bytes only).",
    )
    bytes: str | None = Field(
        None,
        description="Bytes one call must move at least, as a formula; null: every input read once and "
        "every output written once (the sizes from the definition).",
    )
    tolerance: Tolerance = Field(default_factory=Tolerance, description="Correctness rule of every output.")
    targets: dict[str, list[str]] = Field(
        default_factory=lambda: {arch: list(f) for arch, f in DEFAULT_FAMILIES.items()},
        description="Architecture -> instruction families the kernel must execute there "
        "(arch.TARGET_FAMILIES). The task exists for exactly these architectures.",
    )
    workloads: list[str] | Literal["all"] = Field(
        "all", description="Workload uuids of the task's family, or 'all' workloads of the definition."
    )
    default_workload: str | None = Field(
        None, description="The workload of listings and of an env reset that names none; null: the first."
    )
    split: Split = Field("train", description="train, validation or test (test: never in training data).")
    held_out: bool = Field(
        False,
        description="The operator is a generalisation probe: no train-split task shares its definition.",
    )
    independent_axes: list[str] = Field(
        default_factory=list,
        description="Leading axes along which the reference's outputs are independent: the outputs at one "
        "index of them depend only on the inputs at that index (the batch and heads of attention, the rows "
        "M of a GEMM). Every tensor either starts with exactly these axes, in order, or has none of them. "
        "A verified call on new values then checks a secret sample of those indices against a reference "
        "run on that sample alone (``trusted/sampled.py``); empty: every check runs the whole reference.",
    )
    primary: bool = Field(False, description="One of the paper's five primary problems (default task set).")
    multi_file_prompt: bool = Field(
        True,
        description="The prompt documents the several-file answer format; the ten original tasks keep "
        "the one-file prompt they were published with.",
    )

    @field_validator("baseline")
    @classmethod
    def _known_baseline(cls, v: str) -> str:
        if v not in BASELINES:
            raise ValueError(f"unknown baseline {v!r}; expected one of {sorted(BASELINES)}")
        return v

    @field_validator("flops", "bytes")
    @classmethod
    def _formula(cls, v: str | None) -> str | None:
        if v is not None:
            parse_formula(v)
        return v

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        if not v:
            raise ValueError("targets must name at least one architecture")
        for arch, families in v.items():
            if arch not in TARGET_FAMILIES:
                raise ValueError(
                    f"unknown architecture {arch!r} in targets; expected {sorted(TARGET_FAMILIES)}"
                )
            unknown = sorted(set(families) - set(TARGET_FAMILIES[arch])) if families else ["(none)"]
            if unknown:
                raise ValueError(
                    f"targets[{arch!r}] = {families}: unknown or empty; expected a subset of "
                    f"{sorted(TARGET_FAMILIES[arch])}"
                )
        return v

    @model_validator(mode="after")
    def _held_out(self) -> TaskRecord:
        if self.held_out and self.split == "train":
            raise ValueError(f"task {self.name}: a held-out task cannot be in the train split")
        if self.default_workload and self.workloads != "all" and self.default_workload not in self.workloads:
            raise ValueError(
                f"task {self.name}: default_workload {self.default_workload} is not in workloads"
            )
        return self


class TaskRecordFile(BaseModel):
    """The content of one ``tasks/*.json`` file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: list[TaskRecord] = Field(description="Records, in catalog order.")
    description: str = Field("", description="What the file holds (free text).")
