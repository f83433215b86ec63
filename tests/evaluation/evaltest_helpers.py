"""Helpers shared by the evaluator tests (importable because conftest puts this folder on sys.path)."""

from __future__ import annotations

from ptxgym.records.schema import Workload
from ptxgym.records.tasks import Task, get_task


def small_task(task_id: str, **axes: int) -> Task:
    """A catalog task with its var axes shrunk (for CPU tests of the math only, never for verdicts)."""
    task = get_task(task_id)
    return task.model_copy(
        update={"workload": Workload(uuid=f"small-{task_id}", axes=axes, inputs=task.workload.inputs)}
    )


def fixed_backward(task: Task) -> Task:
    """The backward tasks' reference with its derived-input function returning a dict literal.

    The shipped ``forward_state`` returns ``{{"O": O, "LSE": LSE}}`` (a set holding a dict), which raises
    TypeError; reported to the catalog owner. Only the CPU perturbation test uses this copy.
    """
    ref = task.definition.reference.replace('{{"O": O, "LSE": LSE}}', '{"O": O, "LSE": LSE}')
    return task.model_copy(update={"definition": task.definition.model_copy(update={"reference": ref})})


def tiny_task(task_id: str, **axes: int) -> Task:
    """A catalog task with any axes set small, const ones included (fast CPU runs of arena and session).

    For the trusted machinery only, never for verdicts about real kernels.
    """
    task = get_task(task_id)
    defn = task.definition
    consts = {
        n: a.model_copy(update={"value": axes[n]})
        for n, a in defn.axes.items()
        if n in axes and a.type == "const"
    }
    defn = defn.model_copy(update={"axes": {**defn.axes, **consts}})
    var = {n: v for n, v in axes.items() if n not in consts}
    workload = Workload(
        uuid=f"tiny-{task_id}", axes={**task.workload.axes, **var}, inputs=task.workload.inputs
    )
    return task.model_copy(update={"definition": defn, "workload": workload})
