"""ReferencePolicy: plays the expert solution shipped with ptxgym for each task, every turn.

Solutions live in the knowledge packs as ``knowledge_packs/<arch short>/solutions/<Task name>.cu``
(e.g. ``knowledge_packs/sm90a/solutions/Gemm.cu``). A task without one is an error at construction
(``MissingSolutionError`` names the tasks, the paths looked at and the tasks that do have one), so a run
never starts with a policy that cannot answer; ``act`` on a task it was not built for checks again.

The action is the solution in one ```cpp block, as a model is asked to answer, so it goes through the
same extract -> policy -> build -> evaluate path as any model's response.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from ptxgym.policies.base import Action, MissingSolutionError, Observation, Policy, PolicyError
from ptxgym.policies.history import Conversation, build_messages
from ptxgym.records.tasks import Task, catalog, get_task


def packs_root() -> Path:
    """Folder of the installed knowledge packs."""
    return Path(str(resources.files("ptxgym.knowledge_packs")))


def solution_path(task: Task, root: Path | None = None) -> Path:
    """Where the shipped solution of a task lives (whether or not it exists)."""
    return (root or packs_root()) / task.arch_spec.short / "solutions" / f"{task.name}.cu"


def available_solutions(root: Path | None = None) -> dict[str, Path]:
    """Task id -> solution file, for every catalog task that has one."""
    return {tid: p for tid, t in catalog().items() if (p := solution_path(t, root)).is_file()}


class ReferencePolicy(Policy):
    """The shipped expert kernel of each task."""

    name = "reference"

    def __init__(self, tasks: Iterable[str | Task] | None = None, root: str | Path | None = None) -> None:
        self.root = Path(root) if root else packs_root()
        self._sources: dict[str, tuple[Path, str]] = {}
        wanted = [t if isinstance(t, Task) else get_task(t) for t in (tasks or [])]
        missing = [t for t in wanted if not solution_path(t, self.root).is_file()]
        if missing:
            have = sorted(available_solutions(self.root))
            looked = ", ".join(str(solution_path(t, self.root)) for t in missing)
            raise MissingSolutionError(
                f"no shipped reference solution for {', '.join(t.id for t in missing)} (looked at {looked}). "
                f"Tasks with a solution: {', '.join(have) or 'none'}; pass those with --tasks."
            )
        for t in wanted:
            self._load(t)

    def _load(self, task: Task) -> tuple[Path, str]:
        if task.id not in self._sources:
            path = solution_path(task, self.root)
            if not path.is_file():
                raise MissingSolutionError(f"no shipped reference solution for {task.id} (looked at {path})")
            self._sources[task.id] = (path, path.read_text(encoding="utf-8"))
        return self._sources[task.id]

    def act(self, observation: Observation, history: Conversation | None = None) -> Action:
        """The task's solution in a ```cpp block (the task comes from ``history.task_id``)."""
        if history is None or not history.task_id:
            raise PolicyError("ReferencePolicy needs the Conversation (with task_id) to know the task")
        path, source = self._load(get_task(history.task_id))
        try:
            shown = path.relative_to(self.root.parent)
        except ValueError:
            shown = path
        text = f"Reference solution shipped with ptxgym ({shown}).\n\n```cpp\n{source.rstrip()}\n```\n"
        # The prompt a model would have answered (full history), so the turn makes a complete SFT row.
        return Action(text=text, finish_reason="stop", messages=build_messages(history).messages)

    def describe(self) -> dict[str, Any]:
        """Where the solutions come from."""
        return {
            **super().describe(),
            "root": str(self.root),
            "solutions": {k: str(p) for k, (p, _) in self._sources.items()},
        }
