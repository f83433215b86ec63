"""The ptxgym command: tasks and check (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxgym.cli.main import main

PLAIN_KERNEL = (Path(__file__).parents[1] / "data" / "plain_gemm.cu").read_text()


def test_tasks_lists_every_env_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "ptxgym/Gemm-sm90a-v0" in out and "ptxgym/MhaBwdCausal-sm100a-v0" in out


def test_tasks_json_filtered_by_arch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--arch", "sm100a", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["arch"] == "sm_100a" for r in rows) and len(rows) == 31  # 5 primary + the suite
    assert [r["id"] for r in rows if r["primary"]] == [r["id"] for r in rows[:5]]
    assert rows[0]["workload"] == {"M": 8192, "N": 7168, "K": 5120}


@pytest.mark.nvcc
def test_check_a_kernel_file_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "kernel.cu"
    src.write_text(PLAIN_KERNEL)
    assert main(["check", str(src), "--task", "Gemm-sm90a", "--evaluator", "none", "--json"]) == 0
    fb = json.loads(capsys.readouterr().out)
    assert fb["status"] == "NOT_EVALUATED" and fb["compile"]["ok"] is True
    assert fb["sass"]["static_target"] is False


def test_check_reports_extract_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "answer.md"
    src.write_text("I could not write the kernel, sorry.")
    assert main(["check", str(src), "--task", "Gemm-sm90a", "--evaluator", "none"]) == 1
    assert "EXTRACT_ERROR" in capsys.readouterr().out


def test_check_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "/no/such/kernel.cu", "--task", "Gemm-sm90a", "--evaluator", "none"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "tasks" in capsys.readouterr().out
