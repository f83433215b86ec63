"""Bad input to any command: one line on stderr, exit status 2, no traceback, no work started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxgym.cli.main import main

PLAIN = Path(__file__).parents[1] / "data" / "plain_gemm.cu"
CLI = [sys.executable, "-c", "from ptxgym.cli.main import entry; entry()"]


def _one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_unknown_names_are_one_line_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert "did you mean 'Gemm-sm90a'" in _one_line_error(capsys, "check", str(PLAIN), "--task", "gemm-sm90a")
    assert "unknown architecture 'sm_80'" in _one_line_error(capsys, "tasks", "--arch", "sm_80")


def test_malformed_solution_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "solution.json"
    bad.write_text("{not json")
    assert "not a valid Solution record" in _one_line_error(capsys, "check", str(bad), "--task", "Gemm-sm90a")


def test_local_evaluator_without_a_gpu_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from ptxgym.evaluation.choose import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable here")
    err = _one_line_error(capsys, "check", str(PLAIN), "--task", "Gemm-sm90a", "--evaluator", "local")
    assert "--evaluator local, but the GPU evaluator cannot run here" in err


def test_bad_reward_is_refused_before_a_run_directory_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    err = _one_line_error(capsys, "eval", "--reward", "bogus", "--evaluator", "none", "--out", str(out))
    assert "unknown reward 'bogus'" in err and "staged" in err
    assert not out.exists()


def test_a_model_that_is_not_local_fails_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["eval", "--policy", "transformers", "--model", "nobody/no-such-model", "--out", str(out)]
    err = _one_line_error(capsys, *argv, "--evaluator", "none")
    assert "neither a local directory nor a model in the Hugging Face cache" in err and not out.exists()


@pytest.mark.nvcc
def test_resume_with_other_settings_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    base = ["eval", "--tasks", "Gemm-sm90a", "--evaluator", "none", "--out", str(out), "--quiet"]
    assert main([*base, "--turns", "1"]) == 0
    capsys.readouterr()
    before = (out / "run.json").read_text()
    err = _one_line_error(capsys, *base, "--turns", "2", "--resume")
    assert "turns: 1 -> 2" in err
    assert (out / "run.json").read_text() == before  # nothing rewritten


@pytest.mark.nvcc
def test_check_reads_raw_source_on_stdin_and_survives_a_closed_pipe() -> None:
    done = subprocess.run(
        [*CLI, "check", "-", "--task", "Gemm-sm90a", "--evaluator", "none"],
        input=PLAIN.read_text(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "NOT_EVALUATED" in done.stdout, done.stderr
    piped = subprocess.run(
        " ".join(
            [*(f"'{a}'" for a in CLI), "check", str(PLAIN), "--task", "Gemm-sm90a", "--evaluator", "none"]
        )
        + " | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert "BrokenPipeError" not in piped.stderr and "Traceback" not in piped.stderr, piped.stderr


def test_context_overflow_exits_non_zero(
    fake_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = fake_server({"default": {"type": "overflow"}})  # the server's 400 "maximum context length"
    argv = ["eval", "--policy", "openai", "--model", "test-model", "--base-url", srv.base_url]
    rc = main([*argv, "--tasks", "Gemm-sm90a", "--turns", "1", "--evaluator", "none", "--out",
               str(tmp_path / "r"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 3 and "context_overflow" in err and "--variants none" in err


def test_wrong_case_in_eval_leaves_no_run_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    err = _one_line_error(capsys, "eval", "--tasks", "gemm-sm90a", "--out", str(out), "--quiet")
    assert "did you mean 'Gemm-sm90a'" in err and not out.exists()


def test_a_solution_json_missing_fields_is_one_short_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "solution.json"
    bad.write_text('{"name": "x"}')
    err = _one_line_error(capsys, "check", str(bad), "--task", "Gemm-sm90a", "--evaluator", "none")
    assert "definition: Field required; author: Field required" in err and "(and 1 more)" in err
    assert "errors.pydantic.dev" not in err


def test_config_fields_are_named_as_the_flags_the_user_passed(tmp_path: Path, capsys) -> None:
    err = _one_line_error(capsys, "eval", "--reward", "bogus", "--evaluator", "none", "--out", str(tmp_path))
    assert err.startswith("ptxgym eval: --reward: unknown reward 'bogus'; registered:")
    assert "Value error" not in err and "--resume" not in err
    err = _one_line_error(capsys, "eval", "--turns", "0", "--out", str(tmp_path / "r"))
    assert err.startswith("ptxgym eval: --turns: ")
    err = _one_line_error(
        capsys, "serve", "--engine", "vllm", "--model", "m", "--gpu-memory", "5", "--dry-run"
    )
    assert err.startswith("ptxgym serve: --gpu-memory: ")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--model", "/no/such/model/dir"], "--model '/no/such/model/dir': no such directory"),
        (["--model", str(PLAIN)], "is a file; pass the model's directory"),
        (
            ["--model", str(PLAIN.parent), "--tokenizer", "nobody/no-tok"],
            "--tokenizer 'nobody/no-tok' is neither",
        ),
        (["--model", str(PLAIN.parent), "--lora", "/no/adapter"], "--lora '/no/adapter': no such adapter"),
    ],
)
def test_model_paths_are_checked_at_once_without_the_hub(
    tmp_path: Path, capsys, monkeypatch, flags, expected
):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # even where the Hub could be asked: it is not
    out = tmp_path / "run"
    t0 = time.perf_counter()
    err = _one_line_error(capsys, "eval", "--policy", "transformers", *flags, "--out", str(out))
    assert expected in err and not out.exists()
    assert time.perf_counter() - t0 < 10  # no Hub retries


@pytest.mark.nvcc
def test_a_finished_run_is_not_overwritten_without_resume(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    base = [
        "eval",
        "--tasks",
        "Gemm-sm90a",
        "--turns",
        "1",
        "--evaluator",
        "none",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(base) == 0
    capsys.readouterr()
    assert "already holds a run; pass --resume" in _one_line_error(capsys, *base)


def test_report_of_a_missing_run(tmp_path: Path, capsys) -> None:
    assert "no trajectory file at" in _one_line_error(capsys, "report", str(tmp_path / "nothing"))


def test_output_survives_a_pipe_closed_before_the_first_write() -> None:
    """``ptxgym tasks --json | head -c 0``, made certain: the reader is gone before the command starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*CLI, "tasks", "--json"], stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.nvcc
def test_check_stdin_gives_what_the_path_gives_and_names_the_flag() -> None:
    args = ["--task", "Gemm-sm90a", "--evaluator", "none", "--json"]
    by_stdin = subprocess.run(
        [*CLI, "check", "-", *args], input=PLAIN.read_text(), capture_output=True, text=True
    )
    by_path = subprocess.run([*CLI, "check", str(PLAIN), *args], capture_output=True, text=True)
    assert by_stdin.returncode == by_path.returncode == 0, by_stdin.stderr
    fb_stdin, fb_path = json.loads(by_stdin.stdout), json.loads(by_path.stdout)
    assert fb_stdin["status"] == fb_path["status"] == "NOT_EVALUATED"
    assert "(--evaluator none)" in fb_stdin["message"] and "PTXGYM_EVALUATOR" not in fb_stdin["message"]


@pytest.mark.nvcc
def test_compile_errors_are_printed_once(tmp_path: Path, capsys) -> None:
    src = tmp_path / "broken.cu"
    src.write_text("__global__ void k(float* x) { x[0] = undefined_name; }\n")
    assert main(["check", str(src), "--task", "Gemm-sm90a", "--evaluator", "none"]) == 1
    out = capsys.readouterr().out
    assert "COMPILE_ERROR" in out and out.count('identifier "undefined_name" is undefined') == 1
