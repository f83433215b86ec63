"""The in-band SASS count binding (sandboxed/sass_counts.py) and the offset -> opcode listing (cpu/sass.py).

The ctypes structs must match the CUPTI headers byte for byte: a C program compiled against the toolkit's
own headers prints each ``*_STRUCT_SIZE`` and ``sizeof``, and the test compares them with the binding's.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxgym.evaluation.sandboxed import sass_counts as sc

HEADER_SIZES = {
    "_GetChipName": ("CUpti_Device_GetChipName_Params", "CUpti_Device_GetChipName_Params_STRUCT_SIZE"),
    "_Initialize": ("CUpti_Profiler_Initialize_Params", "CUpti_Profiler_Initialize_Params_STRUCT_SIZE"),
    "_MetricDetails": ("CUpti_SassMetrics_MetricDetails", "sizeof(CUpti_SassMetrics_MetricDetails)"),
    "_GetNumOfMetrics": (
        "CUpti_SassMetrics_GetNumOfMetrics_Params",
        "CUpti_SassMetrics_GetNumOfMetrics_Params_STRUCT_SIZE",
    ),
    "_GetMetrics": ("CUpti_SassMetrics_GetMetrics_Params", "CUpti_SassMetrics_GetMetrics_Params_STRUCT_SIZE"),
    "_Config": ("CUpti_SassMetrics_Config", "sizeof(CUpti_SassMetrics_Config)"),
    "_SetConfig": ("CUpti_SassMetricsSetConfig_Params", "CUpti_SassMetricsSetConfig_Params_STRUCT_SIZE"),
    "_UnsetConfig": (
        "CUpti_SassMetricsUnsetConfig_Params",
        "CUpti_SassMetricsUnsetConfig_Params_STRUCT_SIZE",
    ),
    "_Enable": ("CUpti_SassMetricsEnable_Params", "CUpti_SassMetricsEnable_Params_STRUCT_SIZE"),
    "_Disable": ("CUpti_SassMetricsDisable_Params", "CUpti_SassMetricsDisable_Params_STRUCT_SIZE"),
    "_DataProperties": (
        "CUpti_SassMetricsGetDataProperties_Params",
        "CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE",
    ),
    "_InstanceValue": ("CUpti_SassMetrics_InstanceValue", "CUpti_SassMetrics_InstanceValue_STRUCT_SIZE"),
    "_FlushData": ("CUpti_SassMetricsFlushData_Params", "CUpti_SassMetricsFlushData_Params_STRUCT_SIZE"),
}


def _cupti_include() -> Path | None:
    from ptxgym.cpu.toolchain import find_toolchain

    try:
        root = find_toolchain().cuda_home
    except Exception:  # noqa: BLE001 - no toolkit: skipped below
        return None
    for d in (root / "include", root / "extras" / "CUPTI" / "include"):
        if (d / "cupti_sass_metrics.h").is_file():
            return d
    return None


def test_struct_layouts_match_the_cupti_headers(tmp_path: Path) -> None:
    include, cc = _cupti_include(), shutil.which("gcc") or shutil.which("cc")
    if include is None or cc is None:
        pytest.skip("no CUPTI headers or C compiler here")
    body = "\n".join(
        f'printf("{name} %zu %zu\\n", (size_t)({size}), sizeof({ctype}));'
        for name, (ctype, size) in HEADER_SIZES.items()
    )
    src = tmp_path / "sizes.c"
    src.write_text(
        "#include <stdio.h>\n#include <stddef.h>\n#include <cupti_target.h>\n"
        "#include <cupti_profiler_target.h>\n#include <cupti_sass_metrics.h>\n"
        f"int main(void) {{ {body} return 0; }}\n"
    )
    subprocess.run([cc, f"-I{include}", str(src), "-o", str(tmp_path / "sizes")], check=True)
    out = subprocess.run([str(tmp_path / "sizes")], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, struct_size, sizeof = line.split()
        struct = getattr(sc, name)
        if not HEADER_SIZES[name][1].startswith("sizeof("):  # a parameter struct: its STRUCT_SIZE too
            assert sc._size(struct) == int(struct_size), name
        assert ctypes.sizeof(struct) == int(sizeof), name
    assert ctypes.sizeof(sc._Data) == 48 and sc._size(sc._FlushData) == 40


def test_records_are_summed_per_instruction_across_metrics_and_instances() -> None:
    columns = {11: "inst_executed", 22: "thread_inst_executed_true"}
    rows = [
        ("k", 0x80, [(11, 4), (11, 4)]),  # two instances of one metric
        ("k", 0x80, [(22, 128)]),  # the other metric's record for the same instruction
        ("k", 0x90, [(11, 1), (99, 7)]),  # a metric we did not ask for: ignored
    ]
    merged = {(r.function, r.pc_offset): r.values for r in sc.merge_records(rows, columns)}
    assert merged == {
        ("k", 0x80): {"inst_executed": 8, "thread_inst_executed_true": 128},
        ("k", 0x90): {"inst_executed": 1, "thread_inst_executed_true": 0},
    }


@pytest.mark.nvcc
@pytest.mark.slow  # ~7 s of nvcc
def test_pc_listing_of_a_real_module(monkeypatch, tmp_path) -> None:
    from ptxgym.audit.corpus import build_kernel
    from ptxgym.cpu.sass import dump_sass, pc_opcodes
    from ptxgym.cpu.toolchain import find_toolchain

    so = build_kernel("tma_gemm")
    text = dump_sass(so, find_toolchain())
    pcs = pc_opcodes(text)
    tma = next(k for k in pcs if "gemm_tma" in k)
    offsets = sorted(pcs[tma])
    assert offsets[0] == 0 and all(b - a == 16 for a, b in zip(offsets, offsets[1:], strict=False))
    assert any(op.startswith("UTMALDG") for op in pcs[tma].values())

    # the CPU stage's census caches the listing, so the evaluator's join runs no cuobjdump on the GPU's time
    import ptxgym.cpu.sass as sass
    from ptxgym.records.arch import HOPPER

    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path))
    assert sass.module_pcs(so) == pcs  # no census yet: listed now, and cached
    (cached,) = (tmp_path / "sass-pcs").rglob("*.json")
    cached.write_text("{not json")
    assert sass.module_pcs(so) == pcs  # a corrupt entry is listed again
    cached.unlink()
    assert sass.sass_census(so, HOPPER).static_target

    def no_dump(*_args, **_kw):
        raise AssertionError("module_pcs ran cuobjdump although the census had listed the module")

    monkeypatch.setattr(sass, "dump_sass", no_dump)
    assert sass.module_pcs(so) == pcs
    assert sass.module_guarded(so) == pc_opcodes(text, guarded=True)  # the census cached it too


def test_join_places_rows_by_function_and_offset_and_sizes_the_mma_work() -> None:
    from ptxgym.evaluation.protocol import SassRow
    from ptxgym.evaluation.trusted.sass_join import in_band_target, join_counts
    from ptxgym.records.arch import HOPPER

    pcs = {"k": {0x0: "LDC", 0x10: "HGMMA.64x256x16.F32.BF16", 0x20: "UTMALDG.2D"}}
    mmas = 1000
    rows = [
        SassRow(function="k", pc=0x10, inst=4 * mmas, threads=128 * mmas),
        SassRow(function="k", pc=0x20, inst=10, threads=0),  # no thread count: 32 per warp instruction
        SassRow(function="k", pc=0x30, inst=5, threads=160),  # not an instruction of the module
        SassRow(function="other", pc=0x10, inst=5, threads=160),  # not a function of the module
    ]
    joined = join_counts(rows, pcs)
    assert joined.unplaced == 2 and joined.per_opcode["UTMALDG.2D"] == [10, 320]
    record = in_band_target(rows, "", pcs, HOPPER, flops=2.0 * 64 * 256 * 16 * mmas)
    assert record["mma_share"] == pytest.approx(1.0) and record["work"] == "yes"
    assert set(record["counts"]) == {"HGMMA.64x256x16.F32.BF16", "UTMALDG.2D"}
    assert in_band_target(None, "libcupti could not be loaded", pcs, HOPPER, 1.0) == {
        "error": "libcupti could not be loaded"
    }


@pytest.mark.gpu
@pytest.mark.nvcc
def test_in_band_counts_agree_with_nsight_compute_on_the_expert_gemm() -> None:
    """One evaluation of the expert GEMM, in-band counts cross-checked by Nsight Compute: they agree."""
    from built_source import built_candidate

    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
    from ptxgym.knowledge_packs.variants import PACK_ROOT
    from ptxgym.records.feedback import Proof, Status
    from ptxgym.records.tasks import get_task

    task = get_task("Gemm-sm90a")
    source = (PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu").read_text()
    cand = built_candidate(task, source)
    settings = EvalSettings(
        ncu_crosscheck_fraction=1.0, warmup=2, iterations=5, trials=1, memcheck=MemcheckMode.NEVER, seed=7
    )
    with LocalGpuEvaluator(settings=settings, spares=1) as ev:
        verdict = ev.evaluate(task, cand)
    record = verdict.details.get("in_band_target")
    print(f"\nIN_BAND {record}\nTARGET {verdict.target}")
    assert verdict.status is Status.PASSED, verdict.message  # PROOF_FAILED if the two disagreed
    assert verdict.evidence.target_work == [Proof.CUPTI_IN_BAND, Proof.NCU_OFFLINE]
    assert record is not None and not record.get("error"), record
    in_band = sum(
        v["thread_inst_executed_true"] for op, v in record["counts"].items() if op.startswith("HGMMA")
    )
    assert verdict.target.counts.get("HGMMA", 0) == in_band > 0
    assert verdict.details["ncu_target"]["counts"]["HGMMA"] == pytest.approx(in_band, rel=0.01)
    assert verdict.target.credited and verdict.target.mma_share == pytest.approx(1.0, abs=0.01)
    assert record["work"] == "yes" and record["unplaced_rows"] == 0
