"""``ptxgym tasks --dataset`` and ``ptxgym check --dataset`` on a FlashInfer-Trace folder of our own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ptxgym.cli.main import main

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace_dataset"
SOLUTION = FIXTURE / "solutions" / "fixture" / "gemm" / "gemm_n256_k512" / "naive_two_files.json"


def test_tasks_of_a_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--dataset", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "gemm_n256_k512@sm_90a" in out and "gemm_n256_k512@sm_100a" in out and "Gemm-sm90a" not in out
    assert main(["tasks", "--dataset", str(FIXTURE), "--arch", "sm100a", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == "gemm_n256_k512@sm_100a" and row["env_id"] == "ptxgym/Trace-v0"
    assert row["workloads"] == 3 and row["workload"] == {"M": 7, "N": 256, "K": 512}
    assert row["baseline"] == "cuBLAS via torch.matmul" and row["dataset"] == str(FIXTURE.resolve())


def test_tasks_by_split(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--split", "test", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["split"] == "test" and r["held_out"] for r in rows)
    assert {r["family"] for r in rows} == {
        "gemm",
        "mha_fwd",
        "mha_bwd",
        "gqa_paged_prefill",
        "gqa_paged_decode",
    }


def test_bad_dataset_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--dataset", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no dataset folder" in err and len(err.strip().splitlines()) == 1
    assert main(["check", str(SOLUTION), "--task", "Gemm-sm90a", "--dataset", str(FIXTURE)]) == 2
    assert "no task 'Gemm-sm90a' in dataset" in capsys.readouterr().err


def test_check_a_solution_against_another_definition(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(SOLUTION), "--task", "Gemm-sm90a", "--evaluator", "none", "--json"]) == 1
    fb = json.loads(capsys.readouterr().out)
    assert fb["status"] == "TASK_MISMATCH" and fb["compile"] is None
    msg = fb["message"]
    assert (
        "written for definition 'gemm_n256_k512'" in msg and "A is float16 where the task has bfloat16" in msg
    )
    assert "A has shape [M, 512] where the task has [M, 5120]" in msg


def test_check_a_same_named_definition_of_other_dtypes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset's fp16 gemm_n4096_k4096 solution checked against our bf16 catalog task of that name."""
    root = tmp_path / "ds"
    shutil.copytree(FIXTURE, root)
    defn = json.loads((root / "definitions" / "gemm" / "gemm_n256_k512.json").read_text())
    defn.update(name="gemm_n4096_k4096")
    defn["axes"]["N"]["value"] = defn["axes"]["K"]["value"] = 4096
    (root / "definitions" / "gemm" / "gemm_n4096_k4096.json").write_text(json.dumps(defn))
    sol = json.loads(SOLUTION.read_text())
    sol["definition"] = "gemm_n4096_k4096"
    path = root / "solutions" / "fixture" / "gemm" / "gemm_n4096_k4096" / "sol.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(sol))
    assert main(["check", str(path), "--task", "gemm_n4096_k4096@sm_90a", "--evaluator", "none"]) == 1
    out = capsys.readouterr().out
    assert "TASK_MISMATCH" in out and "C is float16 where the task has bfloat16" in out


@pytest.mark.nvcc
def test_check_the_fixture_solution_on_its_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check", str(SOLUTION), "--task", "gemm_n256_k512@sm_90a", "--dataset", str(FIXTURE)]
    assert main([*args, "--evaluator", "none", "--json"]) == 0
    fb = json.loads(capsys.readouterr().out)
    assert fb["status"] == "NOT_EVALUATED" and fb["compile"]["ok"] is True
    assert fb["task_id"] == "gemm_n256_k512@sm_90a"
    assert any("gemm_fixture_kernel" in r["kernel"] for r in fb["compile"]["resources"])
