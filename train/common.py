"""What the SFT and GRPO trainers share: device flags, loading a model and its tokenizer, LoRA configs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def lora_config(
    rank: int,
    alpha: float,
    dropout: float,
    target_modules: str | list[str],
    modules_to_save: list[str] | None = None,
) -> Any:
    """A PEFT ``LoraConfig`` for a causal LM."""
    from peft import LoraConfig

    return LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        modules_to_save=modules_to_save,
        bias="none",
        task_type="CAUSAL_LM",
    )


def recipe_lora(recipe: Any) -> Any:
    """The LoraConfig a recipe asks for (its ``lora_*`` fields), or None when ``use_lora`` is off."""
    if not recipe.use_lora:
        return None
    return lora_config(
        recipe.lora_rank,
        recipe.lora_alpha,
        recipe.lora_dropout,
        recipe.target_modules,
        recipe.modules_to_save,
    )


def quiet_trl() -> None:
    """Silence TRL's experimental-feature warnings (rollout_func) for our own, deliberate use."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
