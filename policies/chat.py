"""Common ground of the chat-model policies: prompt building under a budget, reasoning splitting."""

from __future__ import annotations

import re
from typing import Any

from ptxgym.policies.base import Observation, Policy, conversation_for
from ptxgym.policies.history import (
    BuiltPrompt,
    Conversation,
    HistoryMode,
    TokenCounter,
    build_messages,
    estimate_tokens,
)
from ptxgym.policies.sampling import SamplingParams

_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Split a leading ``<think>...</think>`` block off a response (servers without a reasoning parser).

    A response that has ``</think>`` but no opening tag (Qwen templates put ``<think>`` in the prompt)
    is split at the first ``</think>``. Returns (answer, reasoning or None).
    """
    m = _THINK.match(text)
    if m:
        return text[m.end() :], m.group(1).strip()
    if "</think>" in text and "<think>" not in text:
        head, _, tail = text.partition("</think>")
        return tail.lstrip(), head.strip()
    return text, None


class ChatModelPolicy(Policy):
    """A policy backed by a chat model: history mode, context budget and sampling settings."""

    def __init__(
        self,
        *,
        sampling: SamplingParams | None = None,
        history: HistoryMode | str = HistoryMode.FULL,
        max_context_tokens: int | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        self.sampling = sampling or SamplingParams()
        self.history_mode = HistoryMode(history)
        self.max_context_tokens = max_context_tokens
        self._counter = counter

    def count_tokens(self, text: str) -> int:
        """Tokens of a text: the model's tokenizer when known, else the documented estimate."""
        return self._counter(text) if self._counter else estimate_tokens(text)

    def prompt_budget(self) -> int | None:
        """Tokens the prompt may take: the context window minus room for the response."""
        if not self.max_context_tokens:
            return None
        reserve = min(self.sampling.max_tokens or self.max_context_tokens // 4, self.max_context_tokens // 2)
        return self.max_context_tokens - reserve

    def build_prompt(self, observation: Observation, history: Conversation | None) -> BuiltPrompt:
        """The messages for this turn, trimmed to the budget."""
        conv = conversation_for(observation, history)
        return build_messages(conv, self.history_mode, self.prompt_budget(), self.count_tokens)

    def response_budget(self, prompt_tokens: int) -> int | None:
        """``max_tokens`` for a request: the sampling setting, lowered to what the window has left."""
        want = self.sampling.max_tokens
        if not self.max_context_tokens:
            return want
        left = max(self.max_context_tokens - prompt_tokens - 16, 1)
        return min(want, left) if want else left

    def describe(self) -> dict[str, Any]:
        """Name, sampling, history mode and budget."""
        return {
            **super().describe(),
            "sampling": self.sampling.model_dump(exclude_none=True),
            "history": self.history_mode.value,
            "max_context_tokens": self.max_context_tokens,
        }
