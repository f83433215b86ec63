"""Registration of the Gymnasium ids: one per catalog task, and ``ptxgym/Trace-v0``.

Catalog tasks are ``ptxgym/<Task>-<arch>-v0``; ``ptxgym/Trace-v0`` plays a task of any FlashInfer-Trace
dataset folder::

    gymnasium.make("ptxgym/Trace-v0", dataset="path/to/dataset", task="gemm_n4096_k4096@sm_90a")
"""

from __future__ import annotations

import gymnasium

ENTRY_POINT = "ptxgym.envs.kernel_env:KernelEnv"


def register_envs() -> list[str]:
    """Register every catalog task and the Trace env (idempotent); return the ids.

    Reads only the task records (ids), not the definitions: ``import ptxgym`` stays cheap.
    """
    from ptxgym.records.tasks import TRACE_ENV_ID, catalog_ids

    ids = []
    for task_id in catalog_ids():
        env_id = f"ptxgym/{task_id}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(
                id=env_id,
                entry_point=ENTRY_POINT,
                kwargs={"task": task_id},
                nondeterministic=True,
                disable_env_checker=False,
            )
        ids.append(env_id)
    if TRACE_ENV_ID not in gymnasium.registry:
        gymnasium.register(id=TRACE_ENV_ID, entry_point=ENTRY_POINT, nondeterministic=True)
    ids.append(TRACE_ENV_ID)
    return ids
