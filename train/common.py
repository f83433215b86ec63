"""What the SFT and GRPO trainers share: device flags, model loading, the LoRA recipe, recipe overrides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class DeviceFlags:
    """Precision and placement settings for TRL configs on the machine at hand."""

    use_cpu: bool
    bf16: bool
    gradient_checkpointing: bool


def device_flags(bf16: bool | None = None, gradient_checkpointing: bool | None = None) -> DeviceFlags:
    """CUDA with bf16 where the GPU has it (and checkpointing on), else CPU float32 without checkpointing.

    ``None`` means "decide from the hardware"; an explicit value is kept.
    """
    import torch

    cuda = torch.cuda.is_available()
    bf16_ok = cuda and torch.cuda.is_bf16_supported()
    return DeviceFlags(
        use_cpu=not cuda,
        bf16=bf16_ok if bf16 is None else bf16,
        gradient_checkpointing=cuda if gradient_checkpointing is None else gradient_checkpointing,
    )


def load_model_and_tokenizer(
    model: str | Any, tokenizer: str | Any | None = None, bf16: bool = False
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local directory or hub id, or objects passed through unchanged."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model, str):
        import torch

        dtype = torch.bfloat16 if bf16 else torch.float32
        model_obj = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
    else:
        model_obj = model
    if tokenizer is None:
        if not isinstance(model, str):
            raise ValueError("pass the tokenizer when the model is an object, not a path")
        tokenizer = model
    tok = AutoTokenizer.from_pretrained(tokenizer) if isinstance(tokenizer, str) else tokenizer
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model_obj, tok


class LoraRecipe(BaseModel):
    """The LoRA adapter a trainer puts on the model (PEFT)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="False: train the full model.")
    rank: int = Field(32, ge=1)
    alpha: float = 64.0
    dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"
    modules_to_save: list[str] | None = Field(None, description="Fully trained modules (e.g. embeddings).")

    def peft_config(self) -> Any:
        """The PEFT ``LoraConfig`` this recipe asks for, or None when LoRA is off."""
        if not self.enabled:
            return None
        from peft import LoraConfig

        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,  # type: ignore[arg-type]  # peft takes a float alpha at run time
            lora_dropout=self.dropout,
            target_modules=self.target_modules,
            modules_to_save=self.modules_to_save,
            bias="none",
            task_type="CAUSAL_LM",
        )


def dotted_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every settable field of a (nested) recipe as a dotted path, e.g. ``optim.learning_rate``."""
    out = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out += dotted_fields(kind, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def with_overrides(recipe: R, overrides: Mapping[str, Any]) -> R:
    """A copy of a (nested) recipe with dotted fields replaced, validated.

    ``{"optim.max_steps": 3, "env.tasks": ["Gemm-sm90a"]}``; an unknown field is a ``ValueError`` that
    lists the valid ones, a bad value pydantic's ``ValidationError``.
    """
    data = recipe.model_dump()
    valid = dotted_fields(type(recipe))
    for key, value in overrides.items():
        if key not in valid:
            raise ValueError(f"unknown recipe field {key!r}; valid fields: {', '.join(valid)}")
        node = data
        *path, leaf = key.split(".")
        for part in path:
            node = node[part]
        node[leaf] = value
    return type(recipe).model_validate(data)


def get_preset(presets: Mapping[str, R], kind: str, name: str, overrides: Mapping[str, Any]) -> R:
    """A named preset with dotted fields overridden (``with_overrides``)."""
    if name not in presets:
        raise KeyError(f"unknown {kind} preset {name!r}; presets: {', '.join(sorted(presets))}")
    return with_overrides(presets[name], overrides)


def quiet_trl() -> None:
    """Silence TRL's experimental-feature warnings (rollout_func) for our own, deliberate use."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
