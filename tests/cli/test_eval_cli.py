"""``ptxgym eval`` as a user runs it: subprocesses, SIGKILL and --resume, exit codes and messages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxgym.cli.main import main
from ptxgym.records.turns import read_turns

CLI = [sys.executable, "-c", "from ptxgym.cli.main import entry; entry()"]


def _eval_args(url: str, out: Path) -> list[str]:
    return [
        "eval",
        "--policy",
        "openai",
        "--model",
        "test-model",
        "--base-url",
        url,
        "--tasks",
        "Gemm-sm90a,MhaFwd-sm90a",
        "--trajectories",
        "2",
        "--turns",
        "4",
        "--concurrency",
        "2",
        "--evaluator",
        "none",
        "--out",
        str(out),
    ]


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_no_turn_and_duplicates_none(fake_server, tmp_path: Path) -> None:
    srv = fake_server({"default": {"content": "no kernel, sorry", "delay": 0.15}})
    out = tmp_path / "run"
    traj = out / "trajectories.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*CLI, *_eval_args(srv.base_url, out), "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and (not traj.exists() or traj.read_text().count("\n") < 5):
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stderr.close()
    before = traj.read_bytes()
    finished = before[: before.rfind(b"\n") + 1]
    n_before = finished.count(b"\n")
    assert 5 <= n_before < 16, "the kill should land mid-run"
    # A kill can also land in the middle of a write: simulate that cut on top of the real kill.
    traj.write_bytes(finished + b'{"schema_version": "ptxgym.turn.v1", "run_id": "')

    res = subprocess.run(
        [*CLI, *_eval_args(srv.base_url, out), "--resume", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "cut off by an interrupted run" in res.stderr
    result = json.loads(res.stdout)
    records, problems = read_turns(traj)
    keys = [(r.trajectory_id, r.turn) for r in records]
    assert not problems
    assert len(keys) == len(set(keys)) == 16  # 2 tasks x 2 trajectories x 4 turns, each exactly once
    assert traj.read_bytes().startswith(finished)  # nothing finished before the kill was rewritten
    assert result["turns_on_disk"] == 16 and result["turns_run"] == 16 - n_before
    assert result["summary"]["overall"]["turns"] == 16 and result["evaluator"] == "none"
    for tid in {k[0] for k in keys}:
        assert sorted(t for t_id, t in keys if t_id == tid) == [0, 1, 2, 3]


def test_unreachable_server_is_a_clear_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    rc = main(
        [
            "eval",
            "--policy",
            "vllm",
            "--model",
            "Qwen/Qwen3-8B",
            "--base-url",
            url,
            "--tasks",
            "Gemm-sm90a",
            "--evaluator",
            "none",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert f"no inference server answers at {url}" in err
    assert "ptxgym serve --engine vllm --model Qwen/Qwen3-8B" in err


def test_server_failing_mid_run_exits_3_and_says_resume(
    fake_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = fake_server({"responses": [{"content": "a"}], "default": {"type": "status", "code": 502}})
    rc = main(
        [
            "eval",
            "--policy",
            "openai",
            "--model",
            "test-model",
            "--base-url",
            srv.base_url,
            "--tasks",
            "Gemm-sm90a",
            "--turns",
            "3",
            "--evaluator",
            "none",
            "--out",
            str(tmp_path / "r"),
            "--retries",
            "3",
            "--retry-delay",
            "0.01",
            "--quiet",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 3
    assert "stopped early" in captured.err and "--resume --out" in captured.err
    assert "Gemm-sm90a" in captured.out  # the table of what finished is still printed
    assert len(read_turns(tmp_path / "r" / "trajectories.jsonl")[0]) == 1
    assert len(srv.requests()) == 1 + 3  # one answer, then three tries of the second turn


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--tasks", "NoSuchTask-sm90a", "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "no task 'NoSuchTask-sm90a'" in capsys.readouterr().err
    assert main(["eval", "--resume", "--quiet"]) == 2
    assert "--resume needs --out" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "--policy",
                "reference",
                "--tasks",
                "MhaBwd-sm100a",
                "--evaluator",
                "none",
                "--out",
                str(tmp_path / "b"),
                "--quiet",
            ]
        )
        == 2
    )
    assert "no shipped reference solution for MhaBwd-sm100a" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "--policy",
                "reference",
                "--variants",
                "no-such-variant",
                "--tasks",
                "Gemm-sm90a",
                "--evaluator",
                "none",
                "--out",
                str(tmp_path / "c"),
                "--quiet",
            ]
        )
        == 2
    )
    assert "no-such-variant" in capsys.readouterr().err


@pytest.mark.nvcc
def test_main_job_reference_without_gpu_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptxgym.policies.reference import available_solutions

    if "Gemm-sm90a" not in available_solutions():
        pytest.skip("no shipped Gemm-sm90a reference solution yet")
    rc = main(
        [
            "eval",
            "--policy",
            "reference",
            "--tasks",
            "Gemm-sm90a",
            "--turns",
            "1",
            "--evaluator",
            "none",
            "--out",
            str(tmp_path / "run"),
            "--json",
            "--quiet",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    assert (
        "WARNING: no GPU evaluator" in err
        and "Correctness, target-instruction execution and speed need" in err
    )
    result = json.loads(out)
    assert result["summary"]["gpu_evaluated"] is False and result["turns_on_disk"] == 1
    records, _ = read_turns(tmp_path / "run" / "trajectories.jsonl")
    assert records[0].policy == "reference" and "```cpp" in records[0].action
    # The shipped kernel builds with the pack headers on the include path and shows wgmma/TMA statically.
    fb = records[0].feedback
    assert records[0].status == "NOT_EVALUATED", fb.message
    assert fb.sass is not None and fb.sass.static_target


def test_reference_defaults_skip_tasks_without_solutions(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from ptxgym.cli.eval import _reference_defaults
    from ptxgym.policies.reference import available_solutions

    tasks = _reference_defaults(argparse.Namespace())
    assert tasks and set(tasks) <= set(available_solutions())
    if len(tasks) < 5:
        assert "no shipped reference solution yet" in capsys.readouterr().err
