"""The FlashInfer baselines' own parts, on the CPU: LSE base, plan arguments, layouts, set-up at load.

FlashInfer itself needs a GPU (``test_flashinfer_baselines_gpu.py``). Here the small batches of the three
GQA tasks (``evaltest_helpers.small_gqa``: the definitions' heads, head_dim and page size) are laid out
by the evaluator's own input generator, and what the baseline hands FlashInfer is checked against what
the definition's reference reads: the LSE conversion against the reference's natural-log LSE, the plan's
lengths, pages and last-page lengths (FlashInfer's paged-KV convention) against the rows the reference
gathers, heads, head_dim, page size, scale and causality against the definition.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from evaltest_helpers import GQA_PARAMS, small_gqa  # noqa: E402

from ptxgym.evaluation.sandboxed import flashinfer_baselines as fib  # noqa: E402
from ptxgym.evaluation.sandboxed import library_baselines  # noqa: E402
from ptxgym.evaluation.trusted import inputs as inputs_mod  # noqa: E402
from ptxgym.evaluation.trusted.baseline_store import installed  # noqa: E402

NAMES = sorted(GQA_PARAMS)


def _inputs(name: str):
    task = small_gqa(name)
    ns = inputs_mod.load_reference(task)
    inputs = inputs_mod.generate_inputs(task, ns, seed=3, device="cpu")
    return task, inputs, inputs_mod.run_reference(task, ns, inputs)


def _sequences(task, inputs):
    """Per sequence: (query rows, key/value rows of the flattened cache) as the definition defines them."""
    params = task.workload.params
    q_lens = params.get("q_lens") or [1] * len(params["kv_lens"])
    q0 = [sum(q_lens[:i]) for i in range(len(q_lens))]
    kv_ptr = inputs["kv_indptr"].tolist()
    if "kv_indices" in inputs:
        idx = inputs["kv_indices"].long()
        rows = [idx[a:b] for a, b in zip(kv_ptr, kv_ptr[1:], strict=False)]
    else:
        rows = [torch.arange(a, b) for a, b in zip(kv_ptr, kv_ptr[1:], strict=False)]
    return [(torch.arange(s, s + n), r) for s, n, r in zip(q0, q_lens, rows, strict=True)]


def _keys(inputs):
    if "k_cache" in inputs:
        return inputs["k_cache"].flatten(0, 1), inputs["v_cache"]
    return inputs["k"], inputs["v"]


@pytest.mark.parametrize("name", NAMES)
def test_base2_lse_converted_is_the_definitions_natural_lse(name: str) -> None:
    """FlashInfer's LSE (max + log2 sum 2^(s log2 e - max), scaled scores) times ln 2 is the reference's."""
    task, inputs, outputs = _inputs(name)
    q, (k, _) = inputs["q"].double(), _keys(inputs)
    hq, hkv = q.shape[1], k.shape[1]
    scale = fib.softmax_scale(q.shape[-1])
    assert scale == 1.0 / math.sqrt(task.definition.axes["head_dim"].value)  # type: ignore[union-attr]
    base2 = torch.empty(outputs["lse"].shape, dtype=torch.float32)
    for qrows, kvrows in _sequences(task, inputs):
        n, m = len(qrows), len(kvrows)
        allowed = torch.arange(m)[None, :] <= torch.arange(n)[:, None] + (m - n)  # causal from the end
        for h in range(hq):
            s = (q[qrows, h] @ k[kvrows, h // (hq // hkv)].double().T) * scale * math.log2(math.e)
            s = s.masked_fill(~allowed, float("-inf"))
            top = s.max(dim=-1, keepdim=True).values
            base2[qrows, h] = (
                (top + torch.log2(torch.exp2(s - top).sum(-1, keepdim=True))).squeeze(-1).float()
            )
    assert not torch.allclose(base2, outputs["lse"], atol=1e-2)  # the bases really differ
    torch.testing.assert_close(fib.lse_to_natural(base2), outputs["lse"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_plan_arguments_describe_the_batch_the_reference_reads(name: str) -> None:
    task, inputs, _ = _inputs(name)
    defn = task.definition
    hq, hkv, d = (defn.axes[a].value for a in ("num_qo_heads", "num_kv_heads", "head_dim"))  # type: ignore[union-attr]
    if name == "GqaRaggedPrefill":
        args, kw = fib.ragged_plan(inputs["q"], inputs["k"], inputs["qo_indptr"], inputs["kv_indptr"])
        assert args[0] is inputs["qo_indptr"] and args[1] is inputs["kv_indptr"]  # the harness's buffers
        assert args[2:] == (hq, hkv, d) and kw["causal"] is True
    elif name == "GqaPagedPrefill":
        args, kw = fib.paged_plan(
            *(inputs[n] for n in ("q", "k_cache", "qo_indptr", "kv_indptr", "kv_indices"))
        )
        assert (
            args[0] is inputs["qo_indptr"]
            and args[1] is inputs["kv_indptr"]
            and args[2] is inputs["kv_indices"]
        )
        assert args[4:] == (hq, hkv, d, 1) and kw["causal"] is True
    else:
        args, kw = fib.decode_plan(*(inputs[n] for n in ("q", "k_cache", "kv_indptr", "kv_indices")))
        assert args[0] is inputs["kv_indptr"] and args[1] is inputs["kv_indices"]
        assert args[3:] == (hq, hkv, d, 1) and "causal" not in kw
    assert kw["sm_scale"] == 1.0 / math.sqrt(d)
    assert kw["q_data_type"] == kw["kv_data_type"] == kw["o_data_type"] == torch.bfloat16
    if "k_cache" not in inputs:
        return
    # FlashInfer's paged KV (NHD): sequence i is pages indices[indptr[i]:indptr[i+1]], every page full but
    # the last, which holds last_page_len[i] tokens; token t of page p is k_cache[p, t].
    ptr, idx = (args[1], args[2]) if name == "GqaPagedPrefill" else (args[0], args[1])
    last = (args[3] if name == "GqaPagedPrefill" else args[2]).tolist()
    page_size = inputs["k_cache"].shape[1]
    ptr = ptr.tolist()
    for i, (_, want_rows) in enumerate(_sequences(task, inputs)):
        pages = idx[ptr[i] : ptr[i + 1]].long()
        tokens = [
            (p, t)
            for j, p in enumerate(pages.tolist())
            for t in range(page_size if j < len(pages) - 1 else last[i])
        ]
        assert len(tokens) == task.workload.params["kv_lens"][i]
        got = torch.stack([inputs["k_cache"][p, t] for p, t in tokens])
        assert torch.equal(got, _keys(inputs)[0][want_rows])  # the rows the reference attends to


def test_last_page_lengths() -> None:
    assert fib.last_page_lengths([0, 5, 5, 6], 1) == [1, 0, 1]
    with pytest.raises(ValueError, match="page_size 16"):
        fib.last_page_lengths([0, 2], 16)


def test_bind_sets_up_at_load_and_refuses_unknown_names() -> None:
    A, B = torch.randn(4, 3), torch.randn(5, 3)
    C = torch.empty(4, 5)
    call = library_baselines.bind("gemm_cublas", {}, [[A, B, C]])
    call(A, B, C)
    torch.testing.assert_close(C, A @ B.T)
    for bad in ("no_such_baseline", "bind", "_philox"):
        with pytest.raises(ValueError, match="no baseline function"):
            library_baselines.bind(bad, {}, [])


@pytest.mark.skipif(installed("flashinfer"), reason="flashinfer is installed here")
def test_flashinfer_baseline_fails_at_load_where_flashinfer_is_missing() -> None:
    """The set-up (import, plan) runs in ``bind``: a missing FlashInfer is a load error, not a call's."""
    _, inputs, outputs = _inputs("GqaPagedDecode")
    args = [*inputs.values(), *(torch.empty_like(t) for t in outputs.values())]
    with pytest.raises(ModuleNotFoundError, match="flashinfer"):
        library_baselines.bind("gqa_paged_decode_flashinfer", {}, [args])


def test_flashinfer_workspace_is_pointed_at_tmpdir_for_its_import_only(tmp_path, monkeypatch) -> None:
    """A sandboxed worker may write only in scratch (its TMPDIR); workers started later inherit nothing."""
    import os
    import sys

    fresh = "flashinfer.prefill" not in sys.modules
    monkeypatch.delenv("FLASHINFER_WORKSPACE_BASE", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    try:
        fib.import_flashinfer()
    except ModuleNotFoundError:
        assert not installed("flashinfer")
    else:
        from flashinfer.jit import env as jit_env

        assert not fresh or jit_env.FLASHINFER_WORKSPACE_DIR.is_relative_to(tmp_path)
    assert "FLASHINFER_WORKSPACE_BASE" not in os.environ
