"""Sampling settings shared by the model policies, and named presets.

``SamplingParams`` holds the OpenAI fields (temperature, top_p, max_tokens, presence_penalty, ...) and the
server-specific ones vLLM and SGLang accept in ``extra_body`` (top_k, min_p, repetition_penalty, ...).
``to_openai`` splits them the way the chat-completions API wants; ``to_generate_kwargs`` maps them to
``transformers.GenerationConfig`` names.

Presets: ``qwen-paper`` is the PTXBench paper's setting for its Qwen models (T=1.0, top_p 0.95,
top_k 20, presence_penalty 1.5, max_tokens 81,920); ``greedy`` is deterministic decoding; ``default``
leaves everything to the server.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_OPENAI_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed", "stop")
_EXTRA_FIELDS = ("top_k", "min_p", "repetition_penalty")


class SamplingParams(BaseModel):
    """Decoding settings; ``None`` leaves a setting to the backend's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, description="-1 or None: off. Sent in extra_body.")
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="Sent in extra_body.")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = Field(None, gt=0.0, description="Sent in extra_body.")
    max_tokens: int | None = Field(None, ge=1, description="New tokens per response (reasoning included).")
    seed: int | None = None
    stop: list[str] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Anything else the server takes.")

    def merged(self, **changes: Any) -> SamplingParams:
        """A copy with some settings changed; ``extra_body`` dicts are merged, not replaced."""
        data = self.model_dump()
        extra = {**data.pop("extra_body"), **changes.pop("extra_body", {})}
        data.update({k: v for k, v in changes.items()})
        return SamplingParams(**data, extra_body=extra)

    def to_openai(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(standard request fields, extra_body fields) for /v1/chat/completions."""
        std = {k: getattr(self, k) for k in _OPENAI_FIELDS if getattr(self, k) is not None}
        if self.max_tokens is not None:
            std["max_tokens"] = self.max_tokens
        extra = {k: getattr(self, k) for k in _EXTRA_FIELDS if getattr(self, k) is not None}
        extra.update(self.extra_body)
        return std, extra

    def to_generate_kwargs(self) -> tuple[dict[str, Any], list[str]]:
        """(kwargs for ``model.generate``, names of settings transformers cannot honour)."""
        kw: dict[str, Any] = {}
        ignored = []
        t = self.temperature
        kw["do_sample"] = t is None or t > 0
        if kw["do_sample"]:
            for name in ("temperature", "top_p", "min_p"):
                if getattr(self, name) is not None:
                    kw[name] = getattr(self, name)
            if self.top_k is not None and self.top_k > 0:
                kw["top_k"] = self.top_k
        if self.repetition_penalty is not None:
            kw["repetition_penalty"] = self.repetition_penalty
        if self.max_tokens is not None:
            kw["max_new_tokens"] = self.max_tokens
        for name in ("presence_penalty", "frequency_penalty", "stop"):
            if getattr(self, name):
                ignored.append(name)
        ignored += sorted(self.extra_body)
        return kw, ignored


PRESETS: dict[str, SamplingParams] = {
    "qwen-paper": SamplingParams(
        temperature=1.0, top_p=0.95, top_k=20, presence_penalty=1.5, max_tokens=81920
    ),
    "greedy": SamplingParams(temperature=0.0),
    "default": SamplingParams(),
}


def get_preset(name: str) -> SamplingParams:
    """A named preset; the error lists the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown sampling preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["top_k=40", "temperature=0.6", "stop=</s>"]`` -> typed dict (ints, floats, JSON, else strings).

    Unknown names go to ``extra_body`` so any server-specific setting can be passed from the CLI.
    """
    import json

    out: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"sampling override must look like name=value, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if key == "stop" and isinstance(value, str):
            value = [value]
        (out if key in SamplingParams.model_fields and key != "extra_body" else extra)[key] = value
    if extra:
        out["extra_body"] = extra
    return out
