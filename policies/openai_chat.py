"""OpenAIChatPolicy: a model behind an OpenAI-compatible chat server (vLLM, SGLang, or any other).

- ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``) and ``model`` (the served name);
- ``sampling``: a ``SamplingParams`` (see the ``qwen-paper`` preset); top_k, min_p, ... go in ``extra_body``;
- ``n`` samples per request through ``sample()``;
- reasoning from ``message.reasoning_content`` (SGLang) or ``message.reasoning`` (vLLM), or from a leading
  ``<think>`` block when the server runs without a reasoning parser;
- ``lora``: an adapter served next to the base model. vLLM selects it by its name in the ``model`` field;
  SGLang by ``<base>:<adapter>`` (``engine="sglang"``);
- retries with exponential backoff (and jitter) on refused/dropped connections, timeouts, 5xx and 429;
- ``check()`` asks ``/models`` once: a missing server is a ``ServerUnavailableError`` that names the URL
  and the ``ptxgym serve`` command that starts one; the context window (``max_model_len``) is read there
  when the server reports it, and the prompt is trimmed to fit it.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.policies.base import (
    Action,
    ContextOverflowError,
    Observation,
    ServerError,
    ServerUnavailableError,
)
from ptxgym.policies.chat import ChatModelPolicy, split_reasoning
from ptxgym.policies.history import BuiltPrompt, Conversation, HistoryMode
from ptxgym.policies.sampling import SamplingParams
from ptxgym.policies.transport import TransportError, make_transport

_OVERFLOW = re.compile(r"maximum context length|context length|too long|exceeds? the (?:model|max)", re.I)


class RetryPolicy(BaseModel):
    """How often and how patiently a failed request is repeated."""

    model_config = ConfigDict(frozen=True)

    attempts: int = Field(6, ge=1, description="Tries per request, the first included.")
    base_delay_s: float = Field(1.0, ge=0.0, description="Delay before the second try; doubles after.")
    max_delay_s: float = Field(60.0, ge=0.0)
    jitter: float = Field(0.25, ge=0.0, le=1.0, description="Random +- fraction of each delay.")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        d = min(self.base_delay_s * (2**attempt), self.max_delay_s)
        return max(0.0, d * (1 + random.uniform(-self.jitter, self.jitter)))


class OpenAIChatConfig(BaseModel):
    """Everything an ``OpenAIChatPolicy`` is configured by (the API key is passed apart: no secrets here)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="The served model name.")
    base_url: str = Field("http://127.0.0.1:8000/v1", description="The server's OpenAI API root.")
    sampling: SamplingParams | None = Field(None, description="None: the server's defaults.")
    history: HistoryMode = HistoryMode.FULL
    max_context_tokens: int | None = Field(None, description="None: the window the server reports.")
    lora: str | None = Field(None, description="An adapter served next to the base model.")
    engine: Literal["vllm", "sglang"] | None = Field(None, description="How the adapter is named.")
    enable_thinking: bool | None = None
    tokenizer: str | None = Field(None, description="Tokenizer (name or path) for exact token counts.")
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_s: float = 3600.0
    transport: str = Field("auto", description="auto, openai (the client library) or urllib.")


class OpenAIChatPolicy(ChatModelPolicy):
    """A chat model served over the OpenAI API."""

    def __init__(
        self,
        config: OpenAIChatConfig,
        *,
        api_key: str = "EMPTY",
        tokenizer: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``tokenizer``: a tokenizer object instead of ``config.tokenizer``; ``sleep``: for tests."""
        self.config = config
        source = tokenizer if tokenizer is not None else config.tokenizer
        counter = _tokenizer_counter(source) if source is not None else None
        super().__init__(
            sampling=config.sampling,
            history=config.history,
            max_context_tokens=config.max_context_tokens,
            counter=counter,
        )
        self.model, self.base_url = config.model, config.base_url.rstrip("/")
        self.lora, self.engine = config.lora, config.engine
        self.enable_thinking = config.enable_thinking
        self.retry = config.retry
        self.transport = make_transport(config.transport, self.base_url, api_key, config.timeout_s)
        self._sleep = sleep
        self.name = self.request_model

    # ------------------------------------------------------------------------------------------ public

    @property
    def request_model(self) -> str:
        """The ``model`` field of a request: the base model, or the LoRA adapter as the engine names it."""
        if not self.lora:
            return self.model
        return f"{self.model}:{self.lora}" if self.engine == "sglang" else self.lora

    def check(self) -> None:
        """Fail now, clearly, when no server answers; learn the context window when the server says it."""
        try:
            listing = self.transport.models()
        except TransportError as exc:
            if exc.kind == "status":  # a server is there; /models may just be unsupported
                return
            raise ServerUnavailableError(self._absent_message(str(exc))) from exc
        models = listing.get("data", []) if isinstance(listing, dict) else []
        ids = [m.get("id") for m in models if isinstance(m, dict)]
        if ids and self.request_model not in ids:
            raise ServerError(
                f"the server at {self.base_url} does not serve {self.request_model!r}; it serves: "
                f"{', '.join(map(str, ids))}. Pass one of those as --model (and --lora for an adapter)."
            )
        for m in models:
            if isinstance(m, dict) and m.get("id") == self.request_model and not self.max_context_tokens:
                window = m.get("max_model_len") or m.get("context_length")
                if isinstance(window, int) and window > 0:
                    self.max_context_tokens = window

    def act(self, observation: Observation, history: Conversation | None = None) -> Action:
        """One response for the next turn."""
        return self.sample(observation, history, 1)[0]

    def sample(self, observation: Observation, history: Conversation | None, n: int) -> list[Action]:
        """``n`` responses to the same prompt in one request (the server's ``n``)."""
        built = self.build_prompt(observation, history)
        data = self._post_with_retries(self._body(built, n))
        return self._actions(data, built, n)

    def describe(self) -> dict[str, Any]:
        """Model, URL, adapter, engine, sampling, history mode."""
        return {
            **super().describe(),
            "model": self.model,
            "base_url": self.base_url,
            "lora": self.lora,
            "engine": self.engine,
            "transport": self.transport.name,
        }

    def close(self) -> None:
        """Close the HTTP client."""
        self.transport.close()

    # --------------------------------------------------------------------------------------- request

    def _body(self, built: BuiltPrompt, n: int) -> dict[str, Any]:
        std, extra = self.sampling.to_openai()
        max_tokens = self.response_budget(built.tokens)
        if max_tokens is not None:
            std["max_tokens"] = max_tokens
        if self.enable_thinking is not None:
            extra.setdefault("chat_template_kwargs", {})["enable_thinking"] = self.enable_thinking
        if self.engine == "sglang":
            extra.setdefault("separate_reasoning", True)
        body = {
            "model": self.request_model,
            "messages": [m.model_dump(include={"role", "content"}) for m in built.messages],
            **std,
            **extra,
        }
        if n != 1:
            body["n"] = n
        return body

    def _post_with_retries(self, body: dict[str, Any]) -> dict[str, Any]:
        last: TransportError | None = None
        for attempt in range(self.retry.attempts):
            try:
                return self.transport.chat(body)
            except TransportError as exc:
                last = exc
                if not exc.retryable:
                    raise self._permanent(exc) from exc
                if attempt + 1 < self.retry.attempts:
                    self._sleep(self.retry.delay(attempt))
        assert last is not None
        tries = f"after {self.retry.attempts} tries"
        if last.kind == "connect":
            raise ServerUnavailableError(self._absent_message(f"{last} {tries}")) from last
        if last.kind == "status":
            msg = f"the server at {self.base_url} kept failing {tries}: {last}"
            raise ServerError(msg, last.status) from last
        msg = f"the server at {self.base_url} did not answer {tries}: {last}"
        raise ServerUnavailableError(msg) from last

    def _permanent(self, exc: TransportError) -> Exception:
        body = exc.body or str(exc)
        if exc.status == 400 and _OVERFLOW.search(body):
            return ContextOverflowError(
                f"the prompt does not fit the context of {self.request_model}: {body[:400]}"
            )
        if exc.status in (401, 403):
            return ServerError(
                f"the server at {self.base_url} refused the API key (HTTP {exc.status}); "
                "pass --api-key as the server was started with.",
                exc.status,
            )
        if exc.status == 404:
            return ServerError(
                f"the server at {self.base_url} has no model {self.request_model!r} (HTTP 404): {body[:300]}",
                exc.status,
            )
        return ServerError(f"the server at {self.base_url} rejected the request: {body[:500]}", exc.status)

    def _absent_message(self, detail: str) -> str:
        port = urlparse(self.base_url).port or 8000
        return (
            f"no inference server answers at {self.base_url} ({detail}). Start one with "
            f"`ptxgym serve --engine vllm --model {self.model} --port {port}` (or --engine sglang), wait "
            "until it reports it is ready, then run again; or pass --base-url of a running server."
        )

    # -------------------------------------------------------------------------------------- response

    def _actions(self, data: dict[str, Any], built: BuiltPrompt, n: int) -> list[Action]:
        choices = data.get("choices") or []
        if not choices:
            raise ServerError(f"the server at {self.base_url} returned no choices: {str(data)[:300]}")
        usage = data.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        out = []
        for ch in sorted(choices, key=lambda c: c.get("index", 0)):
            msg = ch.get("message") or {}
            content = msg.get("content") or ""
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            if not reasoning:
                content, reasoning = split_reasoning(content)
            out.append(
                Action(
                    text=content,
                    reasoning=reasoning or None,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion if len(choices) == 1 else None,
                    finish_reason=ch.get("finish_reason"),
                    messages=built.messages,
                    dropped_turns=built.dropped_turns,
                )
            )
        return out


def _tokenizer_counter(tokenizer: str | Any) -> Callable[[str], int]:
    """A token counter from a transformers tokenizer object or a local path / hub name (loaded lazily)."""
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
