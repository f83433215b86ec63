"""Building the runner's CUPTI test programs (``tests/evaluation/native``) for test_runner_cupti*.py."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "ptxgym" / "evaluation" / "runner"
NATIVE = Path(__file__).resolve().parent / "native"
FLAGS = ("-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror")  # the runner's warnings (runner/build.py)


@dataclass(frozen=True)
class Cupti:
    """Where the toolkit keeps CUPTI's headers and library."""

    include: Path
    """Holds cupti.h, cupti_sass_metrics.h and cuda.h."""
    lib_dir: Path
    """Holds libcupti.so (or only libcupti.so.<major>)."""
    lib: str
    """The -l argument: ``cupti``, or ``:libcupti.so.13`` where the unversioned link is missing."""

    def flags(self) -> list[str]:
        """Compile and link arguments for a program using cupti_path.h."""
        lib = self.lib_dir
        return [
            "-DPTXGYM_RUNNER_CUPTI",
            f"-I{self.include}",
            f"-L{lib}",
            f"-l{self.lib}",
            f"-Wl,-rpath,{lib}",
        ]


def gxx() -> str:
    """The host C++ compiler, or skip."""
    found = shutil.which("g++") or shutil.which("c++")
    if found is None:
        pytest.skip("no C++ compiler here")
    return found


def find_cupti() -> Cupti | None:
    """CUPTI of the toolkit ptxgym uses (else /usr/local/cuda), or None."""
    from ptxgym.cpu.toolchain import find_toolchain

    roots = [Path("/usr/local/cuda")]
    try:
        roots.insert(0, find_toolchain().cuda_home)
    except Exception:  # noqa: BLE001 - no toolkit found by ptxgym: try the usual place
        pass
    for root in roots:
        for include in (root / "include", root / "extras" / "CUPTI" / "include"):
            if not all((include / h).is_file() for h in ("cupti.h", "cupti_sass_metrics.h", "cuda.h")):
                continue
            for lib in (
                root / "lib64",
                root / "lib",
                root / "extras" / "CUPTI" / "lib64",
                root / "targets" / "x86_64-linux" / "lib",
            ):
                if (lib / "libcupti.so").exists():
                    return Cupti(include, lib, "cupti")
                versioned = sorted(lib.glob("libcupti.so.[0-9]*"))
                if versioned:
                    return Cupti(include, lib, ":" + min(versioned, key=lambda p: len(p.name)).name)
    return None


def compile_program(source: Path, out: Path, extra: list[str]) -> Path:
    """g++ with the runner's warnings; asserts success with the compiler's message."""
    cmd = [gxx(), *FLAGS, f"-I{RUNNER}", str(source), *extra, "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr[-3000:]}"
    return out


def build_cubin(out: Path, extra: list[str] | None = None) -> Path:
    """native/cupti_kernels.cu as an sm_90a cubin (skips without nvcc)."""
    from ptxgym.cpu.toolchain import find_toolchain

    try:
        nvcc = str(find_toolchain().nvcc)
    except Exception as exc:  # noqa: BLE001 - no toolkit
        pytest.skip(f"no nvcc: {exc}")
    cmd = [
        nvcc,
        "-cubin",
        "-arch=sm_90a",
        *(extra or ["-O3"]),
        str(NATIVE / "cupti_kernels.cu"),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out
