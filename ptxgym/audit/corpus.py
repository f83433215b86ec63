"""The adversarial corpus: GEMM candidates that attack the evaluator, and honest controls.

The hostile candidates (exit, device reset, wild stores, private streams...) are exactly what the source
screen of the build stage rejects, so they are compiled here directly with ``ptxgym.cpu.build.nvcc_flags``
(same flags, same toolchain) to test the evaluator's containment behind that first layer. Products are
cached under ``<PTXGYM_CACHE_DIR>/audit`` by a hash of the sources and the arch. The evaluator tests and
``bench/evaluator_bench.py`` use this module.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from ptxgym.evaluation.trusted.base import BuiltCandidate
from ptxgym.records import settings
from ptxgym.records.arch import get_arch
from ptxgym.records.tasks import Task

KERNELS = Path(__file__).resolve().parent / "kernels"
HOSTILE = (
    "noop",
    "half_written",
    "nan_output",
    "input_mutating",
    "timed_scratch",
    "side_stream",
    "pointer_cache",
    "call_counting",
    "hang",
    "illegal_address",
    "exit_process",
    "device_reset",
    "huge_alloc",
    "host_hidden",
    "sandbox_escape",
    "module_from_memory",
    "guard_overrun",
    "timed_overrun",
)
HONEST = ("naive", "tma_gemm", "decoy_wgmma", "oob_read", "unobserved_oob_read", "mha_fwd_naive")


SANDBOX_ESCAPE_PORT = 47613
"""The 127.0.0.1 port that ``sandbox_escape.cu`` dials."""


def sandbox_escape_markers(home: Path) -> list[Path]:
    """The files ``sandbox_escape.cu`` writes outside the worker's scratch directory if it can."""
    who = ("main", "thread")
    return [Path(f"/tmp/ptxgym-sandbox-escape-{w}.marker") for w in who] + [
        home / f".ptxgym-sandbox-escape-{w}.marker" for w in who
    ]


def _digest(name: str, arch: str) -> str:
    h = hashlib.sha256(arch.encode())
    for path in (KERNELS / f"{name}.cu", KERNELS / "gemm_common.cuh"):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_kernel(name: str, arch: str = "sm_90a") -> Path:
    """The shared object of ``kernels/<name>.cu`` (built once, then cached)."""
    from ptxgym.cpu.build import nvcc_flags
    from ptxgym.cpu.toolchain import find_toolchain

    build = settings.cache_dir() / "audit"
    out = build / f"{name}-{_digest(name, arch)}.so"
    if out.exists():
        return out
    build.mkdir(parents=True, exist_ok=True)
    toolchain = find_toolchain()
    argv = [
        str(toolchain.nvcc),
        *nvcc_flags(get_arch(arch), toolchain, [KERNELS]),
        "-o",
        str(out),
        str(KERNELS / f"{name}.cu"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed for {name}:\n{done.stdout}\n{done.stderr}")
    return out


def static_target(so_path: Path, arch: str = "sm_90a") -> bool:
    """Whether the SASS of a built object holds a target-family opcode (cuobjdump census)."""
    from ptxgym.cpu.sass import sass_census

    return sass_census(so_path, get_arch(arch)).static_target


def module_kernels(so_path: Path, arch: str = "sm_90a") -> list[str]:
    """The kernels of a built object, as the SASS census names them."""
    from ptxgym.cpu.sass import sass_census

    return [k.kernel for k in sass_census(so_path, get_arch(arch)).kernels]


def candidate(name: str, task: Task, turn: int = 0, first_correct: bool = False) -> BuiltCandidate:
    """A BuiltCandidate for one test kernel and task."""
    so = build_kernel(name, task.arch)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    return BuiltCandidate(
        task_id=task.id,
        so_path=so,
        entry_symbol="run",
        source_sha256=_digest(name, task.arch),
        artifact_sha256=digest,
        static_target=static_target(so, task.arch),
        kernels=module_kernels(so, task.arch),
        episode_id="tests",
        turn=turn,
        first_correct_in_episode=first_correct,
    )


if __name__ == "__main__":
    for kernel in (*HONEST, *HOSTILE):
        path = build_kernel(kernel)
        print(f"{kernel:16s} {path.name} static_target={static_target(path)}")
