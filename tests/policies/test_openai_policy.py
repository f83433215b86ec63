"""OpenAIChatPolicy against a real local HTTP server process (both transports)."""

from __future__ import annotations

import asyncio

import pytest

from ptxgym.policies import (
    ContextOverflowError,
    Conversation,
    ServerError,
    ServerUnavailableError,
    get_preset,
)
from ptxgym.policies.openai_chat import OpenAIChatConfig, OpenAIChatPolicy, RetryPolicy

TRANSPORTS = ["urllib", "openai"]
FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.02)
CONV = Conversation(system="You write kernels.", user="Write a GEMM.", task_id="Gemm-sm90a")


def policy(url: str, transport: str, **kw) -> OpenAIChatPolicy:
    kw.setdefault("retry", FAST_RETRY)
    return OpenAIChatPolicy(OpenAIChatConfig(model="test-model", base_url=url, transport=transport, **kw))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reads_both_reasoning_fields(fake_server, transport: str, field: str) -> None:
    srv = fake_server(
        {"default": {"content": "```cpp\nint x;\n```", "reasoning": "think hard", "reasoning_field": field}}
    )
    with policy(srv.base_url, transport) as pol:
        action = pol.act({"text": "ignored"}, CONV)
    assert action.text == "```cpp\nint x;\n```"
    assert action.reasoning == "think hard"
    assert action.prompt_tokens == 123 and action.completion_tokens == 45
    assert [m.role for m in action.messages] == ["system", "user"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_think_block_is_split_when_server_has_no_reasoning_parser(fake_server, transport: str) -> None:
    srv = fake_server({"default": {"content": "<think>plan tiles</think>\n```cpp\nk\n```"}})
    action = policy(srv.base_url, transport).act({}, CONV)
    assert action.reasoning == "plan tiles" and action.text == "```cpp\nk\n```"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_qwen_paper_preset_and_extra_body_reach_the_server(fake_server, transport: str) -> None:
    srv = fake_server({"default": {"content": "x"}})
    sampling = get_preset("qwen-paper").merged(min_p=0.05, extra_body={"repetition_penalty": 1.05})
    pol = policy(srv.base_url, transport, sampling=sampling, enable_thinking=False, lora="fixit")
    actions = pol.sample({}, CONV, n=3)
    body = srv.requests()[-1]["body"]
    assert len(actions) == 3 and body["n"] == 3
    assert body["model"] == "fixit"  # vLLM selects a LoRA adapter by its name
    assert body["temperature"] == 1.0 and body["top_p"] == 0.95 and body["presence_penalty"] == 1.5
    assert body["top_k"] == 20 and body["min_p"] == 0.05 and body["repetition_penalty"] == 1.05
    assert body["max_tokens"] == 81920
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"][0] == {"role": "system", "content": "You write kernels."}


def test_sglang_lora_model_name_and_separate_reasoning(fake_server) -> None:
    srv = fake_server({"default": {"content": "x"}})
    policy(srv.base_url, "urllib", lora="fixit", engine="sglang").act({}, CONV)
    body = srv.requests()[-1]["body"]
    assert body["model"] == "test-model:fixit" and body["separate_reasoning"] is True


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_retries_500_and_dropped_connections_then_succeeds(fake_server, transport: str) -> None:
    srv = fake_server(
        {"responses": [{"type": "status", "code": 500}, {"type": "drop"}], "default": {"content": "finally"}}
    )
    action = policy(srv.base_url, transport).act({}, CONV)
    assert action.text == "finally"
    assert len(srv.requests()) == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_429_is_retried(fake_server, transport: str) -> None:
    srv = fake_server({"responses": [{"type": "status", "code": 429}], "default": {"content": "ok"}})
    assert policy(srv.base_url, transport).act({}, CONV).text == "ok"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_server_errors_after_every_retry_raise_server_error(fake_server, transport: str) -> None:
    srv = fake_server({"default": {"type": "status", "code": 503, "body": "overloaded"}})
    with pytest.raises(ServerError, match="kept failing after 3 tries.*503"):
        policy(srv.base_url, transport).act({}, CONV)
    assert len(srv.requests()) == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bad_request_is_not_retried(fake_server, transport: str) -> None:
    srv = fake_server({"default": {"type": "status", "code": 400, "body": "bad sampling value"}})
    with pytest.raises(ServerError, match="rejected the request"):
        policy(srv.base_url, transport).act({}, CONV)
    assert len(srv.requests()) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_context_overflow_is_its_own_error(fake_server, transport: str) -> None:
    srv = fake_server({"default": {"type": "overflow"}})
    with pytest.raises(ContextOverflowError, match="maximum context length"):
        policy(srv.base_url, transport).act({}, CONV)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_absent_server_says_which_url_and_how_to_start_one(dead_url: str, transport: str) -> None:
    pol = policy(dead_url, transport)
    with pytest.raises(ServerUnavailableError) as err:
        pol.check()
    msg = str(err.value)
    assert dead_url in msg and "connection refused" in msg
    assert "ptxgym serve --engine vllm --model test-model" in msg
    with pytest.raises(ServerUnavailableError, match="after 3 tries"):
        pol.act({}, CONV)


def test_check_reads_context_window_and_rejects_unserved_model(fake_server) -> None:
    srv = fake_server({"model": "test-model", "max_model_len": 32768, "extra_models": ["fixit"]})
    pol = policy(srv.base_url, "openai")
    pol.check()
    assert pol.max_context_tokens == 32768
    wrong = OpenAIChatPolicy(
        OpenAIChatConfig(model="other", base_url=srv.base_url, transport="urllib", retry=FAST_RETRY)
    )
    with pytest.raises(ServerError, match="does not serve 'other'.*test-model, fixit"):
        wrong.check()


def test_max_tokens_is_lowered_to_what_the_window_leaves(fake_server) -> None:
    srv = fake_server({"default": {"content": "x"}})
    pol = policy(srv.base_url, "urllib", sampling=get_preset("qwen-paper"), max_context_tokens=50_000)
    pol.act({}, CONV)
    sent = srv.requests()[-1]["body"]["max_tokens"]
    assert 49_900 < sent < 50_000  # 81,920 wanted; the window minus the short prompt is what is left


def test_huge_response_and_empty_content_come_back_as_text(fake_server) -> None:
    srv = fake_server({"responses": [{"content": "word ", "repeat": 200_000}, {"content": None}]})
    pol = policy(srv.base_url, "urllib")
    assert len(pol.act({}, CONV).text) == 1_000_000
    assert pol.act({}, CONV).text == ""


def test_async_and_batch_variants(fake_server) -> None:
    srv = fake_server({"default": {"content": "a", "delay": 0.05}})
    pol = policy(srv.base_url, "openai")

    async def two():
        return await asyncio.gather(pol.act_async({}, CONV), pol.act_async({}, CONV))

    assert [a.text for a in asyncio.run(two())] == ["a", "a"]
    assert [a.text for a in pol.act_batch([({}, CONV)] * 3)] == ["a", "a", "a"]
    assert len(srv.requests()) == 5
