"""The target family's share of the task's work, from executed counts per SASS instruction (no GPU).

Fixtures (tests/fixtures/ncu/README.md): the recorded decoy and TMA-only profiles, and two derived ones
(the GEMM expert's HGMMA lines with its recorded executed totals; a SIMT GEMM with one wgmma per call).
The expert totals of the MHA kernels are the ones recorded on the H200 (bench/results/
expert_eval_2026-12-03.txt, expert_bwd_2026-12-03.txt) on the HGMMA shapes of their SASS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxgym.evaluation.trusted.ncu import parse_ncu_csv, target_info
from ptxgym.evaluation.trusted.target_work import tile_flops, warpgroup_mmas, work_share
from ptxgym.records.arch import BLACKWELL, HOPPER
from ptxgym.records.feedback import MIN_MMA_SHARE, Verdict
from ptxgym.records.tasks import get_task

NCU = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
GEMM = get_task("Gemm-sm90a")


def _profile(name: str):
    return parse_ncu_csv((NCU / name).read_text())


def test_tile_flops_from_the_opcode():
    assert tile_flops("HGMMA.64x256x16.F32.BF16") == 2 * 64 * 256 * 16
    assert tile_flops("HGMMA.64x8x16.F32.BF16") == 16384
    assert tile_flops("QGMMA.64x128x32.F32.E4M3.E4M3") == 2 * 64 * 128 * 32
    assert tile_flops("HGMMA.64x128x32.F32.BF16.SP") == 64 * 128 * 32  # 2:4 sparse: half the products
    assert tile_flops("UTCHMMA.2CTA") is None and tile_flops("HGMMA") is None


def test_warpgroup_mmas_takes_the_smaller_reading():
    assert warpgroup_mmas(4, 128) == 1.0  # one wgmma of one warpgroup
    assert warpgroup_mmas(4, 1_000_000) == 1.0  # a thread count larger than the warps allow adds nothing
    assert warpgroup_mmas(400, 128) == 1.0
    assert warpgroup_mmas(4, 64) == 0.5  # half the warpgroup's threads predicated off


def test_expert_gemm_counts_do_all_the_work():
    info = target_info(_profile("expert_gemm_derived.csv"), HOPPER, GEMM.flops)
    assert info.executed is Verdict.YES and info.work is Verdict.YES and info.credited
    assert info.mma_flops == pytest.approx(GEMM.flops)  # 1,146,880 MMAs x 524,288 FLOPs = 2 M N K
    assert info.mma_share == pytest.approx(1.0) and info.tma_share is None
    assert "100.0% of the task's" in info.message


@pytest.mark.parametrize(
    ("task_id", "threads", "tiles", "share"),
    [
        ("MhaFwd-sm90a", 805_306_368, [(64, 128, 16)], 1.0),
        ("MhaFwdCausal-sm90a", 415_236_096, [(64, 128, 16)], 1.0313),
        # two HGMMA shapes in the backward kernels: the split is not recorded, so the smaller tile bounds it
        ("MhaBwd-sm90a", 3_221_225_472, [(64, 64, 16)], 0.8),
        ("MhaBwdCausal-sm90a", 1_660_944_384, [(64, 64, 16)], 0.825),
    ],
)
def test_recorded_expert_attention_totals_pass(task_id, threads, tiles, share):
    task = get_task(task_id)
    rows = [(f"HGMMA.{m}x{n}x{k}.F32.BF16", threads // 32, threads) for m, n, k in tiles]
    got = work_share(rows, HOPPER, task.flops)
    assert got.mma_share == pytest.approx(share, rel=1e-3) and got.work is Verdict.YES


def test_decoy_and_tma_only_kernels_do_no_target_work():
    decoy = target_info(_profile("decoy_wgmma.csv"), HOPPER, GEMM.flops)
    assert decoy.executed is Verdict.NO and decoy.mma_share == 0.0 and decoy.work is Verdict.NO
    tma = target_info(_profile("tma_gemm.csv"), HOPPER, GEMM.flops)
    assert tma.executed is Verdict.YES and tma.counts.get("UTMALDG", 0) > 0  # the TMA did execute...
    assert tma.mma_share == 0.0 and tma.work is Verdict.NO and not tma.credited  # ...but no MMA work


def test_a_single_wgmma_per_call_earns_no_target_credit():
    info = target_info(_profile("single_wgmma_derived.csv"), HOPPER, GEMM.flops)
    assert info.executed is Verdict.YES and info.counts == {"HGMMA": 128}
    assert info.mma_share == pytest.approx(16384 / GEMM.flops) and info.mma_share < 1e-7
    assert info.work is Verdict.NO and not info.credited


def test_the_forged_count_of_issue_11_is_an_eighth_of_the_work():
    # "target_executed = yes (HGMMA 18,350,080)" from a forged CSV: on the expert's tile that is 1/8 of it
    rows = [("HGMMA.64x256x16.F32.BF16", 18_350_080 // 32, 18_350_080)]
    got = work_share(rows, HOPPER, GEMM.flops)
    assert got.mma_share == pytest.approx(0.125) and got.mma_share < MIN_MMA_SHARE and got.work is Verdict.NO


def test_an_unsized_mma_is_unknown_never_yes():
    rows = [("UTCHMMA.2CTA", 1_000_000, 32_000_000)]
    got = work_share(rows, BLACKWELL, GEMM.flops)
    assert got.work is Verdict.UNKNOWN and got.mma_share is None and "not spelled" in got.message


def test_rows_that_never_executed_add_nothing():
    rows = [("HGMMA.64x256x16.F32.BF16", 0, 0), ("HGMMA.64x256x16.F32.BF16", 1000, 0)]
    assert work_share(rows, HOPPER, GEMM.flops).mma_flops == 0.0
