"""Step-by-step evaluation of a policy on tasks: the engine of ``ptxgym eval``.

``run_eval(config, out_dir)`` builds the policy and the evaluator, opens (or resumes) the run directory,
runs every trajectory against the Gymnasium env with ``config.concurrency`` in flight, writes each turn as
it finishes, and returns an ``EvalResult`` with the Table-1-style summary.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ptxgym.evaluation.trusted.base import Evaluator
from ptxgym.knowledge_packs.prompting import build_task_prompt
from ptxgym.policies.base import Policy
from ptxgym.policies.factory import build_policy
from ptxgym.records.tasks import get_task
from ptxgym.records.turns import read_turns
from ptxgym.runner.config import NO_VARIANT, EvalConfig, TrajectoryKey, default_tasks
from ptxgym.runner.loop import Runner, SharedEvaluator, TrajectoryResult
from ptxgym.runner.metrics import Summary, paper_ks, summarize
from ptxgym.runner.progress import Progress
from ptxgym.runner.store import Event, ResumeState, RunDirError, RunStore

__all__ = [
    "EvalConfig",
    "EvalResult",
    "Event",
    "NO_VARIANT",
    "Progress",
    "ResumeState",
    "RunDirError",
    "RunStore",
    "Runner",
    "SharedEvaluator",
    "TrajectoryKey",
    "TrajectoryResult",
    "check_variants",
    "default_tasks",
    "run_eval",
]


class EvalResult(BaseModel):
    """What a run (or a resumed part of it) did, and the summary over everything on disk."""

    model_config = ConfigDict(frozen=True)

    run_dir: str
    run_id: str
    evaluator: str
    gpu_reason: str | None = Field(None, description="Why no GPU evaluator ran, when none did.")
    turns_run: int
    turns_on_disk: int
    trajectories: list[TrajectoryResult]
    incomplete: list[str] = Field(default_factory=list, description="Trajectories to continue with --resume.")
    stop_reason: str | None = None
    problems: list[str] = Field(default_factory=list, description="Repaired or skipped lines on resume.")
    summary: Summary

    @property
    def complete(self) -> bool:
        """Every trajectory reached its end."""
        return not self.incomplete


def check_variants(config: EvalConfig) -> None:
    """Render every (task, variant) prompt now, so a bad variant fails before any work is done."""
    for tid in config.tasks:
        for v in config.variants:
            try:
                build_task_prompt(get_task(tid), None if v == NO_VARIANT else v)
            except Exception as exc:  # noqa: BLE001 - re-raised with the variant named
                raise ValueError(f"prompt variant {v!r} cannot be rendered for {tid}: {exc}") from exc


def run_eval(
    config: EvalConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    policy: Policy | None = None,
    evaluator: Evaluator | None = None,
    progress: bool = True,
    api_key: str = "EMPTY",
) -> EvalResult:
    """Run (or resume) an evaluation into ``out_dir``."""
    from ptxgym.evaluation.choose import select_evaluator

    check_variants(config)
    tasks = [get_task(t) for t in config.tasks]
    own_policy = policy is None
    policy = policy or build_policy(config.policy, tasks, api_key=api_key)
    evaluator = evaluator or select_evaluator(config.evaluator)
    store = RunStore(out_dir)
    try:
        policy.check()
        state = store.open(config, policy.describe(), evaluator.name, resume)
        total = len(config.keys()) * config.turns
        done = sum(
            min(len(state.records.get(k.id, [])) if k.id not in state.ended else config.turns, config.turns)
            for k in config.keys()
        )
        bar = Progress(total, done, enabled=progress)
        for p in state.problems:
            bar.note(f"resume: {p}")
        runner = Runner(config, policy, evaluator, store, bar)
        try:
            results = runner.run(state)
        finally:
            bar.close()
    finally:
        store.close()
        evaluator.close()
        if own_policy:
            policy.close()
    records, _ = read_turns(store.trajectory_path)
    summary = summarize(records, paper_ks(config.turns))
    gpu_reason = (
        (getattr(evaluator, "reason", None) or "no GPU evaluator") if evaluator.name == "none" else None
    )
    result = EvalResult(
        run_dir=str(store.dir),
        run_id=store.run_id,
        evaluator=evaluator.name,
        gpu_reason=gpu_reason,
        turns_run=sum(r.turns_run for r in results),
        turns_on_disk=len(records),
        trajectories=results,
        incomplete=[r.trajectory_id for r in results if r.ended is None],
        stop_reason=runner.stop_reason,
        problems=state.problems,
        summary=summary,
    )
    store.write_summary(result.model_dump(mode="json"))
    return result
