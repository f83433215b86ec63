"""The sm_90a expert solutions: built by ptxgym's own pipeline, HGMMA + TMA.

CPU (nvcc): the shipped Gemm.cu goes through extract -> policy -> build -> SASS exactly as
the reference policy's action does (one nvcc call for the module); the SASS must hold HGMMA, UTMALDG and
UTMASTG, ptxas must report no spills, no stack frame and no wgmma serialisation.
The four attention solutions: the same build checks (HGMMA and UTMALDG in the SASS, no spills, no wgmma
serialisation).
GPU (gpu): each of the five through LocalGpuEvaluator must pass correctness and execute HGMMA/UTMALDG.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "knowledge_packs" / "sm90a" / "solutions"


def _bench():
    """bench/expert_bench.py as a module (it owns the evaluator driver of the GPU test)."""
    spec = importlib.util.spec_from_file_location("expert_bench", ROOT / "bench" / "expert_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_gemm_uses_only_pack_wrappers() -> None:
    """Gemm.cu includes the pack headers (on every build's include path) and writes no PTX of its own."""
    text = (SOLUTIONS / "Gemm.cu").read_text()
    assert '#include "sm90a.cuh"' in text
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run," in text
    assert "asm volatile" not in text and "asm(" not in text, (
        "the expert kernel must use the pack's wrappers, not its own inline PTX"
    )
    for wrapper in (
        "tma_load_multicast",
        "wgmma_ss<256>",
        "mbar_wait",
        "mbar_arrive_expect_tx",
        "setmaxnreg_inc",
        "stmatrix_x4",
        "tma_store",
        "fence_proxy_async_shared",
    ):
        assert wrapper in text, wrapper


@pytest.fixture(scope="module")
def gemm_feedback():
    """The shipped Gemm.cu through the pipeline with no GPU evaluator: build + SASS census."""
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    text = (SOLUTIONS / "Gemm.cu").read_text()
    return Pipeline(get_task("Gemm-sm90a")).run(f"```cuda\n{text}\n```")


@pytest.mark.nvcc
def test_gemm_builds_through_the_pipeline(gemm_feedback) -> None:
    fb = gemm_feedback
    assert fb.compile is not None and fb.compile.ok, fb.message
    assert fb.status.value in ("NOT_EVALUATED", "PASSED"), f"{fb.status}: {fb.message}"


@pytest.mark.nvcc
def test_gemm_sass_holds_hgmma_and_tma(gemm_feedback) -> None:
    kernels = gemm_feedback.sass.kernels
    assert len(kernels) == 1
    targets = kernels[0].target_opcodes
    for opcode in ("HGMMA", "UTMALDG", "UTMASTG"):
        assert targets.get(opcode, 0) > 0, f"{opcode} missing from {targets}"
    families = kernels[0].families
    assert "LDL" not in families and "STL" not in families, "accumulators spilled to local memory"


@pytest.mark.nvcc
def test_gemm_ptxas_report_is_clean(gemm_feedback) -> None:
    (res,) = gemm_feedback.compile.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, res
    log = gemm_feedback.compile.log
    for code in ("C7510", "C7517", "C7519", "C7508"):
        assert code not in log, f"ptxas {code}: wgmma serialised / setmaxnreg ignored\n{log[-2000:]}"


# The four attention solutions: built through the pipeline (CPU), then judged on the H200 (gpu).
MHA = ("MhaFwd", "MhaFwdCausal", "MhaBwd", "MhaBwdCausal")


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("name", MHA)
def test_attention_solution_builds_clean_with_wgmma_and_tma(name) -> None:
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    text = (SOLUTIONS / f"{name}.cu").read_text()
    assert "#include <sm90a/headers/wgmma.cuh>" in text and 'asm volatile("wgmma' not in text
    fb = Pipeline(get_task(f"{name}-sm90a")).run(f"```cuda\n{text}\n```")
    assert fb.compile is not None and fb.compile.ok, fb.message
    found: dict[str, int] = {}
    for kernel in fb.sass.kernels:
        for opcode, count in kernel.target_opcodes.items():
            found[opcode] = found.get(opcode, 0) + count
    assert found.get("HGMMA", 0) > 0 and found.get("UTMALDG", 0) > 0, found
    for res in fb.compile.resources:
        # The forward kernels spill 4 (MhaFwd) and 12 (causal) bytes of scalars, measured harmless (0.97x and
        # 0.99x cuDNN); spilled wgmma accumulators would be hundreds of bytes.
        assert res.spill_stores <= 16 and res.spill_loads <= 16, res
    for code in ("C7510", "C7517", "C7519", "C7508"):
        assert code not in fb.compile.log, f"ptxas {code}\n{fb.compile.log[-2000:]}"


@pytest.fixture(scope="module")
def gpu_evaluator():
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    settings = EvalSettings(memcheck=MemcheckMode.NEVER, call_timeout_s=40.0)
    with LocalGpuEvaluator(settings=settings, spares=1) as evaluator:
        yield evaluator


@pytest.mark.gpu
@pytest.mark.parametrize("name", ("Gemm", *MHA))
def test_expert_solution_passes_the_evaluator_with_target_executed(gpu_evaluator, name) -> None:
    """Correct on fresh inputs and wgmma/TMA executed (in band), as judged by LocalGpuEvaluator."""
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    text = (SOLUTIONS / f"{name}.cu").read_text()
    fb = Pipeline(get_task(f"{name}-sm90a"), gpu_evaluator).run(f"```cuda\n{text}\n```")
    summary = _bench().feedback_summary(fb)
    print(f"EXPERT_FEEDBACK {name} " + json.dumps(summary))
    assert summary["status"] == "PASSED", summary
    assert summary["target_executed"] == "yes", summary
    counts = summary["target_counts"]
    # the SASS-patched call's opcodes, or (a module of one MMA tile shape, sass_join.single_tile) the
    # hardware counters' families alone
    mma, tma = ("HGMMA", "UTMALDG") if "HGMMA" in counts else ("GMMA", "TMA loads")
    assert counts.get(mma, 0) > 0 and counts.get(tma, 0) > 0, counts
