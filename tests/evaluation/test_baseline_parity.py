"""bench/baseline_parity.py: its candidate (the TVM-FFI bridge to the library) and its two paths.

CPU: the bridge is built with the host compiler and loaded with ``tvm_ffi.load_module``; through the
FFI it calls the same ``library_baselines`` function the baseline path loads, on the harness tensors
(CPU tensors here: ``gemm_cublas`` is ``torch.matmul``), so its output is bit-identical, and it is then
played as a candidate through the evaluator's stages (``test_baseline_path.cpu_evaluator``) beside the
baseline path. GPU (``-m gpu``): the GEMM row of the bench itself on the device, one repeat.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tvm_ffi = pytest.importorskip("tvm_ffi")

from evaltest_helpers import tiny_task  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import baseline_parity  # noqa: E402

needs_compiler = pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None, reason="no host C++ compiler"
)


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    return baseline_parity.build_bridge(tmp_path_factory.mktemp("bridge"))


@needs_compiler
def test_bridge_calls_the_baselines_library_function_on_the_harness_tensors(bridge):
    from ptxgym.evaluation.sandboxed.library_baselines import gemm_cublas

    module = tvm_ffi.load_module(str(bridge))
    g = torch.Generator().manual_seed(0)
    A = torch.randn(64, 32, generator=g).to(torch.bfloat16)
    B = torch.randn(48, 32, generator=g).to(torch.bfloat16)
    C, want = torch.zeros(64, 48, dtype=torch.bfloat16), torch.zeros(64, 48, dtype=torch.bfloat16)
    module["gemm"](A, B, C)
    gemm_cublas(A, B, want)
    assert torch.equal(C, want)  # in place, same function: bit-identical
    with pytest.raises(RuntimeError, match="mha_fwd_cudnn"):  # a library error comes back as an error
        module["mha_fwd"](A, B, C, C, C)


@needs_compiler
def test_bridge_passes_as_a_candidate_beside_the_baseline_path(bridge, tmp_path):
    from test_baseline_path import SETTINGS, Workers, cpu_evaluator

    from ptxgym.records.feedback import Status

    task = tiny_task("Gemm-sm90a", M=64, N=48, K=32)
    module = tvm_ffi.load_module(str(bridge))
    workers = Workers(tmp_path, candidate=module[baseline_parity.ENTRY["Gemm-sm90a"]])
    # the candidate-only additions (matched calibration, slow cut-off probe) off: the same commands; each
    # worker calibrates (a second baseline worker would reuse the first's: calibration_reuse)
    same = SETTINGS.model_copy(
        update={"matched_calibration": False, "slow_probe_calls": 0, "calibration_reuse": 1}
    )
    ev = cpu_evaluator(tmp_path, workers, same)
    cand = baseline_parity.bridge_candidate(task.model_copy(update={"id": "Gemm-sm90a"}), bridge)
    verdict = ev.evaluate(task, cand)
    assert verdict.status is Status.PASSED, verdict.message
    record = ev.measure_baseline(task)
    assert record.stats is not None and record.correct and record.sandboxed
    assert verdict.timing is not None and verdict.timing.candidate is not None
    assert workers.made[-1].transcript == [
        c.replace("load:so", "load:baseline") for c in workers.made[1].transcript
    ]


@pytest.mark.gpu
def test_gemm_parity_on_the_device(tmp_path):
    """One repeat of the GEMM row: both paths pass, the baseline sandboxed, parity within 5 %."""
    out = tmp_path / "parity.txt"
    code = baseline_parity.main(
        ["--out", str(out), "--tasks", "Gemm-sm90a", "--repeats", "1", "--iterations", "20"]
    )
    text = out.read_text()
    assert code == 0, text
    row = next(line for line in text.splitlines() if line.startswith("Gemm-sm90a |"))
    parity = float(row.split("|")[3])
    assert 0.95 <= parity <= 1.05, text
    assert "UNSANDBOXED" not in text, text


@pytest.mark.gpu
def test_cudnn_baseline_is_timed_in_the_sandboxed_candidate_path():
    """cuDNN SDPA (lazily loaded engine libraries) runs under the candidate's host sandbox on the device."""
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode, TargetMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
    from ptxgym.records.tasks import get_task

    settings = EvalSettings(
        warmup=2,
        iterations=6,
        trials=1,
        correctness_sets=1,
        rotate_sets=1,
        memcheck=MemcheckMode.NEVER,
        target_mode=TargetMode.OFF,
        baseline_from_disk=False,
    )
    with LocalGpuEvaluator(settings=settings, spares=1) as ev:
        record = ev.baseline(get_task("MhaFwd-sm90a"))
    assert record.stats is not None and record.correct, record.message
    assert record.sandboxed is True and record.source == "measured", record.message
