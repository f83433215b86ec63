"""FlashInfer's GQA baselines on a GPU (``-m gpu``; skipped without a GPU or without flashinfer).

Each baseline runs through ``library_baselines.bind`` (plan and warm-up at set-up, as in the worker) on
a small batch and on the task's default workload, and must match the definition's reference (bf16 output,
natural-log LSE); then one task's baseline is checked and timed through the evaluator, in a sandboxed
worker, as the speedups divide by it. With the bundle (``bench/carried_flashinfer.sh``) every FlashInfer
module is precompiled; elsewhere FlashInfer JIT-compiles on first use (minutes).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from evaltest_helpers import GQA_PARAMS, small_gqa  # noqa: E402

from ptxgym.evaluation.trusted.baseline_store import installed  # noqa: E402
from ptxgym.records.tasks import get_task  # noqa: E402

if not installed("flashinfer"):
    pytest.skip("flashinfer is not installed (pip install 'ptxgym[flashinfer]')", allow_module_level=True)


def _check(task) -> None:
    from ptxgym.evaluation.sandboxed import library_baselines
    from ptxgym.evaluation.trusted import inputs as inputs_mod

    ns = inputs_mod.load_reference(task)
    inputs = inputs_mod.generate_inputs(task, ns, seed=2, device="cuda")
    want = inputs_mod.run_reference(task, ns, inputs)
    outs = [torch.full_like(t, float("nan")) for t in want.values()]
    args = [*inputs.values(), *outs]
    call = library_baselines.bind(task.baseline.function, {}, [args])
    assert all(torch.isnan(o).all() for o in outs)  # the set-up's warm-up wrote private outputs only
    call(*args)
    torch.cuda.synchronize()
    out, lse = outs
    torch.testing.assert_close(out.float(), want["output"].float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, want["lse"], atol=1e-2, rtol=1e-3)  # natural log, not base 2
    call(*args)  # planned once: a second call reuses the plan and gives the same result
    torch.testing.assert_close(outs[1], want["lse"], atol=1e-2, rtol=1e-3)


LONG_QUERY = {"q_lens": [3, 70], "kv_lens": [6, 75], "layout_seed": 7}
"""A small paged-prefill batch whose longest query passes 64 rows: FlashInfer's ``auto`` then plans its
FA3 module (the shipped workloads' choice: their longest queries are 628-893 rows). At most 64 rows it
plans the FA2 module instead (``BatchPrefillWithPagedKVCacheWrapper._determine_auto_backend``)."""


@pytest.mark.parametrize("name", sorted(GQA_PARAMS))
def test_flashinfer_baseline_matches_the_reference_small(name: str) -> None:
    """A small batch; paged prefill's has short queries only (FlashInfer's FA2 module on sm_90a).

    Skipped, and said so, where that module is neither precompiled nor compilable here: the trimmed
    bundle (``bench/make_flashinfer_bundle.sh``) carries the FA3 module the shipped workloads plan and
    leaves out FlashInfer's JIT templates.
    """
    task = small_gqa(name)
    try:
        _check(task)
    except FileNotFoundError as e:
        from flashinfer.jit import env as jit_env

        missing = str(e.filename or "")
        if name != "GqaPagedPrefill" or not missing.startswith(str(jit_env.FLASHINFER_CSRC_DIR)):
            raise
        pytest.skip(f"FlashInfer's FA2 prefill module is not precompiled and its JIT sources are absent: {e}")


def test_flashinfer_paged_prefill_matches_the_reference_small_long_query() -> None:
    """A small paged-prefill batch planned on FA3, as the shipped workloads are (``LONG_QUERY``)."""
    _check(small_gqa("GqaPagedPrefill", num_pages=200, params=LONG_QUERY))


@pytest.mark.parametrize("name", sorted(GQA_PARAMS))
def test_flashinfer_baseline_matches_the_reference_default_workload(name: str) -> None:
    _check(get_task(f"{name}-sm90a"))


def test_gqa_baseline_is_flashinfer_timed_through_the_evaluator() -> None:
    from ptxgym.evaluation.trusted.base import EvalSettings
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    settings = EvalSettings(warmup=3, iterations=10, trials=1, correctness_sets=1, baseline_from_disk=False)
    task = get_task("GqaPagedDecode-sm90a")
    with LocalGpuEvaluator(settings=settings) as ev:
        record = ev.measure_baseline(task)
    print(f"\n{task.id} baseline: {record.model_dump_json()}")
    assert (record.name, record.fallback) == ("flashinfer", "")
    assert record.function == "gqa_paged_decode_flashinfer"
    assert record.sandboxed is True and record.correct is True, record.message
    assert record.stats is not None and 0 < record.stats.median_ms < 5.0
