"""Bad input to any command: one line on stderr, exit status 2, no traceback, no work started."""

from __future__ import annotations

import subprocess
import sys
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
