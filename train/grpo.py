"""GRPO with TRL's ``GRPOTrainer``, rewards from the ptxgym environment, LoRA through PEFT.

- ``max_turns == 1``: single-turn. TRL samples ``num_generations`` completions per task prompt; each is
  one env turn, evaluated in a batch by the async ``EnvReward`` (``ptxgym.train.env_reward``).
- ``max_turns > 1``: multi-turn. ``MultiTurnRollout`` (``ptxgym.train.rollout``) is TRL's
  ``rollout_func``: it plays the env for several turns, masks the environment's tokens and credits each
  turn with its discounted return (``credit="turn"``, Kevin-style) or each episode with its return
  (``credit="episode"``).

Generation is vLLM (``use_vllm``, colocated by default) when vLLM is installed and a GPU is visible,
else ``transformers.generate`` (``use_vllm=None`` decides; an explicit value is kept). The recipe's
defaults follow TRL 1.16 (``loss_type="dapo"``, ``beta=0``, group-scaled rewards) with a learning rate
for LoRA, and a DAPO upper clip of 0.28.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.train.common import device_flags, load_model_and_tokenizer, quiet_trl, recipe_lora


class GrpoRecipe(BaseModel):
    """Hyper-parameters of one GRPO run, the environment included."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # environment
    tasks: list[str] = Field(default_factory=lambda: ["Gemm-sm90a"], description="Catalog task ids.")
    variants: list[str | None] = Field(default_factory=lambda: [None], description="Prompt variants.")
    reward: str = Field("staged", description="ptxgym reward spec (name or weighted sum).")
    reward_options: dict[str, Any] = Field(default_factory=dict)
    evaluator: str = Field("auto", description="auto, none or local.")
    eval_settings: dict[str, Any] = Field(default_factory=dict, description="EvalSettings fields.")
    eval_workers: int = Field(8, ge=1, description="Turns evaluated at once.")
    max_turns: int = Field(1, ge=1, description="1: single-turn GRPO; >1: multi-turn rollout_func.")
    credit: Literal["turn", "episode"] = "turn"
    gamma: float = Field(0.4, ge=0, le=1)
    target_speedup: float = 1.2
    # model
    use_lora: bool = True
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"
    modules_to_save: list[str] | None = None
    # optimisation
    learning_rate: float = 1e-5
    max_steps: int = Field(100, ge=1)
    batch_size: int = Field(8, ge=1, description="Completions per device per step.")
    num_generations: int = Field(8, ge=2, description="Completions per prompt (the GRPO group).")
    grad_accum: int = 1
    max_completion_length: int = 4096
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = 0.28
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    seed: int = 0
    bf16: bool | None = None
    gradient_checkpointing: bool | None = None
    use_vllm: bool | None = None
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    logging_steps: int = 1
    save_steps: int | None = None
    log_completions: bool = False


PRESETS: dict[str, GrpoRecipe] = {
    "default": GrpoRecipe(),
    "smoke": GrpoRecipe(
        max_steps=1,
        batch_size=2,
        num_generations=2,
        max_completion_length=32,
        learning_rate=1e-3,
        lora_rank=8,
        lora_alpha=16.0,
        lora_dropout=0.0,
        evaluator="none",
    ),
}


def get_recipe(name: str, **overrides: Any) -> GrpoRecipe:
    """A named preset with fields overridden (validated: a bad value or unknown field is an error)."""
    if name not in PRESETS:
        raise KeyError(f"unknown GRPO preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
    return GrpoRecipe.model_validate({**PRESETS[name].model_dump(), **overrides})


def vllm_usable() -> bool:
    """vLLM is installed and a CUDA GPU is visible."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def grpo_config(recipe: GrpoRecipe, output_dir: str | Path) -> Any:
    """The ``trl.GRPOConfig`` of a recipe on this machine."""
    from trl import GRPOConfig

    flags = device_flags(recipe.bf16, recipe.gradient_checkpointing)
    use_vllm = vllm_usable() if recipe.use_vllm is None else recipe.use_vllm
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=recipe.max_steps,
        per_device_train_batch_size=recipe.batch_size,
        num_generations=recipe.num_generations,
        gradient_accumulation_steps=recipe.grad_accum,
        max_completion_length=recipe.max_completion_length,
        temperature=recipe.temperature,
        top_p=recipe.top_p,
        learning_rate=recipe.learning_rate,
        beta=recipe.beta,
        epsilon=recipe.epsilon,
        epsilon_high=recipe.epsilon_high,
        loss_type=recipe.loss_type,
        scale_rewards=recipe.scale_rewards,
        mask_truncated_completions=recipe.mask_truncated_completions,
        seed=recipe.seed,
        bf16=flags.bf16,
        use_cpu=flags.use_cpu,
        gradient_checkpointing=flags.gradient_checkpointing,
        use_vllm=use_vllm,
        vllm_mode=recipe.vllm_mode,
        vllm_gpu_memory_utilization=recipe.vllm_gpu_memory_utilization,
        logging_steps=recipe.logging_steps,
        save_strategy="steps" if recipe.save_steps else "no",
        save_steps=recipe.save_steps or 500,
        report_to="none",
        disable_tqdm=True,
        log_completions=recipe.log_completions,
    )


def prompt_repeats(recipe: GrpoRecipe) -> int:
    """Copies of each prompt in the dataset so one step's prompts fit in it (TRL drops a short batch)."""
    per_step = max(recipe.batch_size * recipe.grad_accum // recipe.num_generations, 1)
    distinct = max(len(recipe.tasks) * len(recipe.variants), 1)
    return max(1, -(-per_step // distinct))


@dataclass
class GrpoRun:
    """What a finished GRPO run left behind."""

    output_dir: Path
    adapter_dir: Path
    metrics: dict[str, float] = field(default_factory=dict)
    log_history: list[dict[str, Any]] = field(default_factory=list)
    trainer: Any = None


def build_trainer(
    model: str | Any,
    recipe: GrpoRecipe,
    output_dir: str | Path,
    tokenizer: str | Any | None = None,
    callbacks: list[Any] | None = None,
) -> Any:
    """A ready ``GRPOTrainer`` whose rewards come from the environment."""
    from trl import GRPOTrainer

    from ptxgym.train.env_reward import EnvReward, PipelinePool, build_grpo_dataset
    from ptxgym.train.rollout import MultiTurnRollout, RolloutConfig, RolloutReward

    quiet_trl()
    config = grpo_config(recipe, output_dir)
    model_obj, tok = load_model_and_tokenizer(model, tokenizer, bf16=config.bf16)
    dataset, index = build_grpo_dataset(recipe.tasks, recipe.variants, repeats=prompt_repeats(recipe))
    from ptxgym.evaluation.trusted.base import EvalSettings

    settings = EvalSettings(**recipe.eval_settings) if recipe.eval_settings else None
    pool = PipelinePool(recipe.evaluator, settings=settings, max_workers=recipe.eval_workers)
    if recipe.max_turns == 1:
        reward_funcs, rollout = [EnvReward(recipe.reward, pool, reward_options=recipe.reward_options)], None
    else:
        rollout = MultiTurnRollout(
            index,
            RolloutConfig(
                max_turns=recipe.max_turns,
                credit=recipe.credit,
                gamma=recipe.gamma,
                reward=recipe.reward,
                reward_options=recipe.reward_options,
                target_speedup=recipe.target_speedup,
            ),
            pool,
        )
        reward_funcs = [RolloutReward()]
    peft = recipe_lora(recipe)
    trainer = GRPOTrainer(
        model=model_obj,
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=peft,
        rollout_func=rollout,
        callbacks=callbacks,
    )
    trainer.ptxgym_pool = pool
    return trainer


def train_grpo(
    model: str | Any,
    recipe: GrpoRecipe | None = None,
    output_dir: str | Path = "grpo-out",
    tokenizer: str | Any | None = None,
    callbacks: list[Any] | None = None,
) -> GrpoRun:
    """Run GRPO; saves the adapter (or model) and tokenizer under ``final/``."""
    recipe = recipe or GrpoRecipe()
    trainer = build_trainer(model, recipe, output_dir, tokenizer, callbacks)
    try:
        result = trainer.train()
    finally:
        trainer.ptxgym_pool.close()
    final = Path(output_dir) / "final"
    trainer.save_model(str(final))
    trainer.processing_class.save_pretrained(str(final))
    return GrpoRun(Path(output_dir), final, dict(result.metrics), list(trainer.state.log_history), trainer)
