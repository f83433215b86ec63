"""Conversation state and history modes: which earlier turns a model sees, within a token budget.

A ``Conversation`` is the task prompt (system + first user message) plus one ``Exchange`` per finished
turn: the assistant's response and the rendered feedback that followed it. ``build_messages`` turns it
into chat messages under a history mode:

- ``full``: every earlier response and its feedback (the paper's default);
- ``latest``: system + task + only the latest response and its feedback (the paper's ``latest-pair``).

With a token budget, old turns are left out oldest first (system, task and the latest pair always stay);
if the latest pair alone is still too long, its response and then its feedback are cut in the middle
with a marker. The prompt is never refused for length here; a server may still refuse it.

Token counts come from the policy's tokenizer when it has one, else from ``estimate_tokens``: UTF-8
bytes / 3, rounded up, plus 4 per message. Kernel code and logs run at about 3.5-4 bytes per token
with the Qwen/Llama BPE tokenizers, so the estimate errs on the high side (trims a little early).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.knowledge_packs.prompting import TaskPrompt
from ptxgym.records.feedback import truncate
from ptxgym.records.turns import ChatMessage

TokenCounter = Callable[[str], int]

#: Tokens added per message for role markers and separators (ChatML uses about 4).
MESSAGE_OVERHEAD = 4


def estimate_tokens(text: str) -> int:
    """A tokenizer-free, deliberately high estimate of a text's token count."""
    return math.ceil(len(text.encode("utf-8")) / 3)


class HistoryMode(StrEnum):
    """Which earlier turns go into the prompt."""

    FULL = "full"
    LATEST = "latest"


class Exchange(BaseModel):
    """One finished turn as the model saw it: its response and the feedback that followed."""

    model_config = ConfigDict(frozen=True)

    action: str = Field(description="The assistant's response text (what env.step received).")
    feedback: str = Field(description="The rendered feedback (the env's next observation text).")
    reasoning: str | None = Field(None, description="Reasoning text of the response; never sent back.")


class Conversation(BaseModel):
    """The task prompt and every finished turn of one trajectory."""

    model_config = ConfigDict(frozen=True)

    system: str = ""
    user: str
    task_id: str | None = None
    variant: str | None = None
    trajectory_id: str | None = Field(None, description="Set by the runner: <task>/<variant>/<index>.")
    exchanges: tuple[Exchange, ...] = ()

    @classmethod
    def from_prompt(
        cls, prompt: TaskPrompt, task_id: str | None = None, trajectory_id: str | None = None
    ) -> Conversation:
        """Start a conversation from an env's task prompt (``info["prompt"]`` after reset)."""
        return cls(
            system=prompt.system,
            user=prompt.user,
            task_id=task_id,
            variant=prompt.variant,
            trajectory_id=trajectory_id,
        )

    @property
    def turn(self) -> int:
        """0-based index of the next turn."""
        return len(self.exchanges)

    def add(self, action: str, feedback: str, reasoning: str | None = None) -> Conversation:
        """A new conversation with one more finished turn."""
        ex = Exchange(action=action, feedback=feedback, reasoning=reasoning)
        return self.model_copy(update={"exchanges": (*self.exchanges, ex)})


class BuiltPrompt(BaseModel):
    """The messages to send and what the budget did to them."""

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    tokens: int = Field(description="Token count of the messages (tokenizer or estimate).")
    dropped_turns: int = Field(0, description="Earlier turns left out.")
    cut: bool = Field(False, description="Whether the latest response or feedback was cut to fit.")
    over_budget: bool = Field(False, description="Still over the budget: system + task alone exceed it.")


def _count(messages: list[ChatMessage], counter: TokenCounter) -> int:
    return sum(counter(m.content) + MESSAGE_OVERHEAD for m in messages)


def _omitted_note(dropped: int, first_kept: int) -> str:
    if dropped == 0:
        return ""
    span = "turn 1" if dropped == 1 else f"turns 1-{dropped}"
    return (
        f"\n\n[Context note: your responses and feedback for {span} are left out to fit the context; "
        f"the conversation resumes at turn {first_kept}.]"
    )


def _assemble(
    conv: Conversation, keep_from: int, cut_action: int | None = None, cut_feedback: int | None = None
) -> list[ChatMessage]:
    """Messages with exchanges ``keep_from..`` kept; optionally the last pair cut to char limits."""
    msgs = [ChatMessage(role="system", content=conv.system)] if conv.system else []
    msgs.append(ChatMessage(role="user", content=conv.user + _omitted_note(keep_from, keep_from + 1)))
    kept = conv.exchanges[keep_from:]
    for i, ex in enumerate(kept):
        last = i == len(kept) - 1
        action = truncate(ex.action, cut_action) if last and cut_action is not None else ex.action
        feedback = truncate(ex.feedback, cut_feedback) if last and cut_feedback is not None else ex.feedback
        msgs.append(ChatMessage(role="assistant", content=action))
        msgs.append(ChatMessage(role="user", content=feedback))
    return msgs


def build_messages(
    conv: Conversation,
    mode: HistoryMode | str = HistoryMode.FULL,
    budget: int | None = None,
    counter: TokenCounter = estimate_tokens,
) -> BuiltPrompt:
    """Chat messages for the next turn of ``conv`` under a history mode and an optional token budget."""
    mode = HistoryMode(mode)
    n = len(conv.exchanges)
    keep_from = max(n - 1, 0) if mode is HistoryMode.LATEST else 0
    msgs = _assemble(conv, keep_from)
    tokens = _count(msgs, counter)
    if budget is None or tokens <= budget:
        return BuiltPrompt(messages=msgs, tokens=tokens, dropped_turns=keep_from)
    while keep_from < n - 1 and tokens > budget:
        keep_from += 1
        msgs = _assemble(conv, keep_from)
        tokens = _count(msgs, counter)
    if tokens <= budget or n == 0:
        return BuiltPrompt(messages=msgs, tokens=tokens, dropped_turns=keep_from, over_budget=tokens > budget)
    return _cut_latest(conv, keep_from, budget, counter)


def _cut_latest(conv: Conversation, keep_from: int, budget: int, counter: TokenCounter) -> BuiltPrompt:
    """Cut the latest response, then its feedback, to fit; keep at least a short head and tail of each."""
    last = conv.exchanges[-1]
    base = _count(_assemble(conv, len(conv.exchanges)), counter) + 2 * MESSAGE_OVERHEAD
    room = budget - base
    floor = 400  # characters kept of each part at least, so the model still sees what it is about
    fb_tokens = counter(last.feedback)
    # Feedback first gets what it needs (it is what the model must react to), the response the rest.
    fb_room = min(fb_tokens, max(room // 2, room - counter(last.action)))
    act_room = room - fb_room
    cut_action = max(floor, int(len(last.action) * max(act_room, 0) / max(counter(last.action), 1)))
    cut_feedback = max(floor, int(len(last.feedback) * max(fb_room, 0) / max(fb_tokens, 1)))
    cut_action = min(cut_action, len(last.action))
    cut_feedback = min(cut_feedback, len(last.feedback))
    msgs = _assemble(conv, keep_from, cut_action, cut_feedback)
    tokens = _count(msgs, counter)
    while tokens > budget and (cut_action > floor or cut_feedback > floor):
        cut_action = max(floor, cut_action * 3 // 4)
        cut_feedback = max(floor, cut_feedback * 3 // 4)
        msgs = _assemble(conv, keep_from, cut_action, cut_feedback)
        tokens = _count(msgs, counter)
    return BuiltPrompt(
        messages=msgs, tokens=tokens, dropped_turns=keep_from, cut=True, over_budget=tokens > budget
    )
