"""Policies: who writes the kernels. One small interface, several backends.

``policy.act(observation, history) -> Action`` answers one turn (``act_batch`` several, ``act_async``
without blocking, ``sample(..., n)`` n answers to one prompt). ``history`` is a ``Conversation``: the
task prompt plus each earlier response and the feedback that followed; history modes (``full``,
``latest``) and a token budget decide what the model sees.

| policy | backend |
| --- | --- |
| ``OpenAIChatPolicy`` | any OpenAI-compatible chat server: vLLM, SGLang (``ptxgym serve`` starts one) |
| ``TransformersPolicy`` | a local model in-process (transformers, optional PEFT LoRA) |
| ``ReferencePolicy`` | the expert solutions shipped in the knowledge packs |
| ``ReplayPolicy`` | the responses of a recorded trajectory file |

Nothing heavy is imported here: the backends load ``openai``, ``transformers`` and ``torch`` when built.
"""

from __future__ import annotations

import importlib
from typing import Any

from ptxgym.policies.base import (
    Action,
    ContextOverflowError,
    MissingSolutionError,
    Policy,
    PolicyError,
    PolicyExhausted,
    ServerError,
    ServerUnavailableError,
)
from ptxgym.policies.factory import POLICY_BUILDERS, POLICY_KINDS, PolicyConfig, build_policy
from ptxgym.policies.history import Conversation, Exchange, HistoryMode, build_messages, estimate_tokens
from ptxgym.policies.sampling import PRESETS, SamplingParams, get_preset

_LAZY = {
    "OpenAIChatConfig": "ptxgym.policies.openai_chat",
    "OpenAIChatPolicy": "ptxgym.policies.openai_chat",
    "RetryPolicy": "ptxgym.policies.openai_chat",
    "TransformersConfig": "ptxgym.policies.transformers_policy",
    "TransformersPolicy": "ptxgym.policies.transformers_policy",
    "ReferencePolicy": "ptxgym.policies.reference",
    "ReplayPolicy": "ptxgym.policies.replay",
    "ServeSpec": "ptxgym.policies.serve",
    "serve_command": "ptxgym.policies.serve",
}

__all__ = [
    "Action",
    "ContextOverflowError",
    "Conversation",
    "Exchange",
    "HistoryMode",
    "MissingSolutionError",
    "POLICY_BUILDERS",
    "POLICY_KINDS",
    "PRESETS",
    "Policy",
    "PolicyConfig",
    "PolicyError",
    "PolicyExhausted",
    "SamplingParams",
    "ServerError",
    "ServerUnavailableError",
    "build_messages",
    "build_policy",
    "estimate_tokens",
    "get_preset",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ptxgym.policies' has no attribute {name!r}")
