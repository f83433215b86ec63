"""Running a definition's reference at a chosen precision, and measuring its error against float64.

Shared by the CPU and GPU tests of ``test_reference_precision.py``. ``run_at`` runs the reference ``run``
with its outputs kept unrounded (a ``.to(bfloat16)`` in it is skipped), so the error measured is the
reference's own, before the bf16 rounding every reference pays alike. Modes:

* ``fp64``: float inputs passed as float64 and kept float64 (``.float()`` and fp32 allocations become
  float64): the oracle.
* ``fp32``: exact fp32 matmuls throughout (TF32 off).
* ``policy``: what the evaluator does (``precision.reference_precision``): TF32 for the matmuls whose
  operands are marked exact in TF32, exact fp32 for the rest. ``ExactnessCheck`` asserts, value by
  value, that every operand of a matmul issued with TF32 allowed really is exact in TF32.
* ``all_tf32``: every fp32 matmul operand truncated to TF32's 10 mantissa bits in software (what the
  tensor cores do to an fp32 operand; rounding to nearest would halve the error): what TF32 on every
  matmul would cost, on the CPU, which has no TF32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ptxgym.evaluation.trusted import precision
from ptxgym.records.tasks import Task, Tolerance

MATMULS = precision.matmul_functions()
UNSUPPORTED = {torch.einsum, torch.nn.functional.linear, torch.addmm, torch.baddbmm, torch.Tensor.addmm}
"""Matmuls neither the evaluator's policy nor this emulation handles: a reference using one fails here."""
FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.empty_like, torch.zeros_like}
NARROW = (torch.bfloat16, torch.float16)


def tf32_truncate(t: torch.Tensor) -> torch.Tensor:
    """An fp32 tensor with the low 13 mantissa bits of every element cleared (TF32 by truncation)."""
    return (t.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32).view(t.shape)


def is_tf32_exact(t: torch.Tensor) -> bool:
    """Whether every element of an fp32 tensor is exact in TF32."""
    return not bool((t.contiguous().view(torch.int32) & 0x1FFF).any())


class Precision(TorchFunctionMode):
    """Run torch code unrounded, in float64 or with TF32-truncated matmul operands (module docstring)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in UNSUPPORTED:
            raise NotImplementedError(f"{func} is not handled; add it to precision.py and here")
        if func in MATMULS and self.mode == "all_tf32":
            args = tuple(
                tf32_truncate(a) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
                for a in args
            )
        elif func is torch.Tensor.float and self.mode == "fp64" and args[0].dtype == torch.float64:
            return args[0]
        elif func is torch.Tensor.to and _target_dtype(args, kwargs) in NARROW:
            return args[0]  # keep the output unrounded
        elif func in FACTORIES and self.mode == "fp64" and kwargs.get("dtype") == torch.float32:
            kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


class ExactnessCheck(TorchFunctionMode):
    """Counts matmuls and asserts that those issued with TF32 allowed have operands exact in TF32.

    Entered before (below) the policy's mode, so it sees each matmul as the policy issues it, with the
    switch the policy set for it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.matmuls = 0
        self.tf32: list[tuple[tuple[int, ...], ...]] = []
        """Operand shapes of the matmuls the policy ran in TF32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.matmuls += 1
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if torch.get_float32_matmul_precision() != "highest":
                bad = [tuple(t.shape) for t in tensors if not is_tf32_exact(t)]
                assert not bad, f"operands {bad} sent to TF32 are not exact in TF32"
                self.tf32.append(tuple(tuple(t.shape) for t in tensors))
        return func(*args, **(kwargs or {}))


def _target_dtype(args, kwargs):
    if "dtype" in kwargs:
        return kwargs["dtype"]
    return next((a for a in args[1:] if isinstance(a, torch.dtype)), None)


def run_at(namespace: dict[str, Any], inputs: dict[str, Any], mode: str, check: ExactnessCheck | None = None):
    """The reference ``run`` on ``inputs`` at ``mode`` (module docstring), its outputs unrounded."""
    wide = torch.float64 if mode == "fp64" else torch.float32
    cast = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            copy = value.to(wide)
            if mode == "policy" and value.dtype in NARROW:
                precision.mark_exact(copy)  # it holds bf16 values, as a .float() of the input would
            value = copy
        cast[name] = value
    check = check or ExactnessCheck()
    outer = precision.reference_precision() if mode == "policy" else precision.exact_fp32()
    with check, outer, Precision(mode):
        result = namespace["run"](*cast.values())
    assert check.matmuls > 0, "the reference ran no matmul the test saw"
    return result if isinstance(result, tuple | list) else (result,)


@dataclass(frozen=True)
class ErrorReport:
    """How much of the check's tolerance one reference output uses up against the float64 oracle."""

    output: str
    element_share: float
    """max over elements of |ref - oracle| / max(atol, rtol * |oracle|): 1.0 would fail the element rule."""
    norm_share: float
    """(||ref - oracle|| / ||oracle||) / rel_norm: 1.0 would fail the norm rule."""

    def __str__(self) -> str:
        return f"{self.output} {self.element_share:.1e}/{self.norm_share:.1e}"


def error_report(name: str, got, oracle, tol: Tolerance) -> ErrorReport:
    """The tolerance ``got`` uses up against ``oracle`` (both unrounded)."""
    g, o = got.double(), oracle.double()
    diff = (g - o).abs()
    bound = torch.clamp(o.abs() * tol.rtol, min=tol.atol)
    norm = float(diff.norm() / o.norm()) if float(o.norm()) > 0 else 0.0
    return ErrorReport(name, float((diff / bound).max()), norm / tol.rel_norm)


def reports(task: Task, namespace, inputs, modes: tuple[str, ...]) -> dict[str, list[ErrorReport]]:
    """Per mode, per output: the tolerance the reference at that mode uses up against float64."""
    oracle = run_at(namespace, inputs, "fp64")
    names = list(task.definition.outputs)
    out = {}
    for mode in modes:
        got = run_at(namespace, inputs, mode)
        pairs = zip(names, got, oracle, strict=True)
        out[mode] = [error_report(n, g, o, task.tolerance) for n, g, o in pairs]
    return out


def describe(measured: dict[str, list[ErrorReport]]) -> str:
    """One line: per mode, each output's element and norm shares."""
    return "  ".join(f"{mode}: {' '.join(map(str, r))}" for mode, r in measured.items())
