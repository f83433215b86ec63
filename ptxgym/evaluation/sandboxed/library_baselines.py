"""Frontier-library baselines, timed in a worker exactly like a candidate.

Each function takes the task's inputs then its harness-allocated outputs (the candidate's signature),
plus the reference's keyword options (``causal``). It either writes the outputs (destination-passing,
``gemm_cublas``) or returns them; returned tensors are copied into the harness outputs by the worker
*after* the call's timing window closes, so the copy is not charged to the library.

* ``gemm_cublas``: cuBLAS through ``torch.matmul(A, B.T, out=C)``.
* ``mha_fwd_cudnn``: cuDNN SDPA forward with the log-sum-exp (``_scaled_dot_product_cudnn_attention``).
* ``mha_bwd_cudnn``: cuDNN SDPA backward only (``_scaled_dot_product_cudnn_attention_backward``), fed
  the given O, dO and LSE (the forward is not timed).
* ``gqa_ragged_prefill_flashinfer``, ``gqa_paged_prefill_flashinfer``, ``gqa_paged_decode_flashinfer``:
  FlashInfer's batch attention wrappers (``flashinfer_baselines.py``), planned at load by ``bind``.
* ``torch_reference``: the definition's own PyTorch reference ``run`` on the GPU, for definitions no
  library covers (the task's Feedback names it ``torch_reference``); the trusted side passes the source.

The worker gets its callable from ``bind``: a baseline with set-up (``_PREPARED``) does it there, at
load, for every input set, outside any call; a failure is the load's error.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

from ptxgym.evaluation.sandboxed import flashinfer_baselines
from ptxgym.evaluation.sandboxed.flashinfer_baselines import (  # noqa: F401 - baselines by name
    gqa_paged_decode_flashinfer,
    gqa_paged_prefill_flashinfer,
    gqa_ragged_prefill_flashinfer,
)

_EMPTY: dict = {}


def gemm_cublas(A, B, C, **_):
    """C = A @ B^T by cuBLAS, written into C."""
    import torch

    torch.matmul(A, B.T, out=C)


def mha_fwd_cudnn(Q, K, V, O, LSE, causal: bool = False, **_):  # noqa: E741 - the definition's names
    """cuDNN SDPA forward; returns (O, LSE) with LSE shaped [B, H, S] (natural log, fp32)."""
    import torch

    res = torch.ops.aten._scaled_dot_product_cudnn_attention(
        Q, K, V, None, True, 0.0, bool(causal), False, scale=1.0 / math.sqrt(Q.shape[-1])
    )
    return res[0], res[1].reshape(LSE.shape)


def _philox(device):
    import torch

    key = str(device)
    if key not in _EMPTY:
        _EMPTY[key] = (
            torch.zeros((), dtype=torch.int64, device=device),
            torch.zeros((), dtype=torch.int64, device=device),
        )
    return _EMPTY[key]


def mha_bwd_cudnn(Q, K, V, O, dO, LSE, dQ, dK, dV, causal: bool = False, **_):  # noqa: E741 - definition names
    """cuDNN SDPA backward from the given forward state; returns (dQ, dK, dV).

    The dense (non-ragged) call passes no attention bias and no cumulative sequence lengths (None, the
    undefined tensors autograd passes); LSE goes in as the [B, H, S, 1] statistics tensor the cuDNN forward
    produces (same strides as a contiguous [B, H, S]).
    """
    B, H, S, D = Q.shape
    seed, offset = _philox(Q.device)
    import torch

    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        dO,
        Q,
        K,
        V,
        O,
        LSE.reshape(B, H, S, 1),
        seed,
        offset,
        None,
        None,
        None,
        S,
        S,
        0.0,
        bool(causal),
        scale=1.0 / math.sqrt(D),
    )


_REFERENCES: dict[str, dict] = {}


def torch_reference(*args, reference_source: str, input_names: list[str], **options):
    """The definition's reference ``run`` on the inputs; returns its outputs.

    The harness outputs that follow the inputs are ignored (the worker copies the returned tensors into
    them). The source is the task's own code (catalog or dataset), compiled once per worker.
    """
    namespace = _REFERENCES.get(reference_source)
    if namespace is None:
        namespace = {"__name__": "ptxgym_reference_baseline"}
        exec(compile(reference_source, "<definition reference>", "exec"), namespace)  # noqa: S102 - task data
        _REFERENCES[reference_source] = namespace
    return namespace["run"](*args[: len(input_names)], **options)


_PREPARED: dict[str, Callable[..., None]] = {
    "gqa_ragged_prefill_flashinfer": flashinfer_baselines.prepare,
    "gqa_paged_prefill_flashinfer": flashinfer_baselines.prepare,
    "gqa_paged_decode_flashinfer": flashinfer_baselines.prepare,
}
"""Baselines with per-set set-up (planning): ``prepare(function, sets, **options)``."""


def bind(function: str, options: dict[str, Any], sets: Sequence[Sequence[Any]]) -> Callable[..., Any]:
    """The callable the worker times for baseline ``function``, its set-up done for ``sets``."""
    fn = globals().get(function)
    if not inspect.isfunction(fn) or function.startswith("_") or function == "bind":
        raise ValueError(f"no baseline function {function!r} in library_baselines")
    prepare = _PREPARED.get(function)
    if prepare is not None:
        prepare(fn, sets, **options)
    return lambda *a: fn(*a, **options)
