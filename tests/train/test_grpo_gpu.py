"""The short GRPO bench with GPU-evaluated rewards (bench/grpo_gpu.py), on a GPU machine only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.nvcc
def test_grpo_with_gpu_rewards_runs_and_logs_verdicts(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "grpo_gpu.txt"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "grpo_gpu.py"),
        "--steps",
        "2",
        "--generations",
        "4",
        "--budget-s",
        "400",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["steps"], "no GRPO step was scored"
    statuses = {s for step in record["steps"] for s in step["statuses"]}
    # the GPU evaluator ran the candidates: no NOT_EVALUATED, and the naive kernel shows its verdict
    assert not any(s.startswith("NOT_EVALUATED") for s in statuses), statuses
    assert all("reward" in h for h in record["log_history"])
