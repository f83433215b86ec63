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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.train.common import LoraRecipe, device_flags, get_preset, load_model_and_tokenizer, quiet_trl
from ptxgym.train.rollout import RolloutConfig


class EnvRecipe(BaseModel):
    """Where the rewards come from: tasks, prompt variants, reward, evaluator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: list[str] = Field(default_factory=lambda: ["Gemm-sm90a"], description="Catalog task ids.")
    variants: list[str | None] = Field(
        default_factory=lambda: list[str | None]([None]), description="Prompt variants."
    )
    reward: str = Field("staged", description="ptxgym reward spec (name or weighted sum).")
    reward_options: dict[str, Any] = Field(default_factory=dict)
    evaluator: str = Field("auto", description="auto, none, local or ray.")
    eval_settings: dict[str, Any] = Field(default_factory=dict, description="EvalSettings fields.")
    eval_workers: int = Field(8, ge=1, description="Turns evaluated at once.")
    target_speedup: float = Field(1.2, description="An episode ends when a correct turn reaches it.")


class GenerationRecipe(BaseModel):
    """How completions are sampled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_generations: int = Field(8, ge=2, description="Completions per prompt (the GRPO group).")
    max_completion_length: int = 4096
    temperature: float = 1.0
    top_p: float = 1.0
    use_vllm: bool | None = Field(None, description="None: vLLM when installed and a GPU is visible.")
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3


class OptimRecipe(BaseModel):
    """The optimisation step and its bookkeeping."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    learning_rate: float = 1e-5
    max_steps: int = Field(100, ge=1)
    batch_size: int = Field(8, ge=1, description="Completions per device per step.")
    grad_accum: int = 1
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = 0.28
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    seed: int = 0
    bf16: bool | None = None
    gradient_checkpointing: bool | None = None
    logging_steps: int = 1
    save_steps: int | None = None
    log_completions: bool = False
    progress: bool = Field(True, description="A step progress bar with the time left (on stderr).")


class GrpoRecipe(BaseModel):
    """One GRPO run: each concern in its own section, each field in one place."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: EnvRecipe = Field(default_factory=EnvRecipe)
    rollout: RolloutConfig = Field(
        default_factory=lambda: RolloutConfig(max_turns=1),
        description="max_turns 1: single-turn GRPO; more: the multi-turn rollout_func.",
    )
    lora: LoraRecipe = Field(default_factory=LoraRecipe)
    generation: GenerationRecipe = Field(default_factory=GenerationRecipe)
    optim: OptimRecipe = Field(default_factory=OptimRecipe)


PRESETS: dict[str, GrpoRecipe] = {
    "default": GrpoRecipe(),
    "smoke": GrpoRecipe(
        env=EnvRecipe(evaluator="none"),
        lora=LoraRecipe(rank=8, alpha=16.0, dropout=0.0),
        generation=GenerationRecipe(num_generations=2, max_completion_length=32),
        optim=OptimRecipe(max_steps=1, batch_size=2, learning_rate=1e-3),
    ),
}


def get_recipe(name: str, **overrides: Any) -> GrpoRecipe:
    """A named preset with dotted fields overridden, e.g. ``get_recipe("smoke", **{"optim.max_steps": 3})``.

    A bad value or an unknown field is an error that names the valid fields.
    """
    return get_preset(PRESETS, "GRPO", name, overrides)


def vllm_usable() -> bool:
    """vLLM is installed and a CUDA GPU is visible."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def grpo_config(recipe: GrpoRecipe, output_dir: str | Path) -> Any:
    """The ``trl.GRPOConfig`` of a recipe on this machine."""
    from trl import GRPOConfig

    gen, opt = recipe.generation, recipe.optim
    flags = device_flags(opt.bf16, opt.gradient_checkpointing)
    use_vllm = vllm_usable() if gen.use_vllm is None else gen.use_vllm
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=opt.max_steps,
        per_device_train_batch_size=opt.batch_size,
        num_generations=gen.num_generations,
        gradient_accumulation_steps=opt.grad_accum,
        max_completion_length=gen.max_completion_length,
        temperature=gen.temperature,
        top_p=gen.top_p,
        learning_rate=opt.learning_rate,
        beta=opt.beta,
        epsilon=opt.epsilon,
        epsilon_high=opt.epsilon_high,
        loss_type=opt.loss_type,
        scale_rewards=opt.scale_rewards,
        mask_truncated_completions=opt.mask_truncated_completions,
        seed=opt.seed,
        bf16=flags.bf16,
        use_cpu=flags.use_cpu,
        gradient_checkpointing=flags.gradient_checkpointing,
        use_vllm=use_vllm,
        vllm_mode=gen.vllm_mode,
        vllm_gpu_memory_utilization=gen.vllm_gpu_memory_utilization,
        logging_steps=opt.logging_steps,
        save_strategy="steps" if opt.save_steps else "no",
        save_steps=opt.save_steps or 500,
        report_to="none",
        disable_tqdm=not opt.progress,
        log_completions=opt.log_completions,
    )


def prompt_repeats(recipe: GrpoRecipe) -> int:
    """Copies of each prompt in the dataset so one step's prompts fit in it (TRL drops a short batch)."""
    per_step = max(recipe.optim.batch_size * recipe.optim.grad_accum // recipe.generation.num_generations, 1)
    distinct = max(len(recipe.env.tasks) * len(recipe.env.variants), 1)
    return max(1, -(-per_step // distinct))


@dataclass
class GrpoRun:
    """What a finished GRPO run left behind."""

    output_dir: Path
    adapter_dir: Path
    metrics: dict[str, float] = field(default_factory=dict)
    log_history: list[dict[str, Any]] = field(default_factory=list)
    trainer: Any = None


@dataclass
class GrpoSetup:
    """A ready ``GRPOTrainer`` and the evaluation pool its rewards use (``close()`` it when done)."""

    trainer: Any
    pool: Any
    """The ``PipelinePool`` that evaluates completions in the env."""
    rollout: Any = None
    """The ``MultiTurnRollout`` (multi-turn recipes), also the trainer's ``rollout_func``."""

    def close(self) -> None:
        """Stop the evaluation pool."""
        self.pool.close()


def build_trainer(
    model: str | Any,
    recipe: GrpoRecipe,
    output_dir: str | Path,
    tokenizer: str | Any | None = None,
    callbacks: list[Any] | None = None,
) -> GrpoSetup:
    """A ready ``GRPOTrainer`` whose rewards come from the environment, with its evaluation pool."""
    from trl import GRPOTrainer

    from ptxgym.evaluation.trusted.base import EvalSettings
    from ptxgym.train.env_reward import EnvReward, PipelinePool, build_grpo_dataset
    from ptxgym.train.rollout import MultiTurnRollout, RolloutReward

    quiet_trl()
    env = recipe.env
    config = grpo_config(recipe, output_dir)
    model_obj, tok = load_model_and_tokenizer(model, tokenizer, bf16=config.bf16)
    dataset, index = build_grpo_dataset(env.tasks, env.variants, repeats=prompt_repeats(recipe))
    settings = EvalSettings(**env.eval_settings) if env.eval_settings else None
    pool = PipelinePool(env.evaluator, settings=settings, max_workers=env.eval_workers)
    rollout = None
    reward_funcs: list[Any]
    if recipe.rollout.max_turns == 1:
        reward_funcs = [EnvReward(env.reward, pool, reward_options=env.reward_options)]
    else:
        rollout = MultiTurnRollout(
            index,
            recipe.rollout,
            pool,
            reward=env.reward,
            reward_options=env.reward_options,
            target_speedup=env.target_speedup,
        )
        reward_funcs = [RolloutReward()]
    trainer = GRPOTrainer(
        model=model_obj,
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=recipe.lora.peft_config(),
        rollout_func=rollout,
        callbacks=callbacks,
    )
    return GrpoSetup(trainer, pool, rollout)


def train_grpo(
    model: str | Any,
    recipe: GrpoRecipe | None = None,
    output_dir: str | Path = "grpo-out",
    tokenizer: str | Any | None = None,
    callbacks: list[Any] | None = None,
) -> GrpoRun:
    """Run GRPO; saves the adapter (or model) and tokenizer under ``final/``."""
    recipe = recipe or GrpoRecipe()
    setup = build_trainer(model, recipe, output_dir, tokenizer, callbacks)
    trainer = setup.trainer
    try:
        result = trainer.train()
    finally:
        setup.close()
    final = Path(output_dir) / "final"
    trainer.save_model(str(final))
    trainer.processing_class.save_pretrained(str(final))
    return GrpoRun(Path(output_dir), final, dict(result.metrics), list(trainer.state.log_history), trainer)
