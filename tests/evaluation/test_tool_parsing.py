"""Parsing Nsight Compute and compute-sanitizer output, on recorded device output (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxgym.evaluation.trusted.census import is_own_kernel
from ptxgym.evaluation.trusted.memcheck import error_count, first_error
from ptxgym.evaluation.trusted.ncu import (
    foreign_kernels,
    opcode_of,
    parse_ncu_csv,
    verdict_from_profiles,
)
from ptxgym.records.arch import BLACKWELL, HOPPER
from ptxgym.records.feedback import Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_opcode_of_strips_predicates_and_keeps_modifiers():
    assert opcode_of("      UTMALDG.2D [UR4], [UR10]") == "UTMALDG.2D"
    assert opcode_of("@!PT LDS RZ, [RZ]") == "LDS"
    assert opcode_of("@P0 BRA 0x7f0") == "BRA"
    assert opcode_of("@UP1 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24") == "HGMMA.64x128x16.F32.BF16"
    assert opcode_of("") is None


SYNTHETIC = "\n".join(
    [
        "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
        '"Kernel Name","gemm_tma(CUtensorMap, CUtensorMap, bf16*, int, int, int)"',
        '"Address","Source","inst_executed","thread_inst_executed_true"',
        '"0x7f00","      UTMALDG.2D [UR4], [UR10]","1,024","1,024"',
        '"0x7f10","@P0 BRA 0x7f00","2048","0"',
        '"Kernel Name","other_kernel()"',
        '"Address","Source","inst_executed","thread_inst_executed_true"',
        '"0x100","      FFMA R1, R2, R3, R4","10","320"',
        "==PROF== Disconnected from process 4242",
    ]
)


def test_parse_synthetic_rows_and_verdicts():
    kernels = parse_ncu_csv(SYNTHETIC)
    assert [k.name.split("(")[0] for k in kernels] == ["gemm_tma", "other_kernel"]
    assert kernels[0].rows[0] == ("UTMALDG.2D", 1024, 1024)
    verdict, counts, message = verdict_from_profiles(kernels, HOPPER)
    assert verdict is Verdict.YES and counts == {"UTMALDG": 1024} and "UTMALDG x1024" in message
    verdict, counts, _ = verdict_from_profiles(kernels, BLACKWELL)
    assert verdict is Verdict.NO and counts == {}


def test_zero_predicate_true_count_is_not_executed():
    text = SYNTHETIC.replace('"1,024","1,024"', '"1,024","0"')
    verdict, _, _ = verdict_from_profiles(parse_ncu_csv(text), HOPPER)
    assert verdict is Verdict.NO


def test_nothing_profiled_is_unknown_never_yes():
    assert verdict_from_profiles(parse_ncu_csv("==PROF== Disconnected"), HOPPER)[0] is Verdict.UNKNOWN
    header_only = '"Kernel Name","k()"\n'
    assert verdict_from_profiles(parse_ncu_csv(header_only), HOPPER)[0] is Verdict.UNKNOWN


def _fixture(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {path} not recorded")
    return path.read_text()


def test_recorded_tma_profile_is_yes():
    kernels = parse_ncu_csv(_fixture("ncu/tma_gemm.csv"))
    verdict, counts, _ = verdict_from_profiles(kernels, HOPPER)
    assert verdict is Verdict.YES and counts.get("UTMALDG", 0) > 0
    assert all(k.rows for k in kernels)


def test_recorded_decoy_profile_is_no():
    kernels = parse_ncu_csv(_fixture("ncu/decoy_wgmma.csv"))
    assert kernels and all("never_launched" not in k.name for k in kernels)
    verdict, counts, _ = verdict_from_profiles(kernels, HOPPER)
    assert verdict is Verdict.NO and counts == {}


def test_recorded_memcheck_reports():
    text = _fixture("memcheck/oob_read.txt")
    assert error_count(text) and error_count(text) > 0
    first = first_error(text)
    assert first.splitlines()[0] == "Invalid __global__ read of size 2 bytes"
    assert "129 bytes after the nearest allocation" in first and "Host Frame" not in first
    clean = _fixture("memcheck/naive.txt")
    assert error_count(clean) == 0 and first_error(clean) is None


def test_memcheck_first_error_block():
    text = "\n".join(
        [
            "========= COMPUTE-SANITIZER",
            "========= Invalid __global__ read of size 2 bytes",
            "=========     at peek(const __nv_bfloat16 *, long, __nv_bfloat16 *)+0x70",
            "=========     by thread (0,0,0) in block (0,0,0)",
            "=========     Address 0x7f0000000080 is out of bounds",
            "=========",
            "========= ERROR SUMMARY: 1 error",
        ]
    )
    assert first_error(text).splitlines()[0] == "Invalid __global__ read of size 2 bytes"
    assert len(first_error(text).splitlines()) == 4
    assert error_count(text) == 1


@pytest.mark.parametrize(
    ("profiled", "module", "own"),
    [
        (  # the GEMM expert as ncu prints it, against cuobjdump's name for it
            "gemm::gemm_kernel(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, int, int, int)",
            ["_ZN4gemm11gemm_kernelE14CUtensorMap_stS0_S0_iii"],
            True,
        ),
        ("void tile<128>(float *)", ["_Z4tileILi128EEvPf"], True),
        ("peek", ["peek"], True),  # extern "C"
        (
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
            ["_ZN4gemm11gemm_kernelE14CUtensorMap_stS0_S0_iii"],
            False,
        ),
        ("gemm(float *)", ["_Z14gemm_kernelPf"], False),  # '4gemm' inside '14gemm_kernel' is not a name
        ("run_kernel()", [], False),
    ],
)
def test_kernel_census_by_name(profiled, module, own):
    assert is_own_kernel(profiled, module) is own


def test_foreign_kernels_of_a_recorded_profile():
    kernels = parse_ncu_csv(_fixture("ncu/tma_gemm.csv"))
    mangled = ["_Z8gemm_tma14CUtensorMap_stS_P13__nv_bfloat16iii"]
    assert foreign_kernels(kernels, mangled) == ()
    assert foreign_kernels(kernels, ["_Z10wgmma_tilePK13__nv_bfloat16S1_Pf"])[0].startswith("gemm_tma(")
    assert foreign_kernels(kernels, None) == ()  # no module list: no census
    assert foreign_kernels(kernels, [])[0].startswith("gemm_tma(")  # a module with no kernels owns none
