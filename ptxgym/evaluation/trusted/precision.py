"""The precision of the reference's matmuls: exact fp32, on TF32 tensor cores only where that is exact.

Every reference (``run`` and the derived-input functions) runs inside ``reference_precision()``: fp32
matmuls in full precision (TF32 off, cuDNN's too), except a matmul both of whose operands are *exact in
TF32*, which runs on the tensor cores in TF32 with fp32 accumulation. An operand is exact in TF32 when
it is a bf16, fp16 or fp8 tensor converted to fp32 (``.float()``, ``.to(float32)``), or a view or
selection of one (``.T``, ``transpose``, indexing...; ``_tables``), not written in place since: TF32
keeps a 10-bit mantissa and fp32's exponent range, so it holds those values exactly, and the product of
two TF32 values is exact in fp32. Such a matmul differs from the fp32 SIMT one only in its fp32
accumulation (the scores Q K^T of attention, dO V^T of its backward), and only reductions of at most
``MAX_TF32_REDUCTION`` terms take it: the tensor cores' accumulation over the GEMM's K = 5120 was measured
far coarser than fp32 SIMT's on the H200, so the GEMM's reference stays exact fp32.
Anything computed (scaled scores, the softmax P, dS) is not marked and keeps exact fp32: TF32 would
drop 13 of its mantissa bits, and measured against float64 (tests/evaluation/test_reference_precision.py,
TF32 emulated by truncation) that alone used up to a tenth of the check's element tolerance in the
first rows of causal attention, where few keys carry the sum, and biased every output by about 2^-11
of its norm. The reference as run here matches the all-fp32 one bit for bit on the CPU (which has no
TF32) and used at most 0.2% of the element tolerance there (the GEMM at K = 17408); the gpu test of
that file bounds it on the tensor cores.

``PTXGYM_REFERENCE_TF32=off`` (``settings.reference_tf32``) turns the TF32 matmuls off.

Cost: the mode adds a few microseconds of host time to each torch call of a reference (measured 4 us
on a loaded 2-core CPU host). The attention references take a chunk of heads per step (a few dozen
calls in all, not ~10 per head), so their GPU work hides it: on the H100 the MHA forward's whole
reference went from 94 to 79 ms and a sampled quarter from 27 to 25 ms, the rest being GPU work
(``bench/results/verify_cost_2026-12-06_s40_chunked_h100.txt``); references of tiny per-call work (GQA
decode) pay it.

The marks come from a torch function mode on the calling thread (``Tf32WhereExact``); the fp32 matmul
switch is global in torch, so each matmul sets it, dispatches and restores it under one process lock
(cuBLAS reads it when the call is issued). ``exact_fp32`` turns TF32 off for a block; nested and
concurrent holders share it and the last one out restores the caller's switches. Another thread's fp32
matmul that is issued outside these blocks while one of them is open runs in the block's mode.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_LOCK = threading.Lock()
_holders = 0
_saved: tuple[str, bool] = ("highest", True)
_MARK = "_ptxgym_tf32_exact"


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """Full-precision fp32 matmuls (no TF32) for the block, restoring the caller's setting after."""
    import torch

    global _holders, _saved
    with _LOCK:
        if _holders == 0:
            _saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.allow_tf32 = False
        _holders += 1
    try:
        yield
    finally:
        with _LOCK:
            _holders -= 1
            if _holders == 0:
                torch.set_float32_matmul_precision(_saved[0])
                torch.backends.cudnn.allow_tf32 = _saved[1]


def matmul_functions() -> set:
    """The torch functions the policy treats as matmuls (a reference using another one is not covered)."""
    import torch

    return {
        torch.matmul,
        torch.Tensor.matmul,
        torch.Tensor.__matmul__,
        torch.Tensor.__rmatmul__,
        torch.mm,
        torch.Tensor.mm,
        torch.bmm,
        torch.Tensor.bmm,
    }


def _tables() -> tuple[set, set, set, tuple]:
    import torch

    matmuls = matmul_functions()
    converts = {torch.Tensor.float, torch.Tensor.to, torch.Tensor.type}
    preserving = {
        torch.Tensor.__getitem__,
        torch.Tensor.transpose,
        torch.transpose,
        torch.Tensor.t,
        torch.t,
        torch.Tensor.permute,
        torch.permute,
        torch.Tensor.view,
        torch.Tensor.reshape,
        torch.reshape,
        torch.Tensor.contiguous,
        torch.Tensor.flatten,
        torch.flatten,
        torch.Tensor.unsqueeze,
        torch.Tensor.squeeze,
        torch.Tensor.expand,
        torch.Tensor.clone,
        torch.Tensor.narrow,
        torch.Tensor.select,
        torch.Tensor.index_select,
        torch.index_select,
    }
    narrow = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
    return matmuls, converts, preserving, narrow


_TABLES: tuple[set, set, set, tuple] | None = None

MAX_TF32_REDUCTION = 256
"""Longest reduction a TF32 matmul may have. The tensor cores' fp32 accumulation is not the fp32 SIMT
one: on the H200 the GEMM's K = 5120 reduction in TF32 used 23% of the element tolerance against float64
(fp32 SIMT: 2.6%), while attention's D = 128 reductions used about 1e-4 of it
(``bench/results/gpu_tests_2026-12-04_counted_position.txt``). Longer reductions keep exact fp32."""


def _reduction(func: Any, tensors: list) -> int:
    """The reduction length of a matmul: the left operand's last dimension."""
    import torch

    left = tensors[-1] if func is torch.Tensor.__rmatmul__ else tensors[0]
    return int(left.shape[-1]) if left.dim() else 1


_VIEW_PROPERTIES = ("T", "mT", "H", "mH")


def _version(tensor: Any) -> int | None:
    try:
        return int(tensor._version)
    except (AttributeError, RuntimeError):  # not a tensor, or an inference tensor (no version counter)
        return None


def marked_exact(value: Any) -> bool:
    """Whether a tensor is marked exact in TF32 (made from bf16/fp16/fp8 values by conversion or views).

    A mark holds the tensor's version counter when it was made: any in-place write since, through the
    tensor or any view sharing its storage (``mul_``, ``x[i] = ...``, ``out=``), bumps the counter and
    voids it.
    """
    mark = getattr(value, _MARK, None)
    return mark is not None and mark == _version(value)


def mark_exact(tensor: Any) -> None:
    """Mark an fp32 tensor as exact in TF32 (the caller vouches that it holds bf16/fp16/fp8 values)."""
    version = _version(tensor)
    if version is not None:
        setattr(tensor, _MARK, version)


def _make_mode():
    """The mode class (made on first use: this module must not import torch at import time)."""
    import torch
    from torch.overrides import TorchFunctionMode

    global _TABLES
    _TABLES = _TABLES or _tables()
    matmuls, converts, preserving, narrow = _TABLES
    properties = {getattr(torch.Tensor, name) for name in _VIEW_PROPERTIES}

    class Tf32WhereExact(TorchFunctionMode):
        """TF32 for matmuls of operands exact in TF32, exact fp32 for every other (module docstring)."""

        def __init__(self) -> None:
            super().__init__()
            self.matmuls = 0
            self.tf32 = 0
            """Matmuls seen, and how many of them ran in TF32."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in matmuls:
                tensors = [a for a in args if isinstance(a, torch.Tensor)]
                exact = bool(tensors) and all(marked_exact(t) for t in tensors)
                exact = exact and _reduction(func, tensors) <= MAX_TF32_REDUCTION
                self.matmuls += 1
                self.tf32 += exact
                with _LOCK:
                    before = torch.get_float32_matmul_precision()
                    torch.set_float32_matmul_precision("high" if exact else "highest")
                    try:
                        return func(*args, **kwargs)
                    finally:
                        torch.set_float32_matmul_precision(before)
            out = func(*args, **kwargs)
            source = args[0] if args else None
            fp32 = isinstance(out, torch.Tensor) and out.dtype == torch.float32
            if fp32 and isinstance(source, torch.Tensor):
                if func in converts:
                    keep = source.dtype in narrow or marked_exact(source)
                elif func in preserving or getattr(func, "__self__", None) in properties:
                    keep = marked_exact(source)
                else:
                    keep = False
                if keep:
                    mark_exact(out)
            return out

    return Tf32WhereExact


_MODE_CLASS: Any = None


def tf32_where_exact():
    """A fresh ``Tf32WhereExact`` mode (use as a context manager; ``.matmuls`` and ``.tf32`` count)."""
    global _MODE_CLASS
    _MODE_CLASS = _MODE_CLASS or _make_mode()
    return _MODE_CLASS()


@contextlib.contextmanager
def reference_precision() -> Iterator[Any]:
    """Exact fp32 with TF32 for exact-operand matmuls (module docstring); yields the mode (its counts).

    With ``PTXGYM_REFERENCE_TF32=off`` (``settings.reference_tf32``): exact fp32 only, and yields None.
    """
    from ptxgym.records.settings import reference_tf32

    if not reference_tf32():
        with exact_fp32():
            yield None
        return
    mode = tf32_where_exact()
    with exact_fp32(), mode:
        yield mode
