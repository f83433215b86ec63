"""select_evaluator without a usable GPU: a NullEvaluator that says why, or a precise error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ptxgym.evaluation.choose import gpu_unavailable_reason, select_evaluator
from ptxgym.evaluation.trusted.base import NullEvaluator
from ptxgym.records.errors import EvaluatorUnavailableError


@pytest.fixture
def no_gpu():
    reason = gpu_unavailable_reason()
    if reason is None:
        pytest.skip("a supported GPU is usable here; these tests cover the machine without one")
    return reason


def test_auto_gives_null_evaluator_with_the_reason(no_gpu, monkeypatch):
    monkeypatch.delenv("PTXGYM_EVALUATOR", raising=False)
    evaluator = select_evaluator()
    assert isinstance(evaluator, NullEvaluator)
    assert evaluator.reason == no_gpu
    assert "torch" in no_gpu or "CUDA device" in no_gpu


def test_no_driver_is_decided_without_importing_torch():
    code = (
        "import sys; from ptxgym.evaluation.choose import driver_unavailable_reason as r, select_evaluator;"
        "reason = r(); ev = select_evaluator('auto');"
        "print(reason is None or 'torch' not in sys.modules, type(ev).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable here")
    assert out.stdout.split() == ["True", "NullEvaluator"]


def test_messages_name_the_flag_the_user_passed(no_gpu):
    assert "--evaluator none" in select_evaluator("none", source="--evaluator").reason
    with pytest.raises(EvaluatorUnavailableError, match="--evaluator local, but"):
        select_evaluator("local", source="--evaluator")


def test_none_and_local(no_gpu, monkeypatch):
    assert "switched off" in select_evaluator("none").reason
    monkeypatch.setenv("PTXGYM_EVALUATOR", "local")
    with pytest.raises(EvaluatorUnavailableError, match="cannot run here"):
        select_evaluator()
    with pytest.raises(ValueError, match="auto, none or local"):
        select_evaluator("remote")


def test_importing_select_does_not_import_torch():
    code = (
        "import sys, ptxgym.evaluation.choose, ptxgym.evaluation.trusted.local; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_make_and_reset_with_the_default_evaluator_import_no_torch_without_a_driver(monkeypatch):
    """The env path end to end (``gymnasium.make`` + ``reset``); bench/cpu_startup.py times it."""
    from ptxgym.evaluation.choose import driver_unavailable_reason

    if driver_unavailable_reason() is None:
        pytest.skip("an NVIDIA driver is here: the GPU path is taken")
    monkeypatch.delenv("PTXGYM_EVALUATOR", raising=False)
    code = (
        "import sys, gymnasium, ptxgym; env = gymnasium.make('ptxgym/Gemm-sm90a-v0'); env.reset(seed=0);"
        "print(env.unwrapped.evaluator.name, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["none", "False"], out.stderr
