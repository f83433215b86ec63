"""The one reader of ``PTXGYM_*`` environment variables.

Every setting that can come from the environment has one getter here, so a user can find them all in
one place and no other module calls ``os.environ`` for a ``PTXGYM_`` name.

| variable | meaning | default |
| --- | --- | --- |
| ``PTXGYM_CACHE_DIR`` | root of the content-addressed caches (builds, baselines, ncu) | ``~/.cache/ptxgym`` |
| ``PTXGYM_BUILD_CACHE_MB`` | disk the build cache may use; least recently used entries go | ``20480`` |
| ``PTXGYM_NVCC`` | path of the nvcc to use (overrides discovery) | discovered |
| ``PTXGYM_CUDA_HOME`` | CUDA toolkit root to use (overrides discovery) | discovered |
| ``PTXGYM_EVALUATOR`` | ``auto``, ``none``, ``local`` or ``ray``: the evaluator an env attaches | ``auto`` |
| ``PTXGYM_DEVICE`` | CUDA device index of the local evaluator | ``0`` |
| ``PTXGYM_COMPILE_TIMEOUT`` | wall-time limit of one nvcc build, seconds | ``120`` |
| ``PTXGYM_COMPILE_MEMORY_MB`` | address-space limit of one nvcc build, MiB | ``8192`` |
| ``PTXGYM_SANDBOX`` | candidate workers' host sandbox and nvcc's jail: ``on``, ``strict``, ``off`` | ``on`` |
| ``PTXGYM_REFERENCE_TF32`` | ``on``: bf16/fp16-input matmuls of references on TF32 cores; ``off`` | ``on`` |
| ``PTXGYM_CANDIDATE_PROCESS`` | where candidates run: ``native`` or ``python`` | ``native`` |
| ``PTXGYM_RUNNER_READ_EXTRA`` | extra paths (``:``-separated) a jailed GPU runner may read | none |
| ``PTXGYM_MAX_SPARES`` | most spare workers warming while candidates queue for the GPU | ``4`` |
| ``PTXGYM_SPARE_REFILL`` | ``each``: replace each spare taken; ``batch``: once half are gone | ``batch`` |
| ``PTXGYM_TIMING_CORES`` | hardware threads per GPU kept for runners and GPU turns, not builds | ``0`` |
| ``PTXGYM_SCAN_HELPERS`` | most helper processes for the build's backstop scan; ``0``: in-process | 1 to 4 |
| ``PTXGYM_BUILD_PRIORITY`` | builds' CPU priority: ``nice`` (+5) or ``idle`` (``SCHED_IDLE``) | ``nice`` |
| ``PTXGYM_BUILD_PROCESSES`` | processes that run turns' CPU halves; ``0``: threads of this one | ``0`` |
"""

from __future__ import annotations

import os
from pathlib import Path

_PREFIX = "PTXGYM_"


def _get(name: str) -> str | None:
    value = os.environ.get(_PREFIX + name)
    return value if value not in (None, "") else None


def _count(name: str, limit: int) -> int | None:
    """``PTXGYM_<name>`` as an integer from 0 to ``limit`` (None: unset); ``ValueError`` for anything else."""
    value = _get(name)
    if value is None:
        return None
    try:
        number = int(value, 10) if value.isascii() else -1
    except ValueError:
        number = -1
    if not 0 <= number <= limit:
        raise ValueError(f"{_PREFIX}{name} must be an integer from 0 to {limit}, got {value!r}")
    return number


def cache_dir() -> Path:
    """Root of every on-disk cache; created on first use."""
    root = Path(_get("CACHE_DIR") or Path.home() / ".cache" / "ptxgym").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def nvcc_override() -> str | None:
    """An explicit nvcc path, if the user set one."""
    return _get("NVCC")


def cuda_home_override() -> str | None:
    """An explicit CUDA toolkit root, if the user set one."""
    return _get("CUDA_HOME")


def evaluator_choice() -> str:
    """``auto`` (GPU evaluator when a GPU is visible), ``none``, ``local`` or ``ray``."""
    choice = (_get("EVALUATOR") or "auto").lower()
    if choice not in {"auto", "none", "local", "ray"}:
        raise ValueError(
            f"PTXGYM_EVALUATOR must be auto, none or local, or ray (the Ray backend), got {choice!r}"
        )
    return choice


def device_index() -> int:
    """CUDA device index the local evaluator uses."""
    return int(_get("DEVICE") or 0)


MAX_SPARES_LIMIT = 32
"""The most ``PTXGYM_MAX_SPARES`` may ask for (each spare is a process with its own CUDA context)."""


DEFAULT_MAX_SPARES = 4
"""Spares kept warming while candidates queue, when ``PTXGYM_MAX_SPARES`` is unset. With the ``batch``
refill, 16 envs streaming on an H100 host: 80.3 candidates/min (40.2 verified correct) against 72.5 (35.1)
replacing each spare at once (``bench/results/throughput_2026-12-06_refill_h100.txt``); with 2 spares
replaced each, 63.6 (30.8) the day before (``throughput_2026-12-05_stream_h100.txt``)."""


SPARE_REFILLS = ("each", "batch")
"""How the local evaluator replaces the spares a GPU turn took (``LocalGpuEvaluator._refill``)."""


def spare_refill() -> str:
    """``PTXGYM_SPARE_REFILL``: ``batch`` (default) or ``each`` (``LocalGpuEvaluator._refill``)."""
    return _choice("SPARE_REFILL", SPARE_REFILLS, "batch")


def _choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """``PTXGYM_<name>`` lower-cased, one of ``choices`` (``default`` when unset); ``ValueError`` else."""
    value = (_get(name) or default).lower()
    if value not in choices:
        raise ValueError(f"{_PREFIX}{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def max_spares() -> int | None:
    """Most spare workers the local evaluator keeps warming while candidates wait for the GPU (None: unset).

    Raises ``ValueError`` for a value that is not an integer from 0 to ``MAX_SPARES_LIMIT``.
    """
    return _count("MAX_SPARES", MAX_SPARES_LIMIT)


TIMING_CORES_LIMIT = 64
"""The most ``PTXGYM_TIMING_CORES`` may ask for."""


def timing_cores() -> int | None:
    """Cores kept for the GPU turns' host side, apart from builds (``confine/cores.py``); None: unset.

    Raises ``ValueError`` for a value that is not an integer from 0 to ``TIMING_CORES_LIMIT``.
    """
    return _count("TIMING_CORES", TIMING_CORES_LIMIT)


BUILD_PRIORITIES = ("nice", "idle")


def build_priority() -> str:
    """``PTXGYM_BUILD_PRIORITY``: ``nice`` (default) or ``idle`` (``cpu/jail.build_jail``)."""
    return _choice("BUILD_PRIORITY", BUILD_PRIORITIES, "nice")


SCAN_HELPERS_LIMIT = 64
"""The most ``PTXGYM_SCAN_HELPERS`` may ask for."""


_SCANS_HERE = False
"""Set by ``scan_here``: this process scans in its own interpreter, whatever the variable says."""


def scan_here() -> None:
    """From now on this process makes its backstop scans itself, whatever ``PTXGYM_SCAN_HELPERS`` says.

    For a build process (``pipeline``): no evaluator's clock shares its interpreter lock, and N of them
    would start N times the helpers.
    """
    global _SCANS_HERE
    _SCANS_HERE = True


def scan_helpers() -> int:
    """Most helper processes for the build's backstop scan (``cpu/scan_helpers.py``); 0: none.

    Default: half the cores this process may run on, from 1 to 4; 0 after ``scan_here``. Raises
    ``ValueError`` for a value that is not an integer from 0 to ``SCAN_HELPERS_LIMIT``.
    """
    if _SCANS_HERE:
        return 0
    number = _count("SCAN_HELPERS", SCAN_HELPERS_LIMIT)
    if number is None:
        return max(1, min(4, len(os.sched_getaffinity(0)) // 2))  # the cores this process may use
    return number


BUILD_PROCESSES_LIMIT = 256
"""The most ``PTXGYM_BUILD_PROCESSES`` may ask for."""


def build_processes() -> int:
    """How many processes run turns' CPU halves (``pipeline.Pipeline.prepare``); 0 (default): threads.

    Raises ``ValueError`` for a value that is not an integer from 0 to ``BUILD_PROCESSES_LIMIT``.
    """
    number = _count("BUILD_PROCESSES", BUILD_PROCESSES_LIMIT)
    return 0 if number is None else number


def build_cache_mb() -> int:
    """Disk the build cache may hold, in MiB (``cpu/cache_size.py``); raises ``ValueError`` below 1."""
    value = _get("BUILD_CACHE_MB") or "20480"
    try:
        number = int(value, 10) if value.isascii() else 0
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"PTXGYM_BUILD_CACHE_MB must be a positive integer (MiB), got {value!r}")
    return number


def compile_timeout_s() -> float:
    """Wall-time limit of one nvcc build."""
    return float(_get("COMPILE_TIMEOUT") or 120.0)


def compile_memory_mb() -> int:
    """Address-space limit of one nvcc build (RLIMIT_AS), in MiB."""
    return int(_get("COMPILE_MEMORY_MB") or 8192)


def sandbox_mode() -> str:
    """Host sandbox of candidate workers (``evaluation/sandboxed/sandbox.py``) and nvcc's (``cpu/jail.py``).

    ``on``: every layer best effort, each reported; ``strict``: a layer unavailable on this machine is an
    infrastructure error; ``off``: none (the candidate's host code runs unrestricted, nvcc reads any file).
    """
    mode = (_get("SANDBOX") or "on").lower()
    if mode not in {"on", "strict", "off"}:
        raise ValueError(f"PTXGYM_SANDBOX must be on, strict or off, got {mode!r}")
    return mode


def reference_tf32() -> bool:
    """Whether references may run matmuls whose operands are bf16/fp16/fp8 inputs on TF32 tensor cores.

    ``on`` (default): exact products, only the fp32 accumulation order changes
    (``evaluation/trusted/precision.py``); ``off``: every fp32 matmul of a reference in full-precision
    SIMT, e.g. on a GPU whose tensor-core accumulation is coarser than the gpu test of
    tests/evaluation/test_reference_precision.py allows.
    """
    mode = (_get("REFERENCE_TF32") or "on").lower()
    if mode not in {"on", "off"}:
        raise ValueError(f"PTXGYM_REFERENCE_TF32 must be on or off, got {mode!r}")
    return mode == "on"


CANDIDATE_PROCESSES = ("python", "native")
"""Where candidates run: the Python worker (``sandboxed/worker.py``) or the native runner."""


def candidate_process() -> str:
    """The process the local evaluator runs candidates in (``evaluation/runner``).

    ``native`` (the default): ``ptxgym-runner`` (no interpreter, no torch), falling back to the Python
    worker, with the reason recorded, where the runner cannot be built or set up, and for plain (not
    guard-page) arenas; ``python``: the Python worker (``sandboxed/worker.py``) for every candidate.
    """
    value = (_get("CANDIDATE_PROCESS") or "native").lower()
    if value not in CANDIDATE_PROCESSES:
        raise ValueError(f"PTXGYM_CANDIDATE_PROCESS must be python or native, got {value!r}")
    return value


def runner_read_extra() -> tuple[str, ...]:
    """Extra absolute paths a jailed GPU runner may read (an escape hatch if the driver needs more)."""
    raw = _get("RUNNER_READ_EXTRA") or ""
    paths = tuple(p for p in raw.split(":") if p)
    relative = [p for p in paths if not p.startswith("/")]
    if relative:
        raise ValueError(f"PTXGYM_RUNNER_READ_EXTRA takes absolute paths, got {', '.join(relative)}")
    return paths
