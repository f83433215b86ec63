"""FlashInfer's batch attention wrappers as the baselines of the GQA tasks.

Three definitions, three wrappers (FlashInfer's ``backend="auto"``: FA3 kernels for both prefills and
the CUDA-core decode kernel on sm_90a for the shipped workloads):

* ``gqa_ragged_prefill_flashinfer``: ``BatchPrefillWithRaggedKVCacheWrapper``, causal.
* ``gqa_paged_prefill_flashinfer``: ``BatchPrefillWithPagedKVCacheWrapper``, causal, (k_cache, v_cache).
* ``gqa_paged_decode_flashinfer``: ``BatchDecodeWithPagedKVCacheWrapper``.

Layouts match the definitions as they are: q ``[tokens, Hq, D]``, ragged k/v ``[tokens, Hkv, D]``, paged
caches ``[pages, page_size, Hkv, D]`` (FlashInfer's ``NHD``), query head h reads KV head
``h // (Hq / Hkv)`` (FlashInfer's GQA grouping), scale ``1/sqrt(D)``, causal aligned to the end of each
sequence (FlashInfer's causal mask for ``kv_len >= q_len``).

Set-up and timed call. A wrapper is planned from a set's index arrays (``plan`` reads them on the host,
so it synchronises) once, by ``prepare`` when the worker loads the baseline, for every input set, with
one warm-up run into private outputs (JIT modules load there, not in a call); the timed call is only
``run`` into the harness outputs plus the LSE conversion. The plans are kept by the addresses and shapes
of the set's tensors (host metadata: no device read in a call); a call on tensors no plan knows plans
there and then (direct use outside the worker). The plan keeps the set's own index tensors (FlashInfer
reads them in ``run``), so the harness buffers are what the kernels read.

LSE. FlashInfer's kernels write ``m + log2(sum 2^(s*log2(e) - m))``, the base-2 log-sum-exp of the
scaled scores; the definitions ask for the natural log, so every call multiplies by ln 2 in place
(``lse_to_natural``; FlashInfer's own ``lse_base="ln"`` does the same multiply). It is one small
elementwise kernel inside the timed call, as it is part of the task's output.

Where FlashInfer writes. Importing it creates its workspace (a log, the JIT cache) under
``FLASHINFER_WORKSPACE_BASE``; unset, this module points it at ``TMPDIR`` for the import (the worker's
scratch directory under the host sandbox, the only place a sandboxed worker may write; a value set
outside scratch makes the sandboxed attempt fail and the unsandboxed retry time it). Kernels come from
modules compiled ahead of time (``<package>/data/aot`` as ``bench/make_flashinfer_bundle.sh`` builds it,
or FlashInfer's ``flashinfer-jit-cache``); a module missing there is JIT-compiled by FlashInfer into that
workspace at the warm-up, which takes minutes per module in each fresh worker.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

LN2 = math.log(2.0)
WORKSPACE_BYTES = 128 << 20
"""FlashInfer's recommended float workspace (split-KV partial results), one per device, shared by all
wrappers of this process (calls are sequential on one stream)."""

_WORKSPACES: dict[str, Any] = {}
_PLANS: dict[tuple, Any] = {}


def import_flashinfer() -> Any:
    """FlashInfer's prefill and decode modules, with its workspace where this process may write.

    FlashInfer reads ``FLASHINFER_WORKSPACE_BASE`` once, when it is imported; it is set for that import
    only, so processes this one starts later (the evaluator's workers) do not inherit it.
    """
    if "flashinfer.prefill" in sys.modules or os.environ.get("FLASHINFER_WORKSPACE_BASE"):
        import flashinfer.decode
        import flashinfer.prefill

        return flashinfer
    os.environ["FLASHINFER_WORKSPACE_BASE"] = os.environ.get("TMPDIR") or tempfile.gettempdir()
    try:
        import flashinfer.decode
        import flashinfer.prefill
    finally:
        del os.environ["FLASHINFER_WORKSPACE_BASE"]
    return flashinfer


def lse_to_natural(lse):
    """A base-2 log-sum-exp turned into the natural-log one, in place (log x = log2 x * ln 2)."""
    return lse.mul_(LN2)


def softmax_scale(head_dim: int) -> float:
    """The definitions' scale of the scores."""
    return 1.0 / math.sqrt(head_dim)


def last_page_lengths(kv_indptr: Sequence[int], page_size: int) -> list[int]:
    """Tokens in the last page of each sequence, from its page pointers.

    The definitions give pages per sequence, not tokens; with one token per page (the shipped
    definitions) a sequence with pages has exactly one token in its last one, and an empty one none.
    """
    if page_size != 1:
        raise ValueError(
            f"page_size {page_size}: the GQA definitions give page counts only, which fix the last page's "
            "token count for page_size 1 only; a definition with larger pages needs kv lengths as an input"
        )
    return [1 if b > a else 0 for a, b in zip(kv_indptr, kv_indptr[1:], strict=False)]


def ragged_plan(q, k, qo_indptr, kv_indptr, causal: bool = True) -> tuple[tuple, dict[str, Any]]:
    """Arguments of ``BatchPrefillWithRaggedKVCacheWrapper.plan`` for the ragged prefill definition."""
    _, hq, d = q.shape
    args = (qo_indptr, kv_indptr, hq, k.shape[1], d)
    return args, _dtypes(q, k, causal=bool(causal), sm_scale=softmax_scale(d))


def paged_plan(
    q, k_cache, qo_indptr, kv_indptr, kv_indices, causal: bool = True
) -> tuple[tuple, dict[str, Any]]:
    """Arguments of ``BatchPrefillWithPagedKVCacheWrapper.plan`` for the paged prefill definition."""
    _, hq, d = q.shape
    page_size, hkv = k_cache.shape[1], k_cache.shape[2]
    last = _last_page_tensor(kv_indptr, page_size)
    args = (qo_indptr, kv_indptr, kv_indices, last, hq, hkv, d, page_size)
    return args, _dtypes(q, k_cache, causal=bool(causal), sm_scale=softmax_scale(d))


def decode_plan(q, k_cache, kv_indptr, kv_indices) -> tuple[tuple, dict[str, Any]]:
    """Arguments of ``BatchDecodeWithPagedKVCacheWrapper.plan`` for the paged decode definition."""
    _, hq, d = q.shape
    page_size, hkv = k_cache.shape[1], k_cache.shape[2]
    last = _last_page_tensor(kv_indptr, page_size)
    args = (kv_indptr, kv_indices, last, hq, hkv, d, page_size)
    return args, _dtypes(q, k_cache, sm_scale=softmax_scale(d))


def _dtypes(q, kv, **kw: Any) -> dict[str, Any]:
    return {"q_data_type": q.dtype, "kv_data_type": kv.dtype, "o_data_type": q.dtype, **kw}


def _last_page_tensor(kv_indptr, page_size: int):
    import torch

    lengths = last_page_lengths(kv_indptr.tolist(), page_size)
    return torch.tensor(lengths, dtype=torch.int32, device=kv_indptr.device)


# ------------------------------------------------------------------------------ wrappers and plans


def _workspace(device):
    import torch

    key = str(device)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _WORKSPACES[key]


def _key(kind: str, tensors: Sequence[Any]) -> tuple:
    return (kind, *((t.data_ptr(), tuple(t.shape), str(t.device)) for t in tensors))


def _planned(kind: str, tensors: Sequence[Any], make) -> Any:
    """The wrapper planned for these tensors (planned now if none is)."""
    key = _key(kind, tensors)
    wrapper = _PLANS.get(key)
    if wrapper is None:
        wrapper = _PLANS[key] = make()
    return wrapper


def _ragged_wrapper(q, k, v, qo_indptr, kv_indptr, causal: bool = True):
    def make():
        fi = import_flashinfer()
        wrapper = fi.prefill.BatchPrefillWithRaggedKVCacheWrapper(_workspace(q.device), "NHD")
        args, kw = ragged_plan(q, k, qo_indptr, kv_indptr, causal)
        wrapper.plan(*args, **kw)
        return wrapper

    return _planned("ragged", (q, k, v, qo_indptr, kv_indptr), make)


def _paged_wrapper(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, causal: bool = True):
    def make():
        fi = import_flashinfer()
        wrapper = fi.prefill.BatchPrefillWithPagedKVCacheWrapper(_workspace(q.device), "NHD")
        args, kw = paged_plan(q, k_cache, qo_indptr, kv_indptr, kv_indices, causal)
        wrapper.plan(*args, **kw)
        return wrapper

    return _planned("paged", (q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices), make)


def _decode_wrapper(q, k_cache, v_cache, kv_indptr, kv_indices):
    def make():
        fi = import_flashinfer()
        wrapper = fi.decode.BatchDecodeWithPagedKVCacheWrapper(_workspace(q.device), "NHD")
        args, kw = decode_plan(q, k_cache, kv_indptr, kv_indices)
        wrapper.plan(*args, **kw)
        return wrapper

    return _planned("decode", (q, k_cache, v_cache, kv_indptr, kv_indices), make)


# ------------------------------------------------------------------------------ the baselines


def gqa_ragged_prefill_flashinfer(q, k, v, qo_indptr, kv_indptr, output, lse, causal: bool = True, **_):
    """Causal GQA ragged prefill by FlashInfer, written into ``output`` and ``lse`` (natural log)."""
    wrapper = _ragged_wrapper(q, k, v, qo_indptr, kv_indptr, causal)
    wrapper.run(q, k, v, out=output, lse=lse, return_lse=True)
    lse_to_natural(lse)


def gqa_paged_prefill_flashinfer(
    q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, output, lse, causal: bool = True, **_
):
    """Causal GQA paged prefill by FlashInfer, written into ``output`` and ``lse`` (natural log)."""
    wrapper = _paged_wrapper(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, causal)
    wrapper.run(q, (k_cache, v_cache), out=output, lse=lse, return_lse=True)
    lse_to_natural(lse)


def gqa_paged_decode_flashinfer(q, k_cache, v_cache, kv_indptr, kv_indices, output, lse, **_):
    """GQA paged decode by FlashInfer, written into ``output`` and ``lse`` (natural log)."""
    wrapper = _decode_wrapper(q, k_cache, v_cache, kv_indptr, kv_indices)
    wrapper.run(q, (k_cache, v_cache), out=output, lse=lse, return_lse=True)
    lse_to_natural(lse)


def prepare(function, sets: Sequence[Sequence[Any]], **options: Any) -> None:
    """Plan ``function`` for every input set and run it once into private outputs (outside any call).

    ``sets``: each set's arguments in the candidate's order (inputs, then the outputs, which the warm-up
    leaves untouched). Returns when the device is idle, so plans made on the default stream are complete
    before the harness stream runs.
    """
    import torch

    for args in sets:
        private = [t.clone() for t in args[-2:]]
        function(*args[:-2], *private, **options)
    torch.cuda.synchronize()
