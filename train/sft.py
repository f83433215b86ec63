"""Supervised fine-tuning with TRL's ``SFTTrainer`` and a PEFT LoRA adapter.

The default recipe is the PTXBench paper's (appendix A.1; ptxbench.md 7.3): LoRA rank 32, learning rate
4.65e-4 with linear decay, 5 epochs, batch 2, Adam betas (0.9, 0.95), eps 1e-8, no weight decay,
sequences up to 65,536 tokens (longer rows are dropped, not truncated), shuffle seed 0, a checkpoint
every 50 steps, loss on the last assistant message only. LoRA alpha is not given there: we use
alpha = rank (scale 1); LoRA goes on every linear layer.

The dataset is a prompt-completion ``datasets.Dataset`` (``ptxgym.train.sft_examples``), so the loss is on
the completion (the last assistant message) with any chat template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.train.common import LoraRecipe, device_flags, get_preset, load_model_and_tokenizer


class SftRecipe(BaseModel):
    """Hyper-parameters of one SFT run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lora: LoraRecipe = Field(default_factory=lambda: LoraRecipe(alpha=32.0, dropout=0.0))
    learning_rate: float = Field(4.65e-4, gt=0)
    lr_scheduler: str = "linear"
    warmup: float = Field(0.0, ge=0, description="Warm-up steps (>= 1) or fraction of all steps (< 1).")
    epochs: float = Field(5.0, gt=0)
    max_steps: int = Field(-1, description="Overrides epochs when > 0.")
    batch_size: int = Field(2, ge=1)
    grad_accum: int = Field(1, ge=1)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.0
    max_length: int = Field(65_536, ge=16)
    drop_long: bool = Field(True, description="Drop rows longer than max_length (else truncate them).")
    seed: int = 0
    bf16: bool | None = Field(None, description="None: bf16 on a GPU that has it, fp32 otherwise.")
    gradient_checkpointing: bool | None = Field(None, description="None: on a GPU, off on the CPU.")
    logging_steps: int = 10
    save_steps: int | None = Field(50, description="Checkpoint every N steps; None saves only the end.")
    progress: bool = Field(True, description="A step progress bar with the time left (on stderr).")


PRESETS: dict[str, SftRecipe] = {
    "paper": SftRecipe(),
    # Checks that the plumbing runs on any data (the rows built from the shipped solutions included) in
    # under a minute on two CPU cores with `ptxgym train tiny`: 2 steps on rows cut to 2048 tokens.
    "smoke": SftRecipe(
        lora=LoraRecipe(rank=8, alpha=16.0, dropout=0.0),
        learning_rate=5e-3,
        max_steps=2,
        batch_size=1,
        max_length=2048,
        drop_long=False,
        logging_steps=1,
        save_steps=None,
    ),
}


def get_recipe(name: str, **overrides: Any) -> SftRecipe:
    """A named preset with (dotted) fields overridden, e.g. ``get_recipe("smoke", **{"lora.rank": 4})``.

    A bad value or an unknown field is an error that names the valid fields.
    """
    return get_preset(PRESETS, "SFT", name, overrides)


@dataclass
class SftRun:
    """What a finished SFT run left behind."""

    output_dir: Path
    adapter_dir: Path
    rows: int
    dropped_long: int
    metrics: dict[str, float] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    trainer: Any = None


def _token_lengths(dataset: Any, tokenizer: Any) -> list[int]:
    out = []
    for row in dataset:
        ids = tokenizer.apply_chat_template(
            row["prompt"] + row["completion"], tokenize=True, return_dict=False
        )
        out.append(len(ids))
    return out


def prepare_dataset(dataset: Any, tokenizer: Any, recipe: SftRecipe) -> tuple[Any, int]:
    """Keep ``prompt``/``completion`` only; drop rows over ``max_length`` when the recipe says so."""
    if isinstance(dataset, (str, Path)):
        from ptxgym.train.sft_examples import load_sft_dataset

        dataset = load_sft_dataset(dataset)
    missing = {"prompt", "completion"} - set(dataset.column_names)
    if missing:
        raise ValueError(
            f"the SFT dataset lacks columns {sorted(missing)}; build it with ptxgym.train.sft_examples"
        )
    dataset = dataset.select_columns(["prompt", "completion"])
    if not recipe.drop_long:
        return dataset, 0
    lengths = _token_lengths(dataset, tokenizer)
    keep = [i for i, n in enumerate(lengths) if n <= recipe.max_length]
    return dataset.select(keep), len(lengths) - len(keep)


def sft_config(recipe: SftRecipe, output_dir: str | Path) -> Any:
    """The ``trl.SFTConfig`` of a recipe on this machine."""
    from trl import SFTConfig

    flags = device_flags(recipe.bf16, recipe.gradient_checkpointing)
    return SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=recipe.epochs,
        max_steps=recipe.max_steps,
        per_device_train_batch_size=recipe.batch_size,
        gradient_accumulation_steps=recipe.grad_accum,
        learning_rate=recipe.learning_rate,
        lr_scheduler_type=recipe.lr_scheduler,
        warmup_steps=recipe.warmup,
        adam_beta1=recipe.adam_beta1,
        adam_beta2=recipe.adam_beta2,
        adam_epsilon=recipe.adam_epsilon,
        weight_decay=recipe.weight_decay,
        max_length=recipe.max_length,
        seed=recipe.seed,
        data_seed=recipe.seed,
        bf16=flags.bf16,
        use_cpu=flags.use_cpu,
        gradient_checkpointing=flags.gradient_checkpointing,
        logging_steps=recipe.logging_steps,
        save_strategy="steps" if recipe.save_steps else "no",
        save_steps=recipe.save_steps or 500,
        report_to="none",
        completion_only_loss=True,
        disable_tqdm=not recipe.progress,
    )


def train_sft(
    model: str | Any,
    dataset: Any,
    output_dir: str | Path,
    recipe: SftRecipe | None = None,
    tokenizer: str | Any | None = None,
    callbacks: list[Any] | None = None,
) -> SftRun:
    """Fine-tune ``model`` on a prompt-completion dataset; saves the adapter (or model) under ``final/``."""
    from trl import SFTTrainer

    recipe = recipe or SftRecipe()
    flags = device_flags(recipe.bf16, recipe.gradient_checkpointing)
    model_obj, tok = load_model_and_tokenizer(model, tokenizer, bf16=flags.bf16)
    data, dropped = prepare_dataset(dataset, tok, recipe)
    if len(data) == 0:
        raise ValueError(f"no SFT rows left: all {dropped} are longer than max_length={recipe.max_length}")
    peft = recipe.lora.peft_config()
    trainer = SFTTrainer(
        model=model_obj,
        args=sft_config(recipe, output_dir),
        train_dataset=data,
        processing_class=tok,
        peft_config=peft,
        callbacks=callbacks,
    )
    result = trainer.train()
    final = Path(output_dir) / "final"
    trainer.save_model(str(final))
    tok.save_pretrained(str(final))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return SftRun(Path(output_dir), final, len(data), dropped, dict(result.metrics), losses, trainer)
