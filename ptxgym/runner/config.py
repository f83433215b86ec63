"""What an evaluation run does: tasks x variants x trajectories, turns, concurrency, evaluator, policy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ptxgym.knowledge_packs.prompting import DEFAULT_VARIANT, NO_VARIANT
from ptxgym.policies.factory import PolicyConfig
from ptxgym.records.tasks import catalog, get_task


def default_tasks() -> list[str]:
    """The primary tasks of the main job: the five sm_90a (Hopper) tasks."""
    return [tid for tid, t in catalog().items() if t.arch == "sm_90a" and t.primary]


class TrajectoryKey(BaseModel):
    """One trajectory of a run."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    variant: str
    index: int

    @property
    def id(self) -> str:
        """``<task>/<variant>/<index>``: stable across resumes of the same run."""
        return f"{self.task_id}/{self.variant}/{self.index}"

    @property
    def env_variant(self) -> str | None:
        """The env's ``variant`` argument."""
        return None if self.variant == NO_VARIANT else self.variant


class EvalConfig(BaseModel):
    """One ``ptxgym eval`` run."""

    model_config = ConfigDict(frozen=True)

    tasks: list[str] = Field(default_factory=default_tasks, description="Task ids (Gemm-sm90a, ...).")
    variants: list[str] = Field(
        default_factory=lambda: [DEFAULT_VARIANT],
        description="Knowledge-pack prompt variants; 'none' = rules and ABI only.",
    )
    trajectories: int = Field(1, ge=1, description="Trajectories per (task, variant).")
    turns: int = Field(8, ge=1, description="Turns per trajectory (truncated after).")
    concurrency: int = Field(4, ge=1, description="Trajectories in flight at once.")
    evaluator: str = Field("auto", description="auto, none, local or ray.")
    reward: str | None = Field(None, description="Registered reward name; None: the env's default.")
    target_speedup: float = Field(1.2, gt=0, description="A PASSED turn at this speedup ends the trajectory.")
    seed: int = Field(0, description="Base seed; trajectory i resets with seed + i.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig)

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, v: list[str]) -> list[str]:
        return [get_task(t).id for t in v]

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, v: str | None) -> str | None:
        if v is not None:
            from ptxgym.rewards import resolve_reward

            try:
                resolve_reward(v)
            except KeyError as exc:  # pydantic reports ValueErrors only
                raise ValueError(exc.args[0] if exc.args else str(exc)) from exc
        return v

    def keys(self) -> list[TrajectoryKey]:
        """Every trajectory of the run, in a stable order."""
        return [
            TrajectoryKey(task_id=t, variant=v, index=i)
            for t in self.tasks
            for v in self.variants
            for i in range(self.trajectories)
        ]
