"""Helpers shared by the evaluator tests (importable because conftest puts this folder on sys.path)."""

from __future__ import annotations

from ptxgym.evaluation.trusted.pool import WorkerHandle
from ptxgym.records.schema import Workload
from ptxgym.records.tasks import Task, count_bytes, count_flops, get_task


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


GQA_PARAMS = {
    "GqaRaggedPrefill": {"q_lens": [5, 1, 9], "kv_lens": [5, 4, 12]},
    "GqaPagedPrefill": {"q_lens": [3, 7], "kv_lens": [6, 7], "layout_seed": 7},
    "GqaPagedDecode": {"kv_lens": [5, 1, 9, 2], "layout_seed": 3},
}
"""Small batches of the three GQA tasks (the definitions' heads, head_dim and page size unchanged)."""


def small_gqa(
    name: str, arch: str = "sm90a", num_pages: int = 40, tiny: bool = False, params: dict | None = None
) -> Task:
    """A GQA catalog task playing a small batch of its definition (``GQA_PARAMS``), axes consistent.

    ``tiny``: also one KV head (and its query group) of head_dim 16, for whole CPU evaluations.
    ``params``: another batch than ``GQA_PARAMS[name]`` (same keys; ``num_pages`` at least its pages).
    """
    task = get_task(f"{name}-{arch}")
    if tiny:
        defn = task.definition
        hq, hkv = (defn.axes[a].value for a in ("num_qo_heads", "num_kv_heads"))  # type: ignore[union-attr]
        small = {"num_qo_heads": hq // hkv, "num_kv_heads": 1, "head_dim": 16}
        axes = {**defn.axes, **{n: defn.axes[n].model_copy(update={"value": v}) for n, v in small.items()}}
        task = task.model_copy(update={"definition": defn.model_copy(update={"axes": axes})})
    params = GQA_PARAMS[name] if params is None else params
    q, kv = params.get("q_lens"), params["kv_lens"]
    if name == "GqaRaggedPrefill":
        axes = {"total_q": sum(q), "total_kv": sum(kv), "len_indptr": len(q) + 1}
    else:
        rows = {"total_q": sum(q)} if q else {"batch_size": len(kv)}
        axes = {**rows, "num_pages": num_pages, "len_indptr": len(kv) + 1, "num_kv_indices": sum(kv)}
    wl = task.workload.model_copy(update={"uuid": f"small-{name}", "axes": axes, "params": params})
    flops = count_flops(task.definition, wl, task.flop_formula)
    min_bytes = count_bytes(task.definition, wl, task.byte_formula)
    return task.model_copy(
        update={"workload": wl, "workloads": (wl,), "flops": flops, "min_bytes": min_bytes}
    )


def greeted_handle(argv: list[str], tmp_path) -> WorkerHandle:
    """A fake worker (``fake_worker.py``) started with ``argv``, its hello read and checked."""
    handle = WorkerHandle(argv, None, tmp_path)
    hello = handle.receive(30.0)
    assert hello.ok and hello.hello is not None and hello.hello.pid == handle.pid
    return handle
