"""The ten original tasks are unchanged by the move to task records: every field, compared with a snapshot.

``data/legacy_tasks.json`` was written by ``snapshot()`` below from main at 377d943, when the tasks were
rows of a Python tuple (a FLOP lambda, a tolerance chosen by name prefix). Each task's ids, name, arch,
definition and workload (sha256 of their FlashInfer-Trace JSON), baseline, tolerance, FLOPs, bytes,
summary, shapes, the architecture spec (target family and opcodes; fields added to ArchSpec later are
not compared), the speed-of-light floors and the prompt (system and user message, rules-and-ABI variant)
must be exactly what they were.

One change on purpose since: the four attention references compute a chunk of heads per step instead of
one head (their host time had outgrown their GPU work, ``precision.py``), equal to the head-by-head
ones bit for bit on the CPU (``tests/envs/test_references.py``); the eight attention tasks' definition
and user-prompt hashes (the prompt shows the reference) were recorded again for that alone. And the
four forward references take the softmax in one pass and the logsumexp from the softmax at the maximum
(2026-12-06; equal to the previous formula to fp32 rounding, ``tests/envs/test_references.py``): their
definition and user-prompt hashes were recorded again for that alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ptxgym.knowledge_packs.prompting import build_task_prompt
from ptxgym.records.tasks import Task, catalog

SNAPSHOT = json.loads((Path(__file__).parent / "data" / "legacy_tasks.json").read_text())


def _sha(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def snapshot(t: Task) -> dict[str, Any]:
    """Every field of a task that existed before records, in JSON-comparable form."""
    d = t.model_dump(mode="json")
    p = build_task_prompt(t, None)
    spec = dataclasses.asdict(t.arch_spec)
    return {
        "id": t.id,
        "env_id": t.env_id,
        "name": t.name,
        "arch": t.arch,
        "definition_sha256": _sha(t.definition.to_dict()),
        "definition_name": t.definition.name,
        "workload_sha256": _sha(t.workload.to_dict()),
        "workload_uuid": t.workload.uuid,
        "baseline": d["baseline"],
        "tolerance": d["tolerance"],
        "flops": t.flops,
        "min_bytes": t.min_bytes,
        "summary": t.summary,
        "shapes": {k: list(v) for k, v in t.shapes().items()},
        "arch_spec": {k: list(v) if isinstance(v, tuple) else v for k, v in spec.items()},
        "floor_ms_h200": t.floor_ms("NVIDIA H200"),
        "floor_ms_b200": t.floor_ms("NVIDIA B200"),
        "prompt_system_sha256": _sha(p.system),
        "prompt_user_sha256": _sha(p.user),
    }


def test_the_ten_are_still_there_and_first() -> None:
    assert list(catalog())[:10] == sorted(SNAPSHOT, key=list(catalog()).index)
    assert len(SNAPSHOT) == 10


@pytest.mark.parametrize("task_id", sorted(SNAPSHOT))
def test_every_field_unchanged(task_id: str) -> None:
    old = SNAPSHOT[task_id]
    new = snapshot(catalog()[task_id])
    assert set(old) - {"fields"} == set(new)
    # fields ArchSpec gained later (E2's mma_opcodes) are not task data: compare the ones the snapshot has
    new["arch_spec"] = {k: v for k, v in new["arch_spec"].items() if k in old["arch_spec"]}
    for key, value in new.items():
        assert value == old[key], f"{task_id}.{key} changed: {old[key]!r} -> {value!r}"
    assert set(old["fields"]) <= set(Task.model_fields)  # old fields are all still fields


@pytest.mark.parametrize("task_id", sorted(SNAPSHOT))
def test_the_ten_keep_one_workload_and_their_prompt_format(task_id: str) -> None:
    t = catalog()[task_id]
    assert t.family_workloads == (t.workload,) and t.primary and t.split == "train"
    assert not t.multi_file_prompt and t.targets == () and t.source is None
