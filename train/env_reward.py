"""GRPO prompts from the task catalog, and a reward function that scores completions in the environment.

``build_grpo_dataset`` makes one conversational row per (task, prompt variant): ``prompt`` is exactly the
system and user message ``env.reset()`` gives for that task
(``ptxgym.knowledge_packs.prompting.build_task_prompt``),
``task_id`` and ``variant`` travel as columns (TRL passes them to reward functions). ``PromptIndex`` maps a
prompt back to its task for ``rollout_func``, which receives the prompts only.

``EnvReward`` is an ``async`` TRL reward function for single-turn GRPO: each completion is one turn.
It submits the whole batch at once to the pipeline's batch API (``ptxgym.pipeline.run_batch``: extract,
policy, nvcc builds concurrently on a build pool, SASS census, then the built candidates in one
``evaluate_many`` call to the GPU evaluator when one is attached) and waits for it, scores each Feedback
with a ptxgym reward (``ptxgym.rewards.resolve_reward``), logs every reward component, the compile and
correct rates and the status of each completion, and returns ``None`` for INFRA_ERROR turns (our fault,
not the model's: TRL leaves a None out of the group baseline) unless the candidate's code had been loaded
(``Feedback.candidate_ran``): those are scored like a broken proof, or breaking the evaluator would
escape the group's lowest advantage.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ptxgym.evaluation.trusted.base import EvalSettings, Evaluator
from ptxgym.records.feedback import Feedback
from ptxgym.rewards import RewardFn, gate, resolve_reward


def _variant_key(variant: str | None) -> str:
    return variant or ""


@dataclass
class PromptIndex:
    """``(system, user)`` text of a task prompt -> ``(task_id, variant)``."""

    entries: dict[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)

    def add(self, system: str, user: str, task_id: str, variant: str | None) -> None:
        """Remember one prompt."""
        self.entries[(system, user)] = (task_id, variant)

    def lookup(self, prompt: Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
        """The task of a conversational prompt; a clear KeyError for a prompt not built here."""
        system = next((m["content"] for m in prompt if m["role"] == "system"), "")
        user = next((m["content"] for m in prompt if m["role"] == "user"), "")
        try:
            return self.entries[(system, user)]
        except KeyError:
            raise KeyError(
                "prompt not in the index: GRPO prompts must come from build_grpo_dataset "
                f"(user message starts {user[:80]!r})"
            ) from None


def build_grpo_dataset(
    task_ids: Iterable[str], variants: Sequence[str | None] = (None,), repeats: int = 1
) -> tuple[Any, PromptIndex]:
    """A ``datasets.Dataset`` of task prompts (``repeats`` copies of each) and its ``PromptIndex``."""
    from datasets import Dataset

    from ptxgym.knowledge_packs.prompting import build_task_prompt
    from ptxgym.records.tasks import get_task, require_not_test

    task_ids = list(task_ids)
    require_not_test(task_ids, "GRPO training prompts")
    rows, index = [], PromptIndex()
    for tid in task_ids:
        task = get_task(tid)
        for variant in variants:
            p = build_task_prompt(task, variant)
            index.add(p.system, p.user, task.id, variant)
            rows += [{"prompt": p.messages(), "task_id": task.id, "variant": _variant_key(variant)}] * repeats
    if not rows:
        raise ValueError("no GRPO prompts: give at least one task")
    return Dataset.from_list(rows), index


def completion_text(completion: Any) -> str:
    """The assistant text of a TRL completion (conversational list of messages, or a plain string)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion if m.get("role") == "assistant")


def candidate_key(text: str) -> str:
    """SHA-256 of every file the pipeline would extract from a response (of the text if none).

    All of them, named, as the pipeline builds them (``extract_sources``): two responses with the same
    entry file but another header are two candidates.
    """
    import hashlib

    from ptxgym.cpu.extract import extract_sources

    files = extract_sources(text).files
    if files is None:
        return hashlib.sha256(("\x00" + text).encode("utf-8", "surrogatepass")).hexdigest()
    joined = "\x00".join(f"{name}\x00{files[name]}" for name in sorted(files))
    return hashlib.sha256(joined.encode()).hexdigest()


class PipelinePool:
    """One ``Pipeline`` per task over one shared evaluator; batches go through ``run_batch``."""

    def __init__(
        self,
        evaluator: str | Evaluator | None = "auto",
        settings: EvalSettings | None = None,
        max_workers: int = 8,
    ) -> None:
        from ptxgym.evaluation.choose import select_evaluator

        self.evaluator = (
            evaluator if isinstance(evaluator, Evaluator) else select_evaluator(evaluator, settings=settings)
        )
        self.max_workers = max_workers
        """Builds at once in a batch (the build pool's size)."""
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptxgym-batch")
        """Where a batch waits, off the event loop (one batch at a time: each spans the build pool)."""
        self._pipelines: dict[str, Any] = {}

    def pipeline(self, task_id: str) -> Any:
        """The pipeline of a task (built once)."""
        if task_id not in self._pipelines:
            from ptxgym.pipeline import Pipeline
            from ptxgym.records.tasks import get_task

            self._pipelines[task_id] = Pipeline(get_task(task_id), self.evaluator)
        return self._pipelines[task_id]

    async def run_many(self, items: Sequence[tuple[str, str]]) -> list[Feedback]:
        """Feedback for each ``(task_id, action text)``, the whole batch at once (``run_batch``).

        The builds run concurrently on up to ``max_workers`` threads and the built candidates go to the
        evaluator in one ``evaluate_many`` call. Completions whose extracted files are byte-identical
        (GRPO samples often repeat one) are evaluated once per batch and share the Feedback: the
        pipeline is a function of the sources.
        """
        from ptxgym.pipeline import Submission, run_batch

        loop = asyncio.get_running_loop()
        keys = [(tid, candidate_key(text)) for tid, text in items]
        first: dict[tuple[str, str], int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        unique = list(first.values())
        jobs = [(self.pipeline(items[i][0]), Submission(items[i][1])) for i in unique]
        feedbacks = await loop.run_in_executor(self.executor, run_batch, jobs, self.max_workers)
        done = dict(zip(unique, feedbacks, strict=True))
        return [done[first[key]] for key in keys]

    def close(self) -> None:
        """Stop the threads and release the evaluator."""
        self.executor.shutdown(wait=True)
        self.evaluator.close()


def summarise(feedbacks: Sequence[Feedback], components: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Batch metrics: mean of each reward component, compile/correct rates, share of each status."""
    n = max(len(feedbacks), 1)
    out = {
        "ptxgym/compiled": sum(gate.compiled(f) for f in feedbacks) / n,
        "ptxgym/correct": sum(gate.qualifies(f) for f in feedbacks) / n,
    }
    for name in sorted({k for c in components for k in c}):
        out[f"ptxgym/reward/{name}"] = sum(c.get(name, 0.0) for c in components) / n
    for status, count in Counter(f.status.value for f in feedbacks).items():
        out[f"ptxgym/status/{status}"] = count / n
    return out


class EnvReward:
    """Async TRL reward function: every completion is one env turn, scored by a ptxgym reward."""

    def __init__(
        self,
        reward: str | Mapping[str, float] | RewardFn | None = "staged",
        pool: PipelinePool | None = None,
        skip_infra: bool = True,
        reward_options: Mapping[str, Any] | None = None,
        on_feedback: Callable[[list[Feedback]], None] | None = None,
    ) -> None:
        self.reward_fn = resolve_reward(reward, **dict(reward_options or {}))
        self.pool = pool or PipelinePool()
        self.skip_infra = skip_infra
        self.on_feedback = on_feedback
        self.__name__ = f"ptxgym_{reward if isinstance(reward, str) and reward.isidentifier() else 'env'}"

    async def __call__(
        self,
        prompts: list,
        completions: list,
        task_id: list[str] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Evaluate the batch; one reward (or None for an infrastructure failure) per completion."""
        if task_id is None:
            raise ValueError(
                "EnvReward needs the dataset's task_id column (build it with build_grpo_dataset)"
            )
        texts = [completion_text(c) for c in completions]
        feedbacks = await self.pool.run_many(list(zip(task_id, texts, strict=True)))
        results = [self.reward_fn(fb, ()) for fb in feedbacks]
        if log_metric is not None:
            for name, value in summarise(feedbacks, [r.components for r in results]).items():
                log_metric(name, value)
        if log_extra is not None:
            log_extra("status", [fb.status.value for fb in feedbacks])
        if self.on_feedback is not None:
            self.on_feedback(feedbacks)
        return [
            None if self.skip_infra and gate.evaluator_fault(fb) else r.total
            for fb, r in zip(feedbacks, results, strict=True)
        ]
