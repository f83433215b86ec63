"""Multi-turn GRPO: a TRL ``rollout_func`` that plays the ptxgym environment for several turns.

Each episode starts from ``env.reset()`` (the task prompt), then repeats: generate a response with the
trainer's own generation backend (vLLM when the trainer uses it, else ``transformers.generate``), send it
to the env (all live episodes step as one batch, ``ptxgym.envs.vector.step_many``: builds concurrent,
one ``evaluate_many`` call), append the rendered feedback as
the next user message, until the env terminates (target speedup reached), truncates (``max_turns``) or
the context is full. The per-turn rewards ``r_t`` come from the env's reward function; the credit of
turn ``t`` is the discounted return ``R_t = sum_{j>=t} gamma^(j-t) r_j`` (``ptxgym.rewards.kevin``).

Token bookkeeping keeps exactly what the model saw: the context of turn ``t+1`` is the context of turn
``t``, the tokens the model generated, an end-of-turn token if generation was cut, and the tokens of the
feedback message rendered by the chat template (the same suffix trick TRL uses for tool responses).

Two ways to hand the episodes to GRPO (``credit``):

- ``"turn"`` (Kevin-32B; rlenv.md d.1): every turn is its own sample; its prompt is the whole context up
  to that turn, its completion only that turn's tokens, its reward ``R_t``. For a group of ``G`` copies
  of one prompt, ``ceil(G / max_turns)`` episodes are played (more if some end early) and the first ``G``
  turn samples are kept, so GRPO normalises over all turns of all episodes of the task, as Kevin does.
- ``"episode"``: every sample is one whole episode; the completion is all the model's turns with the
  environment's tokens in between, those masked out of the loss with ``env_mask``; the reward is ``R_0``.

Per-sample extra fields (forwarded by TRL to reward functions): ``ptxgym_return``, ``ptxgym_turn``,
``ptxgym_status``, ``ptxgym_turn_rewards`` and ``ptxgym_metrics`` (batch metrics). ``RolloutReward``
returns ``ptxgym_return`` and logs the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.envs.vector import step_many
from ptxgym.records.feedback import Feedback, Status
from ptxgym.rewards import discounted_returns, gate, resolve_reward
from ptxgym.rewards.base import RewardSpec
from ptxgym.train.env_reward import PipelinePool, PromptIndex, summarise


class RolloutConfig(BaseModel):
    """How episodes are played and credited (module docstring); the reward comes from the env section."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(4, ge=1, description="Turns per episode (1 in a GRPO recipe: single-turn).")
    credit: Literal["turn", "episode"] = "turn"
    gamma: float = Field(0.4, ge=0, le=1, description="Discount of later turns' rewards.")
    max_context_tokens: int | None = Field(None, description="End an episode when the context is full.")
    skip_infra: bool = Field(True, description="Give INFRA_ERROR turns no reward (None) instead of 0.")


@dataclass
class _Turn:
    context: list[int]
    completion: list[int]
    logprobs: list[float] | None
    env_ids: list[int] = field(default_factory=list)
    feedback: Feedback | None = None
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)


def _status(turn: _Turn) -> Status:
    """The status of a played turn (every turn gets its feedback before samples are made)."""
    if turn.feedback is None:
        raise RuntimeError("a turn reached the samples without its feedback")
    return turn.feedback.status


def _ours(turn: _Turn) -> bool:
    """An infrastructure failure before the candidate's code was loaded (dropped with ``skip_infra``).

    One after it may be the candidate's doing, and is scored like a broken proof (``rewards.gate``).
    """
    _status(turn)  # a turn without its feedback raises there
    assert turn.feedback is not None
    return gate.evaluator_fault(turn.feedback)


@dataclass
class _Episode:
    group: int
    task_id: str
    env: Any
    prompt_ids: list[int]
    context: list[int]
    turns: list[_Turn] = field(default_factory=list)
    done: bool = False

    def returns(self, gamma: float) -> list[float]:
        return discounted_returns([t.reward for t in self.turns], gamma)


def feedback_suffix_ids(
    tokenizer: Any,
    text: str,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Tokens that follow an assistant turn's end-of-turn token: a user message, then a generation prompt.

    Computed by rendering a two-message dummy conversation with and without the feedback message; the
    dummy's rendering must be a prefix of the longer one up to its last end-of-turn token.
    """
    kw = {
        "tokenize": True,
        "return_dict": False,
        "chat_template": chat_template,
        **dict(template_kwargs or {}),
    }
    dummy = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **kw)
    full = tokenizer.apply_chat_template(
        dummy + [{"role": "user", "content": text}], add_generation_prompt=True, **kw
    )
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError(
            "the chat template is not prefix-preserving: a multi-turn rollout cannot append feedback"
        )
    return list(full[len(prefix) :])


class MultiTurnRollout:
    """``rollout_func(prompts, trainer) -> dict`` for TRL's GRPOTrainer (module docstring)."""

    __name__ = "ptxgym_multi_turn_rollout"

    def __init__(
        self,
        index: PromptIndex,
        config: RolloutConfig | None = None,
        pool: PipelinePool | None = None,
        *,
        reward: RewardSpec = "staged",
        reward_options: Mapping[str, Any] | None = None,
        target_speedup: float = 1.2,
    ) -> None:
        self.index = index
        self.config = config or RolloutConfig()
        self.pool = pool or PipelinePool()
        self.reward_fn = resolve_reward(reward, **dict(reward_options or {}))
        self.target_speedup = target_speedup
        self._envs: dict[tuple[str, str | None], list[Any]] = {}
        self.last_episodes: list[_Episode] = []

    # ------------------------------------------------------------------------------ TRL entry point

    def __call__(self, prompts: list, trainer: Any) -> dict[str, Any]:
        """Play the episodes for one batch of (repeated) prompts and return GRPO samples."""
        groups = _groups(prompts)
        gen = _Generator(trainer)
        if self.config.credit == "episode":
            episodes = [
                self._start(g, prompts[start], gen)
                for g, (start, size) in enumerate(groups)
                for _ in range(size)
            ]
            self._play(episodes, gen)
            out = self._episode_samples(episodes)
        else:
            episodes = self._play_turn_groups(prompts, groups, gen)
            out = self._turn_samples(episodes, groups)
        self._release(episodes)
        self.last_episodes = episodes
        return out

    # ---------------------------------------------------------------------------------- episodes

    def _start(self, group: int, prompt: Sequence[Mapping[str, Any]], gen: _Generator) -> _Episode:
        task_id, variant = self.index.lookup(prompt)
        env = self._checkout(task_id, variant)
        _, info = env.reset()
        ids = gen.template(info["prompt"].messages())
        return _Episode(group, task_id, env, ids, list(ids))

    def _play(self, episodes: list[_Episode], gen: _Generator) -> None:
        limit = self.config.max_context_tokens or gen.context_limit()
        while live := [e for e in episodes if not e.done]:
            completions, logprobs = gen.generate([e.context for e in live])
            texts = gen.decode(completions)
            steps = step_many([e.env for e in live], texts, self.pool.max_workers)
            for i, (e, (obs, reward, terminated, truncated, info)) in enumerate(
                zip(live, steps, strict=True)
            ):
                turn = _Turn(
                    e.context,
                    completions[i],
                    logprobs[i] if logprobs else None,
                    feedback=info["feedback"],
                    reward=float(reward),
                    components=dict(info["reward_components"]),
                )
                e.turns.append(turn)
                e.done = terminated or truncated or len(e.turns) >= self.config.max_turns
                if not e.done:
                    env_ids = gen.env_tokens(completions[i], obs["text"])
                    context = e.context + completions[i] + env_ids
                    e.done = len(context) + gen.max_new_tokens > limit  # no room for another turn
                    if not e.done:
                        turn.env_ids, e.context = env_ids, context

    def _play_turn_groups(
        self, prompts: list, groups: list[tuple[int, int]], gen: _Generator
    ) -> list[_Episode]:
        """Episodes per group until each group has at least as many turns as copies of its prompt."""
        episodes: list[_Episode] = []
        for _ in range(max(size for _, size in groups)):
            need = []
            for g, (start, size) in enumerate(groups):
                have = sum(len(e.turns) for e in episodes if e.group == g)
                if have < size:
                    need += [(g, start)] * math.ceil((size - have) / self.config.max_turns)
            if not need:
                break
            fresh = [self._start(g, prompts[start], gen) for g, start in need]
            self._play(fresh, gen)
            episodes += fresh
        return episodes

    # ---------------------------------------------------------------------------------- samples

    def _turn_samples(self, episodes: list[_Episode], groups: list[tuple[int, int]]) -> dict[str, Any]:
        rows: list[tuple[_Turn, float, int, list[float]]] = []
        for g, (_, size) in enumerate(groups):
            mine = [
                (t, r, i, [x.reward for x in e.turns])
                for e in episodes
                if e.group == g
                for i, (t, r) in enumerate(zip(e.turns, e.returns(self.config.gamma), strict=True))
            ]
            rows += mine[:size]
        turns = [r[0] for r in rows]
        return self._pack(
            prompt_ids=[t.context for t in turns],
            completion_ids=[t.completion for t in turns],
            logprobs=[t.logprobs for t in turns],
            returns=[r[1] for r in rows],
            turn_index=[r[2] for r in rows],
            statuses=[_status(t) for t in turns],
            ours=[_ours(t) for t in turns],
            turn_rewards=[r[3] for r in rows],
            env_mask=None,
            feedbacks=[t.feedback for t in turns],
            components=[t.components for t in turns],
        )

    def _episode_samples(self, episodes: list[_Episode]) -> dict[str, Any]:
        ids, masks, logps = [], [], []
        for e in episodes:
            seq, mask, lp = [], [], []
            for t in e.turns:
                seq += t.completion + t.env_ids
                mask += [1] * len(t.completion) + [0] * len(t.env_ids)
                lp += (t.logprobs or [0.0] * len(t.completion)) + [0.0] * len(t.env_ids)
            ids.append(seq)
            masks.append(mask)
            logps.append(lp)
        has_logprobs = all(t.logprobs is not None for e in episodes for t in e.turns)
        all_turns = [t for e in episodes for t in e.turns]
        return self._pack(
            prompt_ids=[e.prompt_ids for e in episodes],
            completion_ids=ids,
            logprobs=logps if has_logprobs else None,
            returns=[e.returns(self.config.gamma)[0] for e in episodes],
            turn_index=[len(e.turns) for e in episodes],
            statuses=[_status(e.turns[-1]) for e in episodes],
            ours=[_ours(e.turns[-1]) for e in episodes],
            turn_rewards=[[t.reward for t in e.turns] for e in episodes],
            env_mask=masks,
            feedbacks=[t.feedback for t in all_turns],
            components=[t.components for t in all_turns],
        )

    def _pack(
        self,
        *,
        prompt_ids,
        completion_ids,
        logprobs,
        returns,
        turn_index,
        statuses,
        ours,
        turn_rewards,
        env_mask,
        feedbacks,
        components,
    ) -> dict[str, Any]:
        if isinstance(logprobs, list) and any(lp is None for lp in logprobs):
            logprobs = None
        rewards = [None if self.config.skip_infra and o else r for r, o in zip(returns, ours, strict=True)]
        out = {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "ptxgym_return": rewards,
            "ptxgym_turn": turn_index,
            "ptxgym_status": [s.value for s in statuses],
            "ptxgym_turn_rewards": turn_rewards,
            "ptxgym_metrics": summarise(feedbacks, components),
        }
        if env_mask is not None:
            out["env_mask"] = env_mask
        return out

    # ---------------------------------------------------------------------------------- env pool

    def _checkout(self, task_id: str, variant: str | None) -> Any:
        free = self._envs.setdefault((task_id, variant), [])
        if free:
            return free.pop()
        import gymnasium

        from ptxgym.records.tasks import get_task

        return gymnasium.make(
            get_task(task_id).env_id,
            evaluator=self.pool.evaluator,
            reward=self.reward_fn,
            max_turns=self.config.max_turns,
            target_speedup=self.target_speedup,
            variant=variant,
            cut_off_gamma=self.config.gamma,  # the cut-off turns' pay, discounted as their returns would be
        )

    def _release(self, episodes: list[_Episode]) -> None:
        for e in episodes:
            variant = e.env.unwrapped.variant
            self._envs.setdefault((e.task_id, variant), []).append(e.env)


def _groups(prompts: list) -> list[tuple[int, int]]:
    """``(start, size)`` of each run of identical consecutive prompts (TRL repeats each G times)."""
    out: list[tuple[int, int]] = []
    for i, p in enumerate(prompts):
        if out and prompts[out[-1][0]] == p:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


class _Generator:
    """The trainer's generation backend and tokenizer, as the rollout needs them."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.tok = trainer.processing_class
        self.template_kwargs = dict(getattr(trainer, "chat_template_kwargs", None) or {})
        self.chat_template = getattr(trainer, "chat_template", None)
        self.max_new_tokens = int(trainer.args.max_completion_length)

    def template(self, messages: list[dict[str, str]]) -> list[int]:
        return list(
            self.tok.apply_chat_template(
                messages,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                chat_template=self.chat_template,
                **self.template_kwargs,
            )
        )

    def generate(self, contexts: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        # TRL's own single-turn generation (vLLM or transformers, weights synced), one completion per context.
        completion_ids, logprobs = self.trainer._generate_single_turn(contexts, None, {}, 1)
        return [list(c) for c in completion_ids], logprobs

    def decode(self, completions: list[list[int]]) -> list[str]:
        return self.tok.batch_decode(completions, skip_special_tokens=True)

    def env_tokens(self, completion: list[int], feedback_text: str) -> list[int]:
        eos = [] if completion and completion[-1] == self.tok.eos_token_id else [self.tok.eos_token_id]
        return eos + feedback_suffix_ids(self.tok, feedback_text, self.chat_template, self.template_kwargs)

    def context_limit(self) -> int:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        return int(getattr(model.config, "max_position_embeddings", 1 << 30))


class RolloutReward:
    """TRL reward function for ``MultiTurnRollout``: returns the discounted return of each sample."""

    __name__ = "ptxgym_rollout"

    def __call__(
        self,
        prompts: list,
        completions: list,
        ptxgym_return: list[float | None],
        ptxgym_metrics: list[dict[str, float]] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        ptxgym_status: list[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """The returns computed in the rollout; logs the batch metrics and statuses."""
        if log_metric is not None and ptxgym_metrics:
            for name, value in ptxgym_metrics[0].items():
                log_metric(name, value)
        if log_extra is not None and ptxgym_status is not None:
            log_extra("status", list(ptxgym_status))
        return list(ptxgym_return)
