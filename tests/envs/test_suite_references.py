"""Every shipped definition's reference runs on small shapes on the CPU and agrees with a float64 oracle.

The inputs come from the evaluator's own generator (``generate_inputs``: random draws, and the derived
inputs such as the attention backward's O/LSE or the GQA index arrays made from the workload's params),
the reference runs through ``run_reference`` (which checks every output's shape and dtype against the
definition), and an independent float64 computation (plain matmul, masked softmax, autograd, torch's
SDPA) checks the values. Constant axes are shrunk (GEMM N/K, MHA B/H, GQA heads at the same group
ratio) so that every definition runs in well under a second.
"""

from __future__ import annotations

import itertools
import math

import pytest

from ptxgym.records.schema import AxisConst, Definition, Workload
from ptxgym.records.tasks import Task, catalog, count_flops, load_definitions

torch = pytest.importorskip("torch")
inputs_mod = pytest.importorskip("ptxgym.evaluation.trusted.inputs")

SMALL_CONST = {"N": 48, "K": 40, "B": 2, "H": 3}
SMALL_HEADS = {(32, 4): (8, 1), (24, 8): (6, 2)}
SMALL_PARAMS = {
    "gqa_ragged": {"q_lens": [5, 1, 9], "kv_lens": [5, 4, 12]},
    "gqa_paged_prefill": {"q_lens": [3, 7], "kv_lens": [6, 7], "layout_seed": 7},
    "gqa_paged_decode": {"kv_lens": [5, 1, 9, 2], "layout_seed": 3},
}
NUM_PAGES = 40


def _task_of(defn: Definition) -> Task:
    return next(t for t in catalog().values() if t.definition.name == defn.name)


def _small_definition(defn: Definition) -> Definition:
    axes = dict(defn.axes)
    for name, ax in defn.axes.items():
        if isinstance(ax, AxisConst) and name in SMALL_CONST:
            axes[name] = ax.model_copy(update={"value": SMALL_CONST[name]})
    if "num_qo_heads" in axes:
        hq, hkv = axes["num_qo_heads"].value, axes["num_kv_heads"].value  # type: ignore[union-attr]
        small_q, small_kv = SMALL_HEADS[(hq, hkv)]
        axes["num_qo_heads"] = axes["num_qo_heads"].model_copy(update={"value": small_q})
        axes["num_kv_heads"] = axes["num_kv_heads"].model_copy(update={"value": small_kv})
    return defn.model_copy(update={"axes": axes})


def _kind(defn: Definition) -> str:
    if defn.op_type == "gqa_paged":
        return "gqa_paged_prefill" if "qo_indptr" in defn.inputs else "gqa_paged_decode"
    return defn.op_type


def _small_workload(defn: Definition, shipped: Workload) -> Workload:
    kind = _kind(defn)
    if kind == "gemm":
        return shipped.model_copy(update={"axes": {"M": 17}})
    if kind == "attention":
        return shipped.model_copy(update={"axes": {"S": 33}})
    params = SMALL_PARAMS[kind]
    kv = params["kv_lens"]
    if kind == "gqa_ragged":
        q = params["q_lens"]
        axes = {"total_q": sum(q), "total_kv": sum(kv), "len_indptr": len(q) + 1}
    else:
        rows = {"total_q": sum(params["q_lens"])} if "q_lens" in params else {"batch_size": len(kv)}
        axes = {**rows, "num_pages": NUM_PAGES, "len_indptr": len(kv) + 1, "num_kv_indices": sum(kv)}
    return shipped.model_copy(update={"axes": axes, "params": params})


def _small(defn: Definition) -> Task:
    task = _task_of(defn)
    small = _small_definition(defn)
    wl = _small_workload(defn, task.workload)
    return task.model_copy(update={"definition": small, "workload": wl, "workloads": (wl,)})


def _run(task: Task):
    ns = inputs_mod.load_reference(task)
    inputs = inputs_mod.generate_inputs(task, ns, seed=1, device="cpu")
    outputs = inputs_mod.run_reference(task, ns, inputs)  # checks shapes and dtypes
    return ns, inputs, outputs


def _attention64(q, k, v, allowed):
    """float64 softmax attention: q [..., n, D], k/v [..., m, D], allowed [n, m]."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ v, lse


def _check_gemm(inputs, outputs) -> None:
    want = inputs["A"].double() @ inputs["B"].double().T
    torch.testing.assert_close(outputs["C"].double(), want, atol=5e-2, rtol=1e-2)


def _check_mha_fwd(defn: Definition, inputs, outputs) -> None:
    q, k, v = (inputs[n].double() for n in "QKV")
    s_len = q.shape[2]
    allowed = torch.ones(s_len, s_len, dtype=torch.bool)
    if "causal" in defn.name:
        allowed = allowed.tril()
    o, lse = _attention64(q, k, v, allowed)
    torch.testing.assert_close(outputs["O"].double(), o, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(outputs["LSE"].double(), lse, atol=1e-4, rtol=1e-4)


def _check_mha_bwd(defn: Definition, inputs, outputs) -> None:
    causal = "causal" in defn.name
    q, k, v = (inputs[n].double().requires_grad_() for n in "QKV")
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(inputs["dO"].double())
    for name, leaf in (("dQ", q), ("dK", k), ("dV", v)):
        torch.testing.assert_close(outputs[name].double(), leaf.grad, atol=3e-2, rtol=3e-2)
    # the derived forward state (O, LSE) is the forward of the same inputs
    allowed = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool)
    o64, lse64 = _attention64(q.detach(), k.detach(), v.detach(), allowed.tril() if causal else allowed)
    torch.testing.assert_close(inputs["O"].double(), o64, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(inputs["LSE"].double(), lse64, atol=1e-4, rtol=1e-4)


def _check_gqa(task: Task, inputs, outputs) -> None:
    kind, p = _kind(task.definition), task.workload.params or {}
    kv_lens = p["kv_lens"]
    q_lens = p.get("q_lens", [1] * len(kv_lens))
    cum = lambda xs: [0, *torch.tensor(xs).cumsum(0).tolist()]  # noqa: E731
    assert inputs["kv_indptr"].tolist() == cum(kv_lens)
    if "qo_indptr" in inputs:
        assert inputs["qo_indptr"].tolist() == cum(q_lens)
    if kind == "gqa_ragged":
        k_rows, v_rows = inputs["k"].double(), inputs["v"].double()
        rows = [list(range(a, b)) for a, b in itertools.pairwise(cum(kv_lens))]
    else:
        pages = inputs["kv_indices"].tolist()
        assert len(set(pages)) == len(pages) and all(0 <= x < NUM_PAGES for x in pages)
        k_rows, v_rows = inputs["k_cache"].double().flatten(0, 1), inputs["v_cache"].double().flatten(0, 1)
        rows = [pages[a:b] for a, b in itertools.pairwise(cum(kv_lens))]
    q = inputs["q"].double()
    hq, hkv = q.shape[1], k_rows.shape[1]
    group = hq // hkv
    pairs = 0
    starts = cum(q_lens)
    for i, (n, m) in enumerate(zip(q_lens, kv_lens, strict=True)):
        allowed = torch.arange(m)[None, :] <= torch.arange(n)[:, None] + (m - n)
        pairs += int(allowed.sum())
        idx = torch.tensor(rows[i], dtype=torch.long)
        k_i = k_rows[idx].repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, m, D]
        v_i = v_rows[idx].repeat_interleave(group, dim=1).transpose(0, 1)
        q_i = q[starts[i] : starts[i] + n].transpose(0, 1)  # [Hq, n, D]
        o = torch.nn.functional.scaled_dot_product_attention(q_i, k_i, v_i, attn_mask=allowed)
        s = q_i @ k_i.transpose(1, 2) / math.sqrt(q.shape[-1])
        lse = torch.logsumexp(s.masked_fill(~allowed, float("-inf")), dim=-1)
        got_o = outputs["output"][starts[i] : starts[i] + n].double().transpose(0, 1)
        got_lse = outputs["lse"][starts[i] : starts[i] + n].double().transpose(0, 1)
        torch.testing.assert_close(got_o, o, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(got_lse, lse, atol=1e-4, rtol=1e-4)
    # the record's FLOP formula counts exactly the allowed (query, key) pairs: 4 * Hq * D per pair
    flops = count_flops(task.definition, task.workload, task.flop_formula)
    assert flops == pytest.approx(4 * hq * q.shape[-1] * pairs)


@pytest.mark.parametrize("name", sorted(load_definitions()))
def test_reference_runs_small_on_cpu_and_matches_float64(name: str) -> None:
    defn = load_definitions()[name]
    task = _small(defn)
    _, inputs, outputs = _run(task)
    for out_name, t in outputs.items():
        assert torch.isfinite(t.float()).all(), f"{name}: {out_name} has non-finite values"
    kind = _kind(defn)
    if kind == "gemm":
        _check_gemm(inputs, outputs)
    elif kind == "attention" and "O" in defn.outputs:
        _check_mha_fwd(defn, inputs, outputs)
    elif kind == "attention":
        _check_mha_bwd(defn, inputs, outputs)
    else:
        _check_gqa(task, inputs, outputs)


@pytest.mark.parametrize("name", sorted(n for n in load_definitions() if n.startswith("gqa")))
def test_torch_reference_baseline_is_the_reference(name: str) -> None:
    """Where FlashInfer is missing, the GQA baseline runs the definition's own reference (and says so)."""
    from ptxgym.evaluation.sandboxed import library_baselines
    from ptxgym.evaluation.trusted.baseline_store import with_fallback

    task = with_fallback(_small(load_definitions()[name]))
    assert task.baseline.name == "torch_reference" and task.baseline.function == "torch_reference"
    _, inputs, outputs = _run(task)
    harness_outputs = [torch.empty_like(t) for t in outputs.values()]
    got = library_baselines.torch_reference(*inputs.values(), *harness_outputs, **task.baseline_options)
    for want, have in zip(outputs.values(), got, strict=True):
        assert torch.equal(want, have)


def test_library_tasks_pass_no_baseline_options() -> None:
    assert all(t.baseline_options == {} for t in catalog().values() if t.baseline.name != "torch_reference")


@pytest.mark.parametrize("name", sorted(n for n in load_definitions() if n.startswith("gqa")))
def test_gqa_random_inputs_are_redrawn_for_timed_calls(name: str) -> None:
    """Timed calls redraw every random tensor of a GQA task (q and the keys/values).

    The index arrays come from the workload alone (no tensor feeds ``layout``); an input that fed a
    derived function would keep its set's values (``fresh_names``).
    """
    task = _small(load_definitions()[name])
    ns = inputs_mod.load_reference(task)
    random = [n for n, how in task.workload.inputs.items() if how.type == "random"]
    assert set(inputs_mod.fresh_names(task, ns)) == set(random) and "q" in random
