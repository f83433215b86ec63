"""The native runner's CUPTI path (``runner/cupti_path.h``) on the GPU (written on a CPU host, never run yet).

A C++ driver (``native/cupti_gpu_driver.cc``) calls the runner's CUPTI interface as the runner will: start
with the module census, a probe trial (one memset), then it loads the test cubin (``native/cupti_kernels.cu``:
a SIMT loop and a wgmma loop with known trip counts), times three windows of both kernels, and counts one
call of each under the SASS metrics. The checks: spans present and positive, one kernel of each per window
and one memset in the probe as CUPTI's records say, the census names both kernels, and the module's SHA-256,
size and functions equal hashlib's and ``elf_functions``' of the cubin; the executed counts of the loops' FFMA
and HGMMA are exactly trip count x warps.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from cupti_native import NATIVE, build_cubin, compile_program, find_cupti  # tests/evaluation on sys.path
from pydantic import TypeAdapter

from ptxgym.cpu.cubin_symbols import elf_functions
from ptxgym.evaluation.protocol import SassRow, Spans

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SIMT_TRIPS, SIMT_WARPS = 1000, 16  # 4 blocks of 128 threads
HGMMA_TRIPS, HGMMA_WARPS = 50, 4  # one warpgroup


def _opcode_pcs(cubin: Path) -> dict[str, dict[int, str]]:
    """Per kernel: pc -> opcode (cuobjdump), or {} without cuobjdump."""
    from ptxgym.cpu.sass import pc_opcodes
    from ptxgym.cpu.toolchain import find_toolchain

    tool = find_toolchain().cuobjdump
    if tool is None:
        return {}
    text = subprocess.run([str(tool), "--dump-sass", str(cubin)], capture_output=True, text=True, check=True)
    return pc_opcodes(text.stdout)


def _rows(report: dict, name: str) -> list[SassRow]:
    part = report[name]
    assert part["error"] == "" and part["ran"] is True, part
    return TypeAdapter(list[SassRow]).validate_python(part["rows"])


def _driver_report(tmp_path: Path) -> tuple[dict, Path]:
    """Build the kernels and the C++ driver of ``cupti_path.h``, run it on the GPU: its report, the cubin."""
    cupti = find_cupti()
    if cupti is None:
        pytest.skip("no CUPTI headers and library in the CUDA toolkit here")
    cubin = build_cubin(tmp_path / "kernels.cubin")
    driver = compile_program(NATIVE / "cupti_gpu_driver.cc", tmp_path / "driver", [*cupti.flags(), "-ldl"])
    done = subprocess.run(
        [str(driver), str(cubin), str(SIMT_TRIPS), str(HGMMA_TRIPS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), cubin


def test_cupti_path_spans_census_and_sass_counts_on_the_gpu(tmp_path: Path) -> None:
    report, cubin = _driver_report(tmp_path)
    assert report["start"] == "" and report["probe_error"] == "" and report["spans_error"] == "", report

    probe = Spans.model_validate(report["probe"])  # the runner's probe: one memset in window 0
    assert probe.activities == {0: 1} and (probe.spans[0] or 0) > 0, probe

    spans = Spans.model_validate(report["spans"])
    assert set(spans.spans) == {1, 2, 3}
    assert all(ms is not None and 0 < ms < 1000 for ms in spans.spans.values()), spans.spans
    assert spans.activities == {1: 2, 2: 2, 3: 2}  # the memsets between windows belong to none
    assert spans.kernels == {"simt_loop": 3, "hgmma_loop": 3}
    assert spans.launch_known == 6, spans  # each cuLaunchKernel's record came back by correlation id
    image = cubin.read_bytes()
    ours = [m for m in spans.modules if m.sha256 == hashlib.sha256(image).hexdigest()]
    assert ours, f"no loaded module hashes like the cubin: {spans.modules}"
    assert ours[0].size == len(image) and ours[0].functions == elf_functions(image)
    assert spans.census_error == ""

    pcs = _opcode_pcs(cubin)
    for name, kernel, opcode, trips, warps in (
        ("simt", "simt_loop", "FFMA", SIMT_TRIPS, SIMT_WARPS),
        ("hgmma", "hgmma_loop", "HGMMA", HGMMA_TRIPS, HGMMA_WARPS),
    ):
        rows = [r for r in _rows(report, name) if r.function == kernel]
        assert rows, f"no SASS rows of {kernel}: {report[name]}"
        assert max(r.inst for r in rows) == trips * warps, rows  # the loop body runs most
        if pcs:
            loop = [pc for pc, op in pcs[kernel].items() if op.startswith(opcode)]
            assert loop, pcs[kernel]
            by_pc = {r.pc: r for r in rows}
            for pc in loop:
                assert by_pc[pc].inst == trips * warps, (kernel, pc, by_pc.get(pc))
                if opcode == "FFMA":  # every thread of every warp, predicate true
                    assert by_pc[pc].threads == trips * warps * 32, (kernel, pc, by_pc[pc])


def test_hardware_counters_count_the_wgmma_loop_and_nothing_in_simt(tmp_path: Path) -> None:
    """The range profiler's call (``cupti_range.h``), after the SASS-counted calls as in the runner.

    The wgmma loop's tensor-pipe GMMA instructions are its HGMMA executions (trips x 4 warps), the same
    number the SASS metrics count; the SIMT loop shows none; neither kernel issues a TMA load.
    """
    from ptxgym.evaluation.protocol import HwCounts
    from ptxgym.evaluation.trusted.target_work import GMMA_INST_METRIC, TMA_BYTES_METRIC

    report, cubin = _driver_report(tmp_path)
    counts = {}
    for name in ("simt", "hgmma"):
        part = report[f"hw_{name}"]
        assert part["error"] == "" and part["ran"] is True, part
        counts[name] = HwCounts.model_validate(part["counts"])
        assert counts[name].passes == 1 and counts[name].ranges == 1
    assert counts["hgmma"].metrics[GMMA_INST_METRIC] == HGMMA_TRIPS * HGMMA_WARPS, counts["hgmma"]
    sass = max(r.inst for r in _rows(report, "hgmma") if r.function == "hgmma_loop")
    assert sass == counts["hgmma"].metrics[GMMA_INST_METRIC]  # the SASS metrics saw the same executions
    assert counts["simt"].metrics[GMMA_INST_METRIC] == 0, counts["simt"]
    assert counts["simt"].metrics[TMA_BYTES_METRIC] == 0 and counts["hgmma"].metrics[TMA_BYTES_METRIC] == 0
