"""cpu/cubin_symbols: the functions a real cubin defines, and nothing (never an exception) for junk."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ptxgym.cpu.cubin_symbols import elf_functions
from ptxgym.cpu.toolchain import find_toolchain

SOURCE = """
__device__ int counter;
__device__ __noinline__ float twice(float x) { return 2.0f * x; }
__global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = twice(x[i]); }
extern "C" __global__ void plain(float* x) { x[0] = 1.0f; atomicAdd(&counter, 1); }
"""


@pytest.fixture(scope="module")
def cubin(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    work = tmp_path_factory.mktemp("cubin")
    (work / "k.cu").write_text(SOURCE)
    nvcc = str(find_toolchain().nvcc)
    subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-o", "k.cubin", "k.cu"], cwd=work, check=True)
    return (work / "k.cubin").read_bytes()


@pytest.mark.nvcc
def test_kernels_of_a_real_cubin_by_their_mangled_names(cubin: bytes) -> None:
    names = elf_functions(cubin)
    assert names is not None
    assert "_Z5scalePfi" in names and "plain" in names
    assert "counter" not in names and not [n for n in names if n.startswith(".")]  # data, sections: no


@pytest.mark.nvcc
@pytest.mark.parametrize("cut", [0, 3, 63, 64, 1000, -1])
def test_truncated_or_foreign_images_read_as_none(cubin: bytes, cut: int) -> None:
    image = cubin[:cut] if cut >= 0 else cubin[: len(cubin) // 2]
    assert elf_functions(image) is None


def test_non_elf_bytes_read_as_none() -> None:
    assert elf_functions(b"") is None
    assert elf_functions(b"\x7fELF" + b"\xff" * 200) is None
    assert elf_functions(Path(__file__).read_bytes()) is None
