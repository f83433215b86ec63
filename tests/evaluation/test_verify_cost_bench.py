"""bench/verify_cost.py on the CPU with a tiny MHA forward: every piece runs and its checks pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import verify_cost  # noqa: E402
from evaltest_helpers import tiny_task  # noqa: E402


def test_every_piece_is_timed_on_a_sampled_arena(tmp_path, monkeypatch):
    task = tiny_task("MhaFwd-sm90a", B=2, H=32, S=16, D=8)  # 64 independent indices: sampling on
    monkeypatch.setattr("ptxgym.records.tasks.get_task", lambda key, dataset=None: task)
    got = verify_cost.pieces("MhaFwd-sm90a", 2, tmp_path, "cpu")
    assert got.pop("sampled checks (1: on)") == 1.0
    assert set(got) == {
        "prepare (a new draw)",
        "whole reference",
        "verify on a sample (inputs checked too)",
        "held, checked whole",
        "held, checked on a sample",
        "held pool entry (stored reference)",
        "compare only",
        "whole reference, the previous formula",
        "the two formulas' largest difference in O (not s)",
        "the two formulas' largest difference in LSE (not s)",
    }
    assert got.pop("the two formulas' largest difference in LSE (not s)") < 1e-5
    assert got.pop("the two formulas' largest difference in O (not s)") < 2e-2
    assert all(s > 0 for s in got.values())
