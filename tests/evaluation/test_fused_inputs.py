"""The fused input preparation and input check (``fused_inputs.py``): its kernels, the arena's use of them.

The kernels run in Triton's interpreter on CPU tensors, in a child process (``fused_checks.py``: the
interpreter must be on before they are defined), compiled ahead of time for sm_90 and sm_100 without a
GPU, and on the GPU with the compiled kernels (``gpu``).
Under the interpreter a CPU arena takes the fused path too, so the fresh-value attacks and the verified
pool's tests are played through it once more.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from evaltest_helpers import tiny_task  # noqa: E402

from ptxgym.evaluation.trusted.arena import Arena  # noqa: E402

HERE = Path(__file__).parent
CHECKS = [
    "draw",
    "signs",
    "differ",
    "sampled",
    "arena",
    "arena_sampled",
    "arena_deferred",
    "arena_pool_groups",
]


def _run(args: list[str], interpret: bool, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run(args, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", CHECKS)
def test_the_kernels_in_the_interpreter(name):
    proc = _run([sys.executable, "fused_checks.py", name], interpret=True)
    assert proc.returncode == 0 and "passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_every_kernel_variant_compiles_for_the_gpus_without_one():
    """Triton's compiler refuses what its interpreter runs (a GPU run found one): compiled ahead of time."""
    proc = _run([sys.executable, "fused_checks.py", "compiled"], interpret=False)
    assert proc.returncode == 0 and "passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.gpu
def test_the_kernels_on_the_gpu():
    """Every check of ``fused_checks.py`` in one process, with the compiled kernels on GPU 0."""
    proc = _run([sys.executable, "fused_checks.py", "all", "cuda"], interpret=False)
    assert proc.returncode == 0 and "passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.slow
def test_the_fresh_value_attacks_and_the_pool_through_the_fused_path():
    """test_fresh_values.py and test_verified_pool.py again, every CPU arena on the fused path."""
    files = ["test_fresh_values.py", "test_verified_pool.py"]
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *files]
    proc = _run(args, interpret=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def test_a_cpu_arena_keeps_the_torch_path_and_says_why(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    task = tiny_task("Gemm-sm90a", M=64, N=48, K=32)
    arena = Arena(task, [1], "cpu", tmp_path, fused=True)
    assert arena.fused == "off: A: the arena is on cpu, not a CUDA device"
    assert Arena(task, [1], "cpu", tmp_path).fused == arena.fused  # on by default, as EvalSettings'
    off = Arena(task, [1], "cpu", tmp_path, fused=False)
    assert off.fused == "off: EvalSettings.fused_inputs is off"


@pytest.mark.parametrize("fused", [True, False])
def test_the_evaluator_builds_its_arenas_with_the_setting(tmp_path, monkeypatch, fused):
    from test_baseline_path import SETTINGS, Workers, cpu_evaluator, gemm_task

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    settings = SETTINGS.model_copy(update={"fused_inputs": fused})
    arena = cpu_evaluator(tmp_path, Workers(tmp_path), settings)._arena(gemm_task())
    want = "off: A: the arena is on cpu" if fused else "off: EvalSettings.fused_inputs is off"
    assert arena.fused.startswith(want)
