"""The evaluation runner: every turn on disk, bad model output, server failures, resume, concurrency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxgym.evaluation.trusted.base import NullEvaluator
from ptxgym.policies import PolicyConfig, ServerUnavailableError
from ptxgym.policies.openai_chat import OpenAIChatConfig, OpenAIChatPolicy, RetryPolicy
from ptxgym.policies.reference import ReferencePolicy
from ptxgym.policies.replay import ReplayPolicy
from ptxgym.records.turns import read_turns
from ptxgym.runner import EvalConfig, RunDirError, SharedEvaluator, run_eval

FAST_RETRY = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.02)
PLAIN_KERNEL = (Path(__file__).parents[1] / "data" / "plain_gemm.cu").read_text()


def config(**kw) -> EvalConfig:
    base = {
        "tasks": ["Gemm-sm90a"],
        "variants": ["none"],
        "trajectories": 1,
        "turns": 3,
        "concurrency": 2,
        "evaluator": "none",
        "policy": PolicyConfig(kind="openai", model="test-model"),
    }
    return EvalConfig(**{**base, **kw})


def chat(url: str) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(
        OpenAIChatConfig(model="test-model", base_url=url, retry=FAST_RETRY, transport="urllib")
    )


def test_bad_model_output_becomes_turns_with_clear_statuses(fake_server, tmp_path: Path) -> None:
    srv = fake_server(
        {
            "responses": [
                {"content": "I am not sure how to write this kernel."},
                {"content": "```python\nimport torch\ndef run(A, B, C):\n    C.copy_(A @ B.T)\n```"},
                {"content": "token " * 200_000},
            ]
        }
    )
    res = run_eval(config(), tmp_path / "run", policy=chat(srv.base_url), progress=False)
    records, problems = read_turns(tmp_path / "run" / "trajectories.jsonl")
    assert not problems and res.complete and res.turns_run == 3
    assert [r.status for r in records] == ["EXTRACT_ERROR"] * 3
    assert [r.turn for r in records] == [0, 1, 2] and records[-1].truncated
    fb = [r.feedback for r in records]
    assert all(f.message for f in fb)
    assert len(records[2].action) == 1_200_000  # the whole response is kept
    assert records[0].observation.startswith("Turn 1 result: EXTRACT_ERROR")
    # the third prompt carried both earlier turns (full history)
    assert [m.role for m in records[2].messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    sent = srv.requests()[2]["body"]["messages"]
    assert sent[3]["content"] == records[0].observation
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert events == [{**events[0], "event": "end", "reason": "truncated", "turns": 3}]
    assert res.summary.rows[0].turns == 3 and not res.summary.gpu_evaluated


def test_records_load_with_datasets(fake_server, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    srv = fake_server({"default": {"content": "no code", "reasoning": "hmm"}})
    run_eval(
        config(tasks=["Gemm-sm90a", "MhaFwd-sm90a"], turns=2),
        tmp_path / "run",
        policy=chat(srv.base_url),
        progress=False,
    )
    ds = datasets.load_dataset(
        "json",
        data_files=str(tmp_path / "run" / "trajectories.jsonl"),
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    assert ds.num_rows == 4 and set(ds["task_id"]) == {"Gemm-sm90a", "MhaFwd-sm90a"}
    assert ds[0]["reasoning"] == "hmm" and ds[0]["messages"][0]["role"] == "system"


def test_server_errors_mid_run_keep_finished_turns_and_resume_continues(fake_server, tmp_path: Path) -> None:
    failing = fake_server(
        {"responses": [{"content": "a"}, {"content": "b"}], "default": {"type": "status", "code": 500}}
    )
    cfg = config(trajectories=2, concurrency=1)
    res = run_eval(cfg, tmp_path / "run", policy=chat(failing.base_url), progress=False)
    assert not res.complete and len(res.incomplete) == 2 and res.turns_on_disk == 2
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert '"reason":"policy_error"' in events and "kept failing" in events
    with pytest.raises(RunDirError, match="--resume"):
        run_eval(cfg, tmp_path / "run", policy=chat(failing.base_url), progress=False)
    healthy = fake_server({"default": {"content": "c"}})
    res2 = run_eval(cfg, tmp_path / "run", resume=True, policy=chat(healthy.base_url), progress=False)
    records, _ = read_turns(tmp_path / "run" / "trajectories.jsonl")
    keys = [(r.trajectory_id, r.turn) for r in records]
    assert res2.complete and len(keys) == len(set(keys)) == 6 and res2.turns_run == 4
    assert [r.action for r in records if r.trajectory_id.endswith("/0")] == ["a", "b", "c"]
    # the resumed turn saw the recorded history
    assert [m["content"] for m in healthy.requests()[0]["body"]["messages"] if m["role"] == "assistant"] == [
        "a",
        "b",
    ]
    assert len({r.run_id for r in records}) == 1


def test_unreachable_server_fails_before_any_work(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(ServerUnavailableError, match="ptxgym serve"):
        run_eval(config(), tmp_path / "run", policy=chat(url), progress=False)
    assert not (tmp_path / "run" / "trajectories.jsonl").exists()


def test_server_dying_mid_run_stops_the_run_resumably(fake_server, tmp_path: Path) -> None:
    srv = fake_server({"default": {"content": "x", "delay": 0.05}})
    pol = chat(srv.base_url)
    pol.check()
    original = pol.transport.chat
    calls = []

    def dying(body):  # the server process is killed after the second request
        calls.append(1)
        if len(calls) == 3:
            srv.stop()
        return original(body)

    pol.transport.chat = dying
    res = run_eval(
        config(turns=4, trajectories=2, concurrency=1), tmp_path / "run", policy=pol, progress=False
    )
    assert res.stop_reason and "inference server is unavailable" in res.stop_reason
    assert res.turns_on_disk == 2 and len(res.incomplete) == 2


def test_truncated_last_line_is_reported_dropped_and_rerun(fake_server, tmp_path: Path) -> None:
    srv = fake_server({"default": {"content": "x"}})
    run = tmp_path / "run"
    run_eval(config(turns=2), run, policy=chat(srv.base_url), progress=False)
    path = run / "trajectories.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # killed while writing turn 1
    res = run_eval(config(turns=2), run, resume=True, policy=chat(srv.base_url), progress=False)
    assert any("cut off" in p for p in res.problems)
    assert (run / "trajectories.jsonl.cut-0").read_text() == lines[1][: len(lines[1]) // 2]
    records, problems = read_turns(path)
    assert not problems and [r.turn for r in records] == [0, 1] and res.turns_run == 1
    assert path.read_text().startswith(lines[0])


def test_concurrency_keeps_k_requests_in_flight(fake_server, tmp_path: Path) -> None:
    srv = fake_server({"default": {"content": "x", "delay": 0.3}})
    run_eval(
        config(trajectories=3, turns=1, concurrency=3),
        tmp_path / "run",
        policy=chat(srv.base_url),
        progress=False,
    )
    assert max(r["inflight"] for r in srv.requests()) >= 2


def test_replay_of_a_recorded_run(fake_server, tmp_path: Path) -> None:
    srv = fake_server({"responses": [{"content": "first"}, {"content": "second"}]})
    run_eval(config(turns=2), tmp_path / "a", policy=chat(srv.base_url), progress=False)
    pol = ReplayPolicy(tmp_path / "a" / "trajectories.jsonl")
    res = run_eval(config(turns=3), tmp_path / "b", policy=pol, progress=False)
    records, _ = read_turns(tmp_path / "b" / "trajectories.jsonl")
    assert [r.action for r in records] == ["first", "second"]
    assert res.complete and res.trajectories[0].ended == "policy_exhausted"


def test_shared_evaluator_ignores_env_close() -> None:
    inner = NullEvaluator("test")
    shared = SharedEvaluator(inner)
    shared.close()
    assert shared.name == "none" and shared._lock is not None


@pytest.mark.slow
@pytest.mark.nvcc
def test_reference_policy_main_job_on_cpu(tmp_path: Path) -> None:
    packs = tmp_path / "packs" / "sm90a" / "solutions"
    packs.mkdir(parents=True)
    (packs / "Gemm.cu").write_text(PLAIN_KERNEL)
    pol = ReferencePolicy(tasks=["Gemm-sm90a"], root=tmp_path / "packs")
    res = run_eval(
        config(turns=2, policy=PolicyConfig(kind="reference")), tmp_path / "run", policy=pol, progress=False
    )
    records, _ = read_turns(tmp_path / "run" / "trajectories.jsonl")
    assert [r.status for r in records] == ["NOT_EVALUATED", "NOT_EVALUATED"]
    assert "GPU evaluator" in records[0].feedback.message and records[0].feedback.compile.ok
    assert res.evaluator == "none" and res.gpu_reason and not res.summary.gpu_evaluated
