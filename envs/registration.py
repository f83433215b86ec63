"""Registration of one Gymnasium id per catalog task: ``ptxgym/<Task>-<arch>-v0``."""

from __future__ import annotations

import gymnasium

ENTRY_POINT = "ptxgym.envs.kernel_env:KernelEnv"


def register_envs() -> list[str]:
    """Register every catalog task (idempotent); return the ids."""
    from ptxgym.records.tasks import catalog

    ids = []
    for task in catalog().values():
        if task.env_id not in gymnasium.registry:
            gymnasium.register(
                id=task.env_id,
                entry_point=ENTRY_POINT,
                kwargs={"task": task.id},
                nondeterministic=True,
                disable_env_checker=False,
            )
        ids.append(task.env_id)
    return ids
