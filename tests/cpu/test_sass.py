"""SASS stage: census of recorded ``cuobjdump --dump-sass`` outputs, and the tool wrapper's edge cases.

The fixtures in ``fixtures/sass`` were recorded from the test kernels (``fixtures/record_fixtures.py``,
nvcc 13.0.88, cuobjdump 13.5.37); the counts asserted below were checked by hand against those files.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ptxgym.cpu.sass import opcode_base, parse_sass, pc_opcodes, sass_census
from ptxgym.records.arch import BLACKWELL, HOPPER
from ptxgym.records.errors import InfraError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sass"


def census(name: str, arch=HOPPER):
    return parse_sass((FIXTURES / f"{name}.sass").read_text(), arch)


def test_wgmma_kernel_is_target_on_hopper() -> None:
    info = census("wgmma_sm90a")
    assert info.arch == "sm_90a" and info.static_target
    (kernel,) = info.kernels
    assert kernel.kernel == "_Z10wgmma_tilePK13__nv_bfloat16S1_Pf"
    assert kernel.target_opcodes == {"HGMMA": 1}
    assert kernel.instructions == 120
    assert kernel.families["WARPGROUP"] == 2  # WARPGROUP.ARRIVE and WARPGROUP.DEPBAR fold together


def test_tma_kernel_is_target_on_hopper() -> None:
    info = census("tma_sm90a")
    assert info.static_target
    (kernel,) = info.kernels
    assert kernel.target_opcodes == {"UTMALDG": 1}
    assert kernel.families["SYNCS"] >= 3  # mbarrier init / arrive.expect_tx / try_wait
    assert kernel.instructions == 88


def test_tcgen05_kernel_is_target_on_blackwell_only() -> None:
    info = census("tcgen05_sm100a", BLACKWELL)
    assert info.arch == "sm_100a" and info.static_target
    assert info.kernels[0].target_opcodes == {"UTCATOMSWS": 3, "LDTM": 1, "STTM": 1}
    assert not census("tcgen05_sm100a", HOPPER).static_target  # tensor memory is no Hopper family


def test_plain_kernel_is_not_target() -> None:
    for arch in (HOPPER, BLACKWELL):
        info = census("plain_sm90a", arch)
        assert not info.static_target
        assert info.kernels[0].target_opcodes == {}
        assert info.kernels[0].instructions == 32


def test_histogram_sums_the_kernels_and_strips_predicates() -> None:
    info = census("tcgen05_sm100a", BLACKWELL)
    assert sum(info.histogram.values()) == sum(k.instructions for k in info.kernels)
    assert all("@" not in op and "." not in op for op in info.histogram)
    assert info.histogram["EXIT"] >= 1 and info.histogram["BRA"] >= 1  # "@P1 EXIT", "@!P0 BRA" rows


def test_parser_details_on_synthetic_rows() -> None:
    text = """
Fatbin elf code:
arch = sm_90a
		Function : first
        /*0000*/                   LDC R1, c[0x0][0x28] ;              /* 0x00000a00ff017b82 */
                                                                       /* 0x000fe20000000800 */
        /*0010*/              @!PT HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;  /* 0x0 */
        /*0020*/              @UP0 UTMASTG.2D [UR4], [UR8] ;  /* 0x0 */
        /*0030*/                   UTMACCTL.PF [UR4] ;  /* 0x0 */
        /*0040*/                   BRA 0x40;  /* 0x0 */
		Function : second
        /*0000*/                   EXIT ;  /* 0x0 */
"""
    info = parse_sass(text, HOPPER)
    first, second = info.kernels
    assert first.families == {"BRA": 1, "HGMMA": 1, "LDC": 1, "UTMACCTL": 1, "UTMASTG": 1}
    assert first.target_opcodes == {"HGMMA": 1, "UTMASTG": 1}  # TMA cache control is excluded
    assert second.instructions == 1 and not second.target_opcodes
    assert info.static_target
    # the instructions under a guard other than @PT (sass_join.counters_suffice)
    assert pc_opcodes(text, guarded=True) == {
        "first": {0x10: "HGMMA.64x256x16.F32.BF16", 0x20: "UTMASTG.2D"},
        "second": {},
    }
    assert pc_opcodes(text)["first"][0x10] == "HGMMA.64x256x16.F32.BF16"


def test_empty_and_garbage_text() -> None:
    assert parse_sass("", HOPPER).kernels == []
    info = parse_sass("cuobjdump info : File 'x.so' does not contain device code\n", HOPPER)
    assert not info.static_target and info.arch == "sm_90a"


def test_opcode_base() -> None:
    assert opcode_base("UTMALDG.2D") == "UTMALDG" and opcode_base("HGMMA") == "HGMMA"


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _cuobjdump_or_skip():
    from ptxgym.cpu.toolchain import find_toolchain
    from ptxgym.records.errors import ToolchainNotFoundError

    try:
        toolchain = find_toolchain()
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no toolchain: {exc}")
    if toolchain.cuobjdump is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    return toolchain


@needs_gcc
@pytest.mark.nvcc
def test_census_of_an_object_without_device_code(tmp_path: Path) -> None:
    toolchain = _cuobjdump_or_skip()
    so = tmp_path / "libhost.so"
    src = tmp_path / "host.c"
    src.write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    info = sass_census(so, HOPPER, toolchain)
    assert info.kernels == [] and not info.static_target
    assert sass_census(so, HOPPER, toolchain) == info  # second call comes from the census cache


@pytest.mark.nvcc
def test_census_of_junk_is_an_infrastructure_error(tmp_path: Path) -> None:
    toolchain = _cuobjdump_or_skip()
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF not really")
    with pytest.raises(InfraError, match="cuobjdump"):
        sass_census(junk, HOPPER, toolchain, use_cache=False)
