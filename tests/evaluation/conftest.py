"""Fixtures for the evaluator tests: the fake worker (helpers: evaltest_helpers, ptxgym.audit.corpus)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

FAKE_WORKER = _HERE / "fake_worker.py"


@pytest.fixture
def fake_worker_argv():
    """argv prefix that starts the fake worker in a given mode."""

    def _argv(mode: str, *extra: str) -> list[str]:
        return [sys.executable, str(FAKE_WORKER), "--mode", mode, *extra]

    return _argv


@pytest.fixture(autouse=True)
def _fused_arenas_under_the_interpreter(monkeypatch):
    """Under Triton's interpreter every arena a test builds takes the fused path unless it says otherwise.

    ``test_fused_inputs.py`` plays the fresh-value and pool tests again that way.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from ptxgym.evaluation.trusted.arena import Arena

    real = Arena.__init__

    def init(self, *args, fused: bool = True, **kwargs) -> None:
        real(self, *args, fused=fused, **kwargs)

    monkeypatch.setattr(Arena, "__init__", init)
