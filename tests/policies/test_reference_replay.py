"""ReferencePolicy (shipped solutions), ReplayPolicy (recorded trajectories), sampling presets, factory."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxgym.policies import (
    Conversation,
    MissingSolutionError,
    PolicyConfig,
    PolicyError,
    PolicyExhausted,
    SamplingParams,
    build_policy,
    get_preset,
)
from ptxgym.policies.reference import ReferencePolicy, available_solutions, solution_path
from ptxgym.policies.replay import ReplayPolicy
from ptxgym.policies.sampling import parse_overrides
from ptxgym.records.feedback import Feedback, Stage, Status
from ptxgym.records.tasks import get_task
from ptxgym.records.turns import TurnRecord


def _fake_packs(root: Path) -> Path:
    sol = root / "sm90a" / "solutions"
    sol.mkdir(parents=True)
    (sol / "Gemm.cu").write_text("// expert gemm\n__global__ void k() {}\n")
    return root


def test_reference_plays_the_solution_in_a_cpp_block(tmp_path: Path) -> None:
    root = _fake_packs(tmp_path / "packs")
    pol = ReferencePolicy(tasks=["Gemm-sm90a"], root=root)
    action = pol.act({}, Conversation(user="x", task_id="Gemm-sm90a"))
    assert "```cpp\n// expert gemm\n__global__ void k() {}\n```" in action.text
    assert "sm90a/solutions/Gemm.cu" in action.text
    assert [m.role for m in action.messages] == ["user"] and action.messages[0].content == "x"


def test_reference_without_a_solution_fails_at_construction_and_names_it(tmp_path: Path) -> None:
    root = _fake_packs(tmp_path / "packs")
    with pytest.raises(MissingSolutionError) as err:
        ReferencePolicy(tasks=["Gemm-sm90a", "MhaBwd-sm90a"], root=root)
    msg = str(err.value)
    assert "MhaBwd-sm90a" in msg and "MhaBwd.cu" in msg and "Tasks with a solution: Gemm-sm90a" in msg
    pol = ReferencePolicy(root=root)  # no tasks named: checked when asked
    with pytest.raises(MissingSolutionError):
        pol.act({}, Conversation(user="x", task_id="MhaFwd-sm90a"))
    with pytest.raises(PolicyError, match="task_id"):
        pol.act({}, None)


def test_shipped_solutions_are_found_where_the_packs_put_them() -> None:
    shipped = available_solutions()
    for tid, path in shipped.items():
        assert path == solution_path(get_task(tid)) and path.stat().st_size > 0
    if shipped:
        ReferencePolicy(tasks=sorted(shipped))


def _record(tid: str, turn: int, action: str, task: str = "Gemm-sm90a") -> str:
    fb = Feedback(task_id=task, turn=turn, status=Status.EXTRACT_ERROR, stage=Stage.EXTRACT)
    return TurnRecord(
        run_id="r",
        trajectory_id=tid,
        task_id=task,
        variant="none",
        policy="m",
        turn=turn,
        action=action,
        reasoning=f"why {turn}",
        status="EXTRACT_ERROR",
        feedback_json=fb.to_json(),
        prompt_tokens=10,
        completion_tokens=5,
    ).to_line()


def test_replay_plays_recorded_turns_then_is_exhausted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        _record("Gemm-sm90a/none/0", 0, "a0"),
        _record("Gemm-sm90a/none/0", 1, "a1"),
        _record("Gemm-sm90a/none/1", 0, "b0"),
    ]
    path.write_text("\n".join(lines) + "\n" + lines[0][:40])  # plus a cut-off last line
    with pytest.warns(UserWarning, match="unreadable turn record"):
        pol = ReplayPolicy(path)
    conv = Conversation(user="x", task_id="Gemm-sm90a", trajectory_id="Gemm-sm90a/none/0")
    a0 = pol.act({}, conv)
    assert (a0.text, a0.reasoning, a0.completion_tokens) == ("a0", "why 0", 5)
    conv = conv.add("a0", "fb")
    assert pol.act({}, conv).text == "a1"
    with pytest.raises(PolicyExhausted, match="has no turn 2"):
        pol.act({}, conv.add("a1", "fb"))
    other = Conversation(user="x", task_id="Gemm-sm90a", trajectory_id="Gemm-sm90a/none/1")
    assert pol.act({}, other).text == "b0"
    with pytest.raises(PolicyError, match="2 trajectories of task 'Gemm-sm90a'"):
        pol.act({}, Conversation(user="x", task_id="Gemm-sm90a", trajectory_id="elsewhere/9"))
    with pytest.warns(UserWarning):
        pinned = ReplayPolicy(path, trajectory_id="Gemm-sm90a/none/1")
    assert pinned.act({}, Conversation(user="x", task_id="Gemm-sm90a")).text == "b0"


def test_replay_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="not found"):
        ReplayPolicy(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(PolicyError, match="no turn records"):
        ReplayPolicy(tmp_path / "empty.jsonl")


def test_sampling_presets_and_overrides() -> None:
    q = get_preset("qwen-paper")
    assert (q.temperature, q.top_p, q.top_k, q.presence_penalty, q.max_tokens) == (1.0, 0.95, 20, 1.5, 81920)
    std, extra = q.to_openai()
    assert std == {"temperature": 1.0, "top_p": 0.95, "presence_penalty": 1.5, "max_tokens": 81920}
    assert extra == {"top_k": 20}
    kw, ignored = q.to_generate_kwargs()
    assert kw == {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20, "max_new_tokens": 81920}
    assert ignored == ["presence_penalty"]
    assert get_preset("greedy").to_generate_kwargs()[0] == {"do_sample": False}
    over = parse_overrides(["temperature=0.6", "top_k=40", "stop=</s>", 'logit_bias_x={"a": 1}'])
    assert over == {
        "temperature": 0.6,
        "top_k": 40,
        "stop": ["</s>"],
        "extra_body": {"logit_bias_x": {"a": 1}},
    }
    merged = q.merged(**over)
    assert (
        merged.temperature == 0.6 and merged.top_p == 0.95 and merged.extra_body == {"logit_bias_x": {"a": 1}}
    )
    with pytest.raises(ValueError, match="known: default, greedy, qwen-paper"):
        get_preset("hot")
    with pytest.raises(ValueError, match="name=value"):
        parse_overrides(["temperature"])
    assert SamplingParams().to_openai() == ({}, {})


def test_factory_builds_each_kind(tmp_path: Path) -> None:
    cfg = PolicyConfig(
        kind="vllm", model="Qwen/Qwen3-8B", preset="qwen-paper", sampling={"top_k": 40}, lora="fixit"
    )
    pol = build_policy(cfg)
    assert pol.base_url == "http://127.0.0.1:8000/v1" and pol.request_model == "fixit"
    assert pol.sampling.top_k == 40 and pol.sampling.max_tokens == 81920
    sg = build_policy(PolicyConfig(kind="sglang", model="m", lora="a"))
    assert sg.base_url.endswith(":30000/v1") and sg.request_model == "m:a"
    with pytest.raises(ValueError, match="needs --model"):
        build_policy(PolicyConfig(kind="openai"))
    with pytest.raises(ValueError, match="--replay FILE"):
        build_policy(PolicyConfig(kind="replay"))
