"""TransformersPolicy: a local model run in-process with ``transformers`` (lazy imports; optional PEFT LoRA).

The chat template of the tokenizer renders the prompt (``apply_chat_template(add_generation_prompt=True)``;
``enable_thinking`` is passed to templates that take it, e.g. Qwen3); ``generate`` samples with the
``SamplingParams`` it can honour (temperature, top_p, top_k, min_p, repetition_penalty, max_tokens).
presence/frequency penalties and stop strings have no ``generate`` equivalent: they are ignored with a
warning once. A leading ``<think>...</think>`` block becomes the action's reasoning.

Token counts use the model's own tokenizer, and the context window defaults to the model config's
``max_position_embeddings``. Calls are serialised (one model, one device): ``act_batch`` batches
several prompts into one left-padded ``generate`` instead.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.policies.base import Action, ContextOverflowError, Observation
from ptxgym.policies.chat import ChatModelPolicy, split_reasoning
from ptxgym.policies.history import BuiltPrompt, Conversation, HistoryMode
from ptxgym.policies.sampling import SamplingParams


class TransformersConfig(BaseModel):
    """Everything a ``TransformersPolicy`` is configured by."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = Field(None, description="Model directory or hub name (or pass model= an object).")
    tokenizer: str | None = Field(None, description="None: the model's own.")
    lora: str | None = Field(None, description="A PEFT adapter directory put on the model.")
    sampling: SamplingParams = Field(default_factory=lambda: SamplingParams(max_tokens=1024))
    history: HistoryMode = HistoryMode.FULL
    max_context_tokens: int | None = Field(None, description="None: the model's position limit.")
    device: str | None = None
    dtype: str = "auto"
    enable_thinking: bool | None = None
    seed: int | None = None
    name: str | None = Field(None, description="How the policy is named in records.")


class TransformersPolicy(ChatModelPolicy):
    """A causal LM from a local directory, a hub name, or objects already in memory."""

    def __init__(self, config: TransformersConfig, *, model: Any = None, tokenizer: Any = None) -> None:
        """``model`` / ``tokenizer``: objects in memory instead of ``config.model`` / ``config.tokenizer``."""
        source = model if model is not None else config.model
        if source is None:
            raise ValueError("TransformersPolicy needs config.model (a path or name) or model= (an object)")
        self.config = config
        self.model, self.tokenizer = _load(
            source, tokenizer if tokenizer is not None else config.tokenizer, config.dtype, config.device
        )
        if config.lora:
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, config.lora)
        self.model.eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        window = config.max_context_tokens or getattr(self.model.config, "max_position_embeddings", None)
        super().__init__(
            sampling=config.sampling, history=config.history, max_context_tokens=window, counter=self._count
        )
        self.enable_thinking, self.seed, self.lora = config.enable_thinking, config.seed, config.lora
        self.name = config.name or (source if isinstance(source, str) else type(self.model).__name__)
        self._lock = threading.Lock()
        self._warned = False

    @property
    def max_parallel(self) -> int:
        """One in-process model: calls run one at a time."""
        return 1

    def _count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    # ------------------------------------------------------------------------------------------ public

    def act(self, observation: Observation, history: Conversation | None = None) -> Action:
        """One response for the next turn."""
        return self.act_batch([(observation, history)])[0]

    def sample(self, observation: Observation, history: Conversation | None, n: int) -> list[Action]:
        """``n`` responses to one prompt (``num_return_sequences``)."""
        built = self.build_prompt(observation, history)
        return self._generate([built], n)[0]

    def act_batch(self, items: Sequence[tuple[Observation, Conversation | None]]) -> list[Action]:
        """Several prompts in one left-padded ``generate`` call."""
        built = [self.build_prompt(o, h) for o, h in items]
        return [group[0] for group in self._generate(built, 1)]

    def describe(self) -> dict[str, Any]:
        """Model name, adapter and sampling."""
        return {**super().describe(), "lora": self.lora}

    # ------------------------------------------------------------------------------------- generation

    def _render(self, built: BuiltPrompt) -> str:
        msgs = [{"role": m.role, "content": m.content} for m in built.messages]
        kwargs: dict[str, Any] = {}
        if self.enable_thinking is not None:
            kwargs["enable_thinking"] = self.enable_thinking
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs)

    def _generate(self, prompts: list[BuiltPrompt], n: int) -> list[list[Action]]:
        import torch

        kwargs, ignored = self.sampling.to_generate_kwargs()
        if ignored and not self._warned:
            warnings.warn(
                f"transformers generate ignores these sampling settings: {', '.join(ignored)}", stacklevel=3
            )
            self._warned = True
        texts = [self._render(b) for b in prompts]
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompt_len = enc["input_ids"].shape[1]
        room = (self.max_context_tokens or prompt_len + kwargs.get("max_new_tokens", 1024)) - prompt_len
        if room < 1:
            raise ContextOverflowError(
                f"the prompt has {prompt_len} tokens; the context window of "
                f"{self.name} is {self.max_context_tokens}"
            )
        kwargs["max_new_tokens"] = min(kwargs.get("max_new_tokens", room), room)
        device = next(self.model.parameters()).device
        with self._lock, torch.no_grad():
            if self.seed is not None:
                torch.manual_seed(self.seed)
            out = self.model.generate(
                **{k: v.to(device) for k, v in enc.items()},
                num_return_sequences=n,
                pad_token_id=self.tokenizer.pad_token_id,
                **kwargs,
            )
        return self._decode(out[:, prompt_len:], enc["attention_mask"], prompts, n)

    def _eos_ids(self) -> set[int]:
        """End-of-turn ids: the tokenizer's eos and the generation config's (an int or a list)."""
        ids = {self.tokenizer.eos_token_id}
        gen = getattr(self.model, "generation_config", None)
        extra = getattr(gen, "eos_token_id", None)
        ids |= set(extra) if isinstance(extra, (list, tuple)) else {extra}
        return {i for i in ids if i is not None}

    def _decode(self, new_ids: Any, mask: Any, prompts: list[BuiltPrompt], n: int) -> list[list[Action]]:
        eos = self._eos_ids()
        groups: list[list[Action]] = []
        for i, built in enumerate(prompts):
            group = []
            for j in range(n):
                ids = new_ids[i * n + j].tolist()
                finish = "length"
                stop_at = next((k for k, t in enumerate(ids) if t in eos), None)
                if stop_at is not None:
                    ids, finish = ids[:stop_at], "stop"
                ids = [t for t in ids if t != self.tokenizer.pad_token_id]
                raw = self.tokenizer.decode(ids, skip_special_tokens=True)
                text, reasoning = split_reasoning(raw)
                group.append(
                    Action(
                        text=text,
                        reasoning=reasoning,
                        prompt_tokens=int(mask[i].sum()),
                        completion_tokens=len(ids),
                        finish_reason=finish,
                        messages=built.messages,
                        dropped_turns=built.dropped_turns,
                    )
                )
            groups.append(group)
        return groups


def _load(model: str | Any, tokenizer: str | Any | None, dtype: str, device: str | None) -> tuple[Any, Any]:
    """Model and tokenizer objects from paths/names or as given."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model, str):
        kwargs: dict[str, Any] = {"dtype": dtype}
        if device:
            kwargs["device_map"] = device
        model_obj = AutoModelForCausalLM.from_pretrained(model, **kwargs)
    else:
        model_obj = model
        if device:
            model_obj = model_obj.to(device)
    if tokenizer is None:
        if not isinstance(model, str):
            raise ValueError("pass tokenizer= when the model is an object, not a path")
        tokenizer = model
    tok = AutoTokenizer.from_pretrained(tokenizer) if isinstance(tokenizer, str) else tokenizer
    if getattr(tok, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template; set tokenizer.chat_template (a Jinja string)")
    return model_obj, tok
