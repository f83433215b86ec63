"""A CPU-stage episode for every task id of the catalog (and of the Trace fixture).

Every id resets and steps a kernel whose exported ``run`` takes one argument too many, which the source
screen stops (STATIC_REJECT, naming the task's arguments) before nvcc. With nvcc (slow): one id per
operator family, alternating the architectures, steps a kernel with the task's argument count, which
builds and ends NOT_EVALUATED (no GPU here); every id would cost a build each (about 13 s on two cores:
the build cache key holds the definition name), 14 minutes in all.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest

import ptxgym  # noqa: F401 - registers the ids
from ptxgym.records.feedback import Stage, Status
from ptxgym.records.tasks import catalog, catalog_ids, get_task

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace_dataset"
IDS = [*catalog_ids(), "gemm_n256_k512@sm_90a", "gemm_n256_k512@sm_100a"]


def one_per_family() -> list[str]:
    firsts: dict[str, str] = {}
    for t in catalog().values():
        firsts.setdefault(t.family, t.id)
    picked = [get_task(tid) for tid in firsts.values()]
    archs = ["sm_90a", "sm_100a"]
    return [
        next(x.id for x in catalog().values() if x.name == t.name and x.arch == archs[i % 2])
        for i, t in enumerate(picked)
    ] + ["gemm_n256_k512@sm_100a"]


def kernel(arity: int) -> str:
    params = ", ".join(f"tvm::ffi::TensorView a{i}" for i in range(arity))
    return (
        "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/function.h>\n"
        "#include <tvm/ffi/extra/c_env_api.h>\n#include <cuda_runtime.h>\n\n"
        "__global__ void touch(char* p) { if (threadIdx.x == 0) p[0] = p[0]; }\n\n"
        f"void run({params}) {{\n"
        f"  auto stream = (cudaStream_t)TVMFFIEnvGetStream(a{arity - 1}.device().device_type, "
        f"a{arity - 1}.device().device_id);\n"
        f"  touch<<<1, 32, 0, stream>>>((char*)a{arity - 1}.data_ptr());\n}}\n"
        "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);\n"
    )


def make(task_id: str):
    if "@" in task_id:
        return gymnasium.make(
            "ptxgym/Trace-v0", dataset=FIXTURE, task=task_id, evaluator="none", variant=None
        )
    return gymnasium.make(f"ptxgym/{task_id}-v0", evaluator="none", variant=None)


def arity(env) -> int:
    d = env.unwrapped.task.definition
    return len(d.inputs) + len(d.outputs)


@pytest.mark.parametrize("task_id", IDS)
def test_screen_stage_episode(task_id: str) -> None:
    env = make(task_id)
    obs, info = env.reset(seed=0)
    assert info["task_id"] == task_id and obs["turn"] == 0
    names = [*env.unwrapped.task.definition.inputs, *env.unwrapped.task.definition.outputs]
    _, reward, terminated, truncated, info = env.step(f"```cuda\n{kernel(arity(env) + 1)}```")
    fb = info["feedback"]
    assert fb.status is Status.STATIC_REJECT and fb.stage is Stage.SCREEN, fb.message
    assert f"this task passes {len(names)} ({', '.join(names)}" in fb.message
    assert fb.task_id == task_id and not terminated and not truncated


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("task_id", one_per_family())
def test_build_stage_episode(task_id: str) -> None:
    env = make(task_id)
    env.reset(seed=0)
    _, _, _, _, info = env.step(f"```cuda\n{kernel(arity(env))}```")
    fb = info["feedback"]
    assert fb.status is Status.NOT_EVALUATED, fb.message
    assert fb.compile.ok and fb.sass is not None and fb.task_id == task_id
