"""The policy interface: ``act(observation, history) -> Action``, with batched and async variants.

A policy answers one turn of a kernel episode. ``observation`` is the env's observation dict (its
``"text"`` is the task prompt after ``reset`` and the rendered feedback after ``step``); ``history`` is
the ``Conversation`` so far (task prompt plus every earlier action and the feedback that followed it).
The policy returns an ``Action``: the response text the env receives, plus the reasoning text, token
usage and the exact prompt messages it sent, where it knows them.

Errors a policy raises are typed (``PolicyError`` and subclasses) so the runner can tell "the server is
gone" (stop, resumable) from "this trajectory is over" (``PolicyExhausted``, ``ContextOverflowError``).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.policies.history import Conversation
from ptxgym.records.errors import PtxgymError
from ptxgym.records.turns import ChatMessage

Observation = Mapping[str, Any]


class Action(BaseModel):
    """One response of a policy."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The response text handed to env.step (reasoning excluded).")
    reasoning: str | None = Field(None, description="Reasoning text the model produced apart, if any.")
    prompt_tokens: int | None = Field(None, description="Prompt tokens (server or tokenizer count).")
    completion_tokens: int | None = Field(None, description="Generated tokens (reasoning included).")
    finish_reason: str | None = Field(None, description="stop, length, ... as the backend reports it.")
    messages: list[ChatMessage] = Field(default_factory=list, description="The prompt messages sent.")
    dropped_turns: int = Field(0, description="Earlier turns left out of the prompt (history mode/budget).")

    def __str__(self) -> str:
        return self.text


class PolicyError(PtxgymError, RuntimeError):
    """A policy could not produce an action (server down, bad model id, ...)."""


class ServerUnavailableError(PolicyError):
    """No inference server answers at the configured URL."""


class ServerError(PolicyError):
    """The inference server answered with an error status after every retry."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ContextOverflowError(PolicyError):
    """The prompt does not fit the model's context window, even after trimming: the trajectory ends."""


class PolicyExhausted(PolicyError):
    """The policy has nothing more to play for this trajectory (a replay that ran out): it ends cleanly."""


class MissingSolutionError(PolicyError):
    """The reference policy has no shipped solution for a task."""


class Policy(ABC):
    """Base class of every policy. Subclasses implement ``act``; the rest has sensible defaults."""

    #: Short name recorded in trajectory files (model id, ``reference``, ``replay``, ...).
    name: str = "policy"

    @abstractmethod
    def act(self, observation: Observation, history: Conversation | None = None) -> Action:
        """Answer one turn."""

    def sample(self, observation: Observation, history: Conversation | None, n: int) -> list[Action]:
        """``n`` independent answers to the same turn (policies with native ``n`` override this)."""
        return [self.act(observation, history) for _ in range(n)]

    def act_batch(self, items: Sequence[tuple[Observation, Conversation | None]]) -> list[Action]:
        """Answer several turns (of different trajectories); results keep the input order."""
        if len(items) <= 1:
            return [self.act(o, h) for o, h in items]
        with ThreadPoolExecutor(max_workers=min(len(items), self.max_parallel)) as pool:
            return list(pool.map(lambda item: self.act(*item), items))

    async def act_async(self, observation: Observation, history: Conversation | None = None) -> Action:
        """``act`` without blocking the event loop (runs in a worker thread unless overridden)."""
        return await asyncio.to_thread(self.act, observation, history)

    @property
    def max_parallel(self) -> int:
        """How many ``act`` calls may usefully run at once (1 for in-process models)."""
        return 16

    def check(self) -> None:  # noqa: B027 - optional hook, most policies need no check
        """Raise a clear ``PolicyError`` now if the policy cannot work (e.g. no server); default: nothing."""

    def describe(self) -> dict[str, Any]:
        """JSON-serialisable description recorded in the run directory."""
        return {"policy": type(self).__name__, "name": self.name}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients, models and threads."""

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def conversation_for(observation: Observation, history: Conversation | None) -> Conversation:
    """The conversation to answer: ``history`` itself, or a one-message one built from the observation.

    Without a history the observation text is taken as the whole first user message (no system
    message), which is what a bare ``env.reset()`` observation holds.
    """
    if history is not None:
        return history
    text = str(observation.get("text", "")) if isinstance(observation, Mapping) else str(observation)
    return Conversation(system="", user=text)
