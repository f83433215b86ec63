"""Prompt building: task prompt per variant, history modes, token budget trimming."""

from __future__ import annotations

import pytest

from ptxgym.knowledge_packs.prompting import build_task_prompt
from ptxgym.policies.history import (
    MESSAGE_OVERHEAD,
    Conversation,
    HistoryMode,
    build_messages,
    estimate_tokens,
)
from ptxgym.records.tasks import get_task


def _variants(arch: str) -> list[str | None]:
    try:
        from ptxgym.knowledge_packs import variant_names
    except ImportError:
        return [None]
    return [None, *variant_names(arch)]


CASES = [(tid, v) for tid in ("Gemm-sm90a", "MhaBwd-sm100a") for v in _variants(get_task(tid).arch)]


@pytest.mark.parametrize(("task_id", "variant"), CASES)
@pytest.mark.parametrize("mode", ["full", "latest"])
def test_task_prompt_for_every_variant_and_mode(task_id: str, variant: str | None, mode: str) -> None:
    task = get_task(task_id)
    prompt = build_task_prompt(task, variant)
    conv = Conversation.from_prompt(prompt, task_id=task_id)
    conv = conv.add("```cpp\n// v1\n```", "Turn 1 result: COMPILE_ERROR - missing ;")
    conv = conv.add("```cpp\n// v2\n```", "Turn 2 result: INCORRECT_NUMERICAL - max abs error 3.1")
    built = build_messages(conv, mode)
    roles = [m.role for m in built.messages]
    assert built.messages[0].content == prompt.system and task.arch in prompt.system
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC" in prompt.system
    assert built.messages[1].content.startswith(prompt.user)
    assert task.definition.name in prompt.user
    if mode == "full":
        assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
        assert built.dropped_turns == 0 and "left out" not in built.messages[1].content
    else:
        assert roles == ["system", "user", "assistant", "user"]
        assert built.messages[2].content == "```cpp\n// v2\n```"
        assert "INCORRECT_NUMERICAL" in built.messages[3].content
        assert built.dropped_turns == 1 and "turn 1 are left out" in built.messages[1].content
    if variant is not None:
        assert len(prompt.system) > len(build_task_prompt(task, None).system)


def _conv(turns: int, action_chars: int = 3000, feedback_chars: int = 600) -> Conversation:
    conv = Conversation(system="S" * 300, user="U" * 300, task_id="Gemm-sm90a")
    for i in range(turns):
        conv = conv.add(f"<{i}>" + "a" * action_chars, f"[fb {i}]" + "f" * feedback_chars)
    return conv


def test_budget_drops_oldest_turns_first_keeping_system_task_latest() -> None:
    conv = _conv(6)
    full = build_messages(conv, "full")
    budget = full.tokens // 2
    built = build_messages(conv, "full", budget)
    assert built.tokens <= budget and not built.cut and not built.over_budget
    assert built.messages[0].content == "S" * 300
    assert built.messages[1].content.startswith("U" * 300)
    kept = [m.content[:3] for m in built.messages if m.role == "assistant"]
    assert kept[-1] == "<5>" and "<0>" not in kept and len(kept) < 6
    assert kept == [f"<{i}>" for i in range(6 - len(kept), 6)]  # a contiguous tail of turns
    assert f"turns 1-{built.dropped_turns} are left out" in built.messages[1].content


def test_latest_pair_too_long_is_cut_not_refused() -> None:
    conv = _conv(2, action_chars=200_000 * 4)  # a 200k-token response
    built = build_messages(conv, "latest", budget=8000)
    assert built.cut and built.tokens <= 8000 and not built.over_budget
    assistant = built.messages[2].content
    assert assistant.startswith("<1>") and "characters cut" in assistant
    assert built.messages[3].content.startswith("[fb 1]")


def test_system_and_task_alone_over_budget_is_reported_not_raised() -> None:
    conv = Conversation(system="S" * 30_000, user="U" * 30_000)
    built = build_messages(conv, "full", budget=100)
    assert built.over_budget and len(built.messages) == 2


def test_estimate_is_bytes_over_three_and_tokenizer_counter_is_used() -> None:
    assert estimate_tokens("abcdef") == 2 and estimate_tokens("é") == 1
    conv = _conv(1)
    built = build_messages(conv, HistoryMode.FULL, counter=len)
    assert built.tokens == sum(len(m.content) + MESSAGE_OVERHEAD for m in built.messages)
