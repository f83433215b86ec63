"""Toolchain discovery: the system toolkit, the overrides, the PyPI wheel layout and the error messages."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ptxgym.cpu import toolchain as tc
from ptxgym.records.errors import ToolchainNotFoundError

KERNELS = Path(__file__).parents[1] / "kernels"


@pytest.fixture(autouse=True)
def _fresh_discovery() -> Iterator[None]:
    """Every test discovers from scratch and leaves no cached result behind."""
    tc.find_toolchain.cache_clear()
    yield
    tc.find_toolchain.cache_clear()


@pytest.mark.nvcc
def test_system_toolchain_is_complete() -> None:
    t = tc.find_toolchain()
    assert t.nvcc_version.count(".") == 1 and t.nvcc_build.startswith("V" + t.nvcc_version)
    assert any((d / "cuda_runtime.h").is_file() for d in t.include_dirs)
    assert any((d / "nv" / "target").is_file() for d in t.include_dirs)
    assert (t.tvm_ffi_include / "tvm" / "ffi" / "tvm_ffi.h").is_file()
    assert (t.tvm_ffi_lib_dir / "libtvm_ffi.so").is_file()
    flags = t.link_flags()
    assert "-ltvm_ffi" in flags and "-lcuda" in flags and f"-L{t.libcuda_dir}" in flags
    assert len(t.fingerprint) == 32
    tc.find_toolchain.cache_clear()
    assert tc.find_toolchain().fingerprint == t.fingerprint  # stable across discoveries
    assert "nvcc" in t.describe() and t.nvcc_build in t.describe()


@pytest.mark.nvcc
def test_libcuda_stub_links_to_the_real_driver_name() -> None:
    t = tc.find_toolchain()
    stub = t.libcuda_dir / "libcuda.so"
    dynamic = subprocess.run(["readelf", "-d", "-W", str(stub)], capture_output=True, text=True, check=True)
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(stub)], capture_output=True, text=True, check=True
    )
    assert "Library soname: [libcuda.so.1]" in dynamic.stdout
    assert " cuTensorMapEncodeTiled" in symbols.stdout and " cuGetErrorString" in symbols.stdout
    assert {"cuTensorMapEncodeTiled", "cuLaunchKernelEx"} <= tc.libcuda_stub_symbols(t)


@pytest.mark.nvcc
def test_deleted_link_files_are_regenerated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path))
    first = tc.find_toolchain()
    shutil.rmtree(first.link_dir)
    again = tc.find_toolchain()  # remembered, but its generated files are gone: rediscovered
    assert (again.libcuda_dir / "libcuda.so").exists() and again.link_dir.is_dir()


@pytest.mark.nvcc
def test_ptxgym_nvcc_override_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    found = tc.find_toolchain()
    tc.find_toolchain.cache_clear()
    monkeypatch.setenv("PTXGYM_NVCC", str(found.nvcc))
    t = tc.find_toolchain()
    assert t.source == "PTXGYM_NVCC" and t.nvcc == found.nvcc and t.fingerprint == found.fingerprint


def test_bad_overrides_say_which_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PTXGYM_NVCC", str(tmp_path / "no-such-nvcc"))
    with pytest.raises(ToolchainNotFoundError, match="PTXGYM_NVCC"):
        tc.find_toolchain()
    tc.find_toolchain.cache_clear()
    monkeypatch.delenv("PTXGYM_NVCC")
    monkeypatch.setenv("PTXGYM_CUDA_HOME", str(tmp_path))
    with pytest.raises(ToolchainNotFoundError, match="PTXGYM_CUDA_HOME.*bin/nvcc"):
        tc.find_toolchain()


def test_nothing_found_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("PTXGYM_NVCC", "PTXGYM_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tc, "SYSTEM_CUDA_HOME", tmp_path / "none")
    monkeypatch.setattr(tc, "wheel_roots", lambda: [])
    with pytest.raises(ToolchainNotFoundError, match=r"no nvcc found.*ptxgym\[toolchain\]"):
        tc.find_toolchain()


def test_incomplete_toolkit_names_the_missing_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An nvcc whose toolkit root lacks the runtime, crt and CCCL headers (error path, fake nvcc)."""
    (tmp_path / "include").mkdir()
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  *--dryrun*) echo "#\\$ TOP={tmp_path}"; echo "#\\$ INCLUDES=\\"-I{tmp_path}/include\\"";;\n'
        '  *--version*) echo "Cuda compilation tools, release 13.0, V13.0.88";;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PTXGYM_NVCC", str(fake))
    with pytest.raises(ToolchainNotFoundError) as info:
        tc.find_toolchain()
    message = str(info.value)
    needles = ("cuda_runtime.h", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nv/target", "nvidia-cuda-cccl")
    assert all(n in message for n in needles), message


@pytest.mark.slow
@pytest.mark.nvcc
def test_discovery_and_build_from_the_pypi_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With no nvcc on PATH and no system toolkit, the ``nvidia/cu13`` wheel layout builds a TMA kernel."""
    roots = [r for r in tc.wheel_roots() if (r / "bin" / "nvcc").is_file()]
    if not roots:
        pytest.skip(
            "the PyPI CUDA toolchain wheels are not installed in this interpreter "
            "(pip install 'ptxgym[toolchain]')"
        )
    for var in ("PTXGYM_NVCC", "PTXGYM_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path or ["/usr/bin", "/bin"]))
    monkeypatch.setattr(tc, "SYSTEM_CUDA_HOME", tmp_path / "no-system-cuda")
    monkeypatch.setenv("PTXGYM_CACHE_DIR", str(tmp_path / "cache"))

    t = tc.find_toolchain()
    assert t.source == "wheels" and t.cuda_home == roots[0].resolve()
    assert t.cuobjdump is not None

    from ptxgym.cpu.build import build_solution
    from ptxgym.cpu.sass import sass_census
    from ptxgym.records.arch import HOPPER
    from ptxgym.records.schema import Solution

    outcome = build_solution(
        Solution.from_cuda_source((KERNELS / "tma.cu").read_text(), "tma"), HOPPER, toolchain=t
    )
    assert outcome.ok, outcome.message
    assert {"libcudart.so.13", "libcuda.so.1", "libtvm_ffi.so"} <= set(outcome.info.needed)
    assert outcome.info.nvcc_version == t.nvcc_version
    assert sass_census(outcome.so_path, HOPPER, t).kernels[0].target_opcodes == {"UTMALDG": 1}
