"""Fixtures for the evaluator tests: the fake worker (helpers: evaltest_helpers, ptxgym.audit.corpus)."""

from __future__ import annotations

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
